//! Function calls the agent makes on a surface: checked against the catalogs, masked, and
//! kept until answered.

use serde_json::{Map, Value};

use super::{A2UISurfaceBridge, BridgeError, IssuedCall};
use crate::catalog::Catalogs;
use crate::wire::{AgentMessage, CallRendererFunction, FunctionCall};

impl A2UISurfaceBridge {
    /// `callRendererFunction` for `name` in `catalog_id` (the surface default when `None`),
    /// with the caller's deterministic `call_id`; the args it carries are masked
    /// ([`A2UISurfaceBridge::masked_args`]). A `rendererOnly` function is refused before
    /// anything is produced.
    pub fn call_function(
        &mut self,
        catalog_id: Option<&str>,
        name: &str,
        args: Map<String, Value>,
        call_id: &str,
    ) -> Result<AgentMessage, BridgeError> {
        let message = self.request_for(catalog_id, name, args, call_id)?;
        self.record_call(catalog_id, name, call_id)?;
        Ok(message)
    }

    /// The request `call_function` would produce, checked, without recording the call.
    pub(crate) fn request_for(
        &self,
        catalog_id: Option<&str>,
        name: &str,
        args: Map<String, Value>,
        call_id: &str,
    ) -> Result<AgentMessage, BridgeError> {
        let catalog = catalog_id.unwrap_or(self.catalogs.default_catalog());
        check_callable(&self.catalogs, catalog, name)?;
        Ok(AgentMessage::CallRendererFunction(CallRendererFunction {
            function_call_id: call_id.to_owned(),
            surface_id: Some(self.wire_id.clone()),
            call: FunctionCall {
                name: name.to_owned(),
                catalog_id: Some(catalog.to_owned()),
                args: Some(self.masked_args(&args)),
            },
        }))
    }

    /// `args` as the renderer may see them: masked like the data model (K10-R6), see
    /// `mask_args`. What the log records keeps the true args.
    pub fn masked_args(&self, args: &Map<String, Value>) -> Map<String, Value> {
        crate::mask_args::mask_call_args(&self.classification, &self.model, args)
    }

    /// Records that `call_id` was issued (or re-issued after a restart, from the log).
    pub(crate) fn record_call(
        &mut self,
        catalog_id: Option<&str>,
        name: &str,
        call_id: &str,
    ) -> Result<(), BridgeError> {
        if self.calls.contains_key(call_id) {
            return Err(BridgeError::DuplicateCallId {
                call_id: call_id.to_owned(),
            });
        }
        let catalog = catalog_id.unwrap_or(self.catalogs.default_catalog());
        self.calls.insert(
            call_id.to_owned(),
            IssuedCall {
                catalog_id: catalog.to_owned(),
                name: name.to_owned(),
                answered: false,
            },
        );
        Ok(())
    }

    /// Marks a call answered (its gate was resumed, as the log says).
    pub(crate) fn mark_answered(&mut self, call_id: &str) {
        if let Some(call) = self.calls.get_mut(call_id) {
            call.answered = true;
        }
    }

    /// Whether a call was issued here and is not answered yet.
    pub fn is_pending(&self, call_id: &str) -> bool {
        self.calls.get(call_id).is_some_and(|c| !c.answered)
    }
}

/// Checks `args` against the args schema of `name` in `catalog`.
pub(crate) fn check_args(
    catalogs: &Catalogs,
    catalog: &str,
    name: &str,
    args: &Map<String, Value>,
) -> Result<(), BridgeError> {
    catalogs
        .check_args(catalog, name, args)
        .map_err(|detail| BridgeError::InvalidArgs {
            catalog_id: catalog.to_owned(),
            name: name.to_owned(),
            detail,
        })
}

/// Checks that the agent may call `name` in `catalog`.
pub(crate) fn check_callable(
    catalogs: &Catalogs,
    catalog: &str,
    name: &str,
) -> Result<(), BridgeError> {
    let function =
        catalogs
            .function(Some(catalog), name)
            .ok_or_else(|| BridgeError::UnknownFunction {
                catalog_id: catalog.to_owned(),
                name: name.to_owned(),
            })?;
    if !function.callers().agent_may_call() {
        return Err(BridgeError::RendererOnly {
            catalog_id: catalog.to_owned(),
            name: name.to_owned(),
        });
    }
    Ok(())
}
