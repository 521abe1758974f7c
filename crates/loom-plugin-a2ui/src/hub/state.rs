//! What the hub holds: each execution's surfaces, requests and open calls, and what every
//! clone of a hub shares.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

use loom_kernel::{DataClassification, EventEnvelope, ExecutionId};

use super::subscription::Subscriber;
use super::{SurfaceSpec, WireIds};
use crate::bridge::A2UISurfaceBridge;
use crate::catalog::Catalogs;
use crate::gate::FunctionRequest;
use crate::wire::AgentMessage;

pub(super) struct SurfaceState {
    pub(super) bridge: A2UISurfaceBridge,
    pub(super) subscribers: Vec<Subscriber>,
    /// The flow deleted the surface (`delete_surface`): nothing more is sent for it.
    pub(super) deleted: bool,
}

#[derive(Default)]
pub(super) struct ExecState {
    pub(super) next_seq: u64,
    pub(super) ahead: BTreeMap<u64, EventEnvelope>,
    pub(super) surfaces: BTreeMap<String, SurfaceState>,
    /// Requests seen in the log, by call id.
    pub(super) requests: BTreeMap<String, FunctionRequest>,
    /// Call ids whose gate is durable and not resumed: sent, awaiting a reply.
    pub(super) open_calls: BTreeMap<String, ()>,
    /// The `A2UIAction` gates open, by correlation key (the action's name), with how many.
    pub(super) waiting_actions: BTreeMap<String, usize>,
    /// Its log holds a terminal event: nothing more will come.
    pub(super) ended: bool,
    /// Among the executions that ended most recently ([`SurfaceHub::with_ended_retention`]),
    /// kept for late readers even with nobody watching.
    ///
    /// [`SurfaceHub::with_ended_retention`]: super::SurfaceHub::with_ended_retention
    pub(super) retained: bool,
}

impl ExecState {
    pub(super) fn watched(&self) -> bool {
        self.surfaces.values().any(|s| !s.subscribers.is_empty())
    }
}

/// Forgets an ended execution nobody watches once it is no longer among the most recently
/// ended: its log is complete, so a later subscriber's catch-up folds it again from the
/// store. What the hub holds is bounded by the executions running or watched and the
/// retention, not by history.
pub(super) fn evict_if_done(state: &mut HubState, execution: &ExecutionId) {
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

pub(super) struct HubState {
    pub(super) executions: BTreeMap<ExecutionId, ExecState>,
    /// The executions whose end the hub saw live, oldest first, at most the retention.
    pub(super) recently_ended: VecDeque<ExecutionId>,
    /// Which execution issued each call id.
    pub(super) call_owner: BTreeMap<String, ExecutionId>,
    /// The id the next subscription is registered under.
    pub(super) next_subscriber: u64,
}

pub(super) struct Shared {
    pub(super) catalogs: Catalogs,
    /// The wire id scheme; the flow's surface id when `None`.
    pub(super) wire_ids: Mutex<Option<WireIds>>,
    pub(super) classification: DataClassification,
    pub(super) specs: BTreeMap<String, SurfaceSpec>,
    pub(super) state: Mutex<HubState>,
    /// The live messages a subscription holds at most.
    pub(super) subscriber_buffer: AtomicUsize,
    /// How many ended executions are kept with nobody watching.
    pub(super) ended_retention: AtomicUsize,
}

impl Shared {
    pub(super) fn wire_id(&self, execution: &ExecutionId, surface_id: &str) -> String {
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

pub(super) fn surface_entry<'e>(
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

pub(super) fn request_message(
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
