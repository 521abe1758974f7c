//! The server: Loom on the embedded store (or PostgreSQL), the A2UI wire over WebSocket (JSON text frames, one
//! socket per client session), and the operator's admin socket.
//!
//! - `GET /a2ui/{execution}/{surface}?credential=c[&answers=f,g][&capabilities=JSON]`: a
//!   renderer's session (naming the functions it answers, all by default), in the A2UI version
//!   it announces: its capabilities document (`{"v0.9": {...}}`) or the WebSocket subprotocol
//!   it offers (`a2ui.v0.9`, `a2ui.v1.0`), v1.0 when it names none; opened by the plugin's [`RendererEdge`] for
//!   the holder of a renderer credential the server minted for that execution
//!   ([`RendererAccess`]; also `Authorization: Bearer <credential>`), told in its renderer link;
//!   refused with close code 1008 and a reason otherwise, 1013 past a session limit.
//!   Text frames only (a binary frame closes with 1003); small socket buffers (an idle session
//!   costs a few KiB). It gets `createSurface` with the current masked model and any pending function
//!   call, then every update as it becomes durable; it sends actions and function replies,
//!   which the edge checks against the session's execution and surface. A renderer that
//!   reconnects gets the surface again, then live updates.
//! - `GET /operator` with `Authorization: Bearer <admin token>` (refused with 401 without it,
//!   on every address): one JSON request per text frame, one answer each: `{"op": "list"}`
//!   lists the steps in doubt, `{"op": "resolve", "execution", "step", "verdict"}` records a
//!   verdict (see [`crate::operator`]).
//! - `/admin/...`: the console's admin API and web console ([`loom_console::admin_router`]),
//!   mounted when the listener is on loopback, guarded by a token made at start (or given) and
//!   told in the narration as a link, `http://127.0.0.1:<port>/admin/#token=...`.
//! - `/playground/...`: the A2UI playground (see `src/playground.rs`): SSE down, POST up,
//!   behind the same token.
//!
//! Every request that carries `Origin` must name an allowed origin (the server's own by
//! default, `--allow-origin` for more), or it is refused with 403 before any handler runs
//! ([`crate::origin`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{SinkExt, StreamExt};
use loom_console::AdminConfig;
use loom_kernel::{Event, EventEnvelope, EventStore, ExecutionId};
use loom_kernel::{Projection, Runtime, StartOptions};
use loom_plugin_a2ui::{CALL_FUNCTION_EFFECT, SurfaceHub};
use loom_plugin_a2ui::{
    CREDENTIAL, Connection, Limits, ProtocolVersion, Received, Refused, RendererEdge, close_codes,
};
use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use crate::app::{self, FLOW, Order};
use crate::narrate::{self, Direction, Note};
use crate::operator::{self, AdminRequest};
use crate::origin::{self, AllowedOrigins};
use crate::playground;
use crate::store::AnyStore;
use crate::transport::{CrashAfterSubmit, RendererAccess};

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
    /// The admin and playground token; when `None`, the one kept in the admin token file. On
    /// the command line: the `LOOM_ADMIN_TOKEN` environment variable.
    #[arg(skip = std::env::var("LOOM_ADMIN_TOKEN").ok())]
    pub admin_token: Option<String>,
    /// The file holding the admin token when `LOOM_ADMIN_TOKEN` is not set (made, 0600, if
    /// missing): beside a store file by default (`<store>.admin-token`), in
    /// `target/a2ui-callfunction/` for PostgreSQL. Open console tabs and scripts keep working
    /// across a restart while it is kept; delete it to revoke the token.
    #[arg(long)]
    pub admin_token_file: Option<PathBuf>,
    /// The file holding the key renderer credentials are signed with (made, 0600, if
    /// missing): beside a store file by default (`<store>.renderer-key`), in
    /// `target/a2ui-callfunction/` for PostgreSQL. Links handed out stay good while it is kept.
    #[arg(long)]
    pub renderer_key_file: Option<PathBuf>,
    /// An origin (`https://shop.example`) whose pages may open renderer sessions and call the
    /// server, besides the server's own; repeatable.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// Renderer sessions open at once, in all.
    #[arg(long, default_value_t = Limits::default().max_sessions)]
    pub max_sessions: usize,
    /// Renderer sessions open at once per renderer credential (one execution's surface).
    #[arg(long, default_value_t = Limits::default().max_sessions_per_caller)]
    pub max_sessions_per_caller: usize,
    /// Renderer sessions open at once from one address.
    #[arg(long, default_value_t = Limits::default().max_sessions_per_peer)]
    pub max_sessions_per_peer: usize,
}

impl ServerOptions {
    /// The defaults the command line has, on the store file `store`, on a free loopback port,
    /// with a fresh admin token.
    pub fn new(store: impl Into<PathBuf>) -> Self {
        let limits = Limits::default();
        Self {
            store: store.into(),
            schema: crate::store::DEFAULT_SCHEMA.into(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            execution: crate::story::EXECUTION.into(),
            crash_after_submit: false,
            exit_when_done: false,
            admin_token: None,
            admin_token_file: None,
            renderer_key_file: None,
            allowed_origins: Vec::new(),
            max_sessions: limits.max_sessions,
            max_sessions_per_caller: limits.max_sessions_per_caller,
            max_sessions_per_peer: limits.max_sessions_per_peer,
        }
    }

    /// The edge's limits with the sessions bounded as asked.
    fn limits(&self) -> Limits {
        Limits {
            max_sessions: self.max_sessions,
            max_sessions_per_caller: self.max_sessions_per_caller,
            max_sessions_per_peer: self.max_sessions_per_peer,
            ..Limits::default()
        }
    }

    /// Where the renderer key is kept.
    pub fn renderer_key_path(&self) -> PathBuf {
        self.secret_path(self.renderer_key_file.as_ref(), "renderer-key")
    }

    /// Where the admin token is kept (when `LOOM_ADMIN_TOKEN` does not give it).
    pub fn admin_token_path(&self) -> PathBuf {
        self.secret_path(self.admin_token_file.as_ref(), "admin-token")
    }

    /// `given`, or the file named `<store>.<suffix>` beside a store file.
    fn secret_path(&self, given: Option<&PathBuf>, suffix: &str) -> PathBuf {
        match given {
            Some(path) => path.clone(),
            None if crate::store::is_postgres(&self.store.to_string_lossy()) => {
                PathBuf::from(format!("target/a2ui-callfunction/{}.{suffix}", self.schema))
            }
            None => PathBuf::from(format!("{}.{suffix}", self.store.display())),
        }
    }
}

pub(crate) struct AppState<S: EventStore> {
    pub(crate) runtime: Runtime<S>,
    pub(crate) hub: SurfaceHub,
    pub(crate) edge: RendererEdge,
    /// Who may open renderer sessions; the playground adds the executions it starts.
    pub(crate) access: RendererAccess,
    /// Held while the playground picks a new execution's id and starts it.
    pub(crate) starting: tokio::sync::Mutex<()>,
    /// The playground's open sessions, by id: where its POSTed messages go.
    pub(crate) playground: playground::Inboxes,
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
    // Installed before anything is served: a SIGINT that comes once the server answers must
    // find the handler, not the default action (the process killed, the store not closed).
    let mut stop = (!options.exit_when_done).then(crate::signals::StopSignals::install);
    let hub = app::hub();
    let execution = ExecutionId::new(options.execution.clone())?;
    let access = RendererAccess::new(crate::renderer_key::load_or_create(
        &options.renderer_key_path(),
    )?);
    let edge = RendererEdge::with_limits(hub.clone(), access.clone(), options.limits());
    let transport = if options.crash_after_submit {
        Arc::new(CrashAfterSubmit::new(edge.transport()))
    } else {
        edge.transport()
    };
    let ended = Arc::new(Notify::new());
    let (events, _) = broadcast::channel(1024);
    let narrator = Narrator {
        ended: ended.clone(),
        events: events.clone(),
    };
    // Every renderer message goes through the edge's inbound handler as its session's caller,
    // and the edge decides which gates a session's caller may resume.
    let runtime = app::compose(store, &hub, transport)?
        .plugin(&edge)
        .resume_authenticator(edge.clone())
        .plugin(&narrator)
        .build()
        .context("composing the runtime")?;

    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .with_context(|| format!("binding {}", options.addr))?;
    let addr = listener.local_addr()?;
    let token = match options.admin_token.clone() {
        Some(token) => token,
        None => crate::secret_file::load_or_create(
            &options.admin_token_path(),
            "the admin token",
            loom_console::MIN_TOKEN_LEN,
        )?,
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
        edge: edge.clone(),
        access,
        starting: tokio::sync::Mutex::new(()),
        playground: playground::Inboxes::default(),
        events,
        token: token.clone(),
    });
    let mut router = Router::new()
        .route("/a2ui/{execution}/{surface}", get(renderer_socket::<S>))
        .route("/operator", get(admin_socket::<S>))
        .merge(playground::router::<S>())
        .with_state(state.clone());
    // The admin API and the playground hold verdicts and resumes: loopback only.
    let loopback = addr.ip().is_loopback();
    if loopback {
        router = router.merge(loom_console::admin_router(runtime.clone(), admin));
    }
    // Outermost: a request from another site's page is refused before any handler runs.
    let origins = AllowedOrigins::new(addr, &options.allowed_origins);
    tracing::info!(allowed = ?origins.listed(), "origins whose pages may call this server");
    if addr.ip().is_unspecified() && options.allowed_origins.is_empty() {
        tracing::warn!(
            %addr,
            "listening on every address: a browser page is refused unless its origin is given with --allow-origin"
        );
    }
    let router = router.layer(axum::middleware::from_fn_with_state(origins, origin::check));

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
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
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
    let credential = state.access.mint(&execution);
    narrate::emit(&Note::Ready {
        url: format!("ws://{addr}"),
        credential: credential.clone(),
    });
    narrate::say(format!(
        "renderer link (good for {} h): ws://{addr}/a2ui/{execution}/{}?credential={credential}",
        crate::transport::RENDERER_LINK_TTL.as_secs() / 3600,
        app::SURFACE
    ));
    if loopback && options.exit_when_done {
        // The story's servers exit with their execution: links to them would be dead.
        narrate::say(
            "the web console and the A2UI playground are served until this server exits (`cargo run -p a2ui-callfunction -- serve` keeps one up)",
        );
    } else if loopback {
        narrate::say(format!(
            "web console: http://{addr}/admin/#token={token} (loom --admin http://{addr} --token {token})"
        ));
        narrate::say(format!(
            "A2UI playground: http://{addr}/playground/#token={token}&execution={execution}"
        ));
        narrate::say(format!(
            "the playground as this checkout's renderer (no operator view): http://{addr}/playground/#credential={credential}&execution={execution}"
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
        let mut server = server;
        tokio::select! {
            served = &mut server => served??,
            signal = async {
                match stop.as_mut() {
                    Some(stop) => stop.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                narrate::say(format!("{signal}: the server stops (appends in flight finish, the store is closed cleanly)"));
                server.abort();
                runtime.shutdown().await;
            }
        }
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
        if edge.session_count() == 0 {
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
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path((execution, surface)): Path<(String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    State(state): State<Arc<AppState<S>>>,
) -> Response {
    let mut credentials = BTreeMap::new();
    if let Some(credential) = query.get(CREDENTIAL).cloned().or_else(|| bearer(&headers)) {
        credentials.insert(CREDENTIAL.to_owned(), credential);
    }
    let mut connection = Connection {
        execution,
        surface_id: surface,
        credentials,
        peer: Some(peer.ip()),
        answers: query
            .get("answers")
            .map(|names| names.split(',').map(str::to_owned).collect()),
        // A renderer that kept its state across a reconnect says so: it gets `deleteSurface`
        // before `createSurface`.
        reconnect: query
            .get("reconnect")
            .is_some_and(|v| v == "1" || v == "true"),
        ..Connection::default()
    };
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .collect();
    let capabilities = query.get("capabilities").map(String::as_str);
    let (protocol, capabilities) = match negotiate_with_capabilities(capabilities, &offered) {
        Ok(negotiated) => negotiated,
        Err(reason) => return (StatusCode::BAD_REQUEST, reason).into_response(),
    };
    // The catalogs the renderer lists (`supportedCatalogIds`): a surface that needs another
    // is refused with a close reason, before any `createSurface`.
    connection.supported_catalogs = capabilities
        .as_ref()
        .and_then(|value| protocol.supported_catalogs(value));
    // The socket refuses a larger frame before reading it (1009).
    let limit = state.edge.limits().max_frame_bytes;
    let ws = if offered.is_empty() {
        ws
    } else {
        ws.protocols([protocol.subprotocol()])
    };
    // A2UI messages are small: buffers of a few KiB (128 KiB each by default) keep an idle
    // session's memory small; a larger message still passes, in several reads.
    ws.max_message_size(limit)
        .max_frame_size(limit)
        .read_buffer_size(SOCKET_BUFFER_BYTES)
        .write_buffer_size(SOCKET_BUFFER_BYTES)
        .on_upgrade(move |socket| renderer_session(state, socket, connection, protocol))
}

/// The read and write buffer of a renderer's socket.
const SOCKET_BUFFER_BYTES: usize = 4 * 1024;

/// The A2UI version a renderer announced: its capabilities document first, then the
/// subprotocols it offered; v1.0 when it announced nothing.
pub(crate) fn negotiate(
    capabilities: Option<&str>,
    offered: &[String],
) -> Result<ProtocolVersion, String> {
    negotiate_with_capabilities(capabilities, offered).map(|(protocol, _)| protocol)
}

/// [`negotiate`], also giving the capabilities it parsed, for what else they say (the
/// renderer's catalogs).
fn negotiate_with_capabilities(
    capabilities: Option<&str>,
    offered: &[String],
) -> Result<(ProtocolVersion, Option<Value>), String> {
    if let Some(text) = capabilities {
        let value: Value = serde_json::from_str(text)
            .map_err(|error| format!("the capabilities are not JSON: {error}"))?;
        let protocol =
            ProtocolVersion::from_capabilities(&value).map_err(|error| error.to_string())?;
        return Ok((protocol, Some(value)));
    }
    if offered.is_empty() {
        return Ok((ProtocolVersion::default(), None));
    }
    ProtocolVersion::from_offered(offered.iter().map(String::as_str))
        .map(|protocol| (protocol, None))
        .map_err(|error| error.to_string())
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").map(str::to_owned)
}

async fn admin_socket<S: EventStore>(
    ws: WebSocketUpgrade,
    headers: HeaderMap,
    State(state): State<Arc<AppState<S>>>,
) -> Response {
    // Verdicts need the admin token whatever the listen address.
    if !loom_console::bearer_matches(&headers, &state.token) {
        return (StatusCode::UNAUTHORIZED, "the admin token is required").into_response();
    }
    ws.on_upgrade(move |socket| admin_session(state, socket))
}

pub(crate) fn wire_note(direction: Direction, session: u64, message: Value) {
    narrate::emit(&Note::Wire {
        direction,
        session,
        message,
    });
}

/// A close frame with `code` and `reason` (cut to what a close frame carries).
fn close(code: u16, reason: &str) -> Message {
    let mut cut = reason.len().min(120);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    Message::Close(Some(CloseFrame {
        code,
        reason: reason[..cut].to_owned().into(),
    }))
}

/// The close frame for a frame the socket could not read: too large (1009) or not UTF-8
/// (1007); `Err` with the error for a connection that failed (nothing to close).
fn read_error_close(error: axum::Error) -> Result<Message, String> {
    use tokio_tungstenite::tungstenite::Error as WsError;
    let error = error.into_inner();
    match error.downcast_ref::<WsError>() {
        Some(WsError::Capacity(detail)) => Ok(close(1009, &detail.to_string())),
        Some(WsError::Utf8(_)) => Ok(close(1007, "a text frame that is not UTF-8")),
        _ => Err(error.to_string()),
    }
}

async fn renderer_session<S: EventStore>(
    state: Arc<AppState<S>>,
    socket: WebSocket,
    connection: Connection,
    protocol: ProtocolVersion,
) {
    let (mut sink, mut stream) = socket.split();
    let where_ = format!("{}/{}", connection.execution, connection.surface_id);
    let opened = state
        .edge
        .open_versioned(&state.runtime, &connection, protocol)
        .await;
    let mut session = match opened {
        Ok(session) => session,
        Err(error) => {
            narrate::say(format!(
                "renderer session on {where_} refused, nothing kept: {error}"
            ));
            let _ = sink
                .send(close(error.close_code(), &error.to_string()))
                .await;
            return;
        }
    };
    let id = session.session().id();
    narrate::say(format!(
        "renderer session #{id} ({protocol}) opened on {where_} for {}",
        session.session().caller()
    ));
    let send = |value: Value| {
        let text = value.to_string();
        wire_note(Direction::AgentToRenderer, id, value);
        Message::Text(text.into())
    };
    let mut open = true;
    let (frames, refused) = session.take_initial();
    for error in refused {
        narrate::say(format!("session #{id}: not sent: {error}"));
    }
    for frame in frames {
        if sink.send(send(frame)).await.is_err() {
            open = false;
            break;
        }
    }
    let mut ended = "the renderer went away".to_owned();
    while open {
        tokio::select! {
            outbound = session.next() => match outbound {
                Some(mut outbound) => {
                    if let Some(error) = &outbound.refused {
                        narrate::say(format!("session #{id}: not sent: {error}"));
                    }
                    for frame in std::mem::take(&mut outbound.frames) {
                        open = open && sink.send(send(frame)).await.is_ok();
                    }
                    if open {
                        outbound.written();
                    }
                }
                None => {
                    ended = if session.lagged() {
                        "the renderer fell behind (it reconnects to resynchronise)".into()
                    } else {
                        "the surface is deleted".into()
                    };
                    break;
                }
            },
            frame = stream.next() => {
                let bytes = match frame {
                    Some(Ok(Message::Text(text))) => text.as_bytes().to_vec(),
                    Some(Ok(Message::Binary(_))) => {
                        ended = "a binary frame (A2UI messages are JSON text)".into();
                        let _ = sink
                            .send(close(close_codes::UNSUPPORTED_DATA, "A2UI messages are JSON text frames"))
                            .await;
                        break;
                    }
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Ok(_)) => continue,
                    Some(Err(error)) => {
                        match read_error_close(error) {
                            Ok(close) => {
                                ended = format!("an unreadable frame: {close:?}");
                                let _ = sink.send(close).await;
                            }
                            Err(error) => ended = format!("the connection failed: {error}"),
                        }
                        break;
                    }
                };
                let outcome = session.receive(&state.runtime, &bytes).await;
                tell(id, &bytes, &outcome);
                match outcome {
                    Ok(Received::Answered(answer)) => {
                        open = sink.send(send(answer.to_value())).await.is_ok();
                    }
                    Ok(_) => {}
                    Err(refused) => if let Some(code) = refused.close_code() {
                        ended = format!("closed with {code}: {refused}");
                        let _ = sink.send(close(code, &refused.to_string())).await;
                        break;
                    },
                }
            },
        }
    }
    drop(session);
    let _ = sink.send(Message::Close(None)).await;
    narrate::say(format!("renderer session #{id} closed: {ended}"));
}

/// Tells what a renderer sent on session `session` and what became of it. Anything refused
/// records nothing.
pub(crate) fn tell(session: u64, bytes: &[u8], outcome: &Result<Received, Refused>) {
    let value = serde_json::from_slice::<Value>(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()));
    wire_note(Direction::RendererToAgent, session, value);
    let text = match outcome {
        Ok(Received::Action { name }) => format!("action `{name}` resumes its gate"),
        Ok(Received::FunctionReply { call_id, name }) => {
            format!("reply to {call_id} ({name}) resumes its gate")
        }
        Ok(Received::StepReply { call_id }) => format!("reply to {call_id} handed to its step"),
        Ok(Received::Answered(_)) => "callAgentFunction answered in band".to_owned(),
        Ok(Received::RendererError { code, message }) => {
            format!("the renderer reports {code}: {message}")
        }
        Ok(other) => format!("{other:?}"),
        Err(refused) => format!("refused, nothing recorded: {refused}"),
    };
    narrate::say(format!("session #{session}: {text}"));
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
