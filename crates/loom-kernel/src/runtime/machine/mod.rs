//! The driver's decisions, without I/O (LD-022).
//!
//! The machine has two halves, both free of I/O, with one file per kind of transition:
//! - the flow's side, [`FlowState`] (`state.rs`): the execution's one state, the fold of its
//!   log extended by every event as it is issued (LD-025), and beside it, keyed by its ids,
//!   the recorded history still to replay, what the steps running or in doubt and the open
//!   gates need that the fold has no place for, and each command's slot, which the flow's
//!   `FlowCtx` awaits. `FlowCtx` only turns a call into a command for it (a step:
//!   `command.rs`; a gate, timer, `first_of`, request or child: `gate.rs`; a decision, surface
//!   patch or `ctx.patched` marker: `decision.rs`); the world's answers are its other inputs: an effect's outcome (`outcome.rs`), a resume
//!   (`resume.rs`), an operator's verdict (`verdict.rs`), a deadline (`deadline.rs`), a
//!   child's end (`child_end.rs`), a cancel (`cancel.rs`), the flow's end (`end.rs`);
//! - the write side, [`Machine`] (this file): what a live driver knows beyond the flow's
//!   state: the durable head, the events queued for the next append, the append in
//!   flight (`durable.rs`), the replies that wait for their events to be durable, and the
//!   effects and children held until the events before them are durable (LD-003).
//!
//! The two halves are sequenced in one place only: the execution's machine
//! (`runtime/execution/`, `Execution`), which the driver steps and asks what to do. Nothing
//! else calls the write side.
//!
//! Neither awaits, spawns or reads a clock (a value from the world, such as the time a
//! deadline is computed from, is handed in): the tests in each file drive them with plain
//! values. The write side is generic over the reply, the effect dispatch and the child start
//! it carries, which it never looks into except through [`Held`].

mod cancel;
mod child_end;
mod command;
mod deadline;
mod decision;
mod durable;
mod end;
#[cfg(test)]
mod fixtures;
mod gate;
#[cfg(test)]
mod model;
mod offline;
mod outcome;
mod resume;
mod state;
mod verdict;
pub(crate) mod vocabulary;

use crate::event::Event;
use crate::hash::{IdKey, IdMap};

pub(crate) use cancel::CutOff;
pub(crate) use command::StepStart;
pub(crate) use deadline::GateDeadline;
pub(crate) use decision::{DecisionStart, decode_decision};
pub(crate) use end::terminal;
pub(crate) use resume::GateMiss;
pub(crate) use state::{Dispatch, Env, FlowState, QUEUED_DISPATCHES, QUEUED_EVENTS};
pub(crate) use verdict::VerdictMiss;

/// What the machine needs to know of an effect it may hold.
pub(crate) trait Held {
    /// The step the effect runs for.
    fn step_id(&self) -> &str;
    /// Whether it may start only once the events before it are durable (a non-idempotent
    /// effect: K9).
    fn durable_before(&self) -> bool;
}

/// What the driver must do now: start effects and children. The machine has forgotten them.
#[derive(Debug)]
pub(crate) struct Ready<D, C> {
    /// Effects to start.
    pub(crate) run: Vec<D>,
    /// Children to start (their gate is durable).
    pub(crate) children: Vec<C>,
}

impl<D, C> Default for Ready<D, C> {
    fn default() -> Self {
        Self {
            run: Vec::new(),
            children: Vec::new(),
        }
    }
}

/// An append for the driver to write: `events` after `expected` (the durable head).
#[derive(Debug, PartialEq)]
pub(crate) struct Batch {
    pub(crate) expected: u64,
    pub(crate) events: Vec<Event>,
}

/// What became true when an append was durable.
#[derive(Debug)]
pub(crate) struct Durable<R, D, C> {
    /// Replies whose events are durable: they are answered `Ok`.
    pub(crate) replies: Vec<R>,
    /// Effects and children no longer held.
    pub(crate) ready: Ready<D, C>,
}

/// What the driver does with a message (resume, verdict, cancel, deadline, child's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// The execution has ended: the message is refused (a deadline or a child's end is
    /// forgotten).
    Refuse,
    /// The flow is still replaying its history: the gate or step the message names may not be
    /// open yet. It is handled once the replay has caught up.
    Defer,
    /// Handled now.
    Handle,
}

/// The driver's state beyond the flow's: see the module's documentation.
#[derive(Debug)]
pub(crate) struct Machine<R, D, C> {
    /// The head of the log: the seq the next durable event gets.
    durable_head: u64,
    queued: Vec<Event>,
    /// Replies to send once everything queued so far is durable.
    queued_replies: Vec<R>,
    /// Where each step's STEP_STARTED sits in `queued`, while it has not been sent.
    started_at: IdMap<IdKey, usize>,
    /// The append in flight: its replies and how many events it carries.
    in_flight: Option<(Vec<R>, u64)>,
    /// Effects held until the log's head reaches the position beside them.
    held: Vec<(u64, D)>,
    /// Children held the same way (LD-015).
    held_children: Vec<(u64, C)>,
    /// The terminal event is queued (or durable): nothing more is recorded.
    ended: bool,
    /// Every effect, idempotent or not, waits for this run's first durable append: on a store
    /// with leases that append is what says this worker holds the execution (another worker
    /// resuming or recovering it at the same head has its append refused, and must not have
    /// run anything meanwhile).
    hold_until_appended: bool,
    /// A new execution whose id the store claimed for it (`EventStore::claim_new`): no other
    /// start can take the id, so its idempotent effects need not wait for its start.
    start_claimed: bool,
}

/// Room for a new execution's first append: its start and the first steps of a flow whose
/// effects are quick (each step's outcome takes its start's place in the queue), all issued
/// before the first append goes out. Grown one event at a time from nothing, the queue is
/// reallocated twice on the way (4, 8, 16 events of 128 bytes), each time under the
/// allocator's lock and with a copy; in a burst after other work that was the most waited-for
/// lock of the runtime (`docs/PERFORMANCE.md`).
const FIRST_APPEND_EVENTS: usize = 16;

impl<R, D: Held, C> Machine<R, D, C> {
    /// A machine for a log whose head is `durable_head` (0 for a new execution).
    pub(crate) fn new(durable_head: u64) -> Self {
        Self {
            durable_head,
            queued: Vec::new(),
            queued_replies: Vec::new(),
            started_at: IdMap::default(),
            in_flight: None,
            held: Vec::new(),
            held_children: Vec::new(),
            ended: false,
            hold_until_appended: false,
            start_claimed: false,
        }
    }

    /// Holds every effect until this run's first append is durable (a store with leases,
    /// where the log may belong to another worker until then).
    pub(crate) fn hold_effects_until_appended(&mut self) {
        self.hold_until_appended = true;
    }

    /// A new execution: its first event, and the `start` reply that waits for it;
    /// `claimed` when the store claimed its id for it.
    pub(crate) fn new_execution(first: Event, reply: R, claimed: bool) -> Self {
        let mut machine = Self::new(0);
        machine.queued.reserve_exact(FIRST_APPEND_EVENTS);
        machine.start_claimed = claimed;
        machine.queued.push(first);
        machine.queued_replies.push(reply);
        machine
    }

    /// The seq the next durable event gets.
    pub(crate) fn durable_head(&self) -> u64 {
        self.durable_head
    }

    /// Whether the terminal event is queued or durable.
    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    /// Whether no append is in flight.
    #[cfg(test)]
    pub(crate) fn idle(&self) -> bool {
        self.in_flight.is_none()
    }

    /// The seq of the first event not yet handed to an append: a step's outcome replaces its
    /// `STEP_STARTED` only at or after it (`command.rs`).
    pub(crate) fn unsent(&self) -> u64 {
        self.durable_head + self.in_flight.as_ref().map_or(0, |(_, len)| *len)
    }

    /// Whether nothing is in flight nor queued: every event issued so far is durable.
    pub(crate) fn settled(&self) -> bool {
        self.in_flight.is_none() && self.queued.is_empty()
    }

    /// Whether any effect is held for durability.
    #[cfg(test)]
    fn holds_effects(&self) -> bool {
        !self.held.is_empty()
    }

    /// What to do with a message; `cancel` says whether it is a cancel (never deferred: it
    /// needs no open gate), `replaying` whether the flow still replays its history.
    pub(crate) fn admit(&self, cancel: bool, replaying: bool) -> Admit {
        if self.ended {
            Admit::Refuse
        } else if !cancel && replaying {
            Admit::Defer
        } else {
            Admit::Handle
        }
    }

    /// Whether the driver may park the flow and exit: every event is durable, the execution
    /// goes on, no effect runs (`effects_running`) or is held, and the flow waits only for
    /// messages (`waits_for_messages`: at a gate or on a step in doubt). A flow that awaits
    /// anything else (a timer, a channel, a yield) is polled again when it wakes.
    pub(crate) fn may_park(
        &self,
        effects_running: bool,
        waits_for_messages: impl FnOnce() -> bool,
    ) -> bool {
        self.settled()
            && !self.ended
            && !effects_running
            && self.held.is_empty()
            && waits_for_messages()
    }

    /// Whether the effect of `step_id` was handed to the driver (it is not held).
    pub(crate) fn dispatched(&self, step_id: &str) -> bool {
        !self.held.iter().any(|(_, d)| d.step_id() == step_id)
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use crate::payload::Payload;

    #[test]
    fn a_message_is_deferred_while_replaying_refused_once_ended_and_a_cancel_never_waits() {
        let mut m = M::new(1);
        assert_eq!(m.admit(false, true), Admit::Defer);
        assert_eq!(m.admit(true, true), Admit::Handle);
        assert_eq!(m.admit(false, false), Admit::Handle);
        m.cancelled(vec![], cancelled(), "cancel");
        assert_eq!(m.admit(true, false), Admit::Refuse);
        assert_eq!(m.admit(false, true), Admit::Refuse);
    }

    #[test]
    fn a_run_told_to_hold_runs_no_effect_until_its_first_append_is_durable() {
        let mut m = M::new(4);
        m.hold_effects_until_appended();
        let ready = m.issued(vec![started("a")], vec![Fx("a", false)], vec![]);
        assert!(ready.run.is_empty(), "an idempotent effect waits too");
        assert!(m.holds_effects());
        m.take_append().unwrap();
        // Refused (another worker's append came first): nothing ran, nothing is handed out.
        assert_eq!(m.take_all_replies(), Vec::<&str>::new());
        let mut m = M::new(4);
        m.hold_effects_until_appended();
        m.issued(vec![started("a")], vec![Fx("a", false)], vec![]);
        m.take_append().unwrap();
        assert_eq!(m.appended(5).ready.run, vec![Fx("a", false)]);
        // Once an append of the run is durable, idempotent effects run at once again.
        let ready = m.issued(vec![started("b")], vec![Fx("b", false)], vec![]);
        assert_eq!(ready.run, vec![Fx("b", false)]);
    }

    #[test]
    fn a_flow_parks_only_settled_with_nothing_running_or_held_and_waiting_for_a_message() {
        let mut m = M::new(1);
        assert!(m.may_park(false, || true));
        assert!(!m.may_park(false, || false), "it awaits something else");
        assert!(!m.may_park(true, || true), "an effect runs");
        m.issued(vec![started("a")], vec![Fx("a", true)], vec![]);
        assert!(!m.may_park(false, || true), "an event is queued");
        m.take_append().unwrap();
        assert!(!m.may_park(false, || true), "an append is in flight");
        let durable = m.appended(2);
        // The effect was handed out: the driver runs it, then it is done.
        assert_eq!(durable.ready.run.len(), 1);
        assert!(!m.may_park(true, || true));
        assert!(m.may_park(false, || true));
        assert!(m.flow_returned(Ok(Payload::null())));
        m.take_append().unwrap();
        m.appended(3);
        assert!(
            !m.may_park(false, || true),
            "an ended execution does not park"
        );
    }
}
