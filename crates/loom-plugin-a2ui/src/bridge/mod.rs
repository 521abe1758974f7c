//! `A2UISurfaceBridge`: one execution's surface projected onto the A2UI v1.0 wire.
//!
//! The bridge folds Loom's delta ops locally (the true values, so increment / append / merge
//! stay correct) and sends the concrete post-patch value at each touched JSON Pointer, masked
//! on the way out (K10-R6). It reads no clock and draws no random number: call ids come from
//! the caller.

mod calls;
mod errors;
mod inbound;
mod patches;

use std::collections::BTreeMap;

use loom_kernel::DataClassification;
use serde_json::{Map, Value};

use crate::catalog::Catalogs;
use crate::wire::{AgentMessage, CreateSurface, DeleteSurface, UpdateComponents};

pub(crate) use calls::{check_args, check_callable};
pub use errors::{BridgeError, IngestError};
pub(crate) use inbound::parse_reply;
pub use inbound::{FunctionResult, InboundAction};

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
}
