//! The flow's side of the machine: the execution's fold, of its durable log and of every event
//! issued since (the one state of the execution), and what only a live driver knows beside
//! it, keyed by the fold's ids: the recorded history it still replays (a cursor over the log),
//! the per-name counters of step ids, for each step of this run running or in doubt what it
//! needs to run again, for each gate this run waits at its slot, deadline and `first_of`
//! group, each command's slot (its result and the waker of the future that awaits it), and
//! what was issued since the driver last looked (events, effects, deadlines, children).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::task::Waker;

use super::GateDeadline;
use super::vocabulary::{ChildStart, StepError};
use crate::event::Event;
use crate::fold::ExecutionState;
use crate::hash::{IdKey, IdMap};
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::effect::{Effect, EffectCall};
use crate::runtime::history::{History, NonDeterminism};

/// What an execution runs with, fixed when it starts: its id, the effects registered and the
/// capabilities granted (K2), shared with every effect call (its budget, K3, is the fold's).
pub(crate) struct Env {
    pub(crate) execution_id: ExecutionId,
    pub(crate) effects: Arc<BTreeMap<String, Arc<dyn Effect>>>,
    pub(crate) capabilities: Arc<BTreeSet<String>>,
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

/// What a step of this run needs beside the fold's record (whether it runs or is in doubt,
/// what it holds against the budget): what to record its outcome or doubt with, what to run it
/// again with, and where its result goes.
pub(crate) struct StepSide {
    pub(super) effect: String,
    pub(super) attempt: u32,
    /// Whether the effect may run twice harmlessly: a non-idempotent one cut off by a cancel
    /// is recorded in doubt (K9).
    pub(super) idempotent: bool,
    pub(super) input_digest: String,
    pub(super) input: Payload,
    pub(super) slot: u64,
}

/// What a gate this run waits at has beside the fold's pending gate (its event type and key).
#[derive(Clone, Copy)]
pub(crate) struct GateSide {
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
    /// The fold of the durable log and of every event issued after it, as the write side will
    /// number it: what steps run or are in doubt, which gates are pending, what the budget
    /// holds and has spent. Once every event is durable it is the fold of the log.
    pub(super) fold: ExecutionState,
    /// The seq of the first event not yet handed to an append, as the write side last said
    /// (with an effect's outcome, the one event it may record in another's place): the outcome
    /// of a step started at or after it takes its start's place, so the fold numbers it as the
    /// log will.
    pub(super) unsent: u64,
    /// The steps of this run that run or are in doubt (which, the fold says), by step id.
    pub(super) steps: IdMap<IdKey, StepSide>,
    /// The gates this run waits at (the fold's pending gates the flow has reached), by id.
    pub(super) gates: BTreeMap<String, GateSide>,
    pub(super) divergence: Option<NonDeterminism>,
    /// Whether the recorded log ends the execution (whole-log replay: `ctx.patched` past its
    /// last command answers as the old code did).
    pub(super) recorded_end: bool,
    /// Set by whole-log replay: the first command issued past the end of the history, in
    /// words (a completed log followed by a new command is a divergence).
    pub(super) watch_live: bool,
    pub(super) first_live: Option<String>,
    /// Deadlines of gates opened (or replayed as pending) since the driver last looked, to arm.
    pub(super) armed: Vec<GateDeadline>,
    /// Deadlines of gates resumed before them, to disarm.
    pub(super) disarmed: Vec<GateDeadline>,
    /// Gates (event type, correlation key) that their deadline closed: a resume that comes
    /// later is told so. (The fold forgets a gate once it is resumed, and keeps no payload.)
    pub(super) timed_out: BTreeSet<(String, String)>,
    /// Children whose gates were opened or replayed as pending, for the driver to start.
    pub(super) child_starts: Vec<ChildStart>,
    /// `ctx.patched` answers of this run, by change id.
    pub(super) patches: BTreeMap<String, bool>,
    /// Change ids `ctx.deprecate_patch` was called with in this run: `ctx.patched` cannot
    /// answer for them, since the marker it would record (or find) is the one deprecated.
    pub(super) deprecated_patches: BTreeSet<String>,
    /// The live decision whose value the flow's code is making (unlocked), if any: no other
    /// command may be issued meanwhile.
    pub(super) deciding: Option<String>,
}

/// Room for what a flow issues between two turns of its driver when it runs one step at a
/// time, as most do: a step's outcome and the next step's start, and that step's effect. The
/// lists go back and forth with the driver's (`swap_queued`), so there are two of each, and
/// each starts this small rather than at a `Vec`'s first growth to 4 entries (512 bytes a list
/// of events, 608 a list of effects); a flow that issues more grows them once.
pub(crate) const QUEUED_EVENTS: usize = 2;
pub(crate) const QUEUED_DISPATCHES: usize = 1;

impl FlowState {
    /// The state of an execution that runs in `env`, about to replay `history`, whose durable
    /// log folds to `durable` (a new execution's is empty: the driver folds its start, which
    /// the write side queues, with [`FlowState::fold_issued`]).
    pub(crate) fn new(env: Env, history: History, durable: ExecutionState) -> Self {
        Self {
            env,
            history,
            cursor: 0,
            counters: IdMap::default(),
            explicit_ids: HashSet::new(),
            out: Vec::with_capacity(QUEUED_EVENTS),
            dispatch: Vec::with_capacity(QUEUED_DISPATCHES),
            slots: IdMap::default(),
            next_slot: 0,
            unsent: durable.next_seq(),
            recorded_end: durable.status().is_terminal(),
            fold: durable,
            steps: IdMap::default(),
            gates: BTreeMap::new(),
            divergence: None,
            watch_live: false,
            first_live: None,
            armed: Vec::new(),
            disarmed: Vec::new(),
            timed_out: BTreeSet::new(),
            child_starts: Vec::new(),
            patches: BTreeMap::new(),
            deprecated_patches: BTreeSet::new(),
            deciding: None,
        }
    }

    /// Issues `event`: folded as the write side will number it, and queued for the driver.
    pub(super) fn issue(&mut self, event: Event) {
        self.fold_issued(&event);
        self.out.push(event);
    }

    /// Issues `event` if the fold accepts it; hands it back if not (nothing is recorded).
    pub(super) fn try_issue(&mut self, event: Event) -> Option<Event> {
        match self
            .fold
            .apply_issued(&self.env.execution_id, &event, self.unsent)
        {
            Ok(()) => {
                self.out.push(event);
                None
            }
            Err(error) => {
                tracing::debug!(%error, "an event the fold refuses is not recorded");
                Some(event)
            }
        }
    }

    /// Folds an event issued now (on the flow's side, or by the driver: a start, a cancel, the
    /// flow's end), numbered as the write side will number it. False if the fold refuses it.
    pub(crate) fn fold_issued(&mut self, event: &Event) -> bool {
        match self
            .fold
            .apply_issued(&self.env.execution_id, event, self.unsent)
        {
            Ok(()) => true,
            Err(error) => {
                // The log stays the judge: readers fold it and see the same refusal.
                tracing::error!(%error, "the machine issued an event its fold refuses");
                false
            }
        }
    }

    /// The execution's fold: of the durable log and of every event issued since.
    pub(crate) fn fold(&self) -> &ExecutionState {
        &self.fold
    }

    /// The fold, taken (the flow's side is not used again).
    pub(crate) fn take_fold(&mut self) -> ExecutionState {
        std::mem::take(&mut self.fold)
    }

    /// K3: what the execution may still spend now (its budget, less what is spent and what
    /// running steps hold).
    pub(super) fn budget_remaining(&self) -> Option<u64> {
        self.fold.budget().map(|budget| {
            budget
                .saturating_sub(self.fold.budget_spent())
                .saturating_sub(self.fold.held_running())
        })
    }

    /// K3: what the steps that run hold.
    #[cfg(test)]
    pub(super) fn budget_held(&self) -> u64 {
        self.fold.held_running()
    }

    /// K3: what the execution has spent.
    #[cfg(test)]
    pub(super) fn budget_spent(&self) -> u64 {
        self.fold.budget_spent()
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
    #[cfg(test)]
    pub(crate) fn take_queued(&mut self) -> (Vec<Event>, Vec<Dispatch>) {
        (
            std::mem::take(&mut self.out),
            std::mem::take(&mut self.dispatch),
        )
    }

    /// The events and effects queued since the last call, swapped into the caller's lists,
    /// which must be empty: the two lists go back and forth between the flow and its driver
    /// with their capacity, so queuing a step's event and effect allocates nothing.
    pub(crate) fn swap_queued(&mut self, events: &mut Vec<Event>, dispatches: &mut Vec<Dispatch>) {
        debug_assert!(events.is_empty() && dispatches.is_empty());
        std::mem::swap(&mut self.out, events);
        std::mem::swap(&mut self.dispatch, dispatches);
    }

    pub(crate) fn divergence(&self) -> Option<&NonDeterminism> {
        self.divergence.as_ref()
    }

    /// Whether recorded commands remain that the flow has not issued again yet.
    /// Whole-log replay: the first command issued past the end of the history is noted
    /// ([`FlowState::first_live`]).
    pub(crate) fn watch_live(&mut self) {
        self.watch_live = true;
    }

    /// The first command issued past the end of the history, in words, once
    /// [`FlowState::watch_live`] was called.
    pub(crate) fn first_live(&mut self) -> Option<String> {
        self.first_live.take()
    }

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
        !self.gates.is_empty()
            || self
                .fold
                .steps_in_doubt()
                .iter()
                .any(|step_id| self.steps.contains_key(step_id.as_str()))
    }
}
