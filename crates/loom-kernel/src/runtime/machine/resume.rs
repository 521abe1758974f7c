//! A caller's resume of a pending gate (the first gate of a `first_of` closes the others in
//! the same batch).

use super::state::FlowState;
use crate::payload::Payload;
use crate::runtime::markers::{closed_payload, is_reserved_event_type, is_reserved_payload};

/// Why a resume could not be applied to the running flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GateMiss {
    NoPendingGate,
    /// The gate's deadline passed first.
    TimedOut,
    /// A `loom.` gate: only the runtime resumes it.
    Reserved,
    /// The payload is the runtime's timeout marker.
    ReservedPayload,
}

impl FlowState {
    /// A resume arrived: record it against the first pending gate it matches, which must be
    /// `approved_gate` when the resume was approved for one gate.
    pub(crate) fn resume_gate(
        &mut self,
        event_type: &str,
        correlation_key: &str,
        payload: Payload,
        approved_gate: Option<&str>,
    ) -> Result<String, GateMiss> {
        if is_reserved_event_type(event_type) {
            return Err(GateMiss::Reserved);
        }
        if is_reserved_payload(&payload) {
            return Err(GateMiss::ReservedPayload);
        }
        let Some(gate_id) = self
            .waiting_gate(event_type, correlation_key)
            .map(str::to_owned)
        else {
            let key = (event_type.to_owned(), correlation_key.to_owned());
            return Err(if self.timed_out.contains(&key) {
                GateMiss::TimedOut
            } else {
                GateMiss::NoPendingGate
            });
        };
        // An approval given while another gate of this key waited is not one for this gate.
        if approved_gate.is_some_and(|approved| approved != gate_id) {
            return Err(GateMiss::NoPendingGate);
        }
        let Some(gate) = self.gates.remove(&gate_id) else {
            return Err(GateMiss::NoPendingGate);
        };
        if let Some(deadline) = gate.deadline {
            self.disarmed.push((gate_id.clone(), deadline));
        }
        if let Some((group, chosen)) = gate.group {
            // The first of a `first_of`: its resume, then the others closed, in one batch.
            self.close_gate(gate_id.clone(), payload.clone());
            let closed = closed_payload(&gate_id);
            for (other_id, other) in self.take_group(group) {
                if let Some(deadline) = other.deadline {
                    self.disarmed.push((other_id.clone(), deadline));
                }
                self.close_gate(other_id, closed.clone());
            }
            if let Some(slot) = self.slots.get_mut(&group) {
                slot.chosen = Some(chosen);
            }
            self.fill(group, Ok(payload));
            return Ok(gate_id);
        }
        self.close_gate(gate_id.clone(), payload.clone());
        self.fill(gate.slot, Ok(payload));
        Ok(gate_id)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::event::Event;
    use crate::runtime::markers::timed_out_payload;

    #[test]
    fn a_resume_answers_its_gate_once_records_it_and_disarms_its_deadline() {
        let mut s = flow_state();
        let slot = waiting_gate(&mut s, "Go#1", "Go", "k", Some(50), None);
        assert_eq!(
            s.resume_gate("Go", "k", Payload::null(), None),
            Ok("Go#1".to_owned())
        );
        assert!(matches!(filled(&s, slot), Some(Ok(_))));
        assert!(matches!(s.out.as_slice(), [Event::ExecutionResumed(r)] if r.gate_id == "Go#1"));
        assert_eq!(s.take_deadlines().1, vec![("Go#1".to_owned(), 50)]);
        assert_eq!(
            s.resume_gate("Go", "k", Payload::null(), None),
            Err(GateMiss::NoPendingGate)
        );
        assert_eq!(s.out.len(), 1, "the second resume records nothing");
    }

    #[test]
    fn a_resume_reaches_the_gate_opened_first_not_the_first_by_id() {
        let mut s = flow_state();
        waiting_gate(&mut s, "Go#9", "Go", "k", None, None);
        waiting_gate(&mut s, "Go#10", "Go", "k", None, None);
        assert_eq!(
            s.resume_gate("Go", "k", Payload::null(), None),
            Ok("Go#9".to_owned()),
            "Go#10 sorts first by id, but Go#9 was opened first"
        );
        assert_eq!(
            s.resume_gate("Go", "k", Payload::null(), Some("Go#10")),
            Ok("Go#10".to_owned()),
            "an approval for the gate the fold names is honoured"
        );
    }

    #[test]
    fn a_caller_cannot_resume_a_runtime_gate_nor_forge_its_marker() {
        let mut s = flow_state();
        waiting_gate(&mut s, "timer#1", "loom.timer", "timer#1", Some(5), None);
        assert_eq!(
            s.resume_gate("loom.timer", "timer#1", Payload::null(), None),
            Err(GateMiss::Reserved)
        );
        waiting_gate(&mut s, "Go#1", "Go", "k", None, None);
        assert_eq!(
            s.resume_gate("Go", "k", timed_out_payload(5), None),
            Err(GateMiss::ReservedPayload)
        );
        assert!(s.out.is_empty());
        assert_eq!(s.gates.len(), 2);
    }

    #[test]
    fn the_first_gate_of_a_first_of_closes_the_others_in_the_same_batch() {
        let mut s = flow_state();
        let group = s.new_slot();
        waiting_gate(&mut s, "A#1", "A", "k", Some(9), Some((group, 0)));
        waiting_gate(&mut s, "B#1", "B", "k", None, Some((group, 1)));
        assert_eq!(
            s.resume_gate("B", "k", Payload::null(), None),
            Ok("B#1".to_owned())
        );
        assert_eq!(s.out.len(), 2, "its resume, then the other closed");
        assert!(s.gates.is_empty());
        assert_eq!(s.slots.get(&group).and_then(|slot| slot.chosen), Some(1));
        assert_eq!(s.take_deadlines().1, vec![("A#1".to_owned(), 9)]);
    }
}
