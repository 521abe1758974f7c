//! A `first_of` group as the log records it: a note written live before the group's gates,
//! `DECISION_RECORDED` of kind `loom.firstOf` under `<first gate id>:firstOf`, value
//! `{"gates": [<gate id>, ..]}`, so that a reader of the log alone (the console's offline
//! resume) closes the other gates of the one it resumes as the runtime does (issue 41, item 2).
//! The note is no command: replay neither matches nor serves it, so a log written before it
//! replays as before, and such a log's group is simply unknown to a reader.

use crate::envelope::EventEnvelope;
use crate::event::{Event, ExecutionResumed};
use crate::fold::ExecutionState;
#[cfg(test)]
use crate::payload::Payload;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{id, started, suspended};
    use crate::envelope::EventEnvelope;
    use crate::event::DecisionRecorded;

    fn log(note: serde_json::Value) -> Vec<EventEnvelope> {
        let events = vec![
            started("f"),
            Event::DecisionRecorded(DecisionRecorded {
                step_id: "A#1:firstOf".into(),
                kind: FIRST_OF_KIND.into(),
                value: Payload::from_value(&note),
            }),
            suspended("A#1"),
            suspended("B#1"),
        ];
        events
            .into_iter()
            .enumerate()
            .map(|(seq, event)| EventEnvelope::new(id("e"), seq as u64, event))
            .collect()
    }

    /// A note that is not what the runtime writes (no `gates`, not strings, not naming the
    /// gate) closes nothing, and names no gate that is not pending.
    #[test]
    fn a_note_of_another_shape_closes_nothing() {
        for note in [
            serde_json::json!(null),
            serde_json::json!({"gates": "A#1"}),
            serde_json::json!({"gates": [1, 2]}),
            serde_json::json!({"gates": ["C#1", "D#1"]}),
        ] {
            let log = log(note.clone());
            let state = ExecutionState::fold(&log).unwrap();
            assert_eq!(first_of_closing(&log, &state, "A#1"), None, "{note}");
        }
        let log = log(serde_json::json!({"gates": ["A#1", "B#1", "Z#1"]}));
        let state = ExecutionState::fold(&log).unwrap();
        let closing = first_of_closing(&log, &state, "A#1").unwrap();
        let closed: Vec<&str> = closing
            .iter()
            .filter_map(|event| match event {
                Event::ExecutionResumed(r) => Some(r.gate_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(closed, ["B#1"], "a gate that is not pending is not closed");
    }
}
