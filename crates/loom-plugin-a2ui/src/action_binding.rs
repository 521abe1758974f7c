//! Whether an inbound `action` is one the surface could have sent: a component of the surface
//! with that id declares an event action of that name, and the action's `context` is what a
//! renderer computes from that component's bindings over the model the renderer holds (the
//! masked model).
//!
//! A context value bound by an absolute `{"@path": "/..."}` or given as a literal is compared
//! exactly. A relative path (a component inside a list template, whose item the message does
//! not name) or a function call (`{"@call": ...}`, evaluated by the renderer) can only be
//! checked for presence: its key must be there.

use serde_json::{Map, Value};

use crate::bridge::IngestError;
use crate::wire::Action;

/// Checks `action` against `components` (the surface's tree) and `masked_model`.
pub(crate) fn check_action_binding(
    components: &[Value],
    masked_model: &Value,
    action: &Action,
) -> Result<(), IngestError> {
    let component = components
        .iter()
        .find(|c| c.get("id").and_then(Value::as_str) == Some(action.source_component_id.as_str()))
        .ok_or_else(|| IngestError::UnknownComponent {
            component_id: action.source_component_id.clone(),
        })?;
    let event = component
        .get("action")
        .and_then(|a| a.get("event"))
        .filter(|event| event.get("name").and_then(Value::as_str) == Some(action.name.as_str()))
        .ok_or_else(|| IngestError::NoSuchAction {
            component_id: action.source_component_id.clone(),
            name: action.name.clone(),
        })?;
    let declared = event
        .get("context")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    check_context(&declared, masked_model, &action.context).map_err(|key| {
        IngestError::ContextMismatch {
            name: action.name.clone(),
            key,
        }
    })
}

/// `Err(key)` names the first key whose value differs, is missing, or is not declared.
fn check_context(
    declared: &Map<String, Value>,
    masked_model: &Value,
    sent: &Map<String, Value>,
) -> Result<(), String> {
    if let Some(extra) = sent.keys().find(|key| !declared.contains_key(*key)) {
        return Err(extra.clone());
    }
    for (key, binding) in declared {
        let got = sent.get(key);
        let fits = match expected_value(binding, masked_model) {
            Expected::Exactly(expected) => match got {
                Some(value) => *value == expected,
                // A renderer may leave out a binding that resolves to nothing.
                None => expected.is_null(),
            },
            Expected::Missing => got.is_none_or(Value::is_null),
            Expected::Present => got.is_some(),
        };
        if !fits {
            return Err(key.clone());
        }
    }
    Ok(())
}

enum Expected {
    Exactly(Value),
    Missing,
    Present,
}

fn expected_value(binding: &Value, masked_model: &Value) -> Expected {
    let Some(object) = binding.as_object() else {
        return Expected::Exactly(binding.clone());
    };
    if object.contains_key("@call") {
        return Expected::Present;
    }
    match object.get("@path").and_then(Value::as_str) {
        Some(pointer) if pointer.is_empty() || pointer.starts_with('/') => {
            match masked_model.pointer(pointer) {
                Some(value) => Expected::Exactly(value.clone()),
                None => Expected::Missing,
            }
        }
        Some(_) => Expected::Present,
        None => Expected::Exactly(binding.clone()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn button() -> Vec<Value> {
        vec![
            json!({"id": "go", "component": "Button", "child": "l", "action": {"event": {"name": "approve", "context": {"orderId": {"@path": "/order/id"}, "kind": "fast", "card": {"@path": "/card"}}}}}),
        ]
    }

    fn action(component: &str, name: &str, context: Value) -> Action {
        Action {
            name: name.into(),
            surface_id: "s".into(),
            source_component_id: component.into(),
            timestamp: "t".into(),
            context: context.as_object().cloned().unwrap_or_default(),
            user_message: None,
            metadata: None,
            catalog_id: None,
        }
    }

    #[test]
    fn the_context_a_renderer_computes_is_accepted_and_any_other_refused() {
        let model = json!({"order": {"id": "o-1"}, "card": "***"});
        let good = json!({"orderId": "o-1", "kind": "fast", "card": "***"});
        assert_eq!(
            check_action_binding(&button(), &model, &action("go", "approve", good)),
            Ok(())
        );
        for (context, key) in [
            (
                json!({"orderId": "o-2", "kind": "fast", "card": "***"}),
                "orderId",
            ),
            (
                json!({"orderId": "o-1", "kind": "slow", "card": "***"}),
                "kind",
            ),
            (
                json!({"orderId": "o-1", "kind": "fast", "card": "4111"}),
                "card",
            ),
            (json!({"orderId": "o-1", "kind": "fast"}), "card"),
            (
                json!({"orderId": "o-1", "kind": "fast", "card": "***", "x": 1}),
                "x",
            ),
        ] {
            assert_eq!(
                check_action_binding(&button(), &model, &action("go", "approve", context)),
                Err(IngestError::ContextMismatch {
                    name: "approve".into(),
                    key: key.into()
                })
            );
        }
    }

    #[test]
    fn an_unknown_component_or_action_name_is_refused() {
        let model = json!({});
        assert!(matches!(
            check_action_binding(&button(), &model, &action("nope", "approve", json!({}))),
            Err(IngestError::UnknownComponent { .. })
        ));
        assert!(matches!(
            check_action_binding(&button(), &model, &action("go", "reject", json!({}))),
            Err(IngestError::NoSuchAction { .. })
        ));
    }
}
