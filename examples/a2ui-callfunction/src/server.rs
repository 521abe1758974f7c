//! The server: Loom on the embedded store (or PostgreSQL), the A2UI wire over WebSocket (JSON text frames, one
//! socket per client session), and the operator's admin socket.
//!
//! - `GET /a2ui/{execution}/{surface}[?answers=f,g]`: a renderer's session (naming the
//!   functions it answers, all by default). It gets `createSurface` with the
//!   current masked model and any pending function call, then every update as it becomes
//!   durable; it sends actions and function replies. A renderer that reconnects gets the
//!   surface again, then live updates.
//! - `GET /operator`: one JSON request per text frame, one answer each: `{"op": "list"}` lists
//!   the steps in doubt, `{"op": "resolve", "execution", "step", "verdict"}` records a verdict
//!   (see [`crate::operator`]).
//! - `/admin/...`: the console's admin API and web console ([`loom_console::admin_router`]),
//!   mounted when the listener is on loopback, guarded by a token made at start (or given) and
//!   told in the narration as a link, `http://127.0.0.1:<port>/admin/#token=...`.
//! - `/playground/...`: the A2UI playground (see `src/playground.rs`): SSE down, POST up,
//!   behind the same token.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use futures::{SinkExt, StreamExt};
use loom_console::AdminConfig;
use loom_kernel::{Caller, Projection, Runtime, StartOptions};
use loom_kernel::{Event, EventEnvelope, EventStore, ExecutionId};
use loom_plugin_a2ui::{AgentMessage, RendererMessage};
use loom_plugin_a2ui::{CALL_FUNCTION_EFFECT, SurfaceHub};
use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use crate::app::{self, FLOW, Order};
use crate::narrate::{self, Direction, Note};
use crate::operator::{self, AdminRequest};
use crate::playground;
use crate::store::AnyStore;
use crate::transport::{Sessions, WsTransport};

/// How the server runs; also the `server` command's arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerOptions {
    /// The store file (created with its directory if missing), or a `postgres://` URL.
    #[arg(long, default_value = "target/a2ui-callfunction/loom.redb")]
    pub store: PathBuf,
    /// The PostgreSQL schema holding Loom's tables (with a `postgres://` store).
    #[arg(long, default_value = crate::store::DEFAULT_SCHEMA)]
    pub schema: String,
    /// Where to listen (port 0: any free port; the URL is told in a `Ready` note).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
    /// The execution to start (if new) and serve.
    #[arg(long, default_value = crate::story::EXECUTION)]
    pub execution: String,
    /// Aborts the process when `submitOrder`'s reply arrives, before Loom records it.
    #[arg(long)]
    pub crash_after_submit: bool,
    /// Exits once the execution has ended and its renderers have gone.
    #[arg(long)]
    pub exit_when_done: bool,
    /// The admin and playground token; a fresh random one when `None`. On the command line:
    /// the `LOOM_ADMIN_TOKEN` environment variable.
    #[arg(skip = std::env::var("LOOM_ADMIN_TOKEN").ok())]
    pub admin_token: Option<String>,
}

pub(crate) struct AppState<S: EventStore> {
    pub(crate) runtime: Runtime<S>,
    pub(crate) hub: SurfaceHub,
    pub(crate) sessions: Arc<Sessions>,
    /// Every durable event, as it is recorded (for the playground's streams).
    pub(crate) events: broadcast::Sender<EventEnvelope>,
    /// The token the admin API and the playground require.
    pub(crate) token: String,
}

/// Tells every durable event, and wakes the server when the execution ends.
struct Narrator {
    ended: Arc<Notify>,
    events: broadcast::Sender<EventEnvelope>,
}

impl Projection for Narrator {
    fn apply(&self, envelope: &EventEnvelope) {
        // No subscriber is no error: the playground may not be open.
        let _ = self.events.send(envelope.clone());
        narrate::emit(&Note::Event {
            execution: envelope.execution_id.to_string(),
            seq: envelope.seq,
            kind: envelope.event.type_name().to_owned(),
            detail: detail(&envelope.event),
        });
        if matches!(
            envelope.event,
            Event::ExecutionCompleted(_) | Event::ExecutionFailed(_) | Event::ExecutionCancelled(_)
        ) {
            self.ended.notify_one();
        }
    }
}

impl loom_kernel::Plugin for Narrator {
    fn name(&self) -> &str {
        "narrator"
    }

    fn kernel_abi(&self) -> loom_kernel::AbiRange {
        loom_kernel::AbiRange::caret(1, 1)
    }

    fn contribute(&self, contributions: &mut loom_kernel::Contributions) {
        contributions.projection(Arc::new(Narrator {
            ended: self.ended.clone(),
            events: self.events.clone(),
        }));
    }
}

/// What the narration prints of a payload: masked as a message leaving the process (K10-R6),
/// with the surface's classified paths and the card of the order the flow starts with, and
/// inside surface ops as at the path each op writes.
fn shown(payload: &loom_kernel::Payload) -> Value {
    shown_value(&payload.to_value())
}

fn shown_value(value: &Value) -> Value {
    app::operator_classification().mask_message_value(value)
}

/// A short readable summary of an event.
pub fn detail(event: &Event) -> String {
    match event {
        Event::ExecutionStarted(e) => format!("{} v{}", e.flow, e.flow_version),
        Event::StepStarted(e) => format!("{} ({}) attempt {}", e.step_id, e.effect, e.attempt),
        Event::StepCompleted(e) => format!("{} ({}) -> {}", e.step_id, e.effect, shown(&e.output)),
        Event::StepFailed(e) => format!(
            "{} ({}): {} {}",
            e.step_id, e.effect, e.error.code, e.error.message
        ),
        Event::EffectInDoubt(e) => format!(
            "{} ({}) attempt {}: {}",
            e.step_id,
            e.effect,
            e.attempt,
            e.reason
                .as_ref()
                .map_or("-".into(), |r| format!("{} {}", r.code, r.message))
        ),
        Event::EffectResolved(e) => format!(
            "{} verdict {} by {}",
            e.step_id,
            shown_value(&serde_json::to_value(&e.verdict).unwrap_or_default()),
            e.operator.as_deref().unwrap_or("-")
        ),
        Event::DecisionRecorded(e) => format!("{} = {}", e.step_id, shown(&e.value)),
        Event::SurfacePatch(e) => format!("{} {} {}", e.step_id, e.surface_id, shown(&e.ops)),
        Event::ExecutionSuspended(e) => format!(
            "{} on {} (key {})",
            e.gate_id, e.event_type, e.correlation_key
        ),
        Event::ExecutionResumed(e) => format!("{} with {}", e.gate_id, shown(&e.payload)),
        Event::ExecutionCompleted(e) => format!("{}", shown(&e.output)),
        Event::ExecutionFailed(e) => format!("{} {}", e.error.code, e.error.message),
        _ => String::new(),
    }
}

/// Runs the server until the execution ends (with `exit_when_done`) or forever.
pub async fn serve(options: ServerOptions) -> Result<()> {
    // On PostgreSQL the server is one worker, named after its execution: restarted after a
    // crash, it takes the execution's lease back at once (docs/STORAGE.md, leases).
    let worker_id = format!("a2ui-callfunction-{}", options.execution);
    match AnyStore::open(&options.store, &options.schema, Some(&worker_id)).await? {
        AnyStore::Disk(store) => {
            // The classification beside the store, so that `loom --store` on this file masks
            // the same paths (docs/CONSOLE.md).
            let masks = PathBuf::from(format!("{}.masks", options.store.display()));
            let listing: String = app::operator_classification()
                .paths()
                .iter()
                .map(|path| format!("{path}\n"))
                .collect();
            std::fs::write(
                &masks,
                format!("# classified paths (K10-R6) of this store's flows\n{listing}"),
            )
            .with_context(|| format!("writing {}", masks.display()))?;
            serve_on(store, options).await
        }
        AnyStore::Postgres(store) => serve_on(store, options).await,
    }
}

/// [`serve`] on the store it opened.
async fn serve_on<S: EventStore>(store: S, options: ServerOptions) -> Result<()> {
    let sessions = Sessions::new(options.crash_after_submit);
    let hub = app::hub();
    let ended = Arc::new(Notify::new());
    let (events, _) = broadcast::channel(1024);
    let narrator = Narrator {
        ended: ended.clone(),
        events: events.clone(),
    };
    let runtime = app::compose(store, &hub, Arc::new(WsTransport(sessions.clone())))?
        .plugin(&narrator)
        .build()
        .context("composing the runtime")?;
    let execution = ExecutionId::new(options.execution.clone())?;

    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .with_context(|| format!("binding {}", options.addr))?;
    let addr = listener.local_addr()?;
    let token = match options.admin_token {
        Some(token) => token,
        None => loom_console::random_token().context("making the admin token")?,
    };
    let admin = AdminConfig::new(token.clone())
        .context("the admin token")?
        .classification(app::operator_classification().clone())
        // `loom export-log --admin` on the live store, for replay-check: the API is on
        // loopback only, behind the token.
        .log_export(true);
    let state = Arc::new(AppState {
        runtime: runtime.clone(),
        hub: hub.clone(),
        sessions: sessions.clone(),
        events,
        token: token.clone(),
    });
    let mut router = Router::new()
        .route("/a2ui/{execution}/{surface}", get(renderer_socket::<S>))
        .route("/operator", get(admin_socket::<S>))
        .merge(playground::router::<S>())
        .with_state(state);
    // The admin API and the playground hold verdicts and resumes: loopback only.
    let loopback = addr.ip().is_loopback();
    if loopback {
        router = router.merge(loom_console::admin_router(runtime.clone(), admin));
    }

    // Executions a crashed process left mid-flight are driven on: a step that was running
    // when it died is parked in doubt (not idempotent), for an operator's verdict.
    let head = runtime.store().head(&execution).await?;
    if head == 0 {
        narrate::say(format!("starting execution {execution} of flow `{FLOW}`"));
        runtime
            .start(
                FLOW,
                &Order::demo(),
                StartOptions::new(execution.clone()).grant(CALL_FUNCTION_EFFECT),
            )
            .await?;
    } else {
        narrate::say(format!(
            "the store holds {head} events of {execution}: recovering"
        ));
        let recovered = runtime.recover().await?;
        narrate::say(format!("recover() drives {recovered} execution(s) on"));
    }
    // Renderers are served once the execution exists: a renderer that connects early waits in
    // the listener's backlog rather than see an empty surface.
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    // What is served, for RUST_LOG=info (the token stays out of logs: it is a credential).
    tracing::info!(
        renderers = %format!("ws://{addr}/a2ui/{{execution}}/{{surface}}"),
        operator = %format!("ws://{addr}/operator"),
        "serving execution {execution}"
    );
    if loopback {
        tracing::info!(
            console = %format!("http://{addr}/admin/"),
            admin_api = %format!("http://{addr}/admin/v1"),
            playground = %format!("http://{addr}/playground/"),
            "serving the admin API, the web console and the playground (loopback only)"
        );
    } else {
        tracing::info!(%addr, "not on loopback: the admin API and the playground are not mounted");
    }
    narrate::emit(&Note::Ready {
        url: format!("ws://{addr}"),
    });
    if loopback {
        narrate::say(format!(
            "web console: http://{addr}/admin/#token={token} (loom --admin http://{addr} --token {token})"
        ));
        narrate::say(format!(
            "A2UI playground: http://{addr}/playground/#token={token}&execution={execution}"
        ));
    } else {
        narrate::say("the admin API and the playground are served on loopback only: not mounted");
    }
    // Steps in doubt from a crash are announced once recovery has parked them.
    let _ = runtime.wait(&execution).await;
    for step in loom_effect_runtime::steps_in_doubt_of(runtime.store(), &execution).await? {
        narrate::emit(&operator::note_of(&step));
    }

    if !options.exit_when_done {
        server.await??;
        return Ok(());
    }
    loop {
        let state = runtime.state(&execution).await?;
        if state.status().is_terminal() {
            break;
        }
        ended.notified().await;
    }
    // Let the renderers take the last messages and go (they close after `deleteSurface`).
    for _ in 0..50 {
        if sessions.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let state = runtime.state(&execution).await?;
    narrate::say(format!(
        "execution {execution} is {}; the server stops",
        state.status()
    ));
    server.abort();
    // Appends in flight finish and every driver and the timer task are joined, so the store file
    // is released when this returns (the operator's next command may open it at once).
    runtime.shutdown().await;
    Ok(())
}

async fn renderer_socket<S: EventStore>(
    ws: WebSocketUpgrade,
    Path((execution, surface)): Path<(String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
    State(state): State<Arc<AppState<S>>>,
) -> Response {
    let answers = query
        .get("answers")
        .map(|names| names.split(',').map(str::to_owned).collect());
    ws.on_upgrade(move |socket| renderer_session(state, socket, execution, surface, answers))
}

async fn admin_socket<S: EventStore>(
    ws: WebSocketUpgrade,
    State(state): State<Arc<AppState<S>>>,
) -> Response {
    ws.on_upgrade(move |socket| admin_session(state, socket))
}

pub(crate) fn wire_note(direction: Direction, session: u64, message: Value) {
    narrate::emit(&Note::Wire {
        direction,
        session,
        message,
    });
}

async fn renderer_session<S: EventStore>(
    state: Arc<AppState<S>>,
    socket: WebSocket,
    execution: String,
    surface: String,
    answers: Option<Vec<String>>,
) {
    let Ok(execution_id) = ExecutionId::new(execution.clone()) else {
        return;
    };
    let (session, mut outbox) = state.sessions.open(&execution, &surface, answers);
    narrate::say(format!(
        "renderer session #{session} opened on {execution}/{surface}"
    ));
    let (mut sink, mut stream) = socket.split();
    let subscription = state
        .hub
        .subscribe(state.runtime.store(), &execution_id, &surface)
        .await;
    let mut subscription = match subscription {
        Ok(subscription) => subscription,
        Err(error) => {
            narrate::say(format!("session #{session}: cannot subscribe: {error}"));
            state.sessions.close(session);
            return;
        }
    };
    let send = |message: &AgentMessage| {
        let value = message.to_value();
        let text = value.to_string();
        wire_note(Direction::AgentToRenderer, session, value);
        Message::Text(text.into())
    };
    let mut open = true;
    for message in std::mem::take(&mut subscription.initial) {
        if sink.send(send(&message)).await.is_err() {
            open = false;
            break;
        }
    }
    let mut ended = "the renderer went away";
    while open {
        tokio::select! {
            update = subscription.next() => match update {
                Some(message) => open = sink.send(send(&message)).await.is_ok(),
                None => {
                    ended = if subscription.lagged() {
                        "the renderer fell behind (it reconnects to resynchronise)"
                    } else {
                        "the surface is deleted"
                    };
                    break;
                }
            },
            outgoing = outbox.recv() => match outgoing {
                Some(outgoing) => {
                    open = sink.send(send(&outgoing.message)).await.is_ok();
                    if open {
                        let _ = outgoing.sent.send(());
                    }
                }
                None => break,
            },
            frame = stream.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    let _ = inbound(&state, session, &execution_id, &surface, text.as_bytes()).await;
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
        }
    }
    state.sessions.close(session);
    let _ = sink.send(Message::Close(None)).await;
    narrate::say(format!("renderer session #{session} closed: {ended}"));
}

/// An A2UI message from a renderer (a WebSocket frame or a playground POST): an action resumes
/// the Approve gate; a function reply answers a grain-B request in flight, or else resumes a
/// grain-A gate. Anything refused is told and records nothing.
pub(crate) async fn inbound<S: EventStore>(
    state: &AppState<S>,
    session: u64,
    execution: &ExecutionId,
    surface: &str,
    bytes: &[u8],
) -> Result<String, String> {
    let value = serde_json::from_slice::<Value>(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()));
    wire_note(Direction::RendererToAgent, session, value);
    let caller = renderer_caller(session);
    let outcome = match RendererMessage::parse(bytes) {
        Ok(RendererMessage::Action(_)) => state
            .hub
            .deliver_action_as(&state.runtime, &caller, execution, surface, bytes)
            .await
            .map(|action| format!("action `{}` resumes its gate", action.name))
            .map_err(|e| e.to_string()),
        Ok(RendererMessage::RendererFunctionResponse(reply)) => {
            reply_to(state, &caller, surface, &reply.function_call_id, bytes).await
        }
        Ok(RendererMessage::Error(error)) => match &error.function_call_id {
            Some(call_id) => reply_to(state, &caller, surface, call_id, bytes).await,
            None => Ok(format!(
                "the renderer reports {}: {}",
                error.code, error.message
            )),
        },
        Ok(_) => Err("this agent implements no function for the renderer to call".into()),
        Err(error) => Err(error.to_string()),
    };
    match &outcome {
        Ok(text) => narrate::say(format!("session #{session}: {text}")),
        Err(text) => narrate::say(format!(
            "session #{session}: refused, nothing recorded: {text}"
        )),
    }
    outcome
}

/// Who a renderer session's messages come from, for the runtime's resume authenticator: the
/// session the server accepted, never what a message says (LD-019).
fn renderer_caller(session: u64) -> Caller {
    Caller::new(format!("renderer-session-{session}"))
        .and_then(|caller| caller.with_attribute("via", "a2ui"))
        .unwrap_or_else(|_| Caller::anonymous())
}

async fn reply_to<S: EventStore>(
    state: &AppState<S>,
    caller: &Caller,
    surface: &str,
    call_id: &str,
    bytes: &[u8],
) -> Result<String, String> {
    if state.sessions.deliver(call_id, bytes.to_vec()) {
        return Ok(format!("reply to {call_id} handed to its step"));
    }
    state
        .hub
        .deliver_function_response_as(&state.runtime, caller, surface, bytes)
        .await
        .map(|result| {
            format!(
                "reply to {} ({}) resumes its gate",
                result.call_id, result.name
            )
        })
        .map_err(|e| e.to_string())
}

async fn admin_session<S: EventStore>(state: Arc<AppState<S>>, mut socket: WebSocket) {
    while let Some(Ok(frame)) = socket.next().await {
        let Message::Text(text) = frame else {
            continue;
        };
        let answer = match serde_json::from_str::<AdminRequest>(text.as_str()) {
            Ok(request) => operator::answer(&state.runtime, request).await,
            Err(error) => serde_json::json!({"ok": false, "error": error.to_string()}),
        };
        if socket
            .send(Message::Text(answer.to_string().into()))
            .await
            .is_err()
        {
            break;
        }
    }
}
