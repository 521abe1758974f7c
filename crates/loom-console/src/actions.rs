//! The admin API's actions on many executions or on none yet: the flows a server runs
//! (`GET /admin/v1/flows`), starting an execution (`POST /admin/v1/executions`) and cancelling
//! every execution a filter matches (`POST /admin/v1/cancel-many`). Mounted by
//! [`crate::admin_router`] behind the same bearer token as the rest of the API.
//!
//! A start's input is checked against the JSON Schema its flow declares
//! (`Flow::input_schema`) before the runtime records anything, as a resume's payload is
//! against its gate's. A cancel by filter refuses a filter that names nothing (it would cancel
//! every execution that has not ended) unless `all` says so, counts before it cancels
//! (`dryRun`), and refuses to go on when the count the operator confirmed (`expect`) is no
//! longer what the filter matches.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::{get, post};
use loom_kernel::{EventStore, ExecutionId, ExecutionStatus, Payload, Runtime};
use loom_kernel::{StartError, StartOptions};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::admin::{AdminState, Answer, body, ok};
use crate::error::ConsoleError;
use crate::expected::{example_payload, field_violations};
use crate::query::{self, ListFilter, MAX_LIST_LIMIT};

/// The most executions one cancel-many request cancels (or counts, on a dry run).
pub const MAX_CANCEL_MANY: usize = 10_000;

/// How many executions a cancel-many request cancels when it does not say.
pub const DEFAULT_CANCEL_MANY: usize = 1_000;

/// The statuses of executions that have not ended: what a cancel can still stop.
const NOT_ENDED: [ExecutionStatus; 3] = [
    ExecutionStatus::Running,
    ExecutionStatus::Suspended,
    ExecutionStatus::InDoubt,
];

type Shared<S> = State<Arc<AdminState<S>>>;

/// Adds the actions' routes to the admin API's router (before its token guard is laid over).
pub(crate) fn routes<S: EventStore>(api: Router<Arc<AdminState<S>>>) -> Router<Arc<AdminState<S>>> {
    api.route("/admin/v1/flows", get(flows::<S>))
        .route("/admin/v1/executions", post(start::<S>))
        .route("/admin/v1/cancel-many", post(cancel_many::<S>))
}

/// A flow registered with the server's runtime, as `GET /admin/v1/flows` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlowView {
    /// The name executions start it by.
    pub name: String,
    /// Its version.
    pub version: u32,
    /// The JSON Schema its input must fit, when the flow declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// An input made from that schema: a starting point, not necessarily the right input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<Value>,
}

/// The flows of `runtime`, by name then version.
pub fn flow_views<S: EventStore>(runtime: &Runtime<S>) -> Vec<FlowView> {
    runtime
        .registered_flows()
        .map(|flow| FlowView {
            name: flow.name().to_owned(),
            version: flow.version(),
            input_schema: flow.input_schema().cloned(),
            example: flow.input_schema().map(example_payload),
        })
        .collect()
}

async fn flows<S: EventStore>(State(state): Shared<S>) -> Answer {
    ok(flow_views(&state.runtime))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StartBody {
    flow: String,
    #[serde(default)]
    input: Value,
    id: Option<String>,
    version: Option<u32>,
    #[serde(default)]
    capabilities: Vec<String>,
    budget: Option<u64>,
}

const START_SHAPE: &str = r#"{"flow": "..", "input": .., "id": ".." (optional), "version": <n> (optional: the newest), "capabilities": [".."] (optional), "budget": <n> (optional)}"#;

/// What a start answers: the execution's id (made up when the request named none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Started {
    /// The execution started (or found already started with the same flow and input).
    pub execution: String,
    /// The flow it runs and its version.
    pub flow: String,
    /// The flow's version.
    pub version: u32,
}

async fn start<S: EventStore>(State(state): Shared<S>, bytes: Bytes) -> Answer {
    let request: StartBody = body(&bytes, START_SHAPE)?;
    let registered = flow_views(&state.runtime);
    let flow = pick_flow(&registered, &request.flow, request.version)?;
    Payload::try_from_value(&request.input).map_err(|error| {
        ConsoleError::bad_request(format!("the input cannot be recorded: {error}"))
    })?;
    if let Some(schema) = &flow.input_schema {
        match field_violations(schema, &request.input) {
            Ok(found) if found.is_empty() => {}
            Ok(found) => {
                let detail = found
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(ConsoleError::bad_request(format!(
                    "the input does not fit what flow '{}' v{} expects ({detail}); nothing was started",
                    flow.name, flow.version
                ))
                .with_violations(found));
            }
            Err(compile) => tracing::warn!(
                flow = %flow.name,
                error = %compile,
                "the flow's input schema does not compile: the start is not checked"
            ),
        }
    }
    let id = match request.id.as_deref() {
        Some(id) => query::execution_id(id)?,
        None => fresh_id(&flow.name)?,
    };
    let mut options = StartOptions::new(id.clone());
    options.flow_version = Some(flow.version);
    options.budget = request.budget;
    for capability in request.capabilities {
        options = options.grant(capability);
    }
    match state
        .runtime
        .start(&flow.name, &request.input, options)
        .await
    {
        Ok(id) => {
            tracing::info!(execution = %id, flow = %flow.name, "started through the admin API");
            ok(Started {
                execution: id.to_string(),
                flow: flow.name.clone(),
                version: flow.version,
            })
        }
        Err(error @ StartError::Conflict { .. }) => Err(ConsoleError::refused(error.to_string())),
        Err(StartError::ShutDown) => Err(ConsoleError::unavailable(
            "the server's runtime is shutting down; nothing was started",
        )),
        Err(error @ (StartError::UnknownFlow(_) | StartError::UnknownFlowVersion { .. })) => {
            Err(ConsoleError::bad_request(error.to_string()))
        }
        Err(error) => Err(ConsoleError::internal(error.to_string())),
    }
}

/// The registered flow a start names: the version asked for, else the newest.
fn pick_flow<'a>(
    registered: &'a [FlowView],
    name: &str,
    version: Option<u32>,
) -> Result<&'a FlowView, ConsoleError> {
    let named: Vec<&FlowView> = registered.iter().filter(|f| f.name == name).collect();
    let Some(newest) = named.iter().max_by_key(|f| f.version) else {
        let mut names: Vec<&str> = registered.iter().map(|f| f.name.as_str()).collect();
        names.dedup();
        return Err(ConsoleError::bad_request(format!(
            "no flow named '{name}' is registered with this server; it runs: {} (GET /admin/v1/flows)",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        )));
    };
    match version {
        None => Ok(newest),
        Some(version) => named
            .iter()
            .find(|f| f.version == version)
            .copied()
            .ok_or_else(|| {
                let versions: Vec<String> = named.iter().map(|f| f.version.to_string()).collect();
                ConsoleError::bad_request(format!(
                    "flow '{name}' has no version {version}; registered: {}",
                    versions.join(", ")
                ))
            }),
    }
}

/// An id for a start that named none: the flow's name and 12 random hex digits, or
/// `console-` and those digits when the flow's name does not make a valid id.
fn fresh_id(flow: &str) -> Result<ExecutionId, ConsoleError> {
    let random = crate::admin::random_token()
        .map_err(|error| ConsoleError::internal(format!("no random id: {error}")))?;
    let suffix = random.get(..12).unwrap_or(&random);
    ExecutionId::new(format!("{flow}-{suffix}"))
        .or_else(|_| ExecutionId::new(format!("console-{suffix}")))
        .map_err(|error| ConsoleError::internal(error.to_string()))
}

/// A cancel by filter, as `POST /admin/v1/cancel-many` takes it: the list's filters (at least
/// one, or `all`), whether to count only, how many at most, and the count confirmed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CancelManyRequest {
    /// Only executions of this status (running, suspended or in-doubt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only executions of this flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
    /// Only executions whose id starts with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_prefix: Option<String>,
    /// Only the children of this execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Only executions started at or after this time (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_from_ms: Option<u64>,
    /// Only executions started before this time (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_before_ms: Option<u64>,
    /// With no filter: cancel every execution that has not ended (refused without it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
    /// Count and list only; cancel nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// At most this many (1 to [`MAX_CANCEL_MANY`], default [`DEFAULT_CANCEL_MANY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The count the operator confirmed (a dry run's `matched`): when the filter matches
    /// another number by now, nothing is cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<usize>,
    /// The reason recorded with each cancel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

const CANCEL_MANY_SHAPE: &str = r#"{"status": "running|suspended|in-doubt", "flow": "..", "idPrefix": "..", "parent": "..", "startedFromMs": <unix ms>, "startedBeforeMs": <unix ms>, "all": true (only with no filter), "dryRun": true|false, "limit": <1..=10000>, "expect": <the count a dry run gave>, "reason": ".."}"#;

/// What a cancel by filter answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelManyAnswer {
    /// Whether this was a dry run: then nothing was cancelled.
    pub dry_run: bool,
    /// How many executions that have not ended the filter matches (up to the limit).
    pub matched: usize,
    /// The matched executions, newest start first.
    pub executions: Vec<String>,
    /// Whether more than the limit match: run it again for the rest.
    pub more: bool,
    /// The executions cancelled (none on a dry run).
    pub cancelled: Vec<String>,
    /// Executions matched but not cancelled, and why (one that ended meanwhile).
    pub skipped: Vec<SkippedCancel>,
}

/// An execution a cancel by filter matched and did not cancel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedCancel {
    /// The execution.
    pub execution: String,
    /// Why it was not cancelled.
    pub reason: String,
}

async fn cancel_many<S: EventStore>(State(state): Shared<S>, bytes: Bytes) -> Answer {
    let request: CancelManyRequest = body(&bytes, CANCEL_MANY_SHAPE)?;
    let limit = request.limit.unwrap_or(DEFAULT_CANCEL_MANY);
    if limit == 0 || limit > MAX_CANCEL_MANY {
        return Err(ConsoleError::bad_request(format!(
            "limit {limit} is out of range: cancel 1 to {MAX_CANCEL_MANY} executions a request"
        )));
    }
    let status = request
        .status
        .as_deref()
        .filter(|status| !status.trim().is_empty())
        .map(crate::view::parse_status)
        .transpose()?;
    if let Some(status) = status
        && !NOT_ENDED.contains(&status)
    {
        return Err(ConsoleError::bad_request(format!(
            "{} executions have already ended or not begun: nothing to cancel (filter on running, suspended or in-doubt)",
            crate::view::status_name(status)
        )));
    }
    let base = ListFilter {
        status: None,
        flow: non_empty(request.flow),
        id_prefix: non_empty(request.id_prefix),
        parent: non_empty(request.parent),
        started_from_ms: request.started_from_ms,
        started_before_ms: request.started_before_ms,
        limit: Some(MAX_LIST_LIMIT),
        without_counts: true,
        ..ListFilter::default()
    };
    let filtered = status.is_some()
        || base
            != ListFilter {
                limit: Some(MAX_LIST_LIMIT),
                without_counts: true,
                ..ListFilter::default()
            };
    if !filtered && !request.all {
        return Err(ConsoleError::bad_request(
            "no filter given: this would cancel every execution that has not ended. Filter by status, flow, id prefix, parent or start time, or send \"all\": true to mean it",
        ));
    }
    if filtered && request.all {
        return Err(ConsoleError::bad_request(
            "\"all\" is for a cancel with no filter: drop it, or drop the filter",
        ));
    }
    let statuses: Vec<ExecutionStatus> = status.map_or_else(|| NOT_ENDED.to_vec(), |s| vec![s]);
    let (matched, more) = matching(state.runtime.store(), &base, &statuses, limit).await?;
    if let Some(expected) = request.expect
        && (expected != matched.len() || more)
    {
        return Err(ConsoleError::refused(format!(
            "the filter now matches {}{} executions, not the {expected} confirmed; nothing was cancelled: count again",
            matched.len(),
            if more { " or more" } else { "" }
        )));
    }
    let mut answer = CancelManyAnswer {
        dry_run: request.dry_run,
        matched: matched.len(),
        executions: matched.iter().map(ToString::to_string).collect(),
        more,
        ..CancelManyAnswer::default()
    };
    if request.dry_run {
        return ok(answer);
    }
    let reason = request
        .reason
        .unwrap_or_else(|| "cancelled by filter through the admin API".to_owned());
    for id in matched {
        match state.runtime.cancel(&id, Some(reason.clone())).await {
            Ok(()) => answer.cancelled.push(id.to_string()),
            // Ended meanwhile (or deleted), or the runtime refused: said per execution, and
            // the others are still cancelled.
            Err(error) => {
                answer.skipped.push(SkippedCancel {
                    execution: id.to_string(),
                    reason: error.to_string(),
                });
            }
        }
    }
    tracing::info!(
        cancelled = answer.cancelled.len(),
        skipped = answer.skipped.len(),
        "cancel by filter through the admin API"
    );
    ok(answer)
}

fn non_empty(text: Option<String>) -> Option<String> {
    text.filter(|text| !text.trim().is_empty())
}

/// Up to `limit` executions of `statuses` that `base` matches, and whether more do.
async fn matching<S: EventStore>(
    store: &S,
    base: &ListFilter,
    statuses: &[ExecutionStatus],
    limit: usize,
) -> Result<(Vec<ExecutionId>, bool), ConsoleError> {
    let mut found = Vec::new();
    for status in statuses {
        let mut filter = ListFilter {
            status: Some(*status),
            ..base.clone()
        };
        loop {
            let page = query::list_executions(store, &filter).await?;
            for execution in &page.executions {
                if found.len() == limit {
                    return Ok((found, true));
                }
                found.push(query::execution_id(&execution.id)?);
            }
            match page.next_before {
                Some(next) => filter.before = Some(next),
                None => break,
            }
        }
    }
    Ok((found, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flow(name: &str, version: u32) -> FlowView {
        FlowView {
            name: name.to_owned(),
            version,
            input_schema: None,
            example: None,
        }
    }

    #[test]
    fn a_start_picks_the_newest_version_or_the_one_named_and_names_what_exists() {
        let registered = [flow("order", 1), flow("order", 2), flow("hello", 1)];
        assert_eq!(pick_flow(&registered, "order", None).unwrap().version, 2);
        assert_eq!(pick_flow(&registered, "order", Some(1)).unwrap().version, 1);
        let unknown = pick_flow(&registered, "ordr", None).unwrap_err();
        assert!(
            unknown.message.contains("it runs: order, hello"),
            "{unknown}"
        );
        let version = pick_flow(&registered, "order", Some(7)).unwrap_err();
        assert!(version.message.contains("registered: 1, 2"), "{version}");
    }

    #[test]
    fn a_fresh_id_is_made_from_the_flow_or_stands_alone() {
        assert!(fresh_id("order").unwrap().as_str().starts_with("order-"));
        assert!(fresh_id("").unwrap().as_str().len() >= 12);
    }

    #[test]
    fn json_shapes_of_the_answers_stay_camel_case() {
        let answer = CancelManyAnswer {
            dry_run: true,
            ..CancelManyAnswer::default()
        };
        assert_eq!(json!(answer)["dryRun"], json!(true));
    }
}
