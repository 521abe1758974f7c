//! Commands the flow issued: on the flow's side, each call of `FlowCtx` matched against the
//! recorded history while it lasts (served from it), else queued live with its effect's
//! dispatch; on the write side, the events queued for the next append and the effects held
//! until the events before them are durable (K9).

use std::sync::Arc;

use super::state::{Dispatch, FlowState, StepSide};
use super::vocabulary::{StepError, StepName};
use super::{Held, Machine};
use crate::classify::DataClassification;
use crate::event::*;
use crate::hash::IdKey;
use crate::payload::Payload;
use crate::runtime::codes;
use crate::runtime::contain::contain;
use crate::runtime::digest::input_digest;
use crate::runtime::effect::{Effect, EffectCall};
use crate::runtime::history::{Attempted, NonDeterminism, StepState};

/// Where a step stands once the flow's state has seen it ([`FlowState::step`]).
#[derive(Debug)]
pub(crate) enum StepStart {
    /// Decided under the lock: a result the flow gets at once (`Some`), or none yet.
    Now(Option<Payload>),
    /// A new step whose effect's admission checks are to run outside the state's lock.
    Admit(Admission),
}

/// A new step waiting for its effect's admission checks. They are the effect's own code (a
/// JSON Schema check, a user's `admit`), so they run outside the flow's state's lock, as all
/// code that is not the kernel's does.
pub(crate) struct Admission {
    handler: Arc<dyn Effect>,
    call: EffectCall,
    digest: String,
    slot: u64,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("step_id", &self.call.step_id)
            .field("effect", &self.call.effect)
            .finish()
    }
}

impl Admission {
    /// K2 (the capability granted), what the effect declares of itself, K3 (its `max_cost`
    /// within what may still be spent), then the effect's own checks; a panic in any of them
    /// is a refusal.
    pub(crate) fn check(&self) -> Result<Declared, ErrorInfo> {
        let effect = &self.call.effect;
        contain(|| {
            authorize(self.handler.as_ref(), &self.call)?;
            let declared = Declared::read(self.handler.as_ref());
            within_budget(&self.call, declared.max_cost)?;
            self.handler.admit(&self.call)?;
            Ok(declared)
        })
        .unwrap_or_else(|panic| {
            Err(ErrorInfo::new(
                codes::ADMISSION_PANICKED,
                format!("the admission check of effect '{effect}' panicked: {panic}"),
            ))
        })
    }
}

/// K3: a new step starts only if what it may cost fits in what the execution may still spend,
/// whatever the effect's own `admit` checks: a raw effect's budget is the kernel's to keep
/// (issue 41, hole 5).
fn within_budget(call: &EffectCall, max_cost: u64) -> Result<(), ErrorInfo> {
    match call.budget_remaining {
        Some(remaining) if max_cost > remaining => Err(ErrorInfo::new(
            codes::BUDGET_EXCEEDED,
            format!(
                "step '{}' would cost {max_cost} but execution {} may spend only {remaining} more",
                call.step_id, call.execution_id
            ),
        )),
        _ => Ok(()),
    }
}

/// What an effect declares of itself (`max_cost`, `idempotent`), read once per start of a
/// step. It is the effect's own code: read outside the state's lock when the step is new, and
/// with a panic contained wherever it is read (issue 41, hole 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Declared {
    max_cost: u64,
    idempotent: bool,
}

impl Declared {
    fn read(handler: &dyn Effect) -> Self {
        Self {
            max_cost: handler.max_cost(),
            idempotent: handler.idempotent(),
        }
    }

    /// What `handler` declares, or the error that a panic in it makes.
    pub(super) fn of(handler: &dyn Effect, effect: &str) -> Result<Self, ErrorInfo> {
        contain(|| Self::read(handler)).map_err(|panic| {
            ErrorInfo::new(
                codes::ADMISSION_PANICKED,
                format!(
                    "effect '{effect}' panicked saying what it is (max_cost, idempotent): {panic}"
                ),
            )
        })
    }
}

impl<R, D: Held, C> Machine<R, D, C> {
    /// The commands the flow issued: their events are queued; an effect runs now if it is
    /// idempotent and the execution's start is durable or its id claimed, otherwise it is held
    /// until everything queued so far is durable (K9; a start whose id turns out to be taken
    /// runs nothing; on a store with leases, a run whose first append is not yet durable runs
    /// nothing either).
    /// Children start once their gate is durable.
    #[cfg(test)]
    pub(crate) fn issued(
        &mut self,
        mut events: Vec<Event>,
        mut dispatches: Vec<D>,
        children: Vec<C>,
    ) -> super::Ready<D, C> {
        let children = self.issued_in_place(&mut events, &mut dispatches, children);
        super::Ready {
            run: dispatches,
            children,
        }
    }

    /// [`Machine::issued`] on the driver's own lists, which keep their capacity from one
    /// batch of commands to the next (two allocations a step fewer): `events` is emptied into
    /// the queue, and `dispatches` keeps the effects to run now, in order. Returns the children
    /// to start now.
    pub(crate) fn issued_in_place(
        &mut self,
        events: &mut Vec<Event>,
        dispatches: &mut Vec<D>,
        children: Vec<C>,
    ) -> Vec<C> {
        self.enqueue(events);
        let durable_at = self.unsent() + self.queued.len() as u64;
        // The effects to run now stay in the flow's own list, in order: no list per command.
        let hold_all = (self.durable_head == 0 && !self.start_claimed) || self.hold_until_appended;
        let held = dispatches.extract_if(.., |dispatch| hold_all || dispatch.durable_before());
        self.held
            .extend(held.map(|dispatch| (durable_at, dispatch)));
        let mut ready = Vec::new();
        for child in children {
            if durable_at <= self.durable_head {
                ready.push(child);
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
    fn enqueue(&mut self, events: &mut Vec<Event>) {
        for event in events.drain(..) {
            let finished = match &event {
                Event::StepStarted(e) => {
                    self.started_at
                        .insert(IdKey::new(&e.step_id), self.queued.len());
                    None
                }
                Event::StepCompleted(e) => self.started_at.remove(&IdKey::new(&e.step_id)),
                Event::StepFailed(e) => self.started_at.remove(&IdKey::new(&e.step_id)),
                _ => None,
            };
            match finished.and_then(|index| self.queued.get_mut(index)) {
                Some(slot) => *slot = event,
                None => self.queued.push(event),
            }
        }
    }
}

impl FlowState {
    /// A step: served from the history while it lasts, else admitted (K2, K3, its input) and
    /// started, or refused. `Some` is a result the flow gets at once.
    pub(crate) fn step(
        &mut self,
        slot: u64,
        step_id: String,
        effect: &str,
        input: Payload,
        classification: &DataClassification,
    ) -> Result<StepStart, StepError> {
        let digest = input_digest(&input);
        let attempted = Attempted::Step {
            step_id: &step_id,
            effect,
            input_digest: &digest,
        };
        if self.replay(attempted, classification) {
            return Ok(self.replay_step(step_id, effect, digest, input, slot));
        }
        if self.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        self.note_live(&attempted);
        let Some(handler) = self.env.effects.get(effect).cloned() else {
            return Err(self.refuse_step(step_id, effect, digest, unknown_effect(effect)));
        };
        Ok(StepStart::Admit(
            self.admission(handler, step_id, effect, digest, input, slot),
        ))
    }

    /// The id of the next command called `name`. Counted ids (`name#n`) are unique among
    /// themselves by construction, so only explicit ids need remembering, and a counted id is
    /// checked against them.
    pub(crate) fn step_id(&mut self, name: StepName) -> Result<String, StepError> {
        match name {
            StepName::Counted(name) => self.counted_step_id(&name),
            StepName::Explicit(id) => {
                self.refuse_inside_decision()?;
                let counted_before = id.rsplit_once('#').is_some_and(|(name, n)| {
                    n.parse::<u32>()
                        .is_ok_and(|n| n >= 1 && self.counters.get(name).is_some_and(|c| *c >= n))
                });
                if counted_before || !self.explicit_ids.insert(id.clone()) {
                    return Err(StepError::DuplicateStepId(id));
                }
                Ok(id)
            }
        }
    }

    /// The id of the next command called `name`, counted (`name#n`); the name is copied only
    /// the first time it is used.
    pub(crate) fn counted_step_id(&mut self, name: &str) -> Result<String, StepError> {
        self.refuse_inside_decision()?;
        let count = match self.counters.get_mut(name) {
            Some(seen) => {
                *seen += 1;
                *seen
            }
            None => {
                self.counters.insert(name.to_owned(), 1);
                1
            }
        };
        let id = counted_id(name, count);
        // Most flows name no step explicitly: skip hashing the id then.
        if !self.explicit_ids.is_empty() && self.explicit_ids.contains(&id) {
            return Err(StepError::DuplicateStepId(id));
        }
        Ok(id)
    }

    /// Refuses a command issued while a decision's value is being made: replay serves the
    /// decision without making it, so the command would be missing there.
    pub(super) fn refuse_inside_decision(&self) -> Result<(), StepError> {
        match &self.deciding {
            Some(decision) => Err(StepError::InsideDecision(decision.clone())),
            None => Ok(()),
        }
    }

    /// Refuses a gate on an `(event type, correlation key)` a pending gate already waits on:
    /// a resume could not tell the two apart.
    pub(super) fn refuse_duplicate_gate(
        &self,
        event_type: &str,
        correlation_key: &str,
    ) -> Result<(), StepError> {
        if self.waiting_gate(event_type, correlation_key).is_some() {
            return Err(StepError::DuplicateGate {
                event_type: event_type.to_owned(),
                correlation_key: correlation_key.to_owned(),
            });
        }
        Ok(())
    }

    /// Opens the gate `gate_id`: served from the history while it lasts (`Some` with the
    /// recorded resume when the log holds one), else queued live as `EXECUTION_SUSPENDED`.
    /// `None` means the gate waits.
    pub(super) fn open_gate(
        &mut self,
        gate_id: &str,
        event_type: &str,
        correlation_key: &str,
        classification: &DataClassification,
    ) -> Result<Option<Payload>, StepError> {
        let attempted = Attempted::Suspend {
            gate_id,
            event_type,
            correlation_key,
        };
        if self.replay(attempted, classification) {
            return Ok(self.history.resumed.remove(gate_id));
        }
        if self.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        self.note_live(&attempted);
        self.issue(Event::ExecutionSuspended(ExecutionSuspended {
            gate_id: gate_id.to_owned(),
            event_type: event_type.to_owned(),
            correlation_key: correlation_key.to_owned(),
        }));
        Ok(None)
    }

    /// Matches a command against the history. True when it replays a recorded command; false
    /// when the history is exhausted (the command is live) or the flow diverged (then
    /// `divergence` is set).
    pub(super) fn replay(
        &mut self,
        attempted: Attempted<'_>,
        classification: &DataClassification,
    ) -> bool {
        if self.divergence.is_some() {
            return false;
        }
        let Some((seq, recorded)) = self.history.commands.get(self.cursor) else {
            return false;
        };
        if recorded.matches(&attempted) {
            self.cursor += 1;
            true
        } else {
            let (recorded, attempted) = recorded.describe_against(&attempted, classification);
            self.divergence = Some(NonDeterminism {
                seq: *seq,
                recorded,
                attempted,
            });
            false
        }
    }

    /// A replayed step: its recorded result, or, if it was running when the last worker
    /// stopped, run again (idempotent) or parked in doubt (not idempotent).
    pub(super) fn replay_step(
        &mut self,
        step_id: String,
        effect: &str,
        digest: String,
        input: Payload,
        slot: u64,
    ) -> StepStart {
        // The command just matched is the one before the cursor.
        let recorded = self.history.take_step_state(self.cursor.saturating_sub(1));
        match recorded {
            Some(StepState::Done(Ok(output))) => StepStart::Now(Some(output)),
            Some(StepState::Done(Err(error))) => {
                self.fill(slot, Err(StepError::Failed(error)));
                StepStart::Now(None)
            }
            Some(StepState::InDoubt { attempt }) => {
                self.park_in_doubt(step_id, effect, digest, input, attempt, slot);
                StepStart::Now(None)
            }
            Some(StepState::InFlight { attempt: previous }) => {
                // An effect whose declarations panic is taken as not idempotent: in doubt, the
                // operator decides, rather than run again.
                let declared = self.env.effects.get(effect).cloned().and_then(|handler| {
                    Declared::of(handler.as_ref(), effect)
                        .inspect_err(|error| tracing::error!(step = %step_id, %error.message, "a step in flight is put in doubt"))
                        .ok()
                        .map(|declared| (handler, declared))
                });
                match declared {
                    Some((handler, declared)) if declared.idempotent => {
                        // Run again with the same key, as the next attempt: its STEP_STARTED is
                        // recorded again, so a step re-run after each of several crashes gets
                        // attempts 2, 3, 4... (a quick re-run is recorded by its outcome alone).
                        let attempt = previous.saturating_add(1);
                        let call = self.effect_call(step_id, effect, input, attempt);
                        self.start_step(handler, call, digest, slot, declared);
                    }
                    _ => {
                        self.issue(Event::EffectInDoubt(EffectInDoubt {
                            step_id: step_id.clone(),
                            effect: effect.to_owned(),
                            attempt: previous,
                            reason: Some(worker_stopped(previous)),
                        }));
                        self.park_in_doubt(step_id, effect, digest, input, previous, slot);
                    }
                }
                StepStart::Now(None)
            }
            // A recorded command always has a step state; treat a missing one as never run.
            None => match self.env.effects.get(effect).cloned() {
                Some(handler) => {
                    StepStart::Admit(self.admission(handler, step_id, effect, digest, input, slot))
                }
                None => {
                    self.fill(slot, Err(StepError::Failed(unknown_effect(effect))));
                    StepStart::Now(None)
                }
            },
        }
    }

    /// Keeps a replayed step, which the fold has in doubt, until a verdict; it holds nothing
    /// against the budget.
    pub(super) fn park_in_doubt(
        &mut self,
        step_id: String,
        effect: &str,
        input_digest: String,
        input: Payload,
        attempt: u32,
        slot: u64,
    ) {
        let step = StepSide {
            effect: effect.to_owned(),
            attempt,
            // In doubt, it runs again only on a `retry` verdict, which looks the effect up.
            idempotent: false,
            input_digest,
            input,
            slot,
        };
        self.steps.insert(IdKey::new(&step_id), step);
    }

    /// A new step, up to its effect's admission checks (K2, K3, input), which the caller runs
    /// outside the state's lock ([`Admission::check`]), then hands to
    /// [`FlowState::admitted`].
    pub(super) fn admission(
        &mut self,
        handler: Arc<dyn Effect>,
        step_id: String,
        effect: &str,
        digest: String,
        input: Payload,
        slot: u64,
    ) -> Admission {
        let call = self.effect_call(step_id, effect, input, 1);
        Admission {
            handler,
            call,
            digest,
            slot,
        }
    }

    /// A new step after its admission checks: started, or, refused, recorded as the step's
    /// failure, without a `STEP_STARTED`, and the effect never runs.
    pub(crate) fn admitted(
        &mut self,
        admission: Admission,
        checked: Result<Declared, ErrorInfo>,
    ) -> Result<Option<Payload>, StepError> {
        let Admission {
            handler,
            call,
            digest,
            slot,
        } = admission;
        match checked {
            Ok(declared) => {
                self.start_step(handler, call, digest, slot, declared);
                Ok(None)
            }
            Err(error) => {
                let effect = call.effect.clone();
                Err(self.refuse_step(call.step_id, &effect, digest, error))
            }
        }
    }

    /// A step in one go, its admission checked under the caller's borrow (tests).
    #[cfg(test)]
    pub(crate) fn step_now(
        &mut self,
        slot: u64,
        step_id: String,
        effect: &str,
        input: Payload,
        classification: &DataClassification,
    ) -> Result<Option<Payload>, StepError> {
        match self.step(slot, step_id, effect, input, classification)? {
            StepStart::Now(value) => Ok(value),
            StepStart::Admit(admission) => {
                let checked = admission.check();
                self.admitted(admission, checked)
            }
        }
    }

    /// Records a step that fails before it starts (no such effect, or not admitted): its
    /// failure alone, at no cost.
    pub(super) fn refuse_step(
        &mut self,
        step_id: String,
        effect: &str,
        digest: String,
        error: ErrorInfo,
    ) -> StepError {
        tracing::debug!(step = %step_id, code = %error.code, "step refused before it started");
        self.issue(Event::StepFailed(StepFailed {
            step_id,
            effect: effect.to_owned(),
            input_digest: digest,
            error: error.clone(),
            cost: 0,
        }));
        StepError::Failed(error)
    }

    /// The dispatch of a step, with what the execution may still spend now.
    pub(super) fn effect_call(
        &self,
        step_id: String,
        effect: &str,
        input: Payload,
        attempt: u32,
    ) -> EffectCall {
        EffectCall {
            execution_id: self.env.execution_id.clone(),
            step_id,
            effect: effect.to_owned(),
            input,
            attempt,
            capabilities: Arc::clone(&self.env.capabilities),
            budget_remaining: self.budget_remaining(),
            lease_token: None,
        }
    }

    /// Records a step's start and queues its effect.
    pub(super) fn start_step(
        &mut self,
        handler: Arc<dyn Effect>,
        call: EffectCall,
        digest: String,
        slot: u64,
        declared: Declared,
    ) {
        self.issue(Event::StepStarted(StepStarted {
            step_id: call.step_id.clone(),
            effect: call.effect.clone(),
            input_digest: digest.clone(),
            attempt: call.attempt,
            max_cost: declared.max_cost,
        }));
        let idempotent = declared.idempotent;
        let running = StepSide {
            effect: call.effect.clone(),
            attempt: call.attempt,
            idempotent,
            input_digest: digest,
            input: call.input.clone(),
            slot,
        };
        self.steps.insert(IdKey::new(&call.step_id), running);
        let durable_before = !idempotent;
        self.dispatch.push(Dispatch {
            effect: handler,
            call,
            durable_before,
        });
    }

    /// Notes a command issued past the end of the history, for whole-log replay.
    pub(super) fn note_live(&mut self, attempted: &Attempted<'_>) {
        if self.watch_live && self.first_live.is_none() {
            self.first_live = Some(attempted.to_string());
        }
    }
}

/// The recorded error of a step whose effect is not registered.
pub(crate) fn unknown_effect(effect: &str) -> ErrorInfo {
    ErrorInfo::new(
        codes::UNKNOWN_EFFECT,
        format!("no effect named '{effect}' is registered"),
    )
}

/// Why a step found started, without an outcome, on recovery is in doubt.
pub(crate) fn worker_stopped(attempt: u32) -> ErrorInfo {
    ErrorInfo::new(
        codes::WORKER_STOPPED,
        format!(
            "the worker stopped while attempt {attempt} was running; the effect may or may not have run"
        ),
    )
}

/// `name#n`, built without the formatting machinery (this runs for every command).
pub(crate) fn counted_id(name: &str, n: u32) -> String {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let mut id = String::with_capacity(name.len() + 1 + digits.len() - at);
    id.push_str(name);
    id.push('#');
    for &digit in &digits[at..] {
        id.push(char::from(digit));
    }
    id
}

/// K2 for every effect: its capability (by default the name it is registered as) must have
/// been granted to the execution.
fn authorize(handler: &dyn Effect, call: &EffectCall) -> Result<(), ErrorInfo> {
    let capability = handler.capability().unwrap_or(&call.effect);
    if call.capabilities.contains(capability) {
        return Ok(());
    }
    Err(ErrorInfo::new(
        codes::CAPABILITY_DENIED,
        format!(
            "effect '{}' needs capability '{capability}', which execution {} was not granted",
            call.effect, call.execution_id
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::runtime::history::History;

    #[test]
    fn a_new_execution_holds_every_effect_until_its_start_is_durable() {
        let mut m = M::new_execution(cancelled(), "start", false);
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
    fn a_claimed_new_execution_runs_idempotent_effects_at_once_and_holds_the_others() {
        let mut m = M::new_execution(cancelled(), "start", true);
        let ready = m.issued(
            vec![started("a"), started("b")],
            vec![Fx("a", false), Fx("b", true)],
            vec![],
        );
        assert_eq!(
            ready.run,
            vec![Fx("a", false)],
            "its id is claimed: no start can take it"
        );
        assert!(
            !m.dispatched("b"),
            "a non-idempotent effect waits for its STEP_STARTED"
        );
        let batch = m.take_append().unwrap();
        assert_eq!((batch.expected, batch.events.len()), (0, 3));
        let durable = m.appended(3);
        assert_eq!(durable.replies, vec!["start"]);
        assert_eq!(durable.ready.run, vec![Fx("b", true)]);
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
    fn counted_ids_follow_call_order_and_an_explicit_id_is_used_once() {
        let mut s = flow_state();
        let counted = |s: &mut FlowState| s.step_id(StepName::Counted("a".into()));
        assert_eq!(counted(&mut s), Ok("a#1".to_owned()));
        assert_eq!(counted(&mut s), Ok("a#2".to_owned()));
        let explicit = |s: &mut FlowState, id: &str| s.step_id(StepName::Explicit(id.into()));
        assert_eq!(explicit(&mut s, "x"), Ok("x".to_owned()));
        let twice = |id: &str| Err(StepError::DuplicateStepId(id.into()));
        assert_eq!(explicit(&mut s, "x"), twice("x"));
        assert_eq!(explicit(&mut s, "a#2"), twice("a#2"));
    }

    #[test]
    fn a_step_of_an_unregistered_effect_is_recorded_as_failed_and_runs_nothing() {
        let mut s = flow_state();
        let slot = s.new_slot();
        let none = DataClassification::default();
        let refused = s.step_now(slot, "nope#1".into(), "nope", Payload::null(), &none);
        assert!(matches!(refused, Err(StepError::Failed(_))));
        let (events, dispatches) = s.take_queued();
        assert!(matches!(events.as_slice(), [Event::StepFailed(e)] if e.cost == 0));
        assert!(dispatches.is_empty());
    }

    #[test]
    fn a_replayed_step_is_served_from_the_log_and_another_one_diverges() {
        let digest = input_digest(&Payload::null());
        let done = Event::StepCompleted(StepCompleted {
            step_id: "a#1".into(),
            effect: "e".into(),
            input_digest: digest,
            output: Payload::null(),
            cost: 0,
        });
        let none = DataClassification::default();
        let mut s = flow_state_with(History::from_events(vec![(1, done.clone())]));
        let slot = s.new_slot();
        let served = s.step_now(slot, "a#1".into(), "e", Payload::null(), &none);
        assert_eq!(served, Ok(Some(Payload::null())));
        assert!(s.take_queued().0.is_empty(), "nothing recorded again");
        let mut s = flow_state_with(History::from_events(vec![(1, done)]));
        let other = s.step_now(slot, "b#1".into(), "e", Payload::null(), &none);
        assert_eq!(other, Err(StepError::Diverged));
        assert_eq!(s.divergence().map(|d| d.seq), Some(1));
    }
}
