//! The flow's side of the machine: what a live execution knows beyond the fold of its log.
//! The recorded history it still replays (a cursor over the log), the per-name counters of
//! step ids, the steps running or in doubt with what they need to run again, the open gates,
//! each command's slot (its result and the waker of the future that awaits it), and what was
//! issued since the driver last looked (events, effects, deadlines, children).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::task::Waker;

use super::GateDeadline;
use crate::event::Event;
use crate::fold::ExecutionState;
use crate::hash::IdMap;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::ctx::{ChildStart, StepError};
use crate::runtime::effect::{Effect, EffectCall};
use crate::runtime::history::{History, NonDeterminism};

/// What an execution runs with, fixed when it starts: its id, the effects registered, the
/// capabilities granted (K2) and its budget (K3).
pub(crate) struct Env {
    pub(crate) execution_id: ExecutionId,
    pub(crate) effects: Arc<BTreeMap<String, Arc<dyn Effect>>>,
    pub(crate) capabilities: Arc<BTreeSet<String>>,
    pub(crate) budget: Option<u64>,
}

/// An effect to start once the events before it are durable (at once, for idempotent ones).
pub(crate) struct Dispatch {
    pub(crate) effect: Arc<dyn Effect>,
    pub(crate) call: EffectCall,
    /// Events to append before it may start: non-idempotent effects wait for their
    /// STEP_STARTED to be durable (K9).
    pub(crate) durable_before: bool,
}

/// A command's result, once there is one, and the waker of the future that awaits it.
pub(crate) struct Slot {
    pub(super) value: Option<Result<Payload, StepError>>,
    /// For a `first_of`: which gate's resume `value` is.
    pub(super) chosen: Option<usize>,
    pub(super) waker: Option<Waker>,
}

pub(crate) struct RunningStep {
    pub(crate) effect: String,
    /// Whether the effect may run twice harmlessly: a non-idempotent one cut off by a cancel
    /// is recorded in doubt (K9).
    pub(super) idempotent: bool,
    pub(super) input_digest: String,
    pub(super) input: Payload,
    pub(super) attempt: u32,
    pub(super) slot: u64,
    /// K3: what the step holds against the budget while it runs.
    pub(super) held: u64,
    /// K3: the `max_cost` its `STEP_STARTED` recorded, what a `completed` verdict charges
    /// (ADR 0024).
    pub(super) charge: u64,
}

pub(crate) struct PendingGate {
    pub(super) gate_id: String,
    pub(super) event_type: String,
    pub(super) correlation_key: String,
    pub(super) slot: u64,
    /// The recorded deadline (unix ms), for a timer or a gate with a timeout (in a `first_of`,
    /// on its first gate only).
    pub(super) deadline: Option<u64>,
    /// For a gate of a `first_of`: the group (its command's slot) and its place in it.
    pub(super) group: Option<(u64, usize)>,
}

/// The flow's side of the machine (see the module's documentation).
pub(crate) struct FlowState {
    pub(super) env: Env,
    pub(super) history: History,
    pub(super) cursor: usize,
    pub(super) counters: IdMap<String, u32>,
    pub(super) explicit_ids: HashSet<String>,
    pub(super) out: Vec<Event>,
    pub(super) dispatch: Vec<Dispatch>,
    pub(super) slots: IdMap<u64, Slot>,
    pub(super) next_slot: u64,
    pub(super) running: IdMap<String, RunningStep>,
    pub(super) in_doubt: BTreeMap<String, RunningStep>,
    pub(super) gates: Vec<PendingGate>,
    pub(super) divergence: Option<NonDeterminism>,
    pub(super) budget_spent: u64,
    /// K3: the sum of what running steps hold (their effects' `max_cost`).
    pub(super) budget_held: u64,
    /// K3: what the steps the log left without an outcome hold, by step id, read from the fold
    /// when the machine starts: a step replayed into doubt is charged it by a `completed`
    /// verdict (ADR 0024).
    pub(super) charges: BTreeMap<String, u64>,
    /// Whether the recorded log ends the execution (whole-log replay: `ctx.patched` past its
    /// last command answers as the old code did).
    pub(super) recorded_end: bool,
    /// Set by whole-log replay: the first command issued past the end of the history, in
    /// words (a completed log followed by a new command is a divergence).
    pub(crate) watch_live: bool,
    pub(crate) first_live: Option<String>,
    /// Deadlines of gates opened (or replayed as pending) since the driver last looked, to arm.
    pub(super) armed: Vec<GateDeadline>,
    /// Deadlines of gates resumed before them, to disarm.
    pub(super) disarmed: Vec<GateDeadline>,
    /// Gates (event type, correlation key) that their deadline closed: a resume that comes
    /// later is told so.
    pub(super) timed_out: BTreeSet<(String, String)>,
    /// Children whose gates were opened or replayed as pending, for the driver to start.
    pub(super) child_starts: Vec<ChildStart>,
    /// `ctx.patched` answers of this run, by change id.
    pub(super) patches: BTreeMap<String, bool>,
}

impl FlowState {
    /// The state of an execution that runs in `env`, about to replay `history`, whose durable
    /// log folds to `durable` (what it has spent, whether it has ended).
    pub(crate) fn new(env: Env, history: History, durable: &ExecutionState) -> Self {
        Self {
            env,
            history,
            cursor: 0,
            counters: IdMap::default(),
            explicit_ids: HashSet::new(),
            out: Vec::new(),
            dispatch: Vec::new(),
            slots: IdMap::default(),
            next_slot: 0,
            running: IdMap::default(),
            in_doubt: BTreeMap::new(),
            gates: Vec::new(),
            divergence: None,
            budget_spent: durable.budget_spent(),
            budget_held: 0,
            recorded_end: durable.status().is_terminal(),
            charges: durable.held_costs().clone(),
            watch_live: false,
            first_live: None,
            armed: Vec::new(),
            disarmed: Vec::new(),
            timed_out: BTreeSet::new(),
            child_starts: Vec::new(),
            patches: BTreeMap::new(),
        }
    }
}

impl FlowState {
    pub(crate) fn new_slot(&mut self) -> u64 {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.slots.insert(
            slot,
            Slot {
                value: None,
                chosen: None,
                waker: None,
            },
        );
        slot
    }

    /// The result of the command in `slot`, taken, with the gate a `first_of` chose; until
    /// there is one, `waker` is woken when it comes.
    pub(crate) fn poll_slot(
        &mut self,
        slot: u64,
        waker: &Waker,
    ) -> Option<(Result<Payload, StepError>, Option<usize>)> {
        let entry = self.slots.get_mut(&slot)?;
        match entry.value.take() {
            Some(value) => {
                let chosen = entry.chosen;
                self.slots.remove(&slot);
                Some((value, chosen))
            }
            None => {
                entry.waker = Some(waker.clone());
                None
            }
        }
    }

    /// The future of the command in `slot` is gone: its result, if it comes, is dropped.
    pub(crate) fn drop_slot(&mut self, slot: u64) {
        self.slots.remove(&slot);
    }

    pub(crate) fn fill(&mut self, slot: u64, value: Result<Payload, StepError>) {
        if let Some(slot) = self.slots.get_mut(&slot) {
            slot.value = Some(value);
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        }
    }

    /// The events and effects queued since the last call.
    pub(crate) fn take_queued(&mut self) -> (Vec<Event>, Vec<Dispatch>) {
        (
            std::mem::take(&mut self.out),
            std::mem::take(&mut self.dispatch),
        )
    }

    pub(crate) fn divergence(&self) -> Option<&NonDeterminism> {
        self.divergence.as_ref()
    }

    /// Whether recorded commands remain that the flow has not issued again yet.
    pub(crate) fn replaying(&self) -> bool {
        self.cursor < self.history.commands.len() && self.divergence.is_none()
    }

    /// How many recorded commands the flow has issued again.
    pub(crate) fn replayed(&self) -> usize {
        self.cursor
    }

    /// Whether the flow has something only a message can answer (a pending gate or a step in
    /// doubt): the only places a driver may park it.
    pub(crate) fn waits_for_messages(&self) -> bool {
        !self.gates.is_empty() || !self.in_doubt.is_empty()
    }
}
