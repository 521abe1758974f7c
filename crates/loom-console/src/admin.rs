//! The admin API: the operator's reads and verdicts over HTTP, for a process that embeds a
//! [`Runtime`] and so holds the store. Mount [`admin_router`] in the server (it answers under
//! `/admin/`) and serve it on loopback only ([`bind_loopback`]).
//!
//! Every API request (`/admin/v1/...`) carries `Authorization: Bearer <token>`, compared in
//! constant time; a missing or wrong token is answered `401` and nothing else is looked at.
//! The web console's static files (`/admin/`, its script and style sheet) hold no data and are
//! served without it; the page asks for the token and keeps it in the tab's session storage. Errors are JSON
//! (`{"error": {"kind": .., "message": ..}}`) with the status of their [`ErrorKind`].
//! Verdicts, resumes and cancels go through the runtime (`Runtime::resolve`, `resume`,
//! `cancel`), so the execution's driver records them and drives the flow on at once.
//! Endpoints are listed in `docs/CONSOLE.md`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use loom_kernel::DataClassification;
use loom_kernel::Verdict;
use loom_kernel::{Caller, CancelError, ResolveError, ResumeError, Runtime};
use loom_kernel::{EventStore, EventStoreExt, ExecutionId, Payload};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{ConsoleError, ErrorKind};
use crate::{offline, query};

/// The shortest token [`AdminConfig::new`] accepts.
pub const MIN_TOKEN_LEN: usize = 16;

/// The longest a `tail` request waits for new events before answering with none.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// Why an [`AdminConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminConfigError {
    #[error(
        "the admin token must be at least {MIN_TOKEN_LEN} characters (use loom_console::random_token())"
    )]
    /// The token is shorter than the minimum.
    TokenTooShort,
    /// The token holds a space or a character that is not printable ASCII.
    #[error("the admin token must be printable ASCII with no spaces")]
    TokenNotPrintable,
}

/// How the admin API is guarded and what it masks.
#[derive(Clone)]
pub struct AdminConfig {
    token: String,
    classification: DataClassification,
    log_export: bool,
}

impl std::fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminConfig")
            .field("token", &"<hidden>")
            .field("classification", &self.classification.paths())
            .field("log_export", &self.log_export)
            .finish()
    }
}

impl AdminConfig {
    /// A configuration requiring `token` as the bearer token: at least [`MIN_TOKEN_LEN`]
    /// printable ASCII characters.
    pub fn new(token: impl Into<String>) -> Result<Self, AdminConfigError> {
        let token = token.into();
        if token.len() < MIN_TOKEN_LEN {
            return Err(AdminConfigError::TokenTooShort);
        }
        if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(AdminConfigError::TokenNotPrintable);
        }
        Ok(Self {
            token,
            classification: DataClassification::default(),
            log_export: false,
        })
    }

    /// Whether `GET /admin/v1/export` hands out whole logs, unmasked (what `loom export-log
    /// --admin` writes for `replay-check`). Off unless asked for: every other answer of the
    /// API is masked (K10-R6), and an export holds the true values.
    pub fn log_export(mut self, allowed: bool) -> Self {
        self.log_export = allowed;
        self
    }

    /// K10-R6: the classification to mask payloads with (give the runtime's own).
    pub fn classification(mut self, classification: DataClassification) -> Self {
        self.classification = classification;
        self
    }
}

/// A fresh token: 32 random bytes from the operating system, in hex.
pub fn random_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// Binds a listener on 127.0.0.1 (`port` 0 picks a free one): where the admin API belongs.
pub async fn bind_loopback(port: u16) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port)).await
}

/// Whether two byte strings are equal, in time that depends on their lengths only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for index in 0..a.len().max(b.len()) {
        let x = a.get(index).copied().unwrap_or(0);
        let y = b.get(index).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

pub(crate) struct AdminState<S> {
    pub(crate) runtime: Runtime<S>,
    pub(crate) config: AdminConfig,
}

type Shared<S> = State<Arc<AdminState<S>>>;

/// The admin API over `runtime`'s store, guarded by `config`'s token, and the web console
/// that uses it (`GET /admin/`). Routes are under `/admin/`; merge it into the server's router
/// (`app.merge(admin_router(..))`).
pub fn admin_router<S: EventStore>(runtime: Runtime<S>, config: AdminConfig) -> Router {
    let state = Arc::new(AdminState { runtime, config });
    let api = Router::new()
        .route("/admin/v1/executions", get(list::<S>))
        .route("/admin/v1/counts", get(counts::<S>))
        .route("/admin/v1/executions/{id}", get(show::<S>))
        .route("/admin/v1/executions/{id}/events", get(events::<S>))
        .route("/admin/v1/executions/{id}/resolve", post(resolve::<S>))
        .route("/admin/v1/executions/{id}/resume", post(resume::<S>))
        .route("/admin/v1/executions/{id}/cancel", post(cancel::<S>))
        .route("/admin/v1/in-doubt", get(in_doubt::<S>))
        .route("/admin/v1/metrics", get(metrics::<S>))
        .route("/admin/v1/export", get(export::<S>))
        .route("/admin/v1/retention/delete", post(retention_delete::<S>))
        .route("/admin/v1/retention/preview", post(retention_preview::<S>));
    // Starting and cancelling by filter live in `actions.rs`, behind the same guard.
    let api = crate::actions::routes(api)
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            authorize::<S>,
        ))
        .with_state(state);
    // The web console's files hold no data: they are served without the token, and the page
    // asks for it before it calls the API.
    let page = Router::new()
        .route("/admin", get(|| async { Redirect::permanent("admin/") }))
        .route(
            "/admin/",
            get(|| async { static_file(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/admin/console.js",
            get(|| async { static_file(CONSOLE_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/admin/console.css",
            get(|| async { static_file(CONSOLE_CSS, "text/css; charset=utf-8") }),
        );
    api.merge(page)
}

const INDEX_HTML: &str = include_str!("../web/index.html");
const CONSOLE_JS: &str = include_str!("../web/console.js");
const CONSOLE_CSS: &str = include_str!("../web/console.css");

/// What the web console's page may load and where it may connect: its own files and the API
/// only, no inline script, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// A file of a page served beside the admin API (the web console's, or an embedding server's
/// own page), with [`CONTENT_SECURITY_POLICY`] and headers that keep it from being sniffed,
/// framed, cached or leaking its URL (which may carry a token).
pub fn static_file(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn authorize<S: EventStore>(
    State(state): Shared<S>,
    request: Request,
    next: Next,
) -> Response {
    // A page of another site may not call the API through its visitor's browser, whatever it
    // holds: refused before the token is even looked at.
    if let Some(origin) = foreign_origin(request.headers()) {
        let error = ConsoleError::new(
            ErrorKind::Unauthorized,
            format!(
                "a request from a page of {origin} is refused: the admin API answers its own origin only"
            ),
        );
        return (StatusCode::FORBIDDEN, axum::Json(error)).into_response();
    }
    if bearer_matches(request.headers(), &state.config.token) {
        return next.run(request).await;
    }
    let mut response = ConsoleError::new(
        ErrorKind::Unauthorized,
        "missing or wrong bearer token: send `Authorization: Bearer <token>` with the server's admin token (the CLI reads --token or LOOM_ADMIN_TOKEN)",
    )
    .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"loom-admin\""),
    );
    response
}

/// The `Origin` of a browser request from another site than the one it is addressed to: the
/// origin's host and port are not the request's `Host`. `None` without `Origin` (a program,
/// or a browser's same-origin `GET`) or when they match.
fn foreign_origin(headers: &HeaderMap) -> Option<String> {
    let origin = headers.get(header::ORIGIN)?;
    let origin = origin.to_str().unwrap_or("(an origin that is not text)");
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or_default();
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match authority {
        Some(authority) if !host.is_empty() && authority.eq_ignore_ascii_case(host) => None,
        _ => Some(origin.to_owned()),
    }
}

/// Whether `headers` carry `Authorization: Bearer <token>`, compared in constant time.
pub fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let Some(given) = value.as_bytes().strip_prefix(b"Bearer ") else {
        return false;
    };
    constant_time_eq(given, token.as_bytes())
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.kind.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, axum::Json(json!({ "error": self }))).into_response()
    }
}

pub(crate) type Answer = Result<Response, ConsoleError>;

/// A query string that does not parse: what was wrong (an unknown parameter is named), and
/// the form that works.
fn bad_query(rejection: &QueryRejection, usage: &str) -> ConsoleError {
    ConsoleError::bad_request(format!(
        "bad query ({}): use {usage}",
        rejection.body_text()
    ))
}

pub(crate) fn ok(value: impl serde::Serialize) -> Answer {
    Ok(axum::Json(value).into_response())
}

/// Unknown parameters are refused: a misspelt filter must not widen what is answered.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
    flow: Option<String>,
    limit: Option<usize>,
    before: Option<String>,
    id_prefix: Option<String>,
    parent: Option<String>,
    started_from_ms: Option<u64>,
    started_before_ms: Option<u64>,
    ended_from_ms: Option<u64>,
    ended_before_ms: Option<u64>,
    counts: Option<bool>,
}

async fn list<S: EventStore>(
    State(state): Shared<S>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Answer {
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => {
            return Err(bad_query(
                &rejection,
                "?status=<status>&flow=<name>&idPrefix=<text>&parent=<execution id>\
                 &startedFromMs=<unix ms>&startedBeforeMs=<unix ms>&endedFromMs=<unix ms>\
                 &endedBeforeMs=<unix ms>&limit=<1..=1000>&before=<nextBefore of the last page>\
                 &counts=<true|false>",
            ));
        }
    };
    let filter = query::ListFilter {
        status: query
            .status
            .as_deref()
            .map(crate::view::parse_status)
            .transpose()?,
        flow: query.flow,
        limit: query.limit,
        before: query.before,
        id_prefix: query.id_prefix,
        parent: query.parent,
        started_from_ms: query.started_from_ms,
        started_before_ms: query.started_before_ms,
        ended_from_ms: query.ended_from_ms,
        ended_before_ms: query.ended_before_ms,
        without_counts: query.counts == Some(false),
    };
    let mut listed = query::list_executions(state.runtime.store(), &filter).await?;
    for view in &mut listed.executions {
        mark_unregistered(&state.runtime, view);
    }
    ok(listed)
}

/// Marks `view` when it has not ended and this server's runtime does not register its flow
/// (and its version, when the view has it: a listing knows only the name): nothing here
/// drives it, and the operator should know why it does not move.
fn mark_unregistered<S: EventStore>(runtime: &Runtime<S>, view: &mut crate::ExecutionView) {
    let ended = matches!(view.status.as_str(), "completed" | "failed" | "cancelled");
    if let (false, Some(flow)) = (ended, view.flow.as_deref()) {
        view.flow_not_registered = !runtime.registered_flows().any(|registered| {
            registered.name() == flow
                && view
                    .flow_version
                    .is_none_or(|version| registered.version() == version)
        });
    }
}

async fn counts<S: EventStore>(State(state): Shared<S>) -> Answer {
    ok(query::execution_counts(state.runtime.store()).await?)
}

async fn show<S: EventStore>(State(state): Shared<S>, Path(id): Path<String>) -> Answer {
    let id = query::execution_id(&id)?;
    let mut shown = query::show(state.runtime.store(), &id, &state.config.classification).await?;
    mark_unregistered(&state.runtime, &mut shown.execution);
    ok(shown)
}

/// Unknown parameters are refused: a misspelt filter must not widen what is answered.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EventsQuery {
    from: Option<u64>,
    limit: Option<usize>,
    wait_ms: Option<u64>,
}

async fn events<S: EventStore>(
    State(state): Shared<S>,
    Path(id): Path<String>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Answer {
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => return Err(bad_query(&rejection, "?from=<seq>&limit=<n>&waitMs=<ms>")),
    };
    let id = query::execution_id(&id)?;
    let store = state.runtime.store();
    let from = query.from.unwrap_or(0);
    let limit = query.limit.unwrap_or(1024).clamp(1, 4096);
    let mut page =
        query::events_from(store, &id, from, limit, &state.config.classification).await?;
    let wait = Duration::from_millis(query.wait_ms.unwrap_or(0)).min(MAX_WAIT);
    if page.events.is_empty() && !page.ended && !wait.is_zero() {
        // Times out with nothing new, which the caller reads as an empty page.
        let _ = tokio::time::timeout(wait, store.wait_for(&id, from)).await;
        page = query::events_from(store, &id, from, limit, &state.config.classification).await?;
    }
    ok(page)
}

/// Unknown parameters are refused: a misspelt filter must not widen what is answered.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExportQuery {
    after: Option<String>,
    limit: Option<usize>,
    execution: Option<String>,
}

/// The most logs one export page holds.
const MAX_EXPORT_PAGE: usize = 100;

/// Whole logs, unmasked, as JSON Lines (one string per execution): one execution
/// (`?execution=ID`), or a page of them in id order after `after`.
async fn export<S: EventStore>(
    State(state): Shared<S>,
    query: Result<Query<ExportQuery>, QueryRejection>,
) -> Answer {
    if !state.config.log_export {
        return Err(ConsoleError::refused(
            "this server does not export logs through its admin API (exports hold true values, unmasked): \
             allow it with AdminConfig::log_export(true), or run export-log with --store once the server has stopped",
        ));
    }
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => {
            return Err(bad_query(
                &rejection,
                "?after=<execution id>&limit=<1..=100> or ?execution=<execution id>",
            ));
        }
    };
    let store = state.runtime.store();
    let jsonl = |log: &[loom_kernel::EventEnvelope]| -> String {
        log.iter()
            .map(|envelope| envelope.to_json() + "\n")
            .collect()
    };
    if let Some(id) = query.execution {
        let id = query::execution_id(&id)?;
        let log = store.read_all(&id).await?;
        if log.is_empty() {
            return Err(ConsoleError::unknown_execution(id.as_str()));
        }
        return ok(crate::ExportPage {
            logs: vec![jsonl(&log)],
            next: None,
        });
    }
    let limit = query.limit.unwrap_or(MAX_EXPORT_PAGE);
    if !(1..=MAX_EXPORT_PAGE).contains(&limit) {
        return Err(ConsoleError::bad_request(format!(
            "limit {limit} is out of range: export 1 to {MAX_EXPORT_PAGE} logs a page"
        )));
    }
    let after = query
        .after
        .as_deref()
        .map(query::execution_id)
        .transpose()?;
    let page = store.list_executions(after.as_ref(), limit).await?;
    let mut logs = Vec::with_capacity(page.executions.len());
    for summary in &page.executions {
        logs.push(jsonl(&store.read_all(&summary.id).await?));
    }
    ok(crate::ExportPage {
        logs,
        next: page.next.map(|id| id.to_string()),
    })
}

async fn in_doubt<S: EventStore>(State(state): Shared<S>) -> Answer {
    ok(query::in_doubt(state.runtime.store(), query::now_ms()).await?)
}

/// The Prometheus text exposition of the runtime's and the store's figures
/// (`docs/CONSOLE.md`, "Metrics").
async fn metrics<S: EventStore>(State(state): Shared<S>) -> Answer {
    let figures = crate::metrics::Figures::gather(&state.runtime, query::now_ms()).await?;
    let text = figures.encode()?;
    Ok((
        [(header::CONTENT_TYPE, crate::metrics::METRICS_CONTENT_TYPE)],
        text,
    )
        .into_response())
}

pub(crate) fn body<T: serde::de::DeserializeOwned>(
    bytes: &Bytes,
    shape: &str,
) -> Result<T, ConsoleError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(|error| {
        ConsoleError::bad_request(format!("bad request body ({error}): send {shape}"))
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResolveBody {
    step_id: String,
    verdict: Verdict,
    operator: Option<String>,
}

const RESOLVE_SHAPE: &str = r#"{"stepId": "..", "verdict": {"kind": "completed", "output": ..} | {"kind": "failed", "error": {"code": .., "message": ..}} | {"kind": "retry"}, "operator": ".."}"#;

async fn resolve<S: EventStore>(
    State(state): Shared<S>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Answer {
    let id = query::execution_id(&id)?;
    let request: ResolveBody = body(&bytes, RESOLVE_SHAPE)?;
    if let Verdict::Completed { output } = &request.verdict
        && output.is_too_deep()
    {
        return Err(ConsoleError::bad_request(
            "the verdict's output is nested too deep to be recorded",
        ));
    }
    let result = state
        .runtime
        .resolve(&id, &request.step_id, request.verdict, request.operator)
        .await;
    match result {
        Ok(()) => ok(json!({"recorded": true})),
        Err(ResolveError::NotInDoubt { .. }) => {
            let state = state.runtime.store().fold(&id).await?;
            Err(offline::not_in_doubt(&id, &request.step_id, &state))
        }
        Err(ResolveError::UnknownExecution { .. }) => {
            Err(ConsoleError::unknown_execution(id.as_str()))
        }
        Err(error) => Err(ConsoleError::internal(error.to_string())),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResumeBody {
    event_type: String,
    correlation_key: String,
    #[serde(default)]
    payload: Value,
    /// Who the operator says they are: an attribute of the caller, whose subject is the
    /// token that was verified.
    #[serde(default)]
    operator: Option<String>,
}

/// The caller of a resume through the admin API (LD-019): the bearer token is what was
/// verified, so it is the subject; the operator's name, if given, is what they declared.
fn admin_caller(operator: Option<&str>) -> Result<Caller, ConsoleError> {
    let caller = Caller::new(ADMIN_CALLER)
        .and_then(|caller| caller.with_attribute("via", "admin-api"))
        .map_err(|error| ConsoleError::internal(error.to_string()))?;
    match operator {
        Some(operator) => caller
            .with_attribute("operator", operator)
            .map_err(|error| ConsoleError::bad_request(format!("the operator name: {error}"))),
        None => Ok(caller),
    }
}

/// The subject of every resume through the admin API: the holder of its bearer token.
pub const ADMIN_CALLER: &str = "admin-token";

async fn resume<S: EventStore>(
    State(state): Shared<S>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Answer {
    let id = query::execution_id(&id)?;
    let request: ResumeBody = body(
        &bytes,
        r#"{"eventType": "..", "correlationKey": "..", "payload": .., "operator": ".."}"#,
    )?;
    let caller = admin_caller(request.operator.as_deref())?;
    let payload = Payload::try_from_value(&request.payload).map_err(|error| {
        ConsoleError::bad_request(format!("the payload cannot be recorded: {error}"))
    })?;
    // What the gate declared it expects (LD-031), checked before the runtime records anything.
    // The schema was recorded with the gate and never changes while it waits, so a check on
    // this fold holds for the resume that follows, unless another resume of the same pair
    // lands first and the flow opens a new gate on it at once: then this resume may answer
    // that gate unchecked.
    let folded = state.runtime.store().fold(&id).await?;
    crate::expected::check_resume(
        state.runtime.store(),
        &id,
        &folded,
        &request.event_type,
        &request.correlation_key,
        &request.payload,
    )
    .await?;
    let result = state
        .runtime
        .resume_as(
            &caller,
            &id,
            &request.event_type,
            &request.correlation_key,
            payload,
        )
        .await;
    match result {
        Ok(()) => ok(json!({"recorded": true})),
        Err(ResumeError::NoPendingGate { .. }) => {
            let folded = state.runtime.store().fold(&id).await?;
            if folded.status().is_terminal() {
                return Err(ended(&id, &folded));
            }
            Err(offline::no_pending_gate(
                &id,
                &request.event_type,
                &request.correlation_key,
                &folded,
            ))
        }
        Err(ResumeError::UnknownExecution { .. }) => {
            Err(ConsoleError::unknown_execution(id.as_str()))
        }
        Err(error @ ResumeError::Unauthorized { .. }) => {
            Err(ConsoleError::refused(error.to_string()))
        }
        Err(error) => Err(ConsoleError::internal(error.to_string())),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RetentionBody {
    ended_before_ms: u64,
    #[serde(default)]
    limit: Option<usize>,
}

const RETENTION_SHAPE: &str = r#"{"endedBeforeMs": <unix ms>, "limit": <1..=10000>}"#;

/// One bounded batch of `loom purge --admin`: deletes up to `limit` executions that ended
/// before `endedBeforeMs` (one commit of the store) and names them.
async fn retention_delete<S: EventStore>(State(state): Shared<S>, bytes: Bytes) -> Answer {
    let request: RetentionBody = body(&bytes, RETENTION_SHAPE)?;
    let limit = request.limit.unwrap_or(crate::retention::DEFAULT_BATCH);
    if limit == 0 || limit > crate::retention::MAX_BATCH {
        return Err(ConsoleError::bad_request(format!(
            "limit {limit} is out of range: send {RETENTION_SHAPE}"
        )));
    }
    let deleted =
        crate::retention::delete_batch(state.runtime.store(), request.ended_before_ms, limit)
            .await?;
    tracing::info!(
        deleted = deleted.len(),
        ended_before_ms = request.ended_before_ms,
        "retention: ended executions deleted"
    );
    ok(json!({"deleted": deleted.iter().map(ExecutionId::as_str).collect::<Vec<_>>()}))
}

/// `loom purge --admin --dry-run`: what a purge would delete, deleting nothing.
async fn retention_preview<S: EventStore>(State(state): Shared<S>, bytes: Bytes) -> Answer {
    let request: RetentionBody = body(&bytes, RETENTION_SHAPE)?;
    let found =
        crate::retention::would_purge(state.runtime.store(), request.ended_before_ms).await?;
    ok(json!({"executions": found.iter().map(ExecutionId::as_str).collect::<Vec<_>>()}))
}

fn ended(id: &ExecutionId, state: &loom_kernel::ExecutionState) -> ConsoleError {
    ConsoleError::refused(format!(
        "execution {id} has already ended ({}); nothing was recorded",
        crate::view::status_name(state.status())
    ))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CancelBody {
    reason: Option<String>,
}

async fn cancel<S: EventStore>(
    State(state): Shared<S>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Answer {
    let id = query::execution_id(&id)?;
    let request: CancelBody = body(&bytes, r#"{"reason": ".."}"#)?;
    match state.runtime.cancel(&id, request.reason).await {
        Ok(()) => ok(json!({"recorded": true})),
        Err(CancelError::Ended { .. }) => {
            let folded = state.runtime.store().fold(&id).await?;
            Err(ended(&id, &folded))
        }
        Err(CancelError::UnknownExecution { .. }) => {
            Err(ConsoleError::unknown_execution(id.as_str()))
        }
        Err(error) => Err(ConsoleError::internal(error.to_string())),
    }
}
