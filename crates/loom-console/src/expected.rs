//! What a gate expects as its resume payload (LD-031): the JSON Schema the flow recorded with
//! the gate, checked here before any resume the console records or hands to the runtime, and
//! shown (with an example made from it) wherever the console tells an operator how to resume.
//!
//! The kernel records schemas and never reads them; this crate takes payloads from people, so
//! it checks them, with `jsonschema` (default features off: no remote references are fetched).
//! A recorded schema that does not compile is not applied (the resume goes on unchecked, as for
//! a gate that declared none) and is reported through `tracing`: a flow's mistake must not
//! leave its gate without any way to be answered.

use loom_kernel::kit::{PAYLOAD_SCHEMA_KIND, expected_payload, payload_schema_step_id};
use loom_kernel::{Event, EventEnvelope, EventStore, ExecutionId, ExecutionState};
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
    match field_violations(&expected.schema, payload) {
        Ok(found) if found.is_empty() => Ok(()),
        Ok(found) => Err(refusal(
            execution,
            event_type,
            correlation_key,
            found,
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

/// One place where a payload does not fit its schema, said for a person: which field, what
/// is wrong with it, and what fits there in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldViolation {
    /// Where in the payload: a JSON Pointer (`/value`, `/items/0`), `/` for the payload itself.
    pub field: String,
    /// What is wrong there (`missing`, or the validator's sentence).
    pub problem: String,
    /// What fits there, in words (`a string of at least 2 characters`).
    pub expected: String,
}

impl std::fmt::Display for FieldViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "at {}: {} (expected {})",
            self.field, self.problem, self.expected
        )
    }
}

/// `Ok(None)` when `payload` fits `schema`; `Ok(Some(..))` names the first violations with
/// where they are; `Err` when the schema does not compile.
pub fn violations(schema: &Value, payload: &Value) -> Result<Option<String>, String> {
    let found = field_violations(schema, payload)?;
    if found.is_empty() {
        return Ok(None);
    }
    Ok(Some(summary(&found)))
}

/// The first violations joined on one line, with how many more there are.
fn summary(found: &[FieldViolation]) -> String {
    let mut detail = found
        .iter()
        .take(SHOWN)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if found.len() > SHOWN {
        detail.push_str(&format!(" (and {} more)", found.len() - SHOWN));
    }
    detail
}

/// Where `payload` does not fit `schema`, field by field (empty when it fits), each with what
/// fits there in words; `Err` when the schema does not compile. A missing required property
/// is named as its own field.
pub fn field_violations(schema: &Value, payload: &Value) -> Result<Vec<FieldViolation>, String> {
    collect_violations(schema, payload, "", 0)
}

/// How many `oneOf` / `anyOf` levels [`field_violations`] looks into for the branch meant.
const BRANCH_DEPTH: usize = 4;

fn collect_violations(
    schema: &Value,
    payload: &Value,
    prefix: &str,
    depth: usize,
) -> Result<Vec<FieldViolation>, String> {
    use jsonschema::error::ValidationErrorKind;
    let validator = jsonschema::validator_for(schema).map_err(|error| error.to_string())?;
    let mut found = Vec::new();
    for error in validator.iter_errors(payload) {
        let at = error.instance_path().to_string();
        // The keyword that failed sits in the schema object that describes the field.
        let keyword_at = error.schema_path().to_string();
        let owner_at = keyword_at
            .rsplit_once('/')
            .map_or("", |(owner, _keyword)| owner);
        let owner = schema.pointer(owner_at);
        match error.kind() {
            ValidationErrorKind::Required { property } => {
                let name = property
                    .as_str()
                    .map_or_else(|| property.to_string(), str::to_owned);
                let described = owner
                    .and_then(|owner| owner.get("properties"))
                    .and_then(|properties| properties.get(&name))
                    .map_or_else(|| "a value".to_owned(), |schema| describe(schema, 0));
                found.push(violation(
                    prefix,
                    &format!("{at}/{name}"),
                    "missing",
                    described,
                ));
            }
            ValidationErrorKind::OneOfNotValid { .. } | ValidationErrorKind::AnyOf { .. } => {
                let meant = owner.and_then(|owner| {
                    let value = payload.pointer(&at)?;
                    meant_branch(owner, value, &format!("{prefix}{at}"), depth)
                });
                match meant {
                    Some(branch) => found.extend(branch),
                    None => found.push(violation(
                        prefix,
                        &at,
                        &error.to_string(),
                        owner.map_or_else(
                            || "what the schema allows".to_owned(),
                            |s| describe(s, 0),
                        ),
                    )),
                }
            }
            _ => found.push(violation(
                prefix,
                &at,
                &error.to_string(),
                owner.map_or_else(|| "what the schema allows".to_owned(), |s| describe(s, 0)),
            )),
        }
    }
    Ok(found)
}

fn violation(prefix: &str, at: &str, problem: &str, expected: String) -> FieldViolation {
    let field = format!("{prefix}{at}");
    FieldViolation {
        field: if field.is_empty() {
            "/".to_owned()
        } else {
            field
        },
        problem: problem.to_owned(),
        expected,
    }
}

/// The violations of the one branch of `owner`'s `oneOf` / `anyOf` that `value` clearly meant:
/// the branch it misses the fewest required fields of, then has the fewest violations in,
/// when no other branch ties with it. `None` when the value meant none more than another
/// (`"de-CH"` for `{"value"} | {"error"}`): then the choice itself is what is wrong.
fn meant_branch(
    owner: &Value,
    value: &Value,
    prefix: &str,
    depth: usize,
) -> Option<Vec<FieldViolation>> {
    if depth >= BRANCH_DEPTH {
        return None;
    }
    let map = owner.as_object()?;
    let branches = map
        .get("oneOf")
        .or_else(|| map.get("anyOf"))
        .and_then(Value::as_array)?;
    let mut scored: Vec<((usize, usize), Vec<FieldViolation>)> = Vec::new();
    for branch in branches {
        let found = collect_violations(&merged(map, branch), value, prefix, depth + 1).ok()?;
        let missing = found.iter().filter(|v| v.problem == "missing").count();
        scored.push(((missing, found.len()), found));
    }
    scored.sort_by_key(|(score, _)| *score);
    match scored.as_slice() {
        [(best, found), (second, _), ..] if best < second && !found.is_empty() => {
            Some(found.clone())
        }
        _ => None,
    }
}

/// How deep [`describe`] goes into nested schemas before it only names them.
const DESCRIBE_DEPTH: usize = 2;

/// What `schema` allows, in words: `a string of at least 2 characters`, `an object with value
/// (a string)`, `one of: ...; or ...`. Short, not complete: the schema itself is the reference.
pub fn describe(schema: &Value, depth: usize) -> String {
    let Value::Object(map) = schema else {
        return if schema == &Value::Bool(false) {
            "nothing (no value is allowed)".to_owned()
        } else {
            "any value".to_owned()
        };
    };
    if let Some(value) = map.get("const") {
        return format!("exactly {value}");
    }
    if let Some(Value::Array(values)) = map.get("enum") {
        let values: Vec<String> = values.iter().map(Value::to_string).collect();
        return format!("one of {}", values.join(", "));
    }
    for branches in ["oneOf", "anyOf"] {
        if let Some(Value::Array(list)) = map.get(branches) {
            if depth >= DESCRIBE_DEPTH {
                return format!("one of {} shapes", list.len());
            }
            let words: Vec<String> = list
                .iter()
                .map(|branch| describe(&merged(map, branch), depth + 1))
                .collect();
            return format!("one of: {}", words.join("; or "));
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
        return describe(&all, depth + 1);
    }
    let kinds: Vec<&str> = match map.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ if map.contains_key("properties") || map.contains_key("required") => vec!["object"],
        _ if map.contains_key("items") => vec!["array"],
        _ => return "any value".to_owned(),
    };
    let words: Vec<String> = kinds
        .iter()
        .map(|kind| describe_type(kind, map, depth))
        .collect();
    words.join(" or ")
}

fn describe_type(kind: &str, map: &Map<String, Value>, depth: usize) -> String {
    let number = |key: &str| map.get(key).filter(|value| value.is_number());
    match kind {
        "string" => {
            let mut words = "a string".to_owned();
            if let Some(format) = map.get("format").and_then(Value::as_str) {
                words.push_str(&format!(" ({format})"));
            }
            let min = number("minLength");
            let max = number("maxLength");
            let characters = |n: &Value| {
                if n.as_u64() == Some(1) {
                    "1 character".to_owned()
                } else {
                    format!("{n} characters")
                }
            };
            match (min, max) {
                (Some(min), Some(max)) => {
                    words.push_str(&format!(" of {min} to {}", characters(max)))
                }
                (Some(min), None) => words.push_str(&format!(" of at least {}", characters(min))),
                (None, Some(max)) => words.push_str(&format!(" of at most {}", characters(max))),
                (None, None) => {}
            }
            if let Some(pattern) = map.get("pattern").and_then(Value::as_str) {
                words.push_str(&format!(" matching {pattern}"));
            }
            words
        }
        "integer" | "number" => {
            let mut words = if kind == "integer" {
                "an integer"
            } else {
                "a number"
            }
            .to_owned();
            if let Some(min) = number("minimum") {
                words.push_str(&format!(" from {min}"));
            } else if let Some(min) = number("exclusiveMinimum") {
                words.push_str(&format!(" above {min}"));
            }
            if let Some(max) = number("maximum") {
                words.push_str(&format!(" up to {max}"));
            } else if let Some(max) = number("exclusiveMaximum") {
                words.push_str(&format!(" below {max}"));
            }
            words
        }
        "boolean" => "true or false".to_owned(),
        "null" => "null".to_owned(),
        "array" => {
            let mut words = "a list".to_owned();
            if let Some(min) = number("minItems") {
                words.push_str(&format!(" of at least {min}"));
            }
            if let Some(items) = map.get("items")
                && depth < DESCRIBE_DEPTH
            {
                words.push_str(&format!(" of {}", describe(items, depth + 1)));
            }
            words
        }
        "object" => {
            let required: Vec<&str> = map
                .get("required")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if required.is_empty() {
                return "an object".to_owned();
            }
            let properties = map.get("properties").and_then(Value::as_object);
            let fields: Vec<String> = required
                .iter()
                .map(|name| match properties.and_then(|p| p.get(*name)) {
                    Some(property) if depth < DESCRIBE_DEPTH => {
                        format!("{name} ({})", describe(property, depth + 1))
                    }
                    _ => (*name).to_owned(),
                })
                .collect();
            format!("an object with {}", fields.join(", "))
        }
        other => format!("a value of type {other}"),
    }
}

fn refusal(
    execution: &ExecutionId,
    event_type: &str,
    correlation_key: &str,
    found: Vec<FieldViolation>,
    expected: ExpectedPayload,
) -> ConsoleError {
    let detail = summary(&found);
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
    ConsoleError::bad_request(message)
        .with_expected(expected)
        .with_violations(found)
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
    fn a_violation_names_the_field_and_says_what_fits_there_in_words() {
        let schema = function_result();
        let bare = field_violations(&schema, &json!("de-CH")).unwrap();
        assert_eq!(bare.len(), 1, "{bare:?}");
        assert_eq!(bare[0].field, "/");
        assert_eq!(
            bare[0].expected,
            "one of: an object with value (a string of at least 2 characters); \
             or an object with error (an object with code, message)"
        );
        let short = field_violations(&function_result(), &json!({"value": "d"})).unwrap();
        assert_eq!(short.len(), 1, "{short:?}");
        assert_eq!(short[0].field, "/value");
        assert_eq!(short[0].expected, "a string of at least 2 characters");
        let schema = json!({"type": "object", "required": ["amount", "currency"],
            "properties": {"amount": {"type": "integer", "minimum": 1},
                           "currency": {"enum": ["EUR", "CHF"]}}});
        let found = field_violations(&schema, &json!({"amount": 0})).unwrap();
        let fields: Vec<(&str, &str, &str)> = found
            .iter()
            .map(|v| (v.field.as_str(), v.problem.as_str(), v.expected.as_str()))
            .collect();
        assert!(
            fields.contains(&("/currency", "missing", r#"one of "EUR", "CHF""#)),
            "{fields:?}"
        );
        assert!(
            fields
                .iter()
                .any(|(field, _, expected)| *field == "/amount" && *expected == "an integer from 1"),
            "{fields:?}"
        );
        assert!(
            field_violations(&schema, &json!({"amount": 2, "currency": "EUR"}))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_schema_that_does_not_compile_is_reported_not_applied() {
        assert!(violations(&json!({"type": 12}), &json!(1)).is_err());
    }
}
