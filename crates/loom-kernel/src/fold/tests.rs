use super::*;
use crate::event::{Event, ExecutionStarted, StepCompleted, StepStarted};

fn id() -> ExecutionId {
    ExecutionId::new("x").expect("a valid id")
}

fn start() -> Event {
    Event::ExecutionStarted(ExecutionStarted {
        flow: "f".into(),
        flow_version: 1,
        input: Payload::null(),
        capabilities: BTreeSet::new(),
        budget: Some(10),
    })
}

fn started(step: &str, max_cost: u64) -> Event {
    Event::StepStarted(StepStarted {
        step_id: step.into(),
        effect: "e".into(),
        input_digest: "d".into(),
        attempt: 1,
        max_cost,
    })
}

fn completed(step: &str, cost: u64) -> Event {
    Event::StepCompleted(StepCompleted {
        step_id: step.into(),
        effect: "e".into(),
        input_digest: "d".into(),
        output: Payload::null(),
        cost,
    })
}

fn fold_log(events: Vec<Event>) -> ExecutionState {
    let log: Vec<EventEnvelope> = (0..)
        .zip(events)
        .map(|(seq, event)| EventEnvelope::new(id(), seq, event))
        .collect();
    ExecutionState::fold(&log).expect("a valid log")
}

#[test]
fn a_quick_step_folded_as_issued_is_the_fold_of_its_outcome_alone_in_its_start_s_place() {
    let mut issued = ExecutionState::new();
    let events = [start(), started("a", 4), started("b", 2), completed("a", 3)];
    for event in &events {
        issued.apply_issued(&id(), event, 1).expect("accepted");
    }
    assert_eq!(issued.held_running(), 2, "b still holds its max_cost");
    let log = fold_log(vec![start(), completed("a", 3), started("b", 2)]);
    assert_eq!(issued, log);
    // Once its start is handed to an append, the outcome is the next event.
    let mut issued = ExecutionState::new();
    issued.apply_issued(&id(), &start(), 0).expect("accepted");
    issued
        .apply_issued(&id(), &started("a", 4), 0)
        .expect("accepted");
    issued
        .apply_issued(&id(), &completed("a", 3), 2)
        .expect("accepted");
    let log = fold_log(vec![start(), started("a", 4), completed("a", 3)]);
    assert_eq!(issued, log);
    // A second outcome is refused and changes nothing.
    let before = issued.clone();
    assert!(issued.apply_issued(&id(), &completed("a", 3), 0).is_err());
    assert_eq!(issued, before);
}
