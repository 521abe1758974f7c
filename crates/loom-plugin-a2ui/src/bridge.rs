//! `A2UISurfaceBridge`: one execution's surface projected onto the A2UI v1.0 wire.
//!
//! The bridge folds Loom's delta ops locally (the true values, so increment / append / merge
//! stay correct) and sends the concrete post-patch value at each touched JSON Pointer, masked
//! on the way out (K10-R6). It reads no clock and draws no random number: call ids come from
//! the caller.

use std::collections::{BTreeMap, BTreeSet};

use loom_agent_surface::{PatchError, SurfaceOp, apply_surface_patches};
use loom_kernel::DataClassification;
use loom_kernel::Event;
use serde_json::{Map, Value, json};
use thiserror::Error;

use crate::action_binding::check_action_binding;
use crate::catalog::{Catalogs, ComponentError};
use crate::wire::{
    AgentMessage, CallRendererFunction, CreateSurface, DeleteSurface, FunctionCall, FunctionError,
    FunctionOutcome, RendererMessage, UpdateComponents, UpdateDataModel, WireError,
};

/// An outgoing message the bridge refuses to produce.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// A component does not fit its catalog.
    #[error("surface `{surface_id}`: {source}")]
    Component {
        /// The surface's id.
        surface_id: String,
        /// The underlying error.
        #[source]
        source: ComponentError,
    },
    /// The initial data model is not a JSON object.
    #[error("surface `{surface_id}`: the data model must be a JSON object")]
    ModelNotAnObject {
        /// The surface's id.
        surface_id: String,
    },
    /// `createSurface` was already sent for this surface.
    #[error("surface `{surface_id}` was already created")]
    AlreadyCreated {
        /// The surface's id.
        surface_id: String,
    },
    /// The surface was never created (or was deleted).
    #[error("surface `{surface_id}` is not created")]
    NotCreated {
        /// The surface's id.
        surface_id: String,
    },
    /// A patch does not apply; the model is unchanged.
    #[error("surface `{surface_id}`: {source}")]
    Patch {
        /// The surface's id.
        surface_id: String,
        /// The underlying error.
        #[source]
        source: Box<PatchError>,
    },
    /// A `SURFACE_PATCH` does not decode as surface ops.
    #[error("surface `{surface_id}`: a SURFACE_PATCH does not decode: {detail}")]
    Decode {
        /// The surface's id.
        surface_id: String,
        /// What went wrong, in words.
        detail: String,
    },
    /// The function is not in the surface's catalogs.
    #[error("catalog `{catalog_id}` has no function `{name}`")]
    UnknownFunction {
        /// The catalog's id.
        catalog_id: String,
        /// The name concerned.
        name: String,
    },
    /// The function may only be called by the renderer; nothing was sent.
    #[error(
        "function `{name}` of catalog `{catalog_id}` is rendererOnly: the agent may not call it"
    )]
    RendererOnly {
        /// The catalog's id.
        catalog_id: String,
        /// The name concerned.
        name: String,
    },
    /// The call's `args` fail the function's args schema; nothing was recorded or sent.
    #[error("the args of `{name}` (catalog `{catalog_id}`) fail its args schema: {detail}")]
    InvalidArgs {
        /// The catalog's id.
        catalog_id: String,
        /// The function's name.
        name: String,
        /// What went wrong, in words.
        detail: String,
    },
    /// The call id was already issued by this bridge.
    #[error("call id `{call_id}` was already issued")]
    DuplicateCallId {
        /// The function call's id.
        call_id: String,
    },
}

/// An inbound message refused; nothing was recorded and the bridge is unchanged.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum IngestError {
    /// Not a valid v1.0 renderer-to-agent message.
    #[error("not an A2UI v1.0 renderer message: {0}")]
    Wire(#[from] WireError),
    /// A valid message, but not the kind this ingest takes.
    #[error("expected {expected}, got a `{got}` message")]
    UnexpectedKind {
        /// The kind of message expected.
        expected: &'static str,
        /// The kind of message received.
        got: &'static str,
    },
    /// The message is about another surface.
    #[error("the message is for surface `{got}`, not `{expected}`")]
    WrongSurface {
        /// This bridge's surface.
        expected: String,
        /// The surface the message names.
        got: String,
    },
    /// The reply's call id is not the one expected.
    #[error("the reply answers call `{got}`, not the expected `{expected}`")]
    MismatchedCallId {
        /// The call id expected.
        expected: String,
        /// The call id the reply carries.
        got: String,
    },
    /// No call with this id was issued (here).
    #[error("no call `{call_id}` was issued on this surface")]
    UnknownCallId {
        /// The function call's id.
        call_id: String,
    },
    /// The call was already answered.
    #[error("call `{call_id}` was already answered")]
    AlreadyAnswered {
        /// The function call's id.
        call_id: String,
    },
    /// The action names a component the surface does not hold.
    #[error("the surface holds no component `{component_id}`")]
    UnknownComponent {
        /// The component the action names.
        component_id: String,
    },
    /// The component declares no event action of that name.
    #[error("component `{component_id}` has no action `{name}`")]
    NoSuchAction {
        /// The component the action names.
        component_id: String,
        /// The action's name.
        name: String,
    },
    /// No gate of this surface's execution waits for the action.
    #[error("no gate waits for action `{name}`")]
    NoGateWaiting {
        /// The action's name.
        name: String,
    },
    /// The action's context is not what the component binds over the current model.
    #[error("the context of action `{name}` does not match its component's bindings at `{key}`")]
    ContextMismatch {
        /// The action's name.
        name: String,
        /// The first context key that differs, is missing, or is not declared.
        key: String,
    },
    /// The result does not match the function's declared return schema.
    #[error("the result of call `{call_id}` ({name}) fails its return schema: {detail}")]
    InvalidResult {
        /// The function call's id.
        call_id: String,
        /// The function called.
        name: String,
        /// What went wrong, in words.
        detail: String,
    },
}

/// A user action, normalized for the caller to resume a gate (`A2UIAction`, keyed by the
/// action's name) or to start an execution.
#[derive(Debug, Clone, PartialEq)]
pub struct InboundAction {
    /// The action's name.
    pub name: String,
    /// The surface it came from.
    pub surface_id: String,
    /// The component that triggered it.
    pub source_component_id: String,
    /// The resolved context.
    pub context: Map<String, Value>,
    /// The optional human-readable description.
    pub user_message: Option<String>,
}

impl InboundAction {
    /// The gate event type actions resume.
    pub const EVENT_TYPE: &'static str = "A2UIAction";

    /// The correlation key of the gate it resumes: the action's name.
    pub fn correlation_key(&self) -> &str {
        &self.name
    }

    /// The resume payload. The renderer's timestamp is left out: it is client-controlled and
    /// nothing recorded should depend on it.
    pub fn payload(&self) -> Value {
        let mut map = Map::new();
        map.insert("name".into(), Value::String(self.name.clone()));
        map.insert("surfaceId".into(), Value::String(self.surface_id.clone()));
        map.insert(
            "sourceComponentId".into(),
            Value::String(self.source_component_id.clone()),
        );
        map.insert("context".into(), Value::Object(self.context.clone()));
        if let Some(text) = &self.user_message {
            map.insert("userMessage".into(), Value::String(text.clone()));
        }
        Value::Object(map)
    }
}

/// A checked reply to a call this bridge issued, with the surface and function filled in from
/// the bridge's own record (the wire reply names neither).
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionResult {
    /// The call id.
    pub call_id: String,
    /// The surface the call was made on.
    pub surface_id: String,
    /// The function's catalog.
    pub catalog_id: String,
    /// The function's name.
    pub name: String,
    /// The value (checked against the return schema) or the renderer's error.
    pub outcome: FunctionOutcome,
}

impl FunctionResult {
    /// The gate payload for grain A and the effect output for grain B.
    pub fn payload(&self) -> Value {
        let mut map = Map::new();
        map.insert("functionCallId".into(), Value::String(self.call_id.clone()));
        map.insert("surfaceId".into(), Value::String(self.surface_id.clone()));
        map.insert("name".into(), Value::String(self.name.clone()));
        match &self.outcome {
            FunctionOutcome::Value(value) => {
                map.insert("value".into(), value.clone());
            }
            FunctionOutcome::Error(error) => {
                map.insert(
                    "error".into(),
                    json!({"code": error.code, "message": error.message}),
                );
            }
        }
        Value::Object(map)
    }
}

#[derive(Debug, Clone, PartialEq)]
struct IssuedCall {
    catalog_id: String,
    name: String,
    answered: bool,
}

/// One execution's surface on the A2UI wire.
#[derive(Debug, Clone)]
pub struct A2UISurfaceBridge {
    surface_id: String,
    /// The id renderers know the surface by (the flow's `surface_id` unless set otherwise):
    /// what goes out, and what an inbound action must name.
    wire_id: String,
    catalogs: Catalogs,
    classification: DataClassification,
    components: Vec<Value>,
    model: Value,
    created: bool,
    calls: BTreeMap<String, IssuedCall>,
}

impl A2UISurfaceBridge {
    /// A bridge for `surface_id` using `catalogs`, masking `classification` on the way out.
    pub fn new(
        surface_id: impl Into<String>,
        catalogs: Catalogs,
        classification: DataClassification,
    ) -> Self {
        let surface_id = surface_id.into();
        Self {
            wire_id: surface_id.clone(),
            surface_id,
            catalogs,
            classification,
            components: Vec::new(),
            model: Value::Object(Map::new()),
            created: false,
            calls: BTreeMap::new(),
        }
    }

    /// The surface id, as the flow names it (and the log records it).
    pub fn surface_id(&self) -> &str {
        &self.surface_id
    }

    /// This bridge with renderers knowing the surface as `wire_id` (unique per renderer, for
    /// instance one per execution); what the log records keeps the flow's surface id.
    pub fn with_wire_id(mut self, wire_id: impl Into<String>) -> Self {
        self.wire_id = wire_id.into();
        self
    }

    /// The id renderers know the surface by.
    pub fn wire_id(&self) -> &str {
        &self.wire_id
    }

    /// The catalogs the surface uses.
    pub fn catalogs(&self) -> &Catalogs {
        &self.catalogs
    }

    /// The true data model (never sent as is).
    pub fn model(&self) -> &Value {
        &self.model
    }

    /// The data model as the renderer sees it.
    pub fn masked_model(&self) -> Value {
        self.classification.mask(&self.model)
    }

    /// The component tree as it stands.
    pub fn components(&self) -> &[Value] {
        &self.components
    }

    /// Whether `createSurface` was produced and the surface not deleted since.
    pub fn is_created(&self) -> bool {
        self.created
    }

    /// Sets the component tree (checked against the catalogs, with a `root`) without
    /// producing a message; `create_surface` and `snapshot` carry it.
    pub fn set_components(&mut self, components: Vec<Value>) -> Result<(), BridgeError> {
        self.catalogs
            .check_components(&components, true)
            .map_err(|source| BridgeError::Component {
                surface_id: self.surface_id.clone(),
                source,
            })?;
        self.components = components;
        Ok(())
    }

    /// `createSurface` with `components` and the initial data model (masked).
    pub fn create_surface(
        &mut self,
        components: Vec<Value>,
        data_model: Value,
    ) -> Result<AgentMessage, BridgeError> {
        if self.created {
            return Err(BridgeError::AlreadyCreated {
                surface_id: self.surface_id.clone(),
            });
        }
        if !data_model.is_object() {
            return Err(BridgeError::ModelNotAnObject {
                surface_id: self.surface_id.clone(),
            });
        }
        self.set_components(components)?;
        self.model = data_model;
        self.created = true;
        Ok(self.create_message())
    }

    /// `createSurface` with the current components and masked model, for a client that
    /// connects late or reconnects; marks the surface created.
    pub fn snapshot(&mut self) -> AgentMessage {
        self.created = true;
        self.create_message()
    }

    fn create_message(&self) -> AgentMessage {
        let data_model = match self.masked_model() {
            Value::Object(map) => Some(map),
            _ => None,
        };
        AgentMessage::CreateSurface(CreateSurface {
            surface_id: self.wire_id.clone(),
            catalog_id: Some(self.catalogs.default_catalog().to_owned()),
            send_data_model: None,
            components: (!self.components.is_empty()).then(|| self.components.clone()),
            data_model,
            metadata: None,
        })
    }

    /// `updateComponents`: adds or replaces components by id.
    pub fn update_components(
        &mut self,
        components: Vec<Value>,
    ) -> Result<AgentMessage, BridgeError> {
        self.require_created()?;
        self.merge_components(&components)?;
        Ok(AgentMessage::UpdateComponents(UpdateComponents {
            surface_id: self.wire_id.clone(),
            components,
        }))
    }

    /// Adds `components` to the tree, each replacing the one of the same id, checked against
    /// the catalogs (all or nothing), without producing a message: before `createSurface`,
    /// or for a subscriber that gets the tree whole.
    pub fn merge_components(&mut self, components: &[Value]) -> Result<(), BridgeError> {
        self.catalogs
            .check_components(components, false)
            .map_err(|source| BridgeError::Component {
                surface_id: self.surface_id.clone(),
                source,
            })?;
        let mut merged = self.components.clone();
        for component in components {
            let id = component.get("id");
            match merged.iter_mut().find(|c| c.get("id") == id) {
                Some(slot) => *slot = component.clone(),
                None => merged.push(component.clone()),
            }
        }
        // The merged tree must have its `root`. Nothing else needs checking again: the tree was
        // checked when it was set, `components` just now, and a merge by id keeps ids unique.
        if !merged
            .iter()
            .any(|c| c.get("id").and_then(Value::as_str) == Some("root"))
        {
            return Err(BridgeError::Component {
                surface_id: self.surface_id.clone(),
                source: crate::catalog::ComponentError::NoRoot,
            });
        }
        self.components = merged;
        Ok(())
    }

    /// Folds one durable event. A `SURFACE_PATCH` of this surface applies (all or nothing) and
    /// gives the `updateDataModel` messages for it (none before `createSurface`); every other
    /// event gives none.
    pub fn apply_event(&mut self, event: &Event) -> Result<Vec<AgentMessage>, BridgeError> {
        let Event::SurfacePatch(patch) = event else {
            return Ok(Vec::new());
        };
        if patch.surface_id != self.surface_id {
            return Ok(Vec::new());
        }
        let raw: Vec<Value> = patch.ops.decode().map_err(|err| BridgeError::Decode {
            surface_id: self.surface_id.clone(),
            detail: err.to_string(),
        })?;
        let ops = raw
            .iter()
            .map(SurfaceOp::from_value)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| BridgeError::Decode {
                surface_id: self.surface_id.clone(),
                detail: err.to_string(),
            })?;
        self.apply_ops(&ops)
    }

    /// Applies ops (all or nothing) and gives one `updateDataModel` per place changed, minimal:
    /// a pointer below another touched pointer is covered by it. Each carries the post-patch
    /// value, masked; a removed value is `null`. Before `createSurface`, the model is folded
    /// and no message is produced.
    pub fn apply_ops(&mut self, ops: &[SurfaceOp]) -> Result<Vec<AgentMessage>, BridgeError> {
        let touched =
            apply_surface_patches(&mut self.model, ops).map_err(|source| BridgeError::Patch {
                surface_id: self.surface_id.clone(),
                source: Box::new(source),
            })?;
        if !self.created {
            return Ok(Vec::new());
        }
        let pointers = refine_appends(&self.model, ops, touched.into_iter().map(|t| t.pointer));
        let mut updates = Vec::with_capacity(pointers.len());
        for pointer in pointers {
            let value = self.value_at(&pointer);
            // Only a masked value can need its pointer moved up: one walk for the rest.
            if value.as_str() == Some(loom_kernel::MASK) {
                let root = self.masked_root(pointer);
                let value = self.value_at(&root);
                updates.push((root, value));
            } else {
                updates.push((pointer, value));
            }
        }
        let keep = minimal_mask(updates.iter().map(|(p, _)| p.as_str()));
        Ok(updates
            .into_iter()
            .zip(keep)
            .filter(|(_, keep)| *keep)
            .map(|((pointer, value), _)| self.update_message(pointer, value))
            .collect())
    }

    fn value_at(&self, pointer: &str) -> Value {
        match self.model.pointer(pointer) {
            None => Value::Null,
            Some(value) => self.classification.mask_at(pointer, value),
        }
    }

    fn update_message(&self, pointer: String, value: Value) -> AgentMessage {
        AgentMessage::UpdateDataModel(UpdateDataModel {
            surface_id: self.wire_id.clone(),
            path: Some(if pointer.is_empty() {
                "/".to_owned()
            } else {
                pointer
            }),
            value,
        })
    }

    /// The renderer holds a masked value whole (`"***"`), so a change below a classified path
    /// is sent as the classified path itself: nothing can be written below a string.
    fn masked_root(&self, pointer: String) -> String {
        if self.classification.is_empty() || !self.classification.is_masked_pointer(&pointer) {
            return pointer;
        }
        ancestors(&pointer)
            .chain(std::iter::once(pointer.as_str()))
            .find(|p| !p.is_empty() && self.classification.is_masked_pointer(p))
            .map_or_else(|| pointer.clone(), str::to_owned)
    }

    /// `deleteSurface`; the bridge keeps its model, so a later `snapshot` can recreate it.
    pub fn delete_surface(&mut self) -> Result<AgentMessage, BridgeError> {
        self.require_created()?;
        self.created = false;
        Ok(AgentMessage::DeleteSurface(DeleteSurface {
            surface_id: self.wire_id.clone(),
        }))
    }

    fn require_created(&self) -> Result<(), BridgeError> {
        if self.created {
            Ok(())
        } else {
            Err(BridgeError::NotCreated {
                surface_id: self.surface_id.clone(),
            })
        }
    }

    /// Parses an `action` for this surface: refused unless a component of the surface with
    /// that id declares that action and the context is what its bindings give over the masked
    /// model (`action_binding`).
    pub fn ingest_action(&self, message: &[u8]) -> Result<InboundAction, IngestError> {
        match RendererMessage::parse(message)? {
            RendererMessage::Action(action) => {
                if action.surface_id != self.wire_id {
                    return Err(IngestError::WrongSurface {
                        expected: self.wire_id.clone(),
                        got: action.surface_id,
                    });
                }
                check_action_binding(&self.components, &self.masked_model(), &action)?;
                Ok(InboundAction {
                    name: action.name,
                    surface_id: self.surface_id.clone(),
                    source_component_id: action.source_component_id,
                    context: action.context,
                    user_message: action.user_message,
                })
            }
            other => Err(IngestError::UnexpectedKind {
                expected: "an action",
                got: kind_of(&other),
            }),
        }
    }

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

    /// Checks a reply (`rendererFunctionResponse`, or a top-level `error` naming the call)
    /// against the call this bridge issued as `expected_call_id`: the id must match, the call
    /// must be pending, and a value must fit the function's return schema. On success the call
    /// is marked answered; on error nothing changes.
    pub fn ingest_function_response(
        &mut self,
        message: &[u8],
        expected_call_id: &str,
    ) -> Result<FunctionResult, IngestError> {
        let (call_id, outcome) = parse_reply(message)?;
        if call_id != expected_call_id {
            return Err(IngestError::MismatchedCallId {
                expected: expected_call_id.to_owned(),
                got: call_id,
            });
        }
        let result = self.check_reply(call_id, outcome)?;
        self.mark_answered(&result.call_id);
        Ok(result)
    }

    pub(crate) fn check_reply(
        &self,
        call_id: String,
        outcome: FunctionOutcome,
    ) -> Result<FunctionResult, IngestError> {
        let Some(call) = self.calls.get(&call_id) else {
            return Err(IngestError::UnknownCallId { call_id });
        };
        if call.answered {
            return Err(IngestError::AlreadyAnswered { call_id });
        }
        if let FunctionOutcome::Value(value) = &outcome {
            self.catalogs
                .check_result(&call.catalog_id, &call.name, value)
                .map_err(|detail| IngestError::InvalidResult {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    detail,
                })?;
        }
        Ok(FunctionResult {
            call_id,
            surface_id: self.surface_id.clone(),
            catalog_id: call.catalog_id.clone(),
            name: call.name.clone(),
            outcome,
        })
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

/// Reads a reply to a call: both error shapes are accepted.
pub(crate) fn parse_reply(message: &[u8]) -> Result<(String, FunctionOutcome), IngestError> {
    match RendererMessage::parse(message)? {
        RendererMessage::RendererFunctionResponse(response) => {
            Ok((response.function_call_id, response.outcome))
        }
        RendererMessage::Error(error) => match error.function_call_id {
            Some(call_id) => Ok((
                call_id,
                FunctionOutcome::Error(FunctionError {
                    code: error.code,
                    message: error.message,
                }),
            )),
            None => Err(IngestError::UnexpectedKind {
                expected: "a function response",
                got: "error without functionCallId",
            }),
        },
        other => Err(IngestError::UnexpectedKind {
            expected: "a function response",
            got: kind_of(&other),
        }),
    }
}

pub(crate) fn kind_of(message: &RendererMessage) -> &'static str {
    match message {
        RendererMessage::Action(_) => "action",
        RendererMessage::CallAgentFunction(_) => "callAgentFunction",
        RendererMessage::RendererFunctionResponse(_) => "rendererFunctionResponse",
        RendererMessage::Error(_) => "error",
        #[allow(unreachable_patterns)]
        _ => "unknown",
    }
}

/// An `append` reports its array; when nothing else in the batch touched that array, the new
/// items alone are sent (`/items/3`, `/items/4`), so appending to a long list costs what was
/// appended, not the list.
fn refine_appends(
    model: &Value,
    ops: &[SurfaceOp],
    touched: impl Iterator<Item = String>,
) -> Vec<String> {
    let touched: Vec<String> = touched.collect();
    if !ops.iter().any(|op| matches!(op, SurfaceOp::Append { .. })) {
        return touched;
    }
    let mut appends: BTreeMap<&str, usize> = BTreeMap::new();
    let mut other: BTreeSet<&str> = BTreeSet::new();
    for (op, pointer) in ops.iter().zip(&touched) {
        match op {
            SurfaceOp::Append { .. } => *appends.entry(pointer.as_str()).or_default() += 1,
            _ => {
                other.insert(pointer.as_str());
            }
        }
    }
    let mut out = Vec::with_capacity(touched.len());
    for pointer in &touched {
        let Some(&count) = appends.get(pointer.as_str()) else {
            out.push(pointer.clone());
            continue;
        };
        let related = other
            .iter()
            .any(|o| is_ancestor_or_self(o, pointer) || is_ancestor_or_self(pointer, o));
        let len = model
            .pointer(pointer)
            .and_then(Value::as_array)
            .map(Vec::len);
        match len {
            // A new array (count == len) goes whole: its parent key did not exist before.
            Some(len) if !related && count < len => {
                for index in len - count..len {
                    out.push(format!("{pointer}/{index}"));
                }
            }
            _ => out.push(pointer.clone()),
        }
    }
    out
}

fn is_ancestor_or_self(ancestor: &str, pointer: &str) -> bool {
    pointer == ancestor
        || (pointer.starts_with(ancestor) && pointer.as_bytes().get(ancestor.len()) == Some(&b'/'))
}

/// Which pointers to keep: not a duplicate of an earlier one, and not below another pointer
/// of the set.
pub(crate) fn minimal_mask<'p>(pointers: impl Iterator<Item = &'p str> + Clone) -> Vec<bool> {
    let all: BTreeSet<&str> = pointers.clone().collect();
    let mut emitted = BTreeSet::new();
    pointers
        .map(|p| !ancestors(p).any(|a| all.contains(a)) && emitted.insert(p))
        .collect()
}

/// The proper ancestors of a pointer, root (`""`) first.
fn ancestors(pointer: &str) -> impl Iterator<Item = &str> + '_ {
    let cut_points = pointer
        .char_indices()
        .filter(|(_, c)| *c == '/')
        .map(|(i, _)| i);
    cut_points.map(move |i| &pointer[..i])
}
