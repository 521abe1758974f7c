//! A child's end (LD-015): the gate that waits for it is resumed with its marker; and the
//! children whose gates were opened, for the driver to start, or to cancel when the parent
//! ends.

use super::state::FlowState;
use super::vocabulary::ChildStart;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::markers::CHILD_EVENT_TYPE;

impl FlowState {
    /// The children whose gates were opened (or replayed as pending) since the driver last
    /// looked: the driver starts them once their gates are durable.
    pub(crate) fn take_child_starts(&mut self) -> Vec<ChildStart> {
        std::mem::take(&mut self.child_starts)
    }

    /// The child gates still pending, `(gate id, child id)`, in gate order: the children to
    /// cancel when the execution ends.
    pub(crate) fn pending_children(&self) -> Vec<(String, ExecutionId)> {
        let pending = self.fold.pending_gates();
        let mut children: Vec<_> = self
            .gates
            .keys()
            .filter_map(|gate_id| pending.get(gate_id).map(|g| (gate_id, g)))
            .filter(|(_, g)| *g.event_type == *CHILD_EVENT_TYPE)
            .filter_map(|(gate_id, g)| {
                ExecutionId::from_stored(&g.correlation_key)
                    .ok()
                    .map(|child| (gate_id.clone(), child))
            })
            .collect();
        children.sort();
        children
    }

    /// The child `child` ended (`payload` is its marker): the gate that waits for it is
    /// resumed. False when no gate waits for it (it was delivered already): nothing recorded.
    pub(crate) fn child_ended(&mut self, child: &ExecutionId, payload: Payload) -> bool {
        let Some(gate_id) = self
            .waiting_gate(CHILD_EVENT_TYPE, child.as_str())
            .map(str::to_owned)
        else {
            return false;
        };
        let Some(gate) = self.gates.remove(&gate_id) else {
            return false;
        };
        self.close_gate(gate_id, payload.clone());
        self.fill(gate.slot, Ok(payload));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn a_child_s_end_resumes_the_gate_that_waits_for_it_once() {
        let mut s = flow_state();
        let slot = waiting_gate(&mut s, "child:f#1", CHILD_EVENT_TYPE, "p/f#1", None, None);
        let child = ExecutionId::new("p/f#1").expect("a child's id");
        assert_eq!(
            s.pending_children(),
            vec![("child:f#1".to_owned(), child.clone())]
        );
        assert!(s.child_ended(&child, Payload::null()));
        assert!(matches!(filled(&s, slot), Some(Ok(_))));
        assert!(!s.child_ended(&child, Payload::null()), "delivered once");
        assert!(s.pending_children().is_empty());
        assert_eq!(s.out.len(), 1);
    }
}
