//! Deadlines (LD-009): those armed by gates opened (or replayed as pending) and disarmed by
//! resumes, for the driver to hand to the runtime's timer index, and a deadline that passed,
//! which closes its gate (or every gate of its `first_of`) with the timeout marker.

use std::collections::BTreeSet;

use super::state::{FlowState, GateSide};
use crate::event::*;
use crate::payload::Payload;
use crate::runtime::markers::{TIMER_EVENT_TYPE, timed_out_payload};

/// A gate's id and its deadline (unix ms).
pub(crate) type GateDeadline = (String, u64);

impl FlowState {
    /// The deadline of gate `gate_id` passed: close the gate, if it still waits for that
    /// deadline, with the timeout marker. False when it does not (it was resumed first, or the
    /// execution moved on): the late deadline is ignored and nothing is recorded.
    pub(crate) fn expire_gate(&mut self, gate_id: &str, deadline_ms: u64) -> bool {
        let waits = self
            .gates
            .get(gate_id)
            .is_some_and(|g| g.deadline == Some(deadline_ms));
        if !waits {
            return false;
        }
        let Some(gate) = self.gates.remove(gate_id) else {
            return false;
        };
        let payload = timed_out_payload(deadline_ms);
        if let Some((group, _)) = gate.group {
            // Every gate of the `first_of` closes with the timeout marker, in order.
            let mut all = vec![(gate_id.to_owned(), gate)];
            all.extend(self.take_group(group));
            all.sort_by_key(|(_, g)| g.group.map(|(_, index)| index));
            for (gate_id, _) in all {
                if let Some(key) = self.close_gate(gate_id, payload.clone()) {
                    self.timed_out.insert(key);
                }
            }
            self.fill(group, Ok(payload));
            return true;
        }
        let Some(key) = self.close_gate(gate_id.to_owned(), payload.clone()) else {
            return true;
        };
        if key.0 == TIMER_EVENT_TYPE {
            self.fill(gate.slot, Ok(Payload::null()));
        } else {
            self.timed_out.insert(key);
            self.fill(gate.slot, Ok(payload));
        }
        true
    }

    /// The id of the gate of this run that waits for `(event_type, correlation_key)` (the
    /// fold says what each pending gate waits for).
    pub(super) fn waiting_gate(&self, event_type: &str, correlation_key: &str) -> Option<&str> {
        let pending = self.fold.pending_gates();
        // The one opened first, as the fold says (`gate_waiting_for`), not the first by id:
        // `Approval#10` sorts before `Approval#9`.
        self.gates
            .keys()
            .filter_map(|gate_id| {
                let gate = pending.get(gate_id)?;
                (*gate.event_type == *event_type && gate.correlation_key == correlation_key)
                    .then_some((gate.seq, gate_id.as_str()))
            })
            .min()
            .map(|(_, gate_id)| gate_id)
    }

    /// Closes the pending gate `gate_id` with `payload` (its `EXECUTION_RESUMED`); the event
    /// type and correlation key it waited for.
    pub(super) fn close_gate(
        &mut self,
        gate_id: String,
        payload: Payload,
    ) -> Option<(String, String)> {
        let gate = self.fold.pending_gates().get(&gate_id)?;
        let event_type = gate.event_type.to_string();
        let correlation_key = gate.correlation_key.clone();
        self.issue(Event::ExecutionResumed(ExecutionResumed {
            gate_id,
            event_type: event_type.clone(),
            correlation_key: correlation_key.clone(),
            payload,
        }));
        Some((event_type, correlation_key))
    }

    /// Removes and returns the gates of this run in a `first_of` group, in their order.
    pub(super) fn take_group(&mut self, group: u64) -> Vec<(String, GateSide)> {
        let mut taken = Vec::new();
        self.gates.retain(|gate_id, gate| {
            let ours = gate.group.is_some_and(|(of, _)| of == group);
            if ours {
                taken.push((gate_id.clone(), *gate));
            }
            !ours
        });
        taken.sort_by_key(|(_, g)| g.group.map(|(_, index)| index));
        taken
    }

    /// The gates their deadline closed, for resumes that come after the execution ended.
    pub(crate) fn timed_out_gates(&self) -> BTreeSet<(String, String)> {
        self.timed_out.clone()
    }

    /// Deadlines to arm and to disarm since the last call.
    pub(crate) fn take_deadlines(&mut self) -> (Vec<GateDeadline>, Vec<GateDeadline>) {
        (
            std::mem::take(&mut self.armed),
            std::mem::take(&mut self.disarmed),
        )
    }

    /// The deadlines of the gates still pending.
    pub(crate) fn pending_deadlines(&self) -> Vec<GateDeadline> {
        self.gates
            .iter()
            .filter_map(|(gate_id, g)| g.deadline.map(|d| (gate_id.clone(), d)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::GateMiss;
    use super::super::fixtures::*;
    use super::*;
    use crate::runtime::markers::is_timed_out_payload;

    #[test]
    fn a_deadline_closes_its_gate_once_and_a_later_resume_is_told_it_timed_out() {
        let mut s = flow_state();
        let slot = waiting_gate(&mut s, "Go#1", "Go", "k", Some(50), None);
        assert!(
            !s.expire_gate("Go#1", 49),
            "another deadline than the gate's is ignored"
        );
        assert!(s.expire_gate("Go#1", 50));
        assert!(matches!(filled(&s, slot), Some(Ok(p)) if is_timed_out_payload(p)));
        assert!(!s.expire_gate("Go#1", 50), "a gate closes once");
        assert_eq!(
            s.resume_gate("Go", "k", Payload::null(), None),
            Err(GateMiss::TimedOut)
        );
        assert_eq!(s.out.len(), 1);
    }

    #[test]
    fn a_timer_yields_null_and_every_gate_of_a_first_of_closes_at_its_deadline() {
        let mut s = flow_state();
        let timer = waiting_gate(
            &mut s,
            "timer#1",
            TIMER_EVENT_TYPE,
            "timer#1",
            Some(5),
            None,
        );
        assert!(s.expire_gate("timer#1", 5));
        assert!(matches!(filled(&s, timer), Some(Ok(p)) if *p == Payload::null()));
        let group = s.new_slot();
        waiting_gate(&mut s, "A#1", "A", "k", Some(9), Some((group, 0)));
        waiting_gate(&mut s, "B#1", "B", "k", None, Some((group, 1)));
        assert_eq!(s.pending_deadlines(), vec![("A#1".to_owned(), 9)]);
        assert!(s.expire_gate("A#1", 9));
        assert!(s.gates.is_empty());
        assert_eq!(s.out.len(), 3);
        assert_eq!(s.timed_out_gates().len(), 2);
        assert!(s.pending_deadlines().is_empty());
    }
}
