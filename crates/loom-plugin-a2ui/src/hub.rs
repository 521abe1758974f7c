//! The `SurfaceHub`: a kernel projection that feeds one bridge per (execution, surface) from
//! durable events only, serves late and reconnecting clients, and catches up from the store.
//!
//! # No gap, no duplicate
//! The hub applies each execution's events strictly in seq order: an event already applied is
//! skipped, one that arrives ahead of a gap (written before this process started) waits until
//! [`SurfaceHub::catch_up`] has read the missing ones from the store. A subscription is taken
//! under the same lock that applies events: its `createSurface` carries the model as of the
//! last applied event and every later event reaches it as an update, exactly once.
//!
//! # A slow subscriber is dropped, not buffered without limit
//! Each subscription holds at most [`SUBSCRIBER_BUFFER`] live messages (or what
//! [`SurfaceHub::with_subscriber_buffer`] sets) that its client has not taken yet. A subscriber
//! that falls that far behind (a WebSocket client that stopped reading) is dropped: it still
//! gets the messages it holds, then its subscription ends ([`SurfaceSubscription::next`] gives
//! `None`, [`SurfaceSubscription::lagged`] says why). The client resynchronises by subscribing
//! again, which starts from `createSurface` with the current model. The hub's memory stays
//! bounded, and no other subscriber, nor the runtime that feeds the hub, waits for a slow one.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use loom_kernel::DataClassification;
use loom_kernel::{AbiRange, Caller, Contributions, Plugin, Projection, ResumeError, Runtime};
use loom_kernel::{Event, EventEnvelope, ExecutionId, Payload};
use loom_kernel::{EventStore, ReadError};
use serde_json::Value;
use thiserror::Error;
use tokio::sync::mpsc;

use crate::bridge::{A2UISurfaceBridge, FunctionResult, InboundAction, IngestError, parse_reply};
use crate::catalog::Catalogs;
use crate::gate::{
    COMPONENTS_DECISION, ComponentsUpdate, DELETE_DECISION, FUNCTION_RESULT_EVENT, FunctionRequest,
    REQUEST_DECISION,
};
use crate::wire::AgentMessage;

/// What a surface shows besides its data model: its component tree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SurfaceSpec {
    /// The components, one with id `root`.
    pub components: Vec<Value>,
}

/// A hub operation that failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HubError {
    /// Reading the log for a catch-up failed.
    #[error("catch-up of execution {execution} failed: {source}")]
    Read {
        /// The execution concerned.
        execution: ExecutionId,
        /// The underlying error.
        #[source]
        source: ReadError,
    },
    /// An inbound message was refused; nothing was recorded.
    #[error(transparent)]
    Ingest(#[from] IngestError),
    /// The runtime refused the resume (for example, the gate was already resumed).
    #[error("the resume was refused: {source}")]
    Resume {
        /// Why the resume was refused.
        #[source]
        source: ResumeError,
    },
    /// The execution has no such surface here.
    #[error("execution {execution} has no surface `{surface_id}`")]
    UnknownSurface {
        /// The execution concerned.
        execution: ExecutionId,
        /// The surface's id.
        surface_id: String,
    },
}

/// How many live messages a subscription holds for its client at most, unless
/// [`SurfaceHub::with_subscriber_buffer`] says otherwise: a subscriber that falls further
/// behind is dropped (see the module documentation).
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// How many ended executions a hub keeps with nobody watching, by default.
pub const ENDED_RETENTION: usize = 1024;

/// Events read per page when the hub catches up from the store.
const CATCH_UP_PAGE: usize = 512;

/// A client's view of one surface: `createSurface` and any pending function calls first, then
/// every update as it becomes durable.
#[derive(Debug)]
pub struct SurfaceSubscription {
    /// `createSurface` with the current masked model, then pending `callRendererFunction`s.
    pub initial: Vec<AgentMessage>,
    // Boxed: a channel allocates a block of 32 slots when it is made, and a slot holds one
    // message; a pointer keeps an idle subscription's block small.
    receiver: mpsc::Receiver<Box<AgentMessage>>,
    lagged: Arc<AtomicBool>,
    /// Where the hub keeps this subscription's sender, released when it is dropped so that a
    /// closed session costs nothing until the surface's next update.
    registration: Option<Registration>,
}

#[derive(Debug)]
struct Registration {
    hub: Weak<Shared>,
    execution: ExecutionId,
    surface_id: String,
    id: u64,
}

impl Drop for SurfaceSubscription {
    fn drop(&mut self) {
        let Some(registration) = self.registration.take() else {
            return;
        };
        let Some(shared) = registration.hub.upgrade() else {
            return;
        };
        let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(surface) = state
            .executions
            .get_mut(&registration.execution)
            .and_then(|exec| exec.surfaces.get_mut(&registration.surface_id))
        {
            surface.subscribers.retain(|s| s.id != registration.id);
        }
        evict_if_done(&mut state, &registration.execution);
    }
}

impl SurfaceSubscription {
    /// The next live message; `None` once the subscription has ended: the surface was
    /// deleted, the hub is gone, or the client fell too far behind ([`Self::lagged`]).
    pub async fn next(&mut self) -> Option<AgentMessage> {
        self.receiver.recv().await.map(|message| *message)
    }

    /// The next live message if one is waiting.
    pub fn try_next(&mut self) -> Option<AgentMessage> {
        self.receiver.try_recv().ok().map(|message| *message)
    }

    /// Whether the hub dropped this subscription because its client fell more than the
    /// subscriber buffer behind. Its buffered messages are still delivered, then it ends;
    /// subscribe again to resynchronise from `createSurface`.
    pub fn lagged(&self) -> bool {
        self.lagged.load(Ordering::Acquire)
    }
}

/// The hub's end of a subscription.
struct Subscriber {
    id: u64,
    sender: mpsc::Sender<Box<AgentMessage>>,
    lagged: Arc<AtomicBool>,
}

impl Subscriber {
    /// Hands `message` over; `false` once the subscription has ended: dropped by its client,
    /// or full, when it is marked lagged and dropped here.
    fn send(&self, message: &AgentMessage) -> bool {
        match self.sender.try_send(Box::new(message.clone())) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.lagged.store(true, Ordering::Release);
                tracing::warn!(
                    buffer = self.sender.max_capacity(),
                    "an A2UI subscriber fell behind and is dropped: it subscribes again to resynchronise"
                );
                false
            }
        }
    }
}

struct SurfaceState {
    bridge: A2UISurfaceBridge,
    subscribers: Vec<Subscriber>,
    /// The flow deleted the surface (`delete_surface`): nothing more is sent for it.
    deleted: bool,
}

#[derive(Default)]
struct ExecState {
    next_seq: u64,
    ahead: BTreeMap<u64, EventEnvelope>,
    surfaces: BTreeMap<String, SurfaceState>,
    /// Requests seen in the log, by call id.
    requests: BTreeMap<String, FunctionRequest>,
    /// Call ids whose gate is durable and not resumed: sent, awaiting a reply.
    open_calls: BTreeMap<String, ()>,
    /// The `A2UIAction` gates open, by correlation key (the action's name), with how many.
    waiting_actions: BTreeMap<String, usize>,
    /// Its log holds a terminal event: nothing more will come.
    ended: bool,
    /// Among the executions that ended most recently ([`SurfaceHub::with_ended_retention`]),
    /// kept for late readers even with nobody watching.
    retained: bool,
}

impl ExecState {
    fn watched(&self) -> bool {
        self.surfaces.values().any(|s| !s.subscribers.is_empty())
    }
}

/// Forgets an ended execution nobody watches once it is no longer among the most recently
/// ended: its log is complete, so a later subscriber's catch-up folds it again from the
/// store. What the hub holds is bounded by the executions running or watched and the
/// retention, not by history.
fn evict_if_done(state: &mut HubState, execution: &ExecutionId) {
    let done = state.executions.get(execution).is_some_and(|exec| {
        exec.ended && !exec.retained && !exec.watched() && exec.ahead.is_empty()
    });
    if !done {
        return;
    }
    if let Some(exec) = state.executions.remove(execution) {
        for call_id in exec.requests.keys() {
            if state.call_owner.get(call_id) == Some(execution) {
                state.call_owner.remove(call_id);
            }
        }
    }
}

struct HubState {
    executions: BTreeMap<ExecutionId, ExecState>,
    /// The executions whose end the hub saw live, oldest first, at most the retention.
    recently_ended: VecDeque<ExecutionId>,
    /// Which execution issued each call id.
    call_owner: BTreeMap<String, ExecutionId>,
    /// The id the next subscription is registered under.
    next_subscriber: u64,
}

/// How the hub names an execution's surface on the wire: from the execution and the flow's
/// surface id to the id renderers see.
pub type WireIds = Arc<dyn Fn(&ExecutionId, &str) -> String + Send + Sync>;

/// A wire id scheme unique per renderer when a renderer shows several executions: the
/// surface id, `@`, the execution id (`checkout@order-7`).
pub fn per_execution_wire_id(execution: &ExecutionId, surface_id: &str) -> String {
    format!("{surface_id}@{execution}")
}

struct Shared {
    catalogs: Catalogs,
    /// The wire id scheme; the flow's surface id when `None`.
    wire_ids: Mutex<Option<WireIds>>,
    classification: DataClassification,
    specs: BTreeMap<String, SurfaceSpec>,
    state: Mutex<HubState>,
    /// The live messages a subscription holds at most.
    subscriber_buffer: AtomicUsize,
    /// How many ended executions are kept with nobody watching.
    ended_retention: AtomicUsize,
}

impl Shared {
    fn wire_id(&self, execution: &ExecutionId, surface_id: &str) -> String {
        let scheme = self
            .wire_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match scheme {
            Some(scheme) => scheme(execution, surface_id),
            None => surface_id.to_owned(),
        }
    }
}

/// Feeds A2UI bridges from durable events. Cheap to clone; add it to a runtime as a plugin.
#[derive(Clone)]
pub struct SurfaceHub {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SurfaceHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SurfaceHub")
            .field("catalogs", &self.shared.catalogs)
            .field("surfaces", &self.shared.specs.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl SurfaceHub {
    /// A hub whose surfaces use `catalogs` and mask `classification` on the way out; `specs`
    /// gives each surface id its components.
    pub fn new(
        catalogs: Catalogs,
        classification: DataClassification,
        specs: impl IntoIterator<Item = (String, SurfaceSpec)>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                catalogs,
                classification,
                specs: specs.into_iter().collect(),
                state: Mutex::new(HubState {
                    executions: BTreeMap::new(),
                    recently_ended: VecDeque::new(),
                    call_owner: BTreeMap::new(),
                    next_subscriber: 0,
                }),
                subscriber_buffer: AtomicUsize::new(SUBSCRIBER_BUFFER),
                ended_retention: AtomicUsize::new(ENDED_RETENTION),
                wire_ids: Mutex::new(None),
            }),
        }
    }

    /// A hub with one surface, `surface_id`, showing `components` (one with id `root`): the
    /// common case of [`SurfaceHub::new`].
    pub fn one_surface(
        catalogs: Catalogs,
        classification: DataClassification,
        surface_id: impl Into<String>,
        components: Vec<Value>,
    ) -> Self {
        Self::new(
            catalogs,
            classification,
            [(surface_id.into(), SurfaceSpec { components })],
        )
    }

    /// Sets how many live messages each later subscription holds at most (at least 1; the
    /// default is [`SUBSCRIBER_BUFFER`]); a subscriber that falls further behind is dropped.
    pub fn with_subscriber_buffer(self, messages: usize) -> Self {
        self.shared
            .subscriber_buffer
            .store(messages.max(1), Ordering::Relaxed);
        self
    }

    /// Keeps the `executions` that ended most recently (default [`ENDED_RETENTION`]) when
    /// nobody watches them, for late readers ([`SurfaceHub::model`], a renderer that comes
    /// after the end); older ended ones are forgotten once their last subscriber leaves, and
    /// folded again from the store if asked for (a subscribe, [`SurfaceHub::catch_up`]).
    pub fn with_ended_retention(self, executions: usize) -> Self {
        self.shared
            .ended_retention
            .store(executions, Ordering::Relaxed);
        self
    }

    /// Names surfaces on the wire with `scheme` (for instance [`per_execution_wire_id`]), for
    /// the bridges made after this call: set it before the hub serves anything. Only the wire
    /// changes: the log keeps the flow's surface ids. By default a surface's wire id is the
    /// flow's surface id, the same for every execution.
    pub fn with_wire_ids(
        self,
        scheme: impl Fn(&ExecutionId, &str) -> String + Send + Sync + 'static,
    ) -> Self {
        *self
            .shared
            .wire_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(scheme));
        self
    }

    /// The id renderers see for `execution`'s surface `surface_id`.
    pub fn wire_id(&self, execution: &ExecutionId, surface_id: &str) -> String {
        self.shared.wire_id(execution, surface_id)
    }

    fn state(&self) -> MutexGuard<'_, HubState> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads `execution`'s log from the store from the first event this hub has not applied, and
    /// applies what it has not seen (after
    /// a restart, or for an execution written by another process). Safe to call at any time
    /// and more than once: events are applied once each, in order.
    pub async fn catch_up<S: EventStore>(
        &self,
        store: &S,
        execution: &ExecutionId,
    ) -> Result<(), HubError> {
        // Only what the hub has not applied: a subscribe costs the events since, not the log.
        let mut from = self
            .state()
            .executions
            .get(execution)
            .map_or(0, |exec| exec.next_seq);
        loop {
            let page = store
                .read(execution, from, CATCH_UP_PAGE)
                .await
                .map_err(|source| HubError::Read {
                    execution: execution.clone(),
                    source,
                })?;
            let Some(last) = page.last() else {
                return Ok(());
            };
            from = last.seq + 1;
            let full = page.len() >= CATCH_UP_PAGE;
            let mut state = self.state();
            for envelope in page {
                self.offer(&mut state, envelope);
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// Catches up `execution` and subscribes to `surface_id`: the subscription starts with
    /// `createSurface` (current masked model and components) and any pending function calls,
    /// then carries every later update once. For a surface the flow deleted, it is empty and
    /// ended at once.
    pub async fn subscribe<S: EventStore>(
        &self,
        store: &S,
        execution: &ExecutionId,
        surface_id: &str,
    ) -> Result<SurfaceSubscription, HubError> {
        self.catch_up(store, execution).await?;
        let mut guard = self.state();
        let state = &mut *guard;
        let exec = state.executions.entry(execution.clone()).or_default();
        let surface = surface_entry(&self.shared, execution, exec, surface_id);
        let (sender, receiver) =
            mpsc::channel(self.shared.subscriber_buffer.load(Ordering::Relaxed));
        let lagged = Arc::new(AtomicBool::new(false));
        if surface.deleted {
            // The sender is dropped here: the subscription has ended.
            return Ok(SurfaceSubscription {
                initial: Vec::new(),
                receiver,
                lagged,
                registration: None,
            });
        }
        let mut initial = vec![surface.bridge.snapshot()];
        for (call_id, request) in &exec.requests {
            if request.surface_id == surface_id
                && exec.open_calls.contains_key(call_id)
                && let Ok(message) = request_message(&exec.surfaces, request)
            {
                initial.push(message);
            }
        }
        let id = state.next_subscriber;
        state.next_subscriber += 1;
        let mut registration = None;
        if let Some(surface) = state
            .executions
            .get_mut(execution)
            .and_then(|exec| exec.surfaces.get_mut(surface_id))
        {
            surface.subscribers.push(Subscriber {
                id,
                sender,
                lagged: Arc::clone(&lagged),
            });
            registration = Some(Registration {
                hub: Arc::downgrade(&self.shared),
                execution: execution.clone(),
                surface_id: surface_id.to_owned(),
                id,
            });
        }
        Ok(SurfaceSubscription {
            initial,
            receiver,
            lagged,
            registration,
        })
    }

    /// The true model of a surface as the hub has folded it; `None` for an execution it has
    /// not folded, or has forgotten (ended, past [`SurfaceHub::with_ended_retention`], nobody
    /// watching: [`SurfaceHub::catch_up`] folds it again).
    pub fn model(&self, execution: &ExecutionId, surface_id: &str) -> Option<Value> {
        let state = self.state();
        let surface = state.executions.get(execution)?.surfaces.get(surface_id)?;
        Some(surface.bridge.model().clone())
    }

    /// The masked model of a surface: what a renderer holds after every update (`None` as for
    /// [`SurfaceHub::model`]).
    pub fn masked_model(&self, execution: &ExecutionId, surface_id: &str) -> Option<Value> {
        let state = self.state();
        let surface = state.executions.get(execution)?.surfaces.get(surface_id)?;
        Some(surface.bridge.masked_model())
    }

    /// `args` of a call on `execution`'s surface `surface_id` as a renderer may see them:
    /// masked like the surface's data model (K10-R6; classified paths in the args, and any
    /// string or number equal to a classified value of the model). Grain A and the edge's
    /// grain-B transport send them so; an application's own [`Transport`](crate::Transport)
    /// masks what it sends with this. The log keeps the true args.
    pub fn mask_call_args(
        &self,
        execution: &ExecutionId,
        surface_id: &str,
        args: &serde_json::Map<String, Value>,
    ) -> serde_json::Map<String, Value> {
        let state = self.state();
        match state
            .executions
            .get(execution)
            .and_then(|exec| exec.surfaces.get(surface_id))
        {
            Some(surface) => surface.bridge.masked_args(args),
            None => crate::mask_args::mask_call_args(
                &self.shared.classification,
                &Value::Object(serde_json::Map::new()),
                args,
            ),
        }
    }

    /// The grain-A calls of `execution` that are sent and not answered, as requests to send
    /// again (same call ids) after a restart or a reconnect.
    pub fn pending_calls(&self, execution: &ExecutionId) -> Vec<AgentMessage> {
        let state = self.state();
        let Some(exec) = state.executions.get(execution) else {
            return Vec::new();
        };
        exec.open_calls
            .keys()
            .filter_map(|id| exec.requests.get(id))
            .filter_map(|request| request_message(&exec.surfaces, request).ok())
            .collect()
    }

    /// Checks a reply that arrived on `surface_id` against the call it names: the call must
    /// be one this hub sent on that surface, still open, and its value must fit the return
    /// schema. Gives the execution to resume and the result; records nothing.
    pub fn ingest_function_response(
        &self,
        surface_id: &str,
        message: &[u8],
    ) -> Result<(ExecutionId, FunctionResult), IngestError> {
        self.ingest_reply(None, surface_id, message)
    }

    /// [`SurfaceHub::ingest_function_response`] for a reply that arrived on `execution`'s
    /// surface `surface_id` (a renderer session bound to it): a call another execution issued
    /// is unknown here.
    pub fn ingest_function_response_on(
        &self,
        execution: &ExecutionId,
        surface_id: &str,
        message: &[u8],
    ) -> Result<FunctionResult, IngestError> {
        self.ingest_reply(Some(execution), surface_id, message)
            .map(|(_, result)| result)
    }

    fn ingest_reply(
        &self,
        bound_to: Option<&ExecutionId>,
        surface_id: &str,
        message: &[u8],
    ) -> Result<(ExecutionId, FunctionResult), IngestError> {
        let (call_id, outcome) = parse_reply(message)?;
        let state = self.state();
        let execution = state
            .call_owner
            .get(&call_id)
            .filter(|owner| bound_to.is_none_or(|bound| bound == *owner))
            .cloned()
            .ok_or_else(|| IngestError::UnknownCallId {
                call_id: call_id.clone(),
            })?;
        let exec = state
            .executions
            .get(&execution)
            .ok_or_else(|| IngestError::UnknownCallId {
                call_id: call_id.clone(),
            })?;
        let request = exec
            .requests
            .get(&call_id)
            .ok_or_else(|| IngestError::UnknownCallId {
                call_id: call_id.clone(),
            })?;
        if request.surface_id != surface_id {
            return Err(IngestError::WrongSurface {
                expected: request.surface_id.clone(),
                got: surface_id.to_owned(),
            });
        }
        if !exec.open_calls.contains_key(&call_id) {
            // Either never sent (its gate is not durable) or already answered.
            let answered = exec
                .surfaces
                .get(surface_id)
                .is_some_and(|s| !s.bridge.is_pending(&call_id));
            return Err(if answered {
                IngestError::AlreadyAnswered { call_id }
            } else {
                IngestError::UnknownCallId { call_id }
            });
        }
        let surface = exec
            .surfaces
            .get(surface_id)
            .ok_or_else(|| IngestError::UnknownCallId {
                call_id: call_id.clone(),
            })?;
        let result = surface.bridge.check_reply(call_id, outcome)?;
        Ok((execution, result))
    }

    /// Checks a reply and resumes the gate waiting for it. Only the first of several replies
    /// to one call is recorded; the others are refused.
    pub async fn deliver_function_response<S: EventStore>(
        &self,
        runtime: &Runtime<S>,
        surface_id: &str,
        message: &[u8],
    ) -> Result<FunctionResult, HubError> {
        self.deliver_function_response_as(runtime, &Caller::anonymous(), surface_id, message)
            .await
    }

    /// [`SurfaceHub::deliver_function_response`] from `caller` (the renderer session the
    /// application identified), whom the runtime's resume authenticator sees (K12.2, LD-019).
    pub async fn deliver_function_response_as<S: EventStore>(
        &self,
        runtime: &Runtime<S>,
        caller: &Caller,
        surface_id: &str,
        message: &[u8],
    ) -> Result<FunctionResult, HubError> {
        let (execution, result) = self.ingest_function_response(surface_id, message)?;
        let payload = Payload::encode(&result.payload()).map_err(|err| {
            HubError::Ingest(IngestError::InvalidResult {
                call_id: result.call_id.clone(),
                name: result.name.clone(),
                detail: err.to_string(),
            })
        })?;
        runtime
            .resume_as(
                caller,
                &execution,
                FUNCTION_RESULT_EVENT,
                &result.call_id,
                payload,
            )
            .await
            .map_err(|source| HubError::Resume { source })?;
        Ok(result)
    }

    /// Parses an action sent on `execution`'s surface `surface_id`, and checks that the
    /// surface could have sent it: a component of the surface declares it, its context is what
    /// the component binds over the masked model, and a gate of the execution waits for it.
    pub fn ingest_action(
        &self,
        execution: &ExecutionId,
        surface_id: &str,
        message: &[u8],
    ) -> Result<InboundAction, HubError> {
        let state = self.state();
        let surface = state
            .executions
            .get(execution)
            .and_then(|e| e.surfaces.get(surface_id))
            .ok_or_else(|| HubError::UnknownSurface {
                execution: execution.clone(),
                surface_id: surface_id.to_owned(),
            })?;
        let action = surface.bridge.ingest_action(message)?;
        let waiting = state
            .executions
            .get(execution)
            .is_some_and(|e| e.waiting_actions.contains_key(&action.name));
        if !waiting {
            return Err(IngestError::NoGateWaiting { name: action.name }.into());
        }
        Ok(action)
    }

    /// The catalogs a renderer needs to draw `execution`'s surface `surface_id` as it stands:
    /// the surface default and every component's own `catalogId`. Keeps no state for a surface
    /// the hub has not seen yet (its declared components are read).
    pub fn required_catalogs(
        &self,
        execution: &ExecutionId,
        surface_id: &str,
    ) -> std::collections::BTreeSet<String> {
        let mut catalogs =
            std::collections::BTreeSet::from([self.shared.catalogs.default_catalog().to_owned()]);
        let state = self.state();
        let components = match state
            .executions
            .get(execution)
            .and_then(|exec| exec.surfaces.get(surface_id))
        {
            Some(surface) => surface.bridge.components(),
            None => self
                .shared
                .specs
                .get(surface_id)
                .map(|spec| spec.components.as_slice())
                .unwrap_or_default(),
        };
        catalogs.extend(
            components
                .iter()
                .filter_map(|c| c.get("catalogId").and_then(Value::as_str))
                .map(str::to_owned),
        );
        catalogs
    }

    /// The catalogs the hub's surfaces use.
    pub fn catalogs(&self) -> &Catalogs {
        &self.shared.catalogs
    }

    /// Whether the hub serves a surface `surface_id` (it has components for it).
    pub fn serves_surface(&self, surface_id: &str) -> bool {
        self.shared.specs.contains_key(surface_id)
    }

    /// Whether a grain-A call `call_id` of `execution` is sent and unanswered.
    pub fn is_open_call(&self, execution: &ExecutionId, call_id: &str) -> bool {
        self.state()
            .executions
            .get(execution)
            .is_some_and(|e| e.open_calls.contains_key(call_id))
    }

    /// How many subscriptions the hub holds, over every surface (what a closed session must
    /// give back).
    pub fn subscriber_count(&self) -> usize {
        self.state()
            .executions
            .values()
            .flat_map(|e| e.surfaces.values())
            .map(|s| s.subscribers.len())
            .sum()
    }

    /// Parses an action and resumes the `A2UIAction` gate keyed by its name.
    pub async fn deliver_action<S: EventStore>(
        &self,
        runtime: &Runtime<S>,
        execution: &ExecutionId,
        surface_id: &str,
        message: &[u8],
    ) -> Result<InboundAction, HubError> {
        self.deliver_action_as(
            runtime,
            &Caller::anonymous(),
            execution,
            surface_id,
            message,
        )
        .await
    }

    /// [`SurfaceHub::deliver_action`] from `caller` (the renderer session the application
    /// identified), whom the runtime's resume authenticator sees (K12.2, LD-019).
    pub async fn deliver_action_as<S: EventStore>(
        &self,
        runtime: &Runtime<S>,
        caller: &Caller,
        execution: &ExecutionId,
        surface_id: &str,
        message: &[u8],
    ) -> Result<InboundAction, HubError> {
        let action = self.ingest_action(execution, surface_id, message)?;
        let payload = Payload::encode(&action.payload()).map_err(|err| {
            HubError::Ingest(IngestError::InvalidResult {
                call_id: String::new(),
                name: action.name.clone(),
                detail: err.to_string(),
            })
        })?;
        runtime
            .resume_as(
                caller,
                execution,
                InboundAction::EVENT_TYPE,
                action.correlation_key(),
                payload,
            )
            .await
            .map_err(|source| HubError::Resume { source })?;
        Ok(action)
    }

    /// Takes one durable event: applied if next in seq order, skipped if already applied,
    /// held if it arrives ahead of a gap.
    fn offer(&self, state: &mut HubState, envelope: EventEnvelope) {
        let execution = envelope.execution_id.clone();
        let exec = state.executions.entry(execution.clone()).or_default();
        if envelope.seq < exec.next_seq {
            return;
        }
        if envelope.seq > exec.next_seq {
            exec.ahead.insert(envelope.seq, envelope);
            return;
        }
        self.continue_offer(state, &execution, Some(envelope));
    }

    fn continue_offer(
        &self,
        state: &mut HubState,
        execution: &ExecutionId,
        mut next: Option<EventEnvelope>,
    ) {
        let mut ended = false;
        while let Some(envelope) = next {
            let exec = state.executions.entry(execution.clone()).or_default();
            let owned = apply_one(&self.shared, exec, &envelope);
            exec.next_seq = envelope.seq + 1;
            if envelope.event.is_terminal() {
                exec.ended = true;
                ended = true;
            }
            next = exec.ahead.remove(&exec.next_seq);
            for call_id in owned {
                state
                    .call_owner
                    .entry(call_id)
                    .or_insert_with(|| execution.clone());
            }
        }
        if ended {
            // Seen once, then retained among the most recently ended; the oldest past the
            // retention is forgotten unless someone watches it (then when they leave).
            if let Some(exec) = state.executions.get_mut(execution)
                && !exec.retained
            {
                exec.retained = true;
                state.recently_ended.push_back(execution.clone());
            }
            let retention = self.shared.ended_retention.load(Ordering::Relaxed);
            while state.recently_ended.len() > retention {
                let Some(oldest) = state.recently_ended.pop_front() else {
                    break;
                };
                if let Some(exec) = state.executions.get_mut(&oldest) {
                    exec.retained = false;
                }
                // The execution being offered may be about to get a subscriber (a subscribe
                // catches up first): it goes when its last subscriber leaves.
                if oldest != *execution {
                    evict_if_done(state, &oldest);
                }
            }
        }
    }
}

fn surface_entry<'e>(
    shared: &Shared,
    execution: &ExecutionId,
    exec: &'e mut ExecState,
    surface_id: &str,
) -> &'e mut SurfaceState {
    exec.surfaces
        .entry(surface_id.to_owned())
        .or_insert_with(|| {
            let mut bridge = A2UISurfaceBridge::new(
                surface_id,
                shared.catalogs.clone(),
                shared.classification.clone(),
            )
            .with_wire_id(shared.wire_id(execution, surface_id));
            if let Some(spec) = shared.specs.get(surface_id)
                && let Err(error) = bridge.set_components(spec.components.clone())
            {
                tracing::error!(%error, surface_id, "the surface's components are refused by its catalogs");
            }
            SurfaceState {
                bridge,
                subscribers: Vec::new(),
                deleted: false,
            }
        })
}

/// Whether a kernel gate request (`<gate id>:request`) is one of an `A2UIFunctionResult` gate:
/// a grain-A call recorded on the kernel's requests.
fn is_function_request_step(step_id: &str) -> bool {
    loom_kernel::request_gate_id(step_id)
        .and_then(|gate| gate.strip_prefix(FUNCTION_RESULT_EVENT))
        .is_some_and(|n| n.starts_with('#'))
}

fn request_message(
    surfaces: &BTreeMap<String, SurfaceState>,
    request: &FunctionRequest,
) -> Result<AgentMessage, crate::bridge::BridgeError> {
    let surface = surfaces.get(&request.surface_id).ok_or_else(|| {
        crate::bridge::BridgeError::NotCreated {
            surface_id: request.surface_id.clone(),
        }
    })?;
    surface.bridge.request_for(
        Some(&request.catalog_id),
        &request.name,
        request.args.clone(),
        &request.call_id,
    )
}

fn broadcast(surface: &mut SurfaceState, messages: &[AgentMessage]) {
    if messages.is_empty() {
        return;
    }
    surface
        .subscribers
        .retain(|s| messages.iter().all(|m| s.send(m)));
}

/// Applies one event in order; returns the call ids it introduced.
fn apply_one(shared: &Shared, exec: &mut ExecState, envelope: &EventEnvelope) -> Vec<String> {
    match &envelope.event {
        Event::SurfacePatch(patch) => {
            let surface = surface_entry(shared, &envelope.execution_id, exec, &patch.surface_id);
            match surface.bridge.apply_event(&envelope.event) {
                Ok(messages) => broadcast(surface, &messages),
                Err(error) => tracing::error!(
                    %error,
                    execution = %envelope.execution_id,
                    seq = envelope.seq,
                    "a durable SURFACE_PATCH does not fold; the surface keeps its model"
                ),
            }
            Vec::new()
        }
        Event::DecisionRecorded(decision)
            if decision.kind == REQUEST_DECISION
                || (decision.kind == loom_kernel::REQUEST_KIND
                    && is_function_request_step(&decision.step_id)) =>
        {
            let request: FunctionRequest = match decision.value.decode() {
                Ok(request) => request,
                Err(error) => {
                    tracing::error!(%error, seq = envelope.seq, "an A2UI function request in the log does not decode");
                    return Vec::new();
                }
            };
            let surface = surface_entry(shared, &envelope.execution_id, exec, &request.surface_id);
            if let Err(error) = surface.bridge.record_call(
                Some(&request.catalog_id),
                &request.name,
                &request.call_id,
            ) {
                tracing::error!(%error, seq = envelope.seq, "an A2UI function request cannot be recorded");
            }
            let call_id = request.call_id.clone();
            exec.requests.insert(call_id.clone(), request);
            vec![call_id]
        }
        Event::DecisionRecorded(decision) if decision.kind == DELETE_DECISION => {
            let surface_id: String = match decision.value.decode() {
                Ok(surface_id) => surface_id,
                Err(error) => {
                    tracing::error!(%error, seq = envelope.seq, "an A2UI surface deletion in the log does not decode");
                    return Vec::new();
                }
            };
            let surface = surface_entry(shared, &envelope.execution_id, exec, &surface_id);
            surface.deleted = true;
            if surface.bridge.is_created()
                && let Ok(message) = surface.bridge.delete_surface()
            {
                broadcast(surface, &[message]);
            }
            // Ends every subscription: their `next` gives `None`.
            surface.subscribers.clear();
            Vec::new()
        }
        Event::DecisionRecorded(decision) if decision.kind == COMPONENTS_DECISION => {
            let update: ComponentsUpdate = match decision.value.decode() {
                Ok(update) => update,
                Err(error) => {
                    tracing::error!(%error, seq = envelope.seq, "an A2UI components update in the log does not decode");
                    return Vec::new();
                }
            };
            let surface = surface_entry(shared, &envelope.execution_id, exec, &update.surface_id);
            if surface.deleted {
                return Vec::new();
            }
            // A subscriber that comes later gets the merged tree in `createSurface`; those
            // subscribed now get the change.
            let outcome = if surface.bridge.is_created() {
                surface
                    .bridge
                    .update_components(update.components)
                    .map(|message| broadcast(surface, &[message]))
            } else {
                surface.bridge.merge_components(&update.components)
            };
            if let Err(error) = outcome {
                tracing::error!(
                    %error,
                    execution = %envelope.execution_id,
                    seq = envelope.seq,
                    "a durable A2UI components update does not fit the catalogs; the surface keeps its components"
                );
            }
            Vec::new()
        }
        Event::ExecutionSuspended(gate) if gate.event_type == FUNCTION_RESULT_EVENT => {
            let Some(request) = exec.requests.get(&gate.correlation_key) else {
                return Vec::new();
            };
            // The request and its gate are durable: now it may go out.
            exec.open_calls.insert(gate.correlation_key.clone(), ());
            if let Ok(message) = request_message(&exec.surfaces, request) {
                let surface_id = request.surface_id.clone();
                if let Some(surface) = exec.surfaces.get_mut(&surface_id) {
                    broadcast(surface, &[message]);
                }
            }
            Vec::new()
        }
        Event::ExecutionSuspended(gate) if gate.event_type == InboundAction::EVENT_TYPE => {
            *exec
                .waiting_actions
                .entry(gate.correlation_key.clone())
                .or_default() += 1;
            Vec::new()
        }
        Event::ExecutionResumed(resumed) if resumed.event_type == InboundAction::EVENT_TYPE => {
            if let Some(count) = exec.waiting_actions.get_mut(&resumed.correlation_key) {
                *count -= 1;
                if *count == 0 {
                    exec.waiting_actions.remove(&resumed.correlation_key);
                }
            }
            Vec::new()
        }
        Event::ExecutionResumed(resumed) if resumed.event_type == FUNCTION_RESULT_EVENT => {
            exec.open_calls.remove(&resumed.correlation_key);
            if let Some(request) = exec.requests.get(&resumed.correlation_key)
                && let Some(surface) = exec.surfaces.get_mut(&request.surface_id)
            {
                surface.bridge.mark_answered(&resumed.correlation_key);
            }
            Vec::new()
        }
        _ => Vec::new(),
    }
}

impl Projection for SurfaceHub {
    fn apply(&self, envelope: &EventEnvelope) {
        let mut state = self.state();
        self.offer(&mut state, envelope.clone());
    }
}

/// Fed from the store's feed ([`Runtime::follow_feed`]), the hub sees the events of every
/// process on the store, live, and rebuilds every execution's surfaces after a restart: an
/// in-memory hub starts from position 0. Events it has applied already (through
/// [`Projection::apply`] or [`SurfaceHub::catch_up`]) are skipped, so it can be both a
/// plugin and followed. See `docs/CATCH-UP.md`.
impl loom_kernel::FeedProjection for SurfaceHub {
    fn start_position(&self) -> u64 {
        0
    }

    fn apply(&self, event: &loom_kernel::FeedEvent) {
        let mut state = self.state();
        self.offer(&mut state, event.envelope.clone());
    }
}

impl Plugin for SurfaceHub {
    fn name(&self) -> &str {
        "loom-plugin-a2ui"
    }

    fn kernel_abi(&self) -> AbiRange {
        AbiRange::caret(1, 1)
    }

    fn contribute(&self, contributions: &mut Contributions) {
        contributions.projection(Arc::new(self.clone()));
    }
}

#[cfg(test)]
mod tests {
    use loom_kernel::{MemoryStore, SurfacePatch};
    use serde_json::json;

    use super::*;

    const SURFACE: &str = "main";

    fn hub() -> SurfaceHub {
        let catalogs = Catalogs::default_with([]).expect("the default catalogs compile");
        SurfaceHub::one_surface(
            catalogs,
            DataClassification::default(),
            SURFACE,
            vec![json!({"id": "root", "component": "Text", "text": "count"})],
        )
    }

    /// A durable `SURFACE_PATCH` at `seq` that sets `count` to `seq`.
    fn patch(execution: &ExecutionId, seq: u64) -> EventEnvelope {
        let ops = json!([{"op": "set", "path": "count", "value": seq}]);
        EventEnvelope::new(
            execution.clone(),
            seq,
            Event::SurfacePatch(SurfacePatch {
                step_id: format!("surface#{seq}"),
                surface_id: SURFACE.to_owned(),
                ops: Payload::from(ops),
            }),
        )
    }

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_is_dropped_and_resyncs_by_subscribing_again() {
        let hub = hub().with_subscriber_buffer(2);
        let store = MemoryStore::new();
        let execution = ExecutionId::new("counter-1").expect("a valid id");
        Projection::apply(&hub, &patch(&execution, 0));
        let mut slow = hub.subscribe(&store, &execution, SURFACE).await.unwrap();
        let mut reader = hub.subscribe(&store, &execution, SURFACE).await.unwrap();
        let mut read = Vec::new();
        for seq in 1..=5 {
            Projection::apply(&hub, &patch(&execution, seq));
            read.extend(std::iter::from_fn(|| reader.try_next()));
        }
        // The subscriber that keeps up gets every update and stays subscribed.
        assert_eq!(read.len(), 5);
        assert!(!reader.lagged());
        // The one that did not read holds two updates, no more, and then ends.
        assert!(slow.lagged());
        assert!(slow.try_next().is_some());
        assert!(slow.try_next().is_some());
        assert!(slow.next().await.is_none(), "a dropped subscription ends");
        // Subscribing again starts from `createSurface` with the current model.
        let again = hub.subscribe(&store, &execution, SURFACE).await.unwrap();
        assert!(!again.lagged());
        let AgentMessage::CreateSurface(create) = &again.initial[0] else {
            panic!(
                "a subscription starts with createSurface: {:?}",
                again.initial
            );
        };
        assert_eq!(create.data_model.as_ref().unwrap()["count"], json!(5));
    }

    #[tokio::test]
    async fn the_subscriber_buffer_is_at_least_one_message() {
        let hub = hub().with_subscriber_buffer(0);
        let store = MemoryStore::new();
        let execution = ExecutionId::new("counter-2").expect("a valid id");
        Projection::apply(&hub, &patch(&execution, 0));
        let mut subscription = hub.subscribe(&store, &execution, SURFACE).await.unwrap();
        Projection::apply(&hub, &patch(&execution, 1));
        assert!(!subscription.lagged());
        assert!(subscription.try_next().is_some());
    }

    #[tokio::test]
    async fn ended_executions_past_the_retention_are_forgotten_and_folded_again_when_asked() {
        let hub = hub().with_ended_retention(2);
        let store = MemoryStore::new();
        let ids: Vec<ExecutionId> = (1..=3)
            .map(|n| ExecutionId::new(format!("ended-{n}")).expect("a valid id"))
            .collect();
        for execution in &ids {
            let events = [
                loom_kernel::conformance::started("counter"),
                patch(execution, 1).event,
                Event::ExecutionCompleted(loom_kernel::ExecutionCompleted {
                    output: Payload::from(json!(null)),
                }),
            ];
            store.append(execution, 0, &events).await.unwrap();
            for envelope in store.read(execution, 0, 10).await.unwrap() {
                Projection::apply(&hub, &envelope);
            }
        }
        // The two most recent are kept; the first is forgotten.
        assert!(hub.model(&ids[0], SURFACE).is_none());
        assert!(hub.model(&ids[1], SURFACE).is_some());
        assert!(hub.model(&ids[2], SURFACE).is_some());
        // Asked for, it is folded again from the store, and kept while watched.
        let late = hub.subscribe(&store, &ids[0], SURFACE).await.unwrap();
        let AgentMessage::CreateSurface(create) = &late.initial[0] else {
            panic!("{:?}", late.initial)
        };
        assert_eq!(create.data_model.as_ref().unwrap()["count"], json!(1));
        assert!(hub.model(&ids[0], SURFACE).is_some());
        // Folded again, it counts as recently ended: the oldest other one is forgotten, and
        // what the hub holds stays at the retention once nobody watches.
        drop(late);
        assert!(hub.model(&ids[1], SURFACE).is_none());
        assert_eq!(hub.state().executions.len(), 2);
    }

    #[tokio::test]
    async fn with_no_retention_an_ended_execution_stays_while_watched_and_goes_after() {
        let hub = hub().with_ended_retention(0);
        let store = MemoryStore::new();
        let execution = ExecutionId::new("ended-0").expect("a valid id");
        let events = [
            loom_kernel::conformance::started("counter"),
            patch(&execution, 1).event,
            Event::ExecutionCompleted(loom_kernel::ExecutionCompleted {
                output: Payload::from(json!(null)),
            }),
        ];
        store.append(&execution, 0, &events).await.unwrap();
        // Folded by the subscribe's own catch-up, it is not forgotten under its subscriber.
        let watching = hub.subscribe(&store, &execution, SURFACE).await.unwrap();
        let AgentMessage::CreateSurface(create) = &watching.initial[0] else {
            panic!("{:?}", watching.initial)
        };
        assert_eq!(create.data_model.as_ref().unwrap()["count"], json!(1));
        assert!(hub.model(&execution, SURFACE).is_some());
        drop(watching);
        assert!(hub.model(&execution, SURFACE).is_none());
    }
}
