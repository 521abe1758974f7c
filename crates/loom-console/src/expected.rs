//! What a gate expects as its resume payload (LD-031): the JSON Schema the flow recorded with
//! the gate, checked here before any resume the console records or hands to the runtime, and
//! shown (with an example made from it) wherever the console tells an operator how to resume.
//!
//! The kernel records schemas and never reads them; this crate takes payloads from people, so
//! it checks them, with `jsonschema` (default features off: no remote references are fetched).
//! A recorded schema that does not compile is not applied (the resume goes on unchecked, as for
//! a gate that declared none) and is reported through `tracing`: a flow's mistake must not
//! leave its gate without any way to be answered.

use loom_kernel::{Event, EventEnvelope, EventStore, ExecutionId, ExecutionState};
use loom_kernel::{PAYLOAD_SCHEMA_KIND, expected_payload, payload_schema_step_id};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::error::ConsoleError;
use crate::view::GateView;

/// What a gate expects: its JSON Schema and an example payload that fits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpectedPayload {
    /// The gate's id.
    pub gate_id: String,
    /// The JSON Schema the flow declared for the gate's payload.
    pub schema: Value,
    /// A payload made from the schema (its `examples`, `default`, `const` or first `enum`
    /// value when it gives one; else the simplest value of its type): a starting point for the
    /// operator, not necessarily the right answer.
    pub example: Value,
}

/// How many schema violations a refusal names.
const SHOWN: usize = 3;

/// How deep [`example_payload`] follows a schema (a self-referencing schema stops here).
const EXAMPLE_DEPTH: usize = 32;

/// The pending gate a resume of (`event_type`, `correlation_key`) would answer: the oldest
/// one waiting on that pair, as the runtime picks it.
pub fn gate_for<'a>(
    state: &'a ExecutionState,
    event_type: &str,
    correlation_key: &str,
) -> Option<&'a str> {
    state
        .gate_waiting_for(event_type, correlation_key)
        .map(|(gate_id, _)| gate_id.as_str())
}

/// What the pending gate `gate_id` of `execution` expects, if it declared it.
pub async fn expected_of<S: EventStore>(
    store: &S,
    execution: &ExecutionId,
    state: &ExecutionState,
    gate_id: &str,
) -> Result<Option<ExpectedPayload>, ConsoleError> {
    let schema = expected_payload(store, execution, state, gate_id).await?;
    Ok(schema.map(|schema| {
        let schema = schema.to_value();
        ExpectedPayload {
            gate_id: gate_id.to_owned(),
            example: example_payload(&schema),
            schema,
        }
    }))
}

/// Fills in what each pending gate expects, when it declared it, from its `log`.
pub fn gate_expectations(state: &ExecutionState, log: &[EventEnvelope], gates: &mut [GateView]) {
    for gate in gates {
        let Some(seq) = state.decision(&payload_schema_step_id(&gate.gate_id)) else {
            continue;
        };
        if let Some(Event::DecisionRecorded(decision)) = usize::try_from(seq)
            .ok()
            .and_then(|at| log.get(at))
            .map(|e| &e.event)
            && decision.kind == PAYLOAD_SCHEMA_KIND
        {
            let schema = decision.value.to_value();
            gate.expects = Some(ExpectedPayload {
                gate_id: gate.gate_id.clone(),
                example: example_payload(&schema),
                schema,
            });
        }
    }
}

/// Checks `payload` against what the gate a resume of (`event_type`, `correlation_key`) would
/// answer expects. `Ok` when it fits, when the gate declared nothing, or when no gate waits on
/// that pair (the resume itself then says so); else a bad request that names the violations
/// and carries the schema and an example ([`ConsoleError::expected`]). Nothing is recorded
/// either way.
pub async fn check_resume<S: EventStore>(
    store: &S,
    execution: &ExecutionId,
    state: &ExecutionState,
    event_type: &str,
    correlation_key: &str,
    payload: &Value,
) -> Result<(), ConsoleError> {
    let Some(gate_id) = gate_for(state, event_type, correlation_key) else {
        return Ok(());
    };
    let Some(expected) = expected_of(store, execution, state, gate_id).await? else {
        return Ok(());
    };
    match violations(&expected.schema, payload) {
        Ok(None) => Ok(()),
        Ok(Some(detail)) => Err(refusal(
            execution,
            event_type,
            correlation_key,
            &detail,
            expected,
        )),
        Err(compile) => {
            tracing::warn!(
                execution = %execution,
                gate = %gate_id,
                error = %compile,
                "the gate's recorded payload schema does not compile: the resume is not checked"
            );
            Ok(())
        }
    }
}

/// `Ok(None)` when `payload` fits `schema`; `Ok(Some(..))` names the first violations with
/// where they are; `Err` when the schema does not compile.
pub fn violations(schema: &Value, payload: &Value) -> Result<Option<String>, String> {
    let validator = jsonschema::validator_for(schema).map_err(|error| error.to_string())?;
    let mut shown = Vec::new();
    let mut more = 0usize;
    for error in validator.iter_errors(payload) {
        if shown.len() < SHOWN {
            let at = error.instance_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            shown.push(format!("at {at}: {error}"));
        } else {
            more += 1;
        }
    }
    if shown.is_empty() {
        return Ok(None);
    }
    let mut detail = shown.join("; ");
    if more > 0 {
        detail.push_str(&format!(" (and {more} more)"));
    }
    Ok(Some(detail))
}

fn refusal(
    execution: &ExecutionId,
    event_type: &str,
    correlation_key: &str,
    detail: &str,
    expected: ExpectedPayload,
) -> ConsoleError {
    let example = expected.example.to_string();
    let message = format!(
        "the payload does not fit what gate '{}' of execution {execution} expects ({detail}); nothing was recorded. It expects (JSON Schema): {}. For example: loom resume {} {} {} {}",
        expected.gate_id,
        expected.schema,
        crate::shell_word(execution.as_str()),
        crate::shell_word(event_type),
        crate::shell_word(correlation_key),
        crate::shell_word(&example),
    );
    ConsoleError::bad_request(message).with_expected(expected)
}

/// A payload that fits `schema` in the common cases, made without guessing at meaning: the
/// schema's own `examples`, `default`, `const` or first `enum` value when it has one; else the
/// first branch of a `oneOf` / `anyOf`, the merge of an `allOf`, and for a type its simplest
/// value (required properties only, `minLength` and `minimum` respected). `null` for a schema
/// that allows anything.
pub fn example_payload(schema: &Value) -> Value {
    example_at(schema, 0)
}

fn example_at(schema: &Value, depth: usize) -> Value {
    let Value::Object(map) = schema else {
        return Value::Null;
    };
    if depth > EXAMPLE_DEPTH {
        return Value::Null;
    }
    if let Some(Value::Array(examples)) = map.get("examples")
        && let Some(first) = examples.first()
    {
        return first.clone();
    }
    for given in ["default", "const"] {
        if let Some(value) = map.get(given) {
            return value.clone();
        }
    }
    if let Some(Value::Array(values)) = map.get("enum")
        && let Some(first) = values.first()
    {
        return first.clone();
    }
    for branches in ["oneOf", "anyOf"] {
        if let Some(Value::Array(list)) = map.get(branches)
            && let Some(first) = list.first()
        {
            return example_at(&merged(map, first), depth + 1);
        }
    }
    if let Some(Value::Array(list)) = map.get("allOf") {
        let mut all = map.clone();
        all.remove("allOf");
        let all = list
            .iter()
            .fold(Value::Object(all), |acc, branch| match acc {
                Value::Object(acc) => merged(&acc, branch),
                other => other,
            });
        return example_at(&all, depth + 1);
    }
    let kind = match map.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|kind| *kind != "null")
            .unwrap_or("null"),
        _ if map.contains_key("properties") => "object",
        _ if map.contains_key("items") => "array",
        _ => return Value::Null,
    };
    match kind {
        "string" => string_example(map),
        "integer" | "number" => map
            .get("minimum")
            .or_else(|| map.get("exclusiveMinimum"))
            .and_then(Value::as_i64)
            .map_or(json!(0), |min| {
                json!(if map.contains_key("exclusiveMinimum") {
                    min + 1
                } else {
                    min
                })
            }),
        "boolean" => json!(true),
        "array" => {
            let min = map.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            match map.get("items") {
                Some(items) if min > 0 => {
                    let one = example_at(items, depth + 1);
                    Value::Array(vec![one; usize::try_from(min.min(8)).unwrap_or(1)])
                }
                _ => json!([]),
            }
        }
        "object" => {
            let properties = map.get("properties").and_then(Value::as_object);
            let required: Vec<&str> = map
                .get("required")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut object = Map::new();
            for name in required {
                let property = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                object.insert(name.to_owned(), example_at(property, depth + 1));
            }
            Value::Object(object)
        }
        _ => Value::Null,
    }
}

/// `base` (without its branch keywords) with `branch`'s keywords laid over it.
fn merged(base: &Map<String, Value>, branch: &Value) -> Value {
    let mut out = base.clone();
    for keyword in ["oneOf", "anyOf", "allOf", "title", "description"] {
        out.remove(keyword);
    }
    if let Value::Object(branch) = branch {
        for (key, value) in branch {
            match (out.get_mut(key), value) {
                (Some(Value::Object(mine)), Value::Object(theirs)) if key == "properties" => {
                    for (name, schema) in theirs {
                        mine.insert(name.clone(), schema.clone());
                    }
                }
                (Some(Value::Array(mine)), Value::Array(theirs)) if key == "required" => {
                    for name in theirs {
                        if !mine.contains(name) {
                            mine.push(name.clone());
                        }
                    }
                }
                _ => {
                    out.insert(key.clone(), value.clone());
                }
            }
        }
    }
    Value::Object(out)
}

fn string_example(map: &Map<String, Value>) -> Value {
    let format = map.get("format").and_then(Value::as_str);
    let text = match format {
        Some("date-time") => "2026-01-01T00:00:00Z".to_owned(),
        Some("date") => "2026-01-01".to_owned(),
        Some("email") => "name@example.com".to_owned(),
        Some("uri") => "https://example.com/".to_owned(),
        _ => "text".to_owned(),
    };
    let min = map
        .get("minLength")
        .and_then(Value::as_u64)
        .map_or(0, |min| usize::try_from(min.min(64)).unwrap_or(0));
    let mut text = text;
    while text.chars().count() < min {
        text.push('x');
    }
    Value::String(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function_result() -> Value {
        json!({"title": "The result of A2UI function `getLocale`", "oneOf": [
            {"type": "object", "properties": {"functionCallId": {"type": "string"},
              "value": {"allOf": [{"type": "string"}, {"type": "string", "minLength": 2}]}},
             "required": ["value"]},
            {"type": "object", "properties": {"error": {"type": "object",
              "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
              "required": ["code", "message"]}}, "required": ["error"]}]})
    }

    #[test]
    fn the_example_of_a_function_result_fits_it_and_the_bare_value_does_not() {
        let schema = function_result();
        let example = example_payload(&schema);
        assert_eq!(example, json!({"value": "text"}));
        assert_eq!(violations(&schema, &example), Ok(None));
        let bare = violations(&schema, &json!("de-CH")).unwrap();
        assert!(bare.is_some_and(|detail| detail.starts_with("at /:")));
    }

    #[test]
    fn examples_follow_what_the_schema_gives_then_its_type() {
        let cases = [
            (
                json!({"examples": [{"ok": 1}], "type": "object"}),
                json!({"ok": 1}),
            ),
            (json!({"enum": ["yes", "no"]}), json!("yes")),
            (json!({"const": 3}), json!(3)),
            (json!({"type": "integer", "minimum": 5}), json!(5)),
            (json!({"type": ["null", "boolean"]}), json!(true)),
            (json!({"type": "string", "minLength": 6}), json!("textxx")),
            (
                json!({"type": "array", "items": {"type": "number"}, "minItems": 2}),
                json!([0, 0]),
            ),
            (
                json!({"properties": {"a": {"type": "string"}, "b": {}}, "required": ["a"]}),
                json!({"a": "text"}),
            ),
            (json!({}), Value::Null),
            (json!(true), Value::Null),
        ];
        for (schema, example) in cases {
            assert_eq!(example_payload(&schema), example, "{schema}");
        }
    }

    #[test]
    fn a_self_nesting_or_deep_schema_gives_an_example_without_running_away() {
        let mut schema = json!({"type": "string"});
        for _ in 0..200 {
            schema = json!({"type": "object", "properties": {"a": schema}, "required": ["a"]});
        }
        let example = example_payload(&schema);
        let mut depth = 0;
        let mut at = &example;
        while let Some(inner) = at.get("a") {
            depth += 1;
            at = inner;
        }
        assert!(depth <= EXAMPLE_DEPTH + 1, "{depth}");
    }

    #[test]
    fn a_schema_that_does_not_compile_is_reported_not_applied() {
        assert!(violations(&json!({"type": 12}), &json!(1)).is_err());
    }
}
