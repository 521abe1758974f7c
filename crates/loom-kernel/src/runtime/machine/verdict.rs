//! An operator's verdict on a step in doubt (LD-006): completed, failed, or run again.

use super::command::{Declared, unknown_effect};
use super::state::FlowState;
use super::vocabulary::StepError;
use crate::event::*;

/// Why a verdict could not be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VerdictMiss {
    NotInDoubt,
}

impl FlowState {
    /// An operator's verdict on a step in doubt.
    pub(crate) fn resolve(
        &mut self,
        step_id: &str,
        verdict: Verdict,
        operator: Option<String>,
    ) -> Result<(), VerdictMiss> {
        if !self.fold.steps_in_doubt().contains(step_id) {
            return Err(VerdictMiss::NotInDoubt);
        }
        let step = self.steps.remove(step_id).ok_or(VerdictMiss::NotInDoubt)?;
        // The fold charges a `completed` verdict what the step held (LD-024).
        self.issue(Event::EffectResolved(EffectResolved {
            step_id: step_id.to_owned(),
            verdict: verdict.clone(),
            operator,
        }));
        match verdict {
            Verdict::Completed { output } => self.fill(step.slot, Ok(output)),
            Verdict::Failed { error } => self.fill(step.slot, Err(StepError::Failed(error))),
            Verdict::Retry => match self.env.effects.get(&step.effect).cloned() {
                Some(handler) => match Declared::of(handler.as_ref(), &step.effect) {
                    Ok(declared) => {
                        let call = self.effect_call(
                            step_id.to_owned(),
                            &step.effect,
                            step.input,
                            step.attempt.saturating_add(1),
                        );
                        self.start_step(handler, call, step.input_digest, step.slot, declared);
                    }
                    // Recorded as the step's failure, as a refused new step is.
                    Err(error) => {
                        let failed = self.refuse_step(
                            step_id.to_owned(),
                            &step.effect,
                            step.input_digest,
                            error,
                        );
                        self.fill(step.slot, Err(failed));
                    }
                },
                None => self.fill(
                    step.slot,
                    Err(StepError::Failed(unknown_effect(&step.effect))),
                ),
            },
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::payload::Payload;
    use crate::runtime::effect::EffectOutcome;

    /// A flow whose step `charge#1` is parked in doubt, and that step's slot.
    fn charge_in_doubt() -> (FlowState, u64) {
        let mut s = flow_state();
        let slot = s.new_slot();
        durable(&mut s, started_as("charge#1", "charge", 0));
        durable(&mut s, in_doubt("charge#1", "charge"));
        s.park_in_doubt(
            "charge#1".into(),
            "charge",
            "d".into(),
            Payload::null(),
            1,
            slot,
        );
        (s, slot)
    }

    #[test]
    fn a_verdict_answers_a_step_in_doubt_once() {
        let (mut s, slot) = charge_in_doubt();
        assert!(s.waits_for_messages());
        let output = Payload::from_value(&serde_json::json!("ok"));
        let verdict = Verdict::Completed {
            output: output.clone(),
        };
        assert_eq!(s.resolve("charge#1", verdict, None), Ok(()));
        assert!(matches!(filled(&s, slot), Some(Ok(p)) if *p == output));
        assert!(matches!(s.out.as_slice(), [Event::EffectResolved(_)]));
        assert_eq!(
            s.resolve("charge#1", Verdict::Retry, None),
            Err(VerdictMiss::NotInDoubt)
        );
        assert!(!s.waits_for_messages());
    }

    #[test]
    fn a_retry_of_an_effect_no_longer_registered_fails_the_step() {
        let (mut s, slot) = charge_in_doubt();
        assert_eq!(s.resolve("charge#1", Verdict::Retry, None), Ok(()));
        assert!(matches!(filled(&s, slot), Some(Err(StepError::Failed(_)))));
        assert!(s.take_queued().1.is_empty(), "nothing runs");
    }

    #[test]
    fn a_completed_verdict_charges_what_the_step_held_and_a_failed_one_nothing() {
        let mut s = flow_state();
        running(&mut s, "charge#1", false, 3);
        let doubt = EffectOutcome::in_doubt(ErrorInfo::new("bank.timeout", "?"));
        s.complete_step("charge#1", doubt);
        let output = Payload::null();
        assert_eq!(
            s.resolve("charge#1", Verdict::Completed { output }, None),
            Ok(())
        );
        assert_eq!(s.budget_spent(), 3);
        running(&mut s, "refund#1", false, 2);
        let doubt = EffectOutcome::in_doubt(ErrorInfo::new("bank.timeout", "?"));
        s.complete_step("refund#1", doubt);
        let error = ErrorInfo::new("bank.refused", "no");
        assert_eq!(
            s.resolve("refund#1", Verdict::Failed { error }, None),
            Ok(())
        );
        assert_eq!(s.budget_spent(), 3);
    }
}
