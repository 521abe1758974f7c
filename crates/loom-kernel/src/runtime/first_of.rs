//! A `first_of` group as the log records it: a note written live before the group's gates,
//! `DECISION_RECORDED` of kind `loom.firstOf` under `<first gate id>:firstOf`, value
//! `{"gates": [<gate id>, ..]}`, so that a reader of the log alone (the console's offline
//! resume) closes the other gates of the one it resumes as the runtime does (issue 41, item 2).
//! The note is no command: replay neither matches nor serves it, so a log written before it
//! replays as before, and such a log's group is simply unknown to a reader.

use crate::envelope::EventEnvelope;
use crate::event::{Event, ExecutionResumed};
use crate::fold::ExecutionState;
use crate::runtime::markers::{FIRST_OF_KIND, closed_payload, is_first_of_step_id};

/// The resumes that close the other gates of `gate_id`'s `first_of` group when `gate_id` is
/// resumed, as the runtime records them in the same batch: one per gate of the group still
/// pending in `state`, in the group's order, with the closed marker naming `gate_id`. `None`
/// when `log` records no group holding `gate_id` (a gate opened alone, or a log from before
/// the note).
pub fn first_of_closing(
    log: &[EventEnvelope],
    state: &ExecutionState,
    gate_id: &str,
) -> Option<Vec<Event>> {
    let gates = log.iter().find_map(|envelope| match &envelope.event {
        Event::DecisionRecorded(note)
            if note.kind == FIRST_OF_KIND && is_first_of_step_id(&note.step_id) =>
        {
            let gates: Vec<String> = note
                .value
                .to_value()
                .get("gates")?
                .as_array()?
                .iter()
                .filter_map(|gate| gate.as_str().map(str::to_owned))
                .collect();
            gates.iter().any(|gate| gate == gate_id).then_some(gates)
        }
        _ => None,
    })?;
    let closed = closed_payload(gate_id);
    let pending = state.pending_gates();
    Some(
        gates
            .iter()
            .filter(|other| *other != gate_id)
            .filter_map(|other| {
                let gate = pending.get(other.as_str())?;
                Some(Event::ExecutionResumed(ExecutionResumed {
                    gate_id: other.clone(),
                    event_type: gate.event_type.to_string(),
                    correlation_key: gate.correlation_key.clone(),
                    payload: closed.clone(),
                }))
            })
            .collect(),
    )
}
