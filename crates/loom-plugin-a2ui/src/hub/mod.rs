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

mod apply;
mod inbound;
mod state;
mod subscription;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use loom_kernel::DataClassification;
use loom_kernel::{AbiRange, Contributions, Plugin, Projection, ResumeError};
use loom_kernel::{EventEnvelope, ExecutionId, ReadError};
use serde_json::Value;
use thiserror::Error;

use crate::bridge::IngestError;
use crate::catalog::Catalogs;
use crate::wire::AgentMessage;
use state::{HubState, Shared, request_message};
pub use subscription::SurfaceSubscription;

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

/// How the hub names an execution's surface on the wire: from the execution and the flow's
/// surface id to the id renderers see.
pub type WireIds = Arc<dyn Fn(&ExecutionId, &str) -> String + Send + Sync>;

/// A wire id scheme unique per renderer when a renderer shows several executions: the
/// surface id, `@`, the execution id (`checkout@order-7`).
pub fn per_execution_wire_id(execution: &ExecutionId, surface_id: &str) -> String {
    format!("{surface_id}@{execution}")
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
///
/// [`Runtime::follow_feed`]: loom_kernel::Runtime::follow_feed
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
