//! The driver's decisions, without I/O (ADR 0022).
//!
//! [`Machine`] holds what a live driver knows beyond the flow's own state (`CtxState`) and the
//! fold of what is durable: the events queued for the next append, the append in flight, the
//! replies that wait for their events to be durable, and the effects and children held until
//! the events before them are durable (ADR 0003). The driver feeds it inputs (commands the flow
//! issued, an append that became durable or failed, the flow's end, a cancel) and carries out
//! what it returns (an append to write, effects to start, children to start, replies to send).
//! It never awaits, spawns or reads a clock: its tests drive it with plain values.
//!
//! It is generic over the reply, the effect dispatch and the child start it carries, which it
//! never looks into except through [`Held`].

use std::collections::HashMap;

use crate::event::{Event, ExecutionCompleted, ExecutionFailed};
use crate::payload::Payload;
use crate::runtime::flow::FlowError;

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
    started_at: HashMap<String, usize>,
    /// The append in flight: its replies and how many events it carries.
    in_flight: Option<(Vec<R>, u64)>,
    /// Effects held until the log's head reaches the position beside them.
    held: Vec<(u64, D)>,
    /// Children held the same way (ADR 0015).
    held_children: Vec<(u64, C)>,
    /// The terminal event is queued (or durable): nothing more is recorded.
    ended: bool,
}

impl<R, D: Held, C> Machine<R, D, C> {
    /// A machine for a log whose head is `durable_head` (0 for a new execution).
    pub(crate) fn new(durable_head: u64) -> Self {
        Self {
            durable_head,
            queued: Vec::new(),
            queued_replies: Vec::new(),
            started_at: HashMap::new(),
            in_flight: None,
            held: Vec::new(),
            held_children: Vec::new(),
            ended: false,
        }
    }

    /// A new execution: its first event, and the `start` reply that waits for it.
    pub(crate) fn new_execution(first: Event, reply: R) -> Self {
        let mut machine = Self::new(0);
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
    pub(crate) fn idle(&self) -> bool {
        self.in_flight.is_none()
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

    /// The commands the flow issued: their events are queued; an effect runs now if it is
    /// idempotent and the execution's start is durable, otherwise it is held until everything
    /// queued so far is durable (K9; a start whose id turns out to be taken runs nothing).
    /// Children start once their gate is durable.
    pub(crate) fn issued(
        &mut self,
        events: Vec<Event>,
        dispatches: Vec<D>,
        children: Vec<C>,
    ) -> Ready<D, C> {
        self.enqueue(events);
        let durable_at = self.durable_head
            + self.in_flight.as_ref().map_or(0, |(_, len)| *len)
            + self.queued.len() as u64;
        let mut ready = Ready::default();
        for dispatch in dispatches {
            if dispatch.durable_before() || self.durable_head == 0 {
                self.held.push((durable_at, dispatch));
            } else {
                ready.run.push(dispatch);
            }
        }
        for child in children {
            if durable_at <= self.durable_head {
                ready.children.push(child);
            } else {
                self.held_children.push((durable_at, child));
            }
        }
        ready
    }

    /// Adds events to the queue. A step that finishes while its STEP_STARTED is still queued
    /// is recorded by its outcome alone, in the STEP_STARTED's place: the log keeps the order
    /// in which the flow issued its commands, with one event per quick step instead of two.
    /// (Only idempotent effects can finish so early; a non-idempotent one starts only once its
    /// STEP_STARTED is durable.)
    fn enqueue(&mut self, events: Vec<Event>) {
        for event in events {
            let finished = match &event {
                Event::StepStarted(e) => {
                    self.started_at.insert(e.step_id.clone(), self.queued.len());
                    None
                }
                Event::StepCompleted(e) => self.started_at.remove(&e.step_id),
                Event::StepFailed(e) => self.started_at.remove(&e.step_id),
                _ => None,
            };
            match finished.and_then(|index| self.queued.get_mut(index)) {
                Some(slot) => *slot = event,
                None => self.queued.push(event),
            }
        }
    }

    /// A reply to send once everything queued so far is durable.
    pub(crate) fn reply_when_durable(&mut self, reply: R) {
        self.queued_replies.push(reply);
    }

    /// A cancel: the doubts it records, then `EXECUTION_CANCELLED`; the execution has ended.
    pub(crate) fn cancelled(&mut self, doubts: Vec<Event>, cancelled: Event, reply: R) {
        // The flow's queue is empty here: the driver takes it after every poll.
        self.queued.extend(doubts);
        self.queued.push(cancelled);
        self.end();
        self.queued_replies.push(reply);
    }

    /// The flow returned: its terminal event is queued, unless the execution has ended.
    /// Returns whether it was (the driver then drops the effects it runs).
    pub(crate) fn flow_returned(&mut self, result: Result<Payload, FlowError>) -> bool {
        if self.ended {
            return false;
        }
        self.queued.push(terminal(result));
        self.end();
        true
    }

    fn end(&mut self) {
        self.ended = true;
        self.held.clear();
        self.held_children.clear();
    }

    /// The next append, if none is in flight and something is queued. The replies queued so
    /// far wait for it.
    pub(crate) fn take_append(&mut self) -> Option<Batch> {
        if self.in_flight.is_some() || self.queued.is_empty() {
            return None;
        }
        let events = std::mem::take(&mut self.queued);
        self.started_at.clear();
        let replies = std::mem::take(&mut self.queued_replies);
        self.in_flight = Some((replies, events.len() as u64));
        Some(Batch {
            expected: self.durable_head,
            events,
        })
    }

    /// The append in flight is durable; the log's head is now `head`.
    pub(crate) fn appended(&mut self, head: u64) -> Durable<R, D, C> {
        let replies = self.in_flight.take().map(|(r, _)| r).unwrap_or_default();
        self.durable_head = head;
        let (ready, waiting): (Vec<_>, Vec<_>) =
            self.held.drain(..).partition(|(at, _)| *at <= head);
        self.held = waiting;
        let run = ready.into_iter().map(|(_, d)| d).collect();
        let (ready, waiting): (Vec<_>, Vec<_>) = self
            .held_children
            .drain(..)
            .partition(|(at, _)| *at <= head);
        self.held_children = waiting;
        let children = ready.into_iter().map(|(_, c)| c).collect();
        Durable {
            replies,
            ready: Ready { run, children },
        }
    }

    /// The append in flight failed, or the driver stops: every reply it still holds, those
    /// of the append in flight first. Nothing it queued will be written by this driver.
    pub(crate) fn take_all_replies(&mut self) -> Vec<R> {
        let mut replies = self.in_flight.take().map(|(r, _)| r).unwrap_or_default();
        replies.append(&mut self.queued_replies);
        replies
    }

    /// The replies queued while nothing waits to be written: their events (if any) are
    /// durable. Empty unless [`Machine::settled`].
    pub(crate) fn take_settled_replies(&mut self) -> Vec<R> {
        if self.settled() {
            std::mem::take(&mut self.queued_replies)
        } else {
            Vec::new()
        }
    }

    /// The replies queued for the next append (a shutdown refuses them; the append in flight
    /// keeps its own).
    pub(crate) fn take_queued_replies(&mut self) -> Vec<R> {
        std::mem::take(&mut self.queued_replies)
    }
}

/// The event that ends an execution whose flow returned `result`.
pub(crate) fn terminal(result: Result<Payload, FlowError>) -> Event {
    match result {
        Ok(output) => Event::ExecutionCompleted(ExecutionCompleted { output }),
        Err(error) => Event::ExecutionFailed(ExecutionFailed {
            error: error.into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ExecutionCancelled, StepCompleted, StepStarted};

    #[derive(Debug, PartialEq)]
    struct Fx(&'static str, bool);

    impl Held for Fx {
        fn step_id(&self) -> &str {
            self.0
        }
        fn durable_before(&self) -> bool {
            self.1
        }
    }

    type M = Machine<&'static str, Fx, &'static str>;

    fn started(step: &str) -> Event {
        Event::StepStarted(StepStarted {
            step_id: step.into(),
            effect: "e".into(),
            input_digest: "d".into(),
            attempt: 1,
            max_cost: 0,
        })
    }

    fn completed(step: &str) -> Event {
        Event::StepCompleted(StepCompleted {
            step_id: step.into(),
            effect: "e".into(),
            input_digest: "d".into(),
            output: Payload::null(),
            cost: 0,
        })
    }

    fn cancelled() -> Event {
        Event::ExecutionCancelled(ExecutionCancelled { reason: None })
    }

    #[test]
    fn a_new_execution_holds_every_effect_until_its_start_is_durable() {
        let mut m = M::new_execution(cancelled(), "start");
        let ready = m.issued(vec![started("a")], vec![Fx("a", false)], vec![]);
        assert!(
            ready.run.is_empty(),
            "nothing runs before the start is durable"
        );
        assert!(!m.dispatched("a"));
        let batch = m.take_append().unwrap();
        assert_eq!(batch.expected, 0);
        assert_eq!(batch.events.len(), 2);
        assert!(m.take_append().is_none(), "one append in flight at a time");
        let durable = m.appended(2);
        assert_eq!(durable.replies, vec!["start"]);
        assert_eq!(durable.ready.run, vec![Fx("a", false)]);
        assert!(m.dispatched("a"));
        assert!(m.settled());
    }

    #[test]
    fn an_idempotent_effect_runs_at_once_and_a_non_idempotent_one_waits_for_its_start() {
        let mut m = M::new(3);
        let ready = m.issued(
            vec![started("a"), started("b")],
            vec![Fx("a", false), Fx("b", true)],
            vec![],
        );
        assert_eq!(ready.run, vec![Fx("a", false)]);
        assert!(m.holds_effects());
        let batch = m.take_append().unwrap();
        assert_eq!(batch.expected, 3);
        // More events pile up while the append is in flight; b's position is already passed.
        m.issued(vec![completed("a")], vec![], vec![]);
        let durable = m.appended(5);
        assert_eq!(durable.ready.run, vec![Fx("b", true)]);
        assert_eq!(m.take_append().unwrap().events, vec![completed("a")]);
    }

    #[test]
    fn a_quick_step_is_recorded_by_its_outcome_alone_in_its_start_s_place() {
        let mut m = M::new(1);
        m.issued(
            vec![started("a"), started("b"), completed("a")],
            vec![],
            vec![],
        );
        let batch = m.take_append().unwrap();
        assert_eq!(batch.events, vec![completed("a"), started("b")]);
        m.appended(3);
        // Once its start went out, the outcome is recorded after it.
        m.issued(vec![completed("b")], vec![], vec![]);
        assert_eq!(m.take_append().unwrap().events, vec![completed("b")]);
    }

    #[test]
    fn a_child_starts_once_its_gate_is_durable() {
        let mut m = M::new(1);
        let ready = m.issued(vec![started("gate")], vec![], vec!["child"]);
        assert!(ready.children.is_empty());
        m.take_append().unwrap();
        assert_eq!(m.appended(2).ready.children, vec!["child"]);
        // Nothing queued: a replayed pending child starts at once.
        assert_eq!(
            m.issued(vec![], vec![], vec!["again"]).children,
            vec!["again"]
        );
    }

    #[test]
    fn a_reply_waits_for_the_events_queued_before_it() {
        let mut m = M::new(1);
        m.reply_when_durable("early");
        assert_eq!(
            m.take_settled_replies(),
            vec!["early"],
            "nothing to wait for"
        );
        m.issued(vec![started("a")], vec![], vec![]);
        m.reply_when_durable("resume");
        assert!(m.take_settled_replies().is_empty());
        m.take_append().unwrap();
        m.reply_when_durable("late");
        let durable = m.appended(2);
        assert_eq!(durable.replies, vec!["resume"]);
        assert_eq!(m.take_settled_replies(), vec!["late"]);
    }

    #[test]
    fn the_end_drops_what_is_held_and_the_flow_s_result_after_a_cancel() {
        let mut m = M::new(1);
        m.issued(vec![started("a")], vec![Fx("a", true)], vec!["child"]);
        m.cancelled(vec![], cancelled(), "cancel");
        assert!(m.ended());
        assert!(!m.holds_effects());
        assert!(!m.flow_returned(Ok(Payload::null())), "already ended");
        let batch = m.take_append().unwrap();
        assert_eq!(batch.events, vec![started("a"), cancelled()]);
        let durable = m.appended(3);
        assert_eq!(durable.replies, vec!["cancel"]);
        assert!(durable.ready.run.is_empty() && durable.ready.children.is_empty());
    }

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

    #[test]
    fn a_failed_append_hands_back_every_reply() {
        let mut m = M::new(1);
        m.issued(vec![started("a")], vec![], vec![]);
        m.reply_when_durable("first");
        m.take_append().unwrap();
        m.reply_when_durable("second");
        assert_eq!(m.take_all_replies(), vec!["first", "second"]);
        assert!(m.idle());
    }

    #[test]
    fn the_flow_s_result_is_its_terminal_event() {
        let mut m = M::new(1);
        assert!(m.flow_returned(Err(FlowError::new("x", "y"))));
        let events = m.take_append().unwrap().events;
        assert!(matches!(events.as_slice(), [Event::ExecutionFailed(_)]));
    }
}
