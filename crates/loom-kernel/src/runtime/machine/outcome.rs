//! An effect's outcome: recorded (completed, failed, or in doubt: K9), its budget released
//! (K3), and handed to the flow.

use super::state::FlowState;
use crate::event::*;
use crate::fold::StepStatus;
use crate::runtime::ctx::StepError;
use crate::runtime::effect::{EffectOutcome, EffectResult};

impl FlowState {
    /// An effect finished: record its outcome and hand it to the flow.
    pub(crate) fn complete_step(&mut self, step_id: &str, outcome: EffectOutcome) {
        // A step of this run that the fold has running; a second outcome is ignored.
        let ours = self.steps.contains_key(step_id);
        let running = self
            .fold
            .step(step_id)
            .and_then(|record| match record.status {
                StepStatus::Started { attempt, .. } if ours => {
                    Some((record.effect.to_string(), attempt))
                }
                _ => None,
            });
        let Some((effect, attempt)) = running else {
            return;
        };
        let cost = outcome.cost;
        let result = match outcome.result {
            EffectResult::InDoubt(reason) => {
                // It stays beside the fold for a verdict; in doubt, it holds nothing (K3).
                tracing::warn!(step = %step_id, code = %reason.code, "effect in doubt");
                self.issue(Event::EffectInDoubt(EffectInDoubt {
                    step_id: step_id.to_owned(),
                    effect,
                    attempt,
                    reason: Some(reason),
                }));
                return;
            }
            result => result,
        };
        let Some(step) = self.steps.remove(step_id) else {
            return;
        };
        let value = match result {
            EffectResult::Completed(output) => {
                self.issue(Event::StepCompleted(StepCompleted {
                    step_id: step_id.to_owned(),
                    effect,
                    input_digest: step.input_digest,
                    output: output.clone(),
                    cost,
                }));
                Ok(output)
            }
            EffectResult::Failed(error) => {
                self.issue(Event::StepFailed(StepFailed {
                    step_id: step_id.to_owned(),
                    effect,
                    input_digest: step.input_digest,
                    error: error.clone(),
                    cost,
                }));
                Err(StepError::Failed(error))
            }
            EffectResult::InDoubt(_) => return,
        };
        self.fill(step.slot, value);
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
