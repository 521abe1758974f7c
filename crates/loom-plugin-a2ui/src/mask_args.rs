//! K10-R6 for function-call arguments: what a renderer is sent in `callRendererFunction` is
//! masked as the data model is; what the log records keeps the true arguments.
//!
//! Arguments are no place in the model, so two rules apply, both toward hiding:
//! - the arguments, read as a document rooted where the classified paths are, are masked as
//!   any message leaving is (`DataClassification::mask_message_value`): an argument
//!   `customer.card` is masked when `customer.card` is classified;
//! - a string or number anywhere in them that equals a classified value the surface's model
//!   holds is masked: a flow that passes `model.customer.card` under another name does not
//!   leak it. Booleans and null carry too little to match on and pass.

use std::collections::BTreeSet;

use loom_kernel::{DataClassification, MASK};
use serde_json::{Map, Value};

/// `args` as a renderer may see them, given the surface's true `model`.
pub(crate) fn mask_call_args(
    classification: &DataClassification,
    model: &Value,
    args: &Map<String, Value>,
) -> Map<String, Value> {
    if classification.is_empty() {
        return args.clone();
    }
    let mut masked = match classification.mask_message_value(&Value::Object(args.clone())) {
        Value::Object(map) => map,
        // Masking keeps an object an object; refuse to let anything out otherwise.
        _ => return Map::new(),
    };
    let mut secrets = BTreeSet::new();
    classified_leaves(model, &classification.mask(model), &mut secrets);
    if !secrets.is_empty() {
        for value in masked.values_mut() {
            mask_matching(value, &secrets);
        }
    }
    masked
}

/// A scalar as compared: its JSON text.
fn key(value: &Value) -> Option<String> {
    match value {
        Value::String(_) | Value::Number(_) => Some(value.to_string()),
        _ => None,
    }
}

/// Collects the strings and numbers of `truth` that `masked` hides. Iterative, so a deeply
/// nested model cannot exhaust the stack.
fn classified_leaves(truth: &Value, masked: &Value, into: &mut BTreeSet<String>) {
    let mut stack = vec![(truth, masked, false)];
    while let Some((truth, masked, hidden)) = stack.pop() {
        let hidden = hidden || (masked.as_str() == Some(MASK) && truth != masked);
        match truth {
            Value::Object(map) => {
                for (name, child) in map {
                    let masked_child = if hidden {
                        child
                    } else {
                        masked.get(name).unwrap_or(child)
                    };
                    stack.push((child, masked_child, hidden));
                }
            }
            Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    let masked_child = if hidden {
                        child
                    } else {
                        masked.get(index).unwrap_or(child)
                    };
                    stack.push((child, masked_child, hidden));
                }
            }
            scalar if hidden => {
                if let Some(key) = key(scalar) {
                    into.insert(key);
                }
            }
            _ => {}
        }
    }
}

/// Replaces every string or number in `value` that is one of `secrets` by the mask.
fn mask_matching(value: &mut Value, secrets: &BTreeSet<String>) {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => stack.extend(map.values_mut()),
            Value::Array(items) => stack.extend(items.iter_mut()),
            scalar => {
                if key(scalar).is_some_and(|k| secrets.contains(&k)) {
                    *scalar = Value::String(MASK.to_owned());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn classification() -> DataClassification {
        DataClassification::mask_paths(["customer.card", "orders.*.iban"]).expect("valid paths")
    }

    fn args(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_classified_path_in_the_args_and_a_classified_value_under_another_name_are_masked() {
        let model = json!({
            "customer": {"card": "4111 1111", "name": "Ada"},
            "orders": [{"iban": "CH93 0076", "total": 12}],
        });
        let masked = mask_call_args(
            &classification(),
            &model,
            &args(json!({
                "customer": {"card": "4111 1111", "name": "Ada"},
                "pay": {"with": "4111 1111", "iban": ["CH93 0076"]},
                "total": 12,
                "confirm": true,
            })),
        );
        assert_eq!(
            Value::Object(masked),
            json!({
                "customer": {"card": MASK, "name": "Ada"},
                "pay": {"with": MASK, "iban": [MASK]},
                "total": 12,
                "confirm": true,
            })
        );
    }

    #[test]
    fn a_whole_classified_object_hides_every_value_inside_it() {
        let classification = DataClassification::mask_paths(["secret"]).expect("a valid path");
        let model = json!({"secret": {"pin": 4242, "words": ["open", "sesame"]}, "pin": 1});
        let masked = mask_call_args(
            &classification,
            &model,
            &args(json!({"a": 4242, "b": "sesame", "c": 1, "d": null})),
        );
        assert_eq!(
            Value::Object(masked),
            json!({"a": MASK, "b": MASK, "c": 1, "d": null})
        );
    }

    #[test]
    fn nothing_classified_sends_the_args_as_they_are() {
        let given = args(json!({"card": "4111"}));
        let masked = mask_call_args(
            &DataClassification::default(),
            &json!({"card": "4111"}),
            &given,
        );
        assert_eq!(masked, given);
    }

    #[test]
    fn a_value_hidden_deep_in_the_model_is_masked_deep_in_the_args() {
        let classification = DataClassification::mask_paths(["deep"]).expect("a valid path");
        let mut model = json!("needle");
        let mut given = json!("needle");
        for _ in 0..100 {
            model = json!([model]);
            given = json!({"x": given});
        }
        let model = json!({"deep": model});
        let masked = mask_call_args(&classification, &model, &args(json!({"a": given})));
        let mut inner = &masked["a"];
        while let Some(next) = inner.get("x") {
            inner = next;
        }
        assert_eq!(inner, &json!(MASK));
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<bool>().prop_map(Value::from),
            (0i64..50).prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::from),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-c]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// No string or number the masked model hides reaches the renderer through the args.
        #[test]
        fn no_hidden_value_leaves_through_the_args(
            model in prop::collection::btree_map("[a-c]", json_value(), 0..4),
            given in prop::collection::btree_map("[a-c]", json_value(), 0..4),
        ) {
            let classification = DataClassification::mask_paths(["a", "b.c"]).expect("valid paths");
            let model = Value::Object(model.into_iter().collect());
            let masked = mask_call_args(&classification, &model, &given.into_iter().collect());
            let mut hidden = BTreeSet::new();
            classified_leaves(&model, &classification.mask(&model), &mut hidden);
            let mut stack = vec![Value::Object(masked)];
            while let Some(value) = stack.pop() {
                match value {
                    Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
                    Value::Array(items) => stack.extend(items),
                    scalar => {
                        if let Some(k) = key(&scalar) {
                            prop_assert!(!hidden.contains(&k) || scalar == json!(MASK), "{scalar} leaked");
                        }
                    }
                }
            }
        }
    }
}
