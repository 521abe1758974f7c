//! The A2UI playground: a page that shows an execution's surface drawn by a renderer, the A2UI
//! wire beside the native model and the log, lists the server's checkouts and starts new ones.
//! Served under `/playground/` on the example's loopback listener.
//!
//! - `GET /playground/`: the page (`web/playground.{html,js,css}`, and `web/lit/a2ui-lit.bundle.js`,
//!   the official web renderer `@a2ui/lit` built from `web/lit/package-lock.json`, all built
//!   into the binary). It reads `#token=..&execution=..&renderer=lit|loom` from the
//!   operator's link, or `#credential=..&execution=..` from a renderer link: then it shows
//!   that execution's surface and wire only.
//! - `GET /playground/v1/{execution}/{surface}/stream?token=..&capabilities=JSON` (or
//!   `?credential=..`, a renderer credential for that execution: no `event` or `model` events,
//!   which are the operator's; or
//!   `&protocol=v0.9`): server-sent events. The stream is a renderer session like a WebSocket
//!   one, in the A2UI version the page's renderer announces: `@a2ui/lit` announces v0.9, the
//!   page's own renderer v1.0. A v0.9 stream also opens a v1.0 session on the same binding
//!   that carries only the function calls (v0.9 has none), which the page answers itself.
//!   Events: `session` (its sessions and version), `wire` (each A2UI message as sent, with its
//!   session), `event` (each durable event of the execution, masked, its log first), `model`
//!   (the native surface model, masked, after each `SURFACE_PATCH`), `final` (once the
//!   execution has ended: its status, masked output and the surface as last drawn, in the
//!   session's version), `failure` (the session could not open: an unknown execution, ...).
//! - `POST /playground/v1/{execution}/{surface}/messages?session=N` with
//!   `Authorization: Bearer <token>` (or the renderer credential session N was opened
//!   with): one A2UI renderer message (an `action`, a
//!   `rendererFunctionResponse`), taken by session N of a stream exactly as a WebSocket frame
//!   is (checked against the session's execution and surface, then sent through the runtime's
//!   inbound seam).
//! - `POST /playground/v1/executions` with the bearer token: starts a new checkout
//!   (`checkout-N`, the next free number); answers `{"execution": id, "rendererPath":
//!   "/a2ui/...?credential=..."}`, the renderer link's path for it.
//!
//! `EventSource` cannot send headers, so the stream takes the token in its query; both compare
//! it in constant time.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use futures::FutureExt;
use loom_console::{bearer_matches, constant_time_eq, static_file};
use loom_kernel::{Event, EventEnvelope, EventStore, EventStoreExt, ExecutionId};
use loom_kernel::{ExecutionStatus, StartOptions};
use loom_plugin_a2ui::{
    AgentMessage, CALL_FUNCTION_EFFECT, Connection, CreateSurface, ProtocolVersion, Received,
    VersionedSession, project_v0_9,
};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::app;
use crate::narrate::Direction;
use crate::server::{self, AppState};
use crate::transport::OPERATOR_VERIFIED;
use loom_plugin_a2ui::CREDENTIAL;

/// A message POSTed for a playground session, with where its outcome goes.
pub(crate) struct Posted {
    /// The session it is for (a stream may hold two).
    session: u64,
    bytes: Vec<u8>,
    outcome: oneshot::Sender<Result<String, String>>,
}

/// Who opened a playground stream.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Viewer {
    /// The operator, with the admin token: the surface, the wire, the log and the model.
    Operator,
    /// A renderer, with a renderer credential: the surface and the wire of its execution only.
    Renderer(String),
}

/// A playground session's inbox, and who may post to it.
#[derive(Clone)]
struct Inbox {
    sender: mpsc::Sender<Posted>,
    viewer: Viewer,
}

/// The playground's open sessions, by id: each takes the messages POSTed for it.
#[derive(Default)]
pub(crate) struct Inboxes(std::sync::Mutex<BTreeMap<u64, Inbox>>);

impl Inboxes {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Inbox>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

const HTML: &str = include_str!("../web/playground.html");
const JS: &str = include_str!("../web/playground.js");
const CSS: &str = include_str!("../web/playground.css");
/// `@a2ui/lit` 0.11 and `@a2ui/web_core` 0.11, bundled from `web/lit/package-lock.json`
/// (`cargo xtask web-bundle` rebuilds it; `--check` proves the committed one is that build).
const LIT: &str = include_str!("../web/lit/a2ui-lit.bundle.js");

/// The playground's routes (the server adds its state).
pub(crate) fn router<S: EventStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .route(
            "/playground",
            get(|| async { Redirect::permanent("playground/") }),
        )
        .route(
            "/playground/",
            get(|| async { static_file(HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/playground/playground.js",
            get(|| async { static_file(JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/playground/playground.css",
            get(|| async { static_file(CSS, "text/css; charset=utf-8") }),
        )
        .route(
            "/playground/a2ui-lit.bundle.js",
            get(|| async { static_file(LIT, "text/javascript; charset=utf-8") }),
        )
        .route("/playground/v1/executions", post(start_checkout::<S>))
        .route(
            "/playground/v1/{execution}/{surface}/stream",
            get(stream::<S>),
        )
        .route(
            "/playground/v1/{execution}/{surface}/messages",
            post(message::<S>),
        )
}

fn refused(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": message.into()}))).into_response()
}

fn unauthorized() -> Response {
    refused(
        StatusCode::UNAUTHORIZED,
        "missing or wrong token: open the link the server printed (…/playground/#token=…)",
    )
}

async fn stream<S: EventStore>(
    State(state): State<Arc<AppState<S>>>,
    Path((execution, surface)): Path<(String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let operator = query
        .get("token")
        .is_some_and(|given| constant_time_eq(given.as_bytes(), state.token.as_bytes()));
    let viewer = match query.get(CREDENTIAL) {
        _ if operator => Viewer::Operator,
        // Checked by the edge when the session opens: a wrong one is a `failure` event.
        Some(credential) => Viewer::Renderer(credential.clone()),
        None => return unauthorized(),
    };
    let Ok(execution) = ExecutionId::new(execution) else {
        return refused(StatusCode::BAD_REQUEST, "not an execution id");
    };
    let offered: Vec<String> = query.get("protocol").into_iter().cloned().collect();
    let protocol = match server::negotiate(query.get("capabilities").map(String::as_str), &offered)
    {
        Ok(protocol) => protocol,
        Err(reason) => return refused(StatusCode::BAD_REQUEST, reason),
    };
    let (tx, rx) = mpsc::channel::<SseEvent>(256);
    tokio::spawn(session(state, execution, surface, protocol, viewer, tx));
    let events = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|event| (Ok::<_, Infallible>(event), rx))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn sse(kind: &str, data: &Value) -> SseEvent {
    SseEvent::default().event(kind).data(data.to_string())
}

/// One playground stream: a renderer session in the page's version (opened by the edge like a
/// WebSocket one, for the operator the server checked the admin token of, or for the holder
/// of a renderer credential), plus, on v0.9, a v1.0 session for the function calls; it lasts
/// until the page goes away. A renderer's stream carries the surface and the wire only: the
/// log and the native model are the operator's.
async fn session<S: EventStore>(
    state: Arc<AppState<S>>,
    execution: ExecutionId,
    surface: String,
    protocol: ProtocolVersion,
    viewer: Viewer,
    tx: mpsc::Sender<SseEvent>,
) {
    // Subscribed before the log is read, so no event falls between the two.
    let mut events = state.events.subscribe();
    let operator = viewer == Viewer::Operator;
    let credentials = match &viewer {
        Viewer::Operator => BTreeMap::from([(OPERATOR_VERIFIED.to_owned(), "yes".to_owned())]),
        Viewer::Renderer(credential) => {
            BTreeMap::from([(CREDENTIAL.to_owned(), credential.clone())])
        }
    };
    let connection = Connection {
        execution: execution.to_string(),
        surface_id: surface.clone(),
        credentials,
        answers: None,
        ..Connection::default()
    };
    let failure = |error: String| sse("failure", &json!({"message": error}));
    let mut render = match state
        .edge
        .open_versioned(&state.runtime, &connection, protocol)
        .await
    {
        Ok(session) => session,
        Err(error) => {
            let kind = match error {
                loom_plugin_a2ui::OpenError::UnknownExecution { .. }
                | loom_plugin_a2ui::OpenError::BadExecutionId { .. } => "unknown-execution",
                _ => "refused",
            };
            let _ = tx
                .send(sse(
                    "failure",
                    &json!({"kind": kind, "message": error.to_string()}),
                ))
                .await;
            return;
        }
    };
    // v0.9 carries no function call: a v1.0 session of the same binding takes them.
    let mut functions = if protocol == ProtocolVersion::V0_9 {
        match state
            .edge
            .open_versioned(&state.runtime, &connection, ProtocolVersion::V1_0)
            .await
        {
            Ok(session) => Some(session),
            Err(error) => {
                let _ = tx.send(failure(error.to_string())).await;
                return;
            }
        }
    } else {
        None
    };
    let log = match state.runtime.store().read_all(&execution).await {
        Ok(log) => log,
        Err(error) => {
            let _ = tx.send(failure(error.to_string())).await;
            return;
        }
    };
    let id = render.session().id();
    let functions_id = functions.as_ref().map(|f| f.session().id());
    let (inbox, mut posted) = mpsc::channel::<Posted>(16);
    {
        let mut inboxes = state.playground.lock();
        let inbox = Inbox {
            sender: inbox,
            viewer: viewer.clone(),
        };
        inboxes.insert(id, inbox.clone());
        if let Some(fid) = functions_id {
            inboxes.insert(fid, inbox);
        }
    }
    let wire = wire_event;
    let mut out = vec![sse(
        "session",
        &json!({"session": id, "functions": functions_id, "protocol": protocol.as_str()}),
    )];
    let mut seen = 0;
    let mut ended = false;
    for envelope in &log {
        seen = envelope.seq;
        ended |= is_end(&envelope.event);
        if operator {
            out.push(event_of(envelope));
        }
    }
    if operator {
        out.extend(model_of(&state, &execution, &surface));
    }
    let (frames, not_sent) = render.take_initial();
    out.extend(
        not_sent
            .iter()
            .map(|error| sse("not-sent", &json!(error.to_string()))),
    );
    out.extend(frames.into_iter().map(|frame| wire(id, frame)));
    if let Some(functions) = &mut functions {
        let (frames, _) = functions.take_initial();
        out.extend(
            frames
                .into_iter()
                .filter(is_call)
                .map(|f| wire(functions_id.unwrap_or(0), f)),
        );
    }
    if ended {
        out.extend(final_of(&state, &execution, &surface, protocol).await);
    }
    let mut open = true;
    for event in out {
        open = open && tx.send(event).await.is_ok();
    }
    let mut deleted = false;
    let mut functions_done = functions.is_none();
    while open {
        tokio::select! {
            () = tx.closed() => break,
            outbound = render.next(), if !deleted => match outbound {
                Some(outbound) => open = forward(&tx, id, outbound).await,
                // Fell behind: the page's event source reconnects and resynchronises.
                None if render.lagged() => break,
                None => deleted = true,
            },
            outbound = next_of(&mut functions), if !functions_done => match outbound {
                Some(mut outbound) => {
                    let calls: Vec<Value> = std::mem::take(&mut outbound.frames)
                        .into_iter()
                        .filter(is_call)
                        .collect();
                    for frame in calls {
                        open = open && tx.send(wire(functions_id.unwrap_or(0), frame)).await.is_ok();
                    }
                    if open {
                        outbound.written();
                    }
                }
                None => functions_done = true,
            },
            post = posted.recv() => {
                let Some(post) = post else { break };
                let session = match (&mut functions, functions_id) {
                    (Some(functions), Some(fid)) if fid == post.session => functions,
                    _ => &mut render,
                };
                let sid = session.session().id();
                let outcome = session.receive(&state.runtime, &post.bytes).await;
                server::tell(sid, &post.bytes, &outcome);
                let answer = match outcome {
                    Ok(Received::Answered(message)) => {
                        open = tx.send(wire(sid, message.to_value())).await.is_ok();
                        Ok("callAgentFunction answered in band".to_owned())
                    }
                    Ok(received) => Ok(format!("{received:?}")),
                    Err(refused) => Err(refused.to_string()),
                };
                let _ = post.outcome.send(answer);
            },
            received = events.recv() => match received {
                Ok(envelope) if envelope.execution_id == execution && envelope.seq > seen => {
                    seen = envelope.seq;
                    if operator {
                        open = tx.send(event_of(&envelope)).await.is_ok();
                    }
                    if operator
                        && matches!(&envelope.event, Event::SurfacePatch(p) if p.surface_id == surface)
                        && let Some(model) = model_of(&state, &execution, &surface)
                    {
                        open = open && tx.send(model).await.is_ok();
                    }
                    if is_end(&envelope.event) {
                        open = open && drain(&mut render, &tx, id, &mut deleted).await;
                        if let Some(event) = final_of(&state, &execution, &surface, protocol).await {
                            open = open && tx.send(event).await.is_ok();
                        }
                    }
                }
                Ok(_) => {}
                // Fell behind the broadcast: what was missed is read back from the log.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if let Ok(missed) = state.runtime.store().read(&execution, seen + 1, usize::MAX).await {
                        let mut ends = false;
                        for envelope in missed {
                            seen = envelope.seq;
                            ends |= is_end(&envelope.event);
                            if operator {
                                open = open && tx.send(event_of(&envelope)).await.is_ok();
                            }
                        }
                        if operator && let Some(model) = model_of(&state, &execution, &surface) {
                            open = open && tx.send(model).await.is_ok();
                        }
                        if ends {
                            open = open && drain(&mut render, &tx, id, &mut deleted).await;
                            if let Some(event) = final_of(&state, &execution, &surface, protocol).await {
                                open = open && tx.send(event).await.is_ok();
                            }
                        }
                    }
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    let mut inboxes = state.playground.lock();
    inboxes.remove(&id);
    if let Some(fid) = functions_id {
        inboxes.remove(&fid);
    }
}

/// A frame the page's renderer session sends, noted on the wire log and as the page's event.
fn wire_event(session: u64, value: Value) -> SseEvent {
    server::wire_note(Direction::AgentToRenderer, session, value.clone());
    sse("wire", &json!({"session": session, "message": value}))
}

/// Sends one outbound of the surface's session to the page: why it was not sent, when it was
/// refused (`not-sent`), then its frames, marked written once all went. Whether the page is
/// still there.
async fn forward(
    tx: &mpsc::Sender<SseEvent>,
    session: u64,
    mut outbound: loom_plugin_a2ui::VersionedOutbound,
) -> bool {
    let mut open = true;
    if let Some(error) = &outbound.refused {
        open = tx
            .send(sse("not-sent", &json!(error.to_string())))
            .await
            .is_ok();
    }
    for frame in std::mem::take(&mut outbound.frames) {
        open = open && tx.send(wire_event(session, frame)).await.is_ok();
    }
    if open {
        outbound.written();
    }
    open
}

/// Forwards what the surface's session has queued by now: once the execution ended, its last
/// messages (its `deleteSurface`), which go before the result (after which the page closes the
/// stream). Whether the page is still there.
async fn drain(
    render: &mut VersionedSession,
    tx: &mpsc::Sender<SseEvent>,
    session: u64,
    deleted: &mut bool,
) -> bool {
    while !*deleted {
        match render.next().now_or_never() {
            Some(Some(outbound)) => {
                if !forward(tx, session, outbound).await {
                    return false;
                }
            }
            Some(None) => *deleted = true,
            None => break,
        }
    }
    true
}

async fn next_of(
    session: &mut Option<VersionedSession>,
) -> Option<loom_plugin_a2ui::VersionedOutbound> {
    match session {
        Some(session) => session.next().await,
        None => std::future::pending().await,
    }
}

fn is_call(frame: &Value) -> bool {
    frame.get("callRendererFunction").is_some() || frame.get("agentFunctionResponse").is_some()
}

fn is_end(event: &Event) -> bool {
    matches!(
        event,
        Event::ExecutionCompleted(_) | Event::ExecutionFailed(_) | Event::ExecutionCancelled(_)
    )
}

/// The end of an execution, for a page: its status, its output (masked), and its surface as
/// last drawn (the components and the masked model), as the frames that draw it in the
/// session's version.
async fn final_of<S: EventStore>(
    state: &AppState<S>,
    execution: &ExecutionId,
    surface: &str,
    protocol: ProtocolVersion,
) -> Option<SseEvent> {
    let folded = state.runtime.state(execution).await.ok()?;
    let status: ExecutionStatus = folded.status();
    let output = folded
        .output()
        .map(|payload| app::operator_classification().mask_message_value(&payload.to_value()));
    let error = folded
        .failure()
        .map(|e| format!("{} {}", e.code, e.message));
    let model = state.hub.masked_model(execution, surface);
    let frames: Vec<Value> = match &model {
        Some(Value::Object(model)) => {
            let create = AgentMessage::CreateSurface(CreateSurface {
                surface_id: state.hub.wire_id(execution, surface),
                catalog_id: Some(loom_plugin_a2ui::BASIC_CATALOG_ID.to_owned()),
                components: Some(app::components()),
                data_model: Some(model.clone()),
                ..CreateSurface::default()
            });
            match protocol {
                ProtocolVersion::V1_0 => vec![create.to_value()],
                _ => project_v0_9(&create).unwrap_or_default(),
            }
        }
        _ => Vec::new(),
    };
    Some(sse(
        "final",
        &json!({
            "status": status.to_string(),
            "output": output,
            "error": error,
            "model": model,
            "frames": frames,
        }),
    ))
}

/// Starts a new checkout as `checkout-N`, the first free N, and serves it to renderers.
async fn start_checkout<S: EventStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Response {
    if !bearer_matches(&headers, &state.token) {
        return unauthorized();
    }
    let _one_at_a_time = state.starting.lock().await;
    let mut number = 1u64;
    let execution = loop {
        let Ok(candidate) = ExecutionId::new(format!("{}-{number}", app::FLOW)) else {
            return refused(StatusCode::INTERNAL_SERVER_ERROR, "no execution id");
        };
        match state.runtime.store().head(&candidate).await {
            Ok(0) => break candidate,
            Ok(_) => number += 1,
            Err(error) => return refused(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
        }
    };
    let started = state
        .runtime
        .start(
            app::FLOW,
            &app::Order::demo(),
            StartOptions::new(execution.clone()).grant(CALL_FUNCTION_EFFECT),
        )
        .await;
    match started {
        Ok(_) => {
            crate::narrate::say(format!("the playground started execution {execution}"));
            // The link a renderer of another machine would be given for it.
            let credential = state.access.mint(&execution);
            axum::Json(json!({
                "execution": execution.as_str(),
                "rendererPath": format!("/a2ui/{execution}/{}?credential={credential}", app::SURFACE),
            }))
            .into_response()
        }
        Err(error) => refused(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
    }
}

fn event_of(envelope: &EventEnvelope) -> SseEvent {
    sse(
        "event",
        &json!({
            "seq": envelope.seq,
            "type": envelope.event.type_name(),
            "event": loom_console::masked_event(app::operator_classification(), &envelope.event),
        }),
    )
}

fn model_of<S: EventStore>(
    state: &AppState<S>,
    execution: &ExecutionId,
    surface: &str,
) -> Option<SseEvent> {
    state
        .hub
        .masked_model(execution, surface)
        .map(|model| sse("model", &model))
}

async fn message<S: EventStore>(
    State(state): State<Arc<AppState<S>>>,
    Path((execution, surface)): Path<(String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let operator = bearer_matches(&headers, &state.token);
    // The session knows its execution and surface; the path only names them for the page.
    let _ = (execution, surface);
    let session = query
        .get("session")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let inbox = state.playground.lock().get(&session).cloned();
    // The operator may post to any session; a renderer only to one its credential opened
    // (the same answer for a session that does not exist, so ids cannot be probed).
    let inbox = match inbox {
        Some(inbox) if operator => inbox,
        Some(inbox) => match &inbox.viewer {
            Viewer::Renderer(credential) if bearer_matches(&headers, credential) => inbox,
            _ => return unauthorized(),
        },
        None if operator => {
            return refused(
                StatusCode::NOT_FOUND,
                format!("no playground session #{session}"),
            );
        }
        None => return unauthorized(),
    };
    let inbox = inbox.sender;
    let (outcome, answer) = oneshot::channel();
    let posted = Posted {
        session,
        bytes: body.to_vec(),
        outcome,
    };
    if inbox.send(posted).await.is_err() {
        return refused(
            StatusCode::GONE,
            format!("playground session #{session} ended"),
        );
    }
    match answer.await {
        Ok(Ok(text)) => axum::Json(json!({"ok": text})).into_response(),
        Ok(Err(text)) => refused(StatusCode::UNPROCESSABLE_ENTITY, text),
        Err(_) => refused(
            StatusCode::GONE,
            format!("playground session #{session} ended"),
        ),
    }
}
