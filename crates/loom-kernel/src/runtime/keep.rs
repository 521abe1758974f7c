//! Parked flows kept in memory, so that a resume does not replay history (LD-020).
//!
//! When a driver parks (its flow waits only for resumes or verdicts), it hands what it was
//! driving to this table instead of dropping it: the flow's future and its context, whose
//! state holds the fold of the durable log (its `next_seq` is the head the flow reached). No task and no channel stays behind: a kept flow
//! is data. The next driver of the execution (a resume, a verdict, a deadline, a cancel, or
//! `recover`) takes it back, checks that the log's head is still the one it parked at, and
//! goes on from there: its cost does not depend on how long the log is. A log that moved (a
//! worker of another process appended to it) makes the kept flow stale: it is dropped and the
//! driver replays the log, as it always did.
//!
//! The table is bounded ([`RuntimeBuilder::max_parked_in_memory`]): past the bound the least
//! recently parked flows are dropped, and replay when they are needed. A shutdown drops them
//! all.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use crate::event::ExecutionStarted;
use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::contain::contain;
use crate::runtime::ctx::FlowCtx;
use crate::runtime::flow::{Flow, FlowError};
use crate::runtime::mailbox::FlowWaker;

/// How many parked flows a runtime keeps in memory unless told otherwise.
pub const DEFAULT_MAX_PARKED_IN_MEMORY: usize = 10_000;

/// The running future of a flow.
pub(crate) type FlowFuture = BoxFuture<'static, FlowResult>;
type FlowResult = Result<Payload, FlowError>;

/// What a parked driver leaves behind for the next one.
pub(crate) struct Kept {
    pub(crate) started: ExecutionStarted,
    /// The head of the log it parked at: a kept flow is current only while the log's head is
    /// still this.
    pub(crate) parked_at: u64,
    pub(crate) ctx: FlowCtx,
    pub(crate) flow: Option<FlowFuture>,
    pub(crate) waker: Arc<FlowWaker>,
}

/// The kept flows of a runtime, least recently parked first.
pub(crate) struct KeptFlows {
    max: usize,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    flows: HashMap<ExecutionId, (u64, Kept)>,
    /// Park order (a counter, not a clock): the first entry is evicted first.
    order: BTreeMap<u64, ExecutionId>,
    next: u64,
}

impl KeptFlows {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            table: Mutex::new(Table::default()),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn len(&self) -> usize {
        self.table().flows.len()
    }

    /// Keeps `kept`, unless `stopping` says a shutdown has begun (asked under the table's
    /// lock, which the shutdown's `clear` takes after setting its signal: nothing is kept
    /// after it); returns what is not kept or the bound evicts (the caller drops it outside
    /// every lock).
    pub(crate) fn insert(
        &self,
        execution: ExecutionId,
        kept: Kept,
        stopping: impl FnOnce() -> bool,
    ) -> Vec<Kept> {
        if self.max == 0 {
            return vec![kept];
        }
        let mut table = self.table();
        if stopping() {
            return vec![kept];
        }
        let tick = table.next;
        table.next += 1;
        let mut evicted = Vec::new();
        if let Some((old, previous)) = table.flows.insert(execution.clone(), (tick, kept)) {
            table.order.remove(&old);
            evicted.push(previous);
        }
        table.order.insert(tick, execution);
        while table.flows.len() > self.max {
            let Some((_, oldest)) = table.order.pop_first() else {
                break;
            };
            if let Some((_, kept)) = table.flows.remove(&oldest) {
                tracing::debug!(execution = %oldest, "a parked flow is evicted; it replays when needed");
                evicted.push(kept);
            }
        }
        evicted
    }

    pub(crate) fn take(&self, execution: &ExecutionId) -> Option<Kept> {
        let mut table = self.table();
        let (tick, kept) = table.flows.remove(execution)?;
        table.order.remove(&tick);
        Some(kept)
    }

    /// A copy of the state `execution`'s kept flow carries.
    pub(crate) fn state(&self, execution: &ExecutionId) -> Option<ExecutionState> {
        let table = self.table();
        let (_, kept) = table.flows.get(execution)?;
        let state = kept.ctx.state().fold().clone();
        Some(state)
    }

    /// For `execution`'s kept flow, if there is one: the head of the log it parked at, and
    /// its pending gate that a resume of (`event_type`, `correlation_key`) reaches. Read from
    /// the kept state in place: nothing is copied or read from the store.
    pub(crate) fn gate_waiting_for(
        &self,
        execution: &ExecutionId,
        event_type: &str,
        correlation_key: &str,
    ) -> Option<(u64, Option<String>)> {
        let table = self.table();
        let (_, kept) = table.flows.get(execution)?;
        let state = kept.ctx.state();
        let gate = state
            .fold()
            .gate_waiting_for(event_type, correlation_key)
            .map(|(gate_id, _)| gate_id.clone());
        Some((kept.parked_at, gate))
    }

    /// Drops every kept flow (a shutdown).
    pub(crate) fn clear(&self) {
        let all = std::mem::take(&mut *self.table());
        drop_flows(all.flows.into_values().map(|(_, kept)| kept));
    }
}

/// Drops flows outside every lock; a panic in a flow's `Drop` is contained.
pub(crate) fn drop_flows(flows: impl IntoIterator<Item = Kept>) {
    for kept in flows {
        if contain(move || drop(kept)).is_err() {
            tracing::error!("a kept flow panicked while it was dropped");
        }
    }
}

/// The flow's future: the kept one, or `flow` run anew.
pub(crate) fn run_or_resume(
    kept: &mut Option<Kept>,
    flow: &Arc<dyn Flow>,
    ctx: &FlowCtx,
    started: &ExecutionStarted,
) -> BoxFuture<'static, FlowResult> {
    match kept.as_mut().and_then(|kept| kept.flow.take()) {
        Some(running) => running,
        None => flow.run(ctx.clone(), started.input.clone()),
    }
}

/// The driver's state when it goes on from a kept flow: its start, an empty history (the flow
/// has replayed it already) and no fold (the kept flow's state holds it).
pub(crate) fn resumed(
    kept: &mut Kept,
) -> (
    ExecutionStarted,
    crate::runtime::history::History,
    ExecutionState,
) {
    (
        kept.started.clone(),
        Default::default(),
        ExecutionState::new(),
    )
}
