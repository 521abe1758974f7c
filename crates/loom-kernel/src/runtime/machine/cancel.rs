//! A cancel: the steps it cuts off recorded in doubt (K9), then `EXECUTION_CANCELLED`; what
//! the write side holds is dropped. A flow that returns with steps running cuts them off the
//! same way (`end.rs`).

use super::state::FlowState;
use super::{Held, Machine};
use crate::event::*;
use crate::fold::StepStatus;
use crate::runtime::codes;

impl<R, D: Held, C> Machine<R, D, C> {
    /// A cancel: the doubts it records, then `EXECUTION_CANCELLED`; the execution has ended.
    pub(crate) fn cancelled(&mut self, doubts: Vec<Event>, cancelled: Event, reply: R) {
        // The flow's queue is empty here: the driver takes it after every poll.
        self.queued.extend(doubts);
        self.queued.push(cancelled);
        self.end();
        self.queued_replies.push(reply);
    }
}

/// What ends an execution while some of its effects run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CutOff {
    /// A cancel.
    Cancel,
    /// The flow returned without awaiting them (a `select` another branch won, a command
    /// future dropped).
    FlowReturned,
    /// No process runs them: the one that did stopped before their outcome was recorded, and
    /// an operator writes to the log offline (`machine/offline.rs`).
    WorkerStopped,
}

impl CutOff {
    fn reason(self, attempt: u32) -> ErrorInfo {
        match self {
            Self::Cancel => ErrorInfo::new(
                codes::CANCELLED_WHILE_RUNNING,
                format!(
                    "the execution was cancelled while attempt {attempt} was running; the effect may or may not have run"
                ),
            ),
            Self::FlowReturned => ErrorInfo::new(
                codes::FLOW_RETURNED_WHILE_RUNNING,
                format!(
                    "the flow returned without awaiting the step while attempt {attempt} was running; the effect may or may not have run"
                ),
            ),
            Self::WorkerStopped => ErrorInfo::new(
                codes::WORKER_STOPPED,
                format!(
                    "the process running attempt {attempt} stopped before its outcome was recorded (recorded by an operator's offline write; the log does not say whether the effect is idempotent); the effect may or may not have run"
                ),
            ),
        }
    }
}

impl FlowState {
    /// The execution ends (`why`) with effects running: every non-idempotent step whose effect
    /// may be running (`dispatched` says which were handed to their effect) is recorded in
    /// doubt, so an operator learns that it may have happened (K9). An idempotent one needs no
    /// word: running it again is harmless, and nothing will.
    pub(crate) fn doubts_cut_off(
        &mut self,
        why: CutOff,
        dispatched: impl Fn(&str) -> bool,
    ) -> Vec<Event> {
        let mut cut_off: Vec<(&str, &str, u32)> = self
            .steps
            .iter()
            .filter(|(step_id, step)| !step.idempotent && dispatched(step_id.as_str()))
            .filter(|(step_id, _)| {
                self.fold
                    .step(step_id.as_str())
                    .is_some_and(|record| matches!(record.status, StepStatus::Started { .. }))
            })
            .map(|(step_id, step)| (step_id.as_str(), step.effect.as_str(), step.attempt))
            .collect();
        // In step-id order, not the map's: the log never depends on hash order.
        cut_off.sort_by(|a, b| a.0.cmp(b.0));
        let doubts: Vec<Event> = cut_off
            .into_iter()
            .map(|(step_id, effect, attempt)| {
                Event::EffectInDoubt(EffectInDoubt {
                    step_id: step_id.to_owned(),
                    effect: effect.to_owned(),
                    attempt,
                    reason: Some(why.reason(attempt)),
                })
            })
            .collect();
        for doubt in &doubts {
            self.fold_issued(doubt);
        }
        doubts
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::payload::Payload;

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
    fn a_cancel_records_in_doubt_only_the_non_idempotent_steps_handed_to_their_effect() {
        let mut s = flow_state();
        running(&mut s, "b#1", false, 0);
        running(&mut s, "a#1", false, 0);
        running(&mut s, "held#1", false, 0);
        running(&mut s, "idem#1", true, 0);
        let doubts = s.doubts_cut_off(CutOff::Cancel, |step| step != "held#1");
        let ids: Vec<&str> = doubts
            .iter()
            .filter_map(|e| match e {
                Event::EffectInDoubt(d) => Some(d.step_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            ids,
            vec!["a#1", "b#1"],
            "in step-id order, never hash order"
        );
    }
}
