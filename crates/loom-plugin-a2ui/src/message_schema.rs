//! Whole agent-to-renderer messages checked as a renderer checks them.

use serde_json::Value;

use crate::catalog::{CatalogError, Catalogs, registry_of};

/// A2UI v1.0's agent-to-renderer schema, as the reference SDK `a2ui-core` 0.4.0 ships it.
const AGENT_TO_RENDERER: &str = include_str!("../schemas/agent_to_renderer.json");

/// The agent-to-renderer message schema with `catalog.json` resolved to one catalog set:
/// checks a whole message (envelope, components, function calls) before it goes on the wire,
/// or in tests of what a server sent. Compile it once and keep it: compiling costs far more
/// than a check.
pub struct MessageSchema {
    validator: jsonschema::Validator,
}

impl MessageSchema {
    /// The schema for messages whose components and functions come from `catalogs`.
    pub fn new(catalogs: &Catalogs) -> Result<Self, CatalogError> {
        let defs: Vec<_> = catalogs.definitions().cloned().collect();
        let registry = registry_of(&defs, catalogs.default_catalog())?;
        let invalid = |detail: String| CatalogError::InvalidSchema {
            catalog_id: "agent_to_renderer".into(),
            name: "message".into(),
            detail,
        };
        let schema: Value =
            serde_json::from_str(AGENT_TO_RENDERER).map_err(|err| invalid(err.to_string()))?;
        let validator = jsonschema::options()
            .with_registry(&registry)
            .build(&schema)
            .map_err(|err| invalid(err.to_string()))?;
        Ok(Self { validator })
    }

    /// What is wrong with `message`, each with where (empty when it is valid).
    pub fn errors(&self, message: &Value) -> Vec<String> {
        self.validator
            .iter_errors(message)
            .map(|err| format!("{err} at {}", err.instance_path()))
            .collect()
    }

    /// Whether `message` is valid.
    pub fn is_valid(&self, message: &Value) -> bool {
        self.validator.is_valid(message)
    }
}

impl std::fmt::Debug for MessageSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageSchema").finish_non_exhaustive()
    }
}
