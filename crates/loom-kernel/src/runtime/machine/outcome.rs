//! An effect's outcome: recorded (completed, failed, or in doubt: K9), its budget released
//! (K3), and handed to the flow.

use super::state::{FlowState, StepSide};
use super::vocabulary::StepError;
use crate::event::*;
use crate::hash::IdKey;
use crate::runtime::effect::{EffectOutcome, EffectResult};

impl FlowState {
    /// An effect finished while the write side has handed the events before `unsent` to an
    /// append (a quick step's outcome takes the place of its start only after them).
    pub(crate) fn effect_done(&mut self, step_id: &str, outcome: EffectOutcome, unsent: u64) {
        self.unsent = unsent;
        self.complete_step(step_id, outcome);
    }

    /// An effect finished: record its outcome and hand it to the flow.
    pub(crate) fn complete_step(&mut self, step_id: &str, outcome: EffectOutcome) {
        // A step of this run; the fold refuses an outcome for a step that does not run (a
        // second outcome, or one for a step in doubt), which is then ignored.
        // Looked up by key, not by `&str`: comparing keys needs no UTF-8 check of each.
        let Some(step) = self.steps.remove(&IdKey::new(step_id)) else {
            return;
        };
        let (event, value) = match outcome.result {
            EffectResult::InDoubt(reason) => {
                let code = reason.code.clone();
                let doubt = Event::EffectInDoubt(EffectInDoubt {
                    step_id: step_id.to_owned(),
                    effect: step.effect.clone(),
                    attempt: step.attempt,
                    reason: Some(reason),
                });
                if self.try_issue(doubt).is_none() {
                    tracing::warn!(step = %step_id, %code, "effect in doubt");
                }
                // It stays beside the fold for a verdict; in doubt, it holds nothing (K3).
                self.steps.insert(IdKey::new(step_id), step);
                return;
            }
            EffectResult::Completed(output) => (
                Event::StepCompleted(StepCompleted {
                    step_id: step_id.to_owned(),
                    effect: step.effect,
                    input_digest: step.input_digest,
                    output: output.clone(),
                    cost: outcome.cost,
                }),
                Ok(output),
            ),
            EffectResult::Failed(error) => (
                Event::StepFailed(StepFailed {
                    step_id: step_id.to_owned(),
                    effect: step.effect,
                    input_digest: step.input_digest,
                    error: error.clone(),
                    cost: outcome.cost,
                }),
                Err(StepError::Failed(error)),
            ),
        };
        match self.try_issue(event) {
            None => self.fill(step.slot, value),
            // Not running (in doubt): it stays as it was.
            Some(Event::StepCompleted(StepCompleted {
                effect,
                input_digest,
                ..
            }))
            | Some(Event::StepFailed(StepFailed {
                effect,
                input_digest,
                ..
            })) => {
                let step = StepSide {
                    effect,
                    input_digest,
                    ..step
                };
                self.steps.insert(IdKey::new(step_id), step);
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::payload::Payload;

    #[test]
    fn an_outcome_is_recorded_its_budget_released_and_handed_to_the_flow_once() {
        let mut s = flow_state();
        let slot = running(&mut s, "reserve#1", true, 4);
        s.complete_step("reserve#1", EffectOutcome::ok(Payload::null()).with_cost(3));
        assert_eq!((s.budget_held(), s.budget_spent()), (0, 3));
        assert!(matches!(filled(&s, slot), Some(Ok(_))));
        assert!(matches!(s.out.as_slice(), [Event::StepCompleted(e)] if e.cost == 3));
        s.complete_step("reserve#1", EffectOutcome::ok(Payload::null()));
        assert_eq!(
            s.out.len(),
            1,
            "a second outcome of the same step is ignored"
        );
    }

    #[test]
    fn an_outcome_in_doubt_costs_nothing_and_waits_for_a_verdict() {
        let mut s = flow_state();
        let slot = running(&mut s, "charge#1", false, 2);
        let doubt = EffectOutcome::in_doubt(ErrorInfo::new("bank.timeout", "?")).with_cost(5);
        s.complete_step("charge#1", doubt);
        assert_eq!((s.budget_held(), s.budget_spent()), (0, 0));
        assert!(filled(&s, slot).is_none());
        assert!(s.waits_for_messages());
        assert!(matches!(s.out.as_slice(), [Event::EffectInDoubt(_)]));
    }
}
