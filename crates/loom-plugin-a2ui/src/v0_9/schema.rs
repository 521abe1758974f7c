//! The published A2UI v0.9 schemas, compiled once: every message a v0.9 session sends is
//! checked against them before it leaves, and the tests check every emitted one again.

use std::sync::OnceLock;

use loom_kernel::Payload;
use serde_json::Value;

use super::ProjectionError;

const SERVER_TO_CLIENT: &str = include_str!("../../schemas/v0_9/server_to_client.json");
const CLIENT_TO_SERVER: &str = include_str!("../../schemas/v0_9/client_to_server.json");
const COMMON_TYPES: &str = include_str!("../../schemas/v0_9/common_types.json");
const BASIC_CATALOG: &str = include_str!("../../schemas/v0_9/catalogs/basic/catalog.json");
const CLIENT_CAPABILITIES: &str = include_str!("../../schemas/v0_9/client_capabilities.json");

/// Where the messages' schemas look for the surface's catalog (`catalog.json`, relative).
const CATALOG_PLACEHOLDER_V0_9: &str = "https://a2ui.org/specification/v0_9/catalog.json";
const COMMON_TYPES_V0_9: &str = "https://a2ui.org/specification/v0_9/common_types.json";

/// The v0.9 schemas with `catalog.json` resolved to the v0.9 basic catalog: agent-to-renderer
/// messages (`server_to_client.json`), renderer-to-agent messages (`client_to_server.json`)
/// and renderer capabilities (`client_capabilities.json`).
pub struct V0_9Schema {
    server_to_client: jsonschema::Validator,
    client_to_server: jsonschema::Validator,
    client_capabilities: jsonschema::Validator,
}

impl std::fmt::Debug for V0_9Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("V0_9Schema").finish_non_exhaustive()
    }
}

impl V0_9Schema {
    /// The schemas, compiled on first use and shared.
    pub fn shared() -> Result<&'static Self, ProjectionError> {
        static SCHEMA: OnceLock<Result<V0_9Schema, String>> = OnceLock::new();
        SCHEMA
            .get_or_init(Self::compile)
            .as_ref()
            .map_err(|detail| ProjectionError::Schema(detail.clone()))
    }

    fn compile() -> Result<Self, String> {
        let parse = |name: &str, text: &str| -> Result<Value, String> {
            serde_json::from_str(text).map_err(|err| format!("{name}: {err}"))
        };
        let mut catalog = parse("catalog.json", BASIC_CATALOG)?;
        // Registered under the placeholder the messages name; its own `$id` would override.
        if let Value::Object(map) = &mut catalog {
            map.remove("$id");
        }
        let registry = jsonschema::Registry::new()
            .add(COMMON_TYPES_V0_9, parse("common_types.json", COMMON_TYPES)?)
            .and_then(|b| b.add(CATALOG_PLACEHOLDER_V0_9, catalog.clone()))
            .and_then(|b| b.add(super::BASIC_CATALOG_V0_9_ID, catalog))
            .map_err(|err| err.to_string())?
            .prepare()
            .map_err(|err| err.to_string())?;
        let build = |name: &str, text: &str| -> Result<jsonschema::Validator, String> {
            jsonschema::options()
                .with_registry(&registry)
                .build(&parse(name, text)?)
                .map_err(|err| format!("{name}: {err}"))
        };
        Ok(Self {
            server_to_client: build("server_to_client.json", SERVER_TO_CLIENT)?,
            client_to_server: build("client_to_server.json", CLIENT_TO_SERVER)?,
            client_capabilities: build("client_capabilities.json", CLIENT_CAPABILITIES)?,
        })
    }

    /// What is wrong with an agent-to-renderer v0.9 message (empty when it is valid).
    pub fn server_to_client_errors(&self, message: &Value) -> Vec<String> {
        errors(&self.server_to_client, message)
    }

    /// What is wrong with a renderer-to-agent v0.9 message (empty when it is valid).
    pub fn client_to_server_errors(&self, message: &Value) -> Vec<String> {
        errors(&self.client_to_server, message)
    }

    /// What is wrong with a v0.9 capabilities document (empty when it is valid).
    pub fn client_capabilities_errors(&self, capabilities: &Value) -> Vec<String> {
        errors(&self.client_capabilities, capabilities)
    }
}

fn errors(validator: &jsonschema::Validator, message: &Value) -> Vec<String> {
    if Payload::value_is_too_deep(message) {
        return vec!["the message nests arrays and objects too deeply".to_owned()];
    }
    validator
        .iter_errors(message)
        .map(|err| format!("{err} at {}", err.instance_path()))
        .collect()
}
