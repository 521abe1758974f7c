//! Whole agent-to-renderer messages checked as a renderer checks them.

use loom_kernel::{MAX_PAYLOAD_DEPTH, Payload};
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

    /// What is wrong with `message`, each with where (empty when it is valid). A message
    /// nested deeper than the log holds and the wire parser reads ([`MAX_PAYLOAD_DEPTH`]) is
    /// refused as such, before any walk of the schema through it.
    pub fn errors(&self, message: &Value) -> Vec<String> {
        if Payload::value_is_too_deep(message) {
            return vec![too_deep()];
        }
        self.validator
            .iter_errors(message)
            .map(|err| format!("{err} at {}", err.instance_path()))
            .collect()
    }

    /// Whether `message` is valid.
    pub fn is_valid(&self, message: &Value) -> bool {
        !Payload::value_is_too_deep(message) && self.validator.is_valid(message)
    }
}

fn too_deep() -> String {
    format!("the message nests arrays and objects deeper than {MAX_PAYLOAD_DEPTH} levels")
}

impl std::fmt::Debug for MessageSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageSchema").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A `Text` value 10,000 function calls deep: built (and dropped) on a thread with room for
    /// serde_json's recursive drop, checked on a thread with 1 MiB of stack.
    fn nested(depth: usize) -> Value {
        let mut value = json!("leaf");
        for _ in 0..depth {
            // Moved in, not through `json!`, which would copy the whole value at each level.
            let mut args = serde_json::Map::new();
            args.insert("value".into(), value);
            let mut call = serde_json::Map::new();
            call.insert("call".into(), json!("formatString"));
            call.insert("args".into(), Value::Object(args));
            value = Value::Object(call);
        }
        value
    }

    fn on_a_small_stack<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(work)
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn a_message_nested_deeper_than_the_wire_parser_reads_is_refused_as_such_even_10_000_deep() {
        std::thread::Builder::new()
            .stack_size(512 << 20)
            .spawn(|| {
                let schema = std::sync::Arc::new(
                    MessageSchema::new(&Catalogs::default_with([]).unwrap()).unwrap(),
                );
                let mut data = json!({ "version": "v1.0",
                    "updateDataModel": { "surfaceId": "s", "value": null } });
                data["updateDataModel"]["value"] = nested(10_000);
                let mut component = json!({ "version": "v1.0", "updateComponents": {
                    "surfaceId": "s",
                    "components": [{ "id": "root", "component": "Text", "text": null }]
                } });
                component["updateComponents"]["components"][0]["text"] = nested(10_000);
                for message in [data, component] {
                    let schema = std::sync::Arc::clone(&schema);
                    let (message, valid, errors) = on_a_small_stack(move || {
                        let valid = schema.is_valid(&message);
                        let errors = schema.errors(&message);
                        (message, valid, errors)
                    });
                    assert!(!valid);
                    assert_eq!(errors, vec![too_deep()]);
                    drop(message);
                }
                let shallow = json!({ "version": "v1.0",
                    "updateDataModel": { "surfaceId": "s", "value": nested(3) } });
                assert!(schema.is_valid(&shallow), "{:?}", schema.errors(&shallow));
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
