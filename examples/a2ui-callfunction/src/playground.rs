//! The A2UI playground: a page that shows one execution's surface three ways, side by side, and
//! renders it. Served under `/playground/` on the example's loopback listener.
//!
//! - `GET /playground/`: the page (`web/playground.{html,js,css}`, built into the binary). It
//!   reads `#token=..&execution=..` from its link.
//! - `GET /playground/v1/{execution}/{surface}/stream?token=..`: server-sent events. The
//!   stream is a renderer session like a WebSocket one (it answers the functions the agent
//!   calls): `session` (its number), `wire` (each A2UI message the bridge emits, as sent),
//!   `event` (each durable event of the execution, masked, its log first), `model` (the native
//!   surface model, masked, after each `SURFACE_PATCH`).
//! - `POST /playground/v1/{execution}/{surface}/messages?session=N` with
//!   `Authorization: Bearer <token>`: one A2UI renderer message (an `action`, a
//!   `rendererFunctionResponse`), taken by the stream's session exactly as a WebSocket frame
//!   is (`RendererSession::receive`: checked against the session's execution and surface,
//!   then sent through the runtime's inbound seam).
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
use loom_console::{bearer_matches, constant_time_eq, static_file};
use loom_kernel::{Event, EventEnvelope, EventStore, EventStoreExt, ExecutionId};
use loom_plugin_a2ui::{Connection, Received};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::app;
use crate::narrate::Direction;
use crate::server::{self, AppState};
use crate::transport::OPERATOR_VERIFIED;

/// A message POSTed for a playground session, with where its outcome goes.
pub(crate) struct Posted {
    bytes: Vec<u8>,
    outcome: oneshot::Sender<Result<String, String>>,
}

/// The playground's open sessions, by id: each takes the messages POSTed for it.
#[derive(Default)]
pub(crate) struct Inboxes(std::sync::Mutex<BTreeMap<u64, mpsc::Sender<Posted>>>);

impl Inboxes {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, mpsc::Sender<Posted>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

const HTML: &str = include_str!("../web/playground.html");
const JS: &str = include_str!("../web/playground.js");
const CSS: &str = include_str!("../web/playground.css");

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
    let authorized = query
        .get("token")
        .is_some_and(|given| constant_time_eq(given.as_bytes(), state.token.as_bytes()));
    if !authorized {
        return unauthorized();
    }
    let Ok(execution) = ExecutionId::new(execution) else {
        return refused(StatusCode::BAD_REQUEST, "not an execution id");
    };
    let (tx, rx) = mpsc::channel::<SseEvent>(256);
    tokio::spawn(session(state, execution, surface, tx));
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

/// One playground renderer session: opened by the edge like a WebSocket one (for the operator
/// the server checked the admin token of), it lasts until the page goes away.
async fn session<S: EventStore>(
    state: Arc<AppState<S>>,
    execution: ExecutionId,
    surface: String,
    tx: mpsc::Sender<SseEvent>,
) {
    // Subscribed before the log is read, so no event falls between the two.
    let mut events = state.events.subscribe();
    let connection = Connection {
        execution: execution.to_string(),
        surface_id: surface.clone(),
        credentials: BTreeMap::from([(OPERATOR_VERIFIED.to_owned(), "yes".to_owned())]),
        answers: None,
    };
    let session = state.edge.open(&state.runtime, &connection).await;
    let log = state.runtime.store().read_all(&execution).await;
    let (mut session, log) = match (session, log) {
        (Ok(session), Ok(log)) => (session, log),
        (Err(error), _) => {
            let _ = tx.send(sse("failure", &json!(error.to_string()))).await;
            return;
        }
        (_, Err(error)) => {
            let _ = tx.send(sse("failure", &json!(error.to_string()))).await;
            return;
        }
    };
    let id = session.id();
    let (inbox, mut posted) = mpsc::channel::<Posted>(16);
    state.playground.lock().insert(id, inbox);
    let wire = |message: &loom_plugin_a2ui::AgentMessage| {
        let value = message.to_value();
        server::wire_note(Direction::AgentToRenderer, id, value.clone());
        sse("wire", &value)
    };
    let mut out = vec![sse("session", &json!({"session": id}))];
    let mut seen = 0;
    for envelope in &log {
        seen = envelope.seq;
        out.push(event_of(envelope));
    }
    out.extend(model_of(&state, &execution, &surface));
    for message in session.take_initial() {
        out.push(wire(&message));
    }
    let mut open = true;
    for event in out {
        open = open && tx.send(event).await.is_ok();
    }
    let mut deleted = false;
    while open {
        tokio::select! {
            () = tx.closed() => break,
            outbound = session.next(), if !deleted => match outbound {
                Some(outbound) => {
                    open = tx.send(wire(&outbound.message)).await.is_ok();
                    if open {
                        outbound.written();
                    }
                }
                // Fell behind: the page's event source reconnects and resynchronises.
                None if session.lagged() => break,
                None => deleted = true,
            },
            post = posted.recv() => {
                let Some(post) = post else { break };
                let outcome = session.receive(&state.runtime, &post.bytes).await;
                server::tell(id, &post.bytes, &outcome);
                let answer = match outcome {
                    Ok(Received::Answered(message)) => {
                        open = tx.send(wire(&message)).await.is_ok();
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
                    open = tx.send(event_of(&envelope)).await.is_ok();
                    if matches!(&envelope.event, Event::SurfacePatch(p) if p.surface_id == surface)
                        && let Some(model) = model_of(&state, &execution, &surface)
                    {
                        open = open && tx.send(model).await.is_ok();
                    }
                }
                Ok(_) => {}
                // Fell behind the broadcast: what was missed is read back from the log.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if let Ok(missed) = state.runtime.store().read(&execution, seen + 1, usize::MAX).await {
                        for envelope in missed {
                            seen = envelope.seq;
                            open = open && tx.send(event_of(&envelope)).await.is_ok();
                        }
                        if let Some(model) = model_of(&state, &execution, &surface) {
                            open = open && tx.send(model).await.is_ok();
                        }
                    }
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    state.playground.lock().remove(&id);
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
    if !bearer_matches(&headers, &state.token) {
        return unauthorized();
    }
    // The session knows its execution and surface; the path only names them for the page.
    let _ = (execution, surface);
    let session = query
        .get("session")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let Some(inbox) = state.playground.lock().get(&session).cloned() else {
        return refused(
            StatusCode::NOT_FOUND,
            format!("no playground session #{session}"),
        );
    };
    let (outcome, answer) = oneshot::channel();
    let posted = Posted {
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
