//! The fold: states it reaches, and every invariant it refuses, named by seq.

use loom_kernel::StepStatus;
use loom_kernel::*;
use loom_kernel::{
    ErrorInfo, Event, EventEnvelope, ExecutionId, ExecutionState, ExecutionStatus, Violation,
};
use serde_json::json;

fn log(events: Vec<Event>) -> Vec<EventEnvelope> {
    loom_kernel::conformance::log_of(&ExecutionId::new("e1").unwrap(), events)
}

fn started() -> Event {
    Event::ExecutionStarted(ExecutionStarted {
        flow: "checkout".into(),
        flow_version: 2,
        input: json!({}).into(),
        capabilities: ["payments".to_string()].into(),
        budget: Some(10),
    })
}

fn step_started(step: &str, effect: &str) -> Event {
    attempt_started(step, effect, 1, 0)
}

/// Attempt `attempt` of `step`, admitted at a cost of at most `max_cost`.
fn attempt_started(step: &str, effect: &str, attempt: u32, max_cost: u64) -> Event {
    Event::StepStarted(StepStarted {
        step_id: step.into(),
        effect: effect.into(),
        input_digest: "d".into(),
        attempt,
        max_cost,
    })
}

fn completed(step: &str, effect: &str, cost: u64) -> Event {
    Event::StepCompleted(StepCompleted {
        step_id: step.into(),
        effect: effect.into(),
        input_digest: "d".into(),
        output: json!("ok").into(),
        cost,
    })
}

fn failed(step: &str) -> Event {
    Event::StepFailed(StepFailed {
        step_id: step.into(),
        effect: "e".into(),
        input_digest: "d".into(),
        error: ErrorInfo::new("boom", "it broke"),
        cost: 1,
    })
}

fn in_doubt(step: &str) -> Event {
    Event::EffectInDoubt(EffectInDoubt {
        step_id: step.into(),
        effect: "e".into(),
        attempt: 1,
        reason: None,
    })
}

fn resolved(step: &str, verdict: Verdict) -> Event {
    Event::EffectResolved(EffectResolved {
        step_id: step.into(),
        verdict,
        operator: None,
    })
}

fn suspended(gate: &str, key: &str) -> Event {
    Event::ExecutionSuspended(ExecutionSuspended {
        gate_id: gate.into(),
        event_type: "Approval".into(),
        correlation_key: key.into(),
    })
}

fn resumed(gate: &str, key: &str) -> Event {
    Event::ExecutionResumed(ExecutionResumed {
        gate_id: gate.into(),
        event_type: "Approval".into(),
        correlation_key: key.into(),
        payload: json!(true).into(),
    })
}

fn decision(step: &str) -> Event {
    Event::DecisionRecorded(DecisionRecorded {
        step_id: step.into(),
        kind: "now".into(),
        value: json!(1).into(),
    })
}

fn done() -> Event {
    Event::ExecutionCompleted(ExecutionCompleted {
        output: json!(1).into(),
    })
}

/// Folds `events` and expects the refusal `violation` at `seq`.
fn check_refused(events: Vec<Event>, seq: u64, violation: Violation) {
    let err = ExecutionState::fold(&log(events)).unwrap_err();
    assert!(err.to_string().contains(&format!("at seq {seq}")), "{err}");
    assert_eq!((err.seq, *err.violation), (seq, violation));
}

#[test]
fn a_full_run_folds_to_completed_with_budget_spent() {
    let state = ExecutionState::fold(&log(vec![
        started(),
        decision("now#1"),
        step_started("charge#1", "payments.charge"),
        completed("charge#1", "payments.charge", 3),
        completed("email#1", "email.send", 2),
        suspended("approve#1", "k1"),
        resumed("approve#1", "k1"),
        done(),
    ]))
    .unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(state.flow(), Some(("checkout", 2)));
    assert_eq!(state.budget(), Some(10));
    assert_eq!(state.budget_spent(), 5);
    assert_eq!(state.next_seq(), 8);
    assert!(state.capabilities().contains("payments"));
    assert_eq!(
        state.step("charge#1").unwrap().status,
        StepStatus::Completed { seq: 3 }
    );
    assert_eq!(state.decision("now#1"), Some(1));
    assert!(state.pending_gates().is_empty());
}

#[test]
fn statuses_follow_gates_and_doubt() {
    let mut events = vec![started(), suspended("a#1", "k1"), suspended("b#1", "k2")];
    let state = ExecutionState::fold(&log(events.clone())).unwrap();
    assert_eq!(state.status(), ExecutionStatus::Suspended);
    assert_eq!(state.pending_gates().len(), 2);

    events.push(resumed("b#1", "k2"));
    let state = ExecutionState::fold(&log(events.clone())).unwrap();
    assert_eq!(
        state.status(),
        ExecutionStatus::Suspended,
        "a#1 still waits"
    );
    assert_eq!(
        state.pending_gates().keys().collect::<Vec<_>>(),
        ["a#1"],
        "resumes may come in any order"
    );

    events.extend([step_started("pay#1", "e"), in_doubt("pay#1")]);
    let state = ExecutionState::fold(&log(events.clone())).unwrap();
    assert_eq!(state.status(), ExecutionStatus::InDoubt);
    assert!(state.steps_in_doubt().contains("pay#1"));

    events.push(resolved("pay#1", Verdict::Retry));
    let state = ExecutionState::fold(&log(events.clone())).unwrap();
    assert_eq!(state.status(), ExecutionStatus::Suspended);
    assert!(state.needs_driving(), "the retried step is in flight");
    assert!(matches!(
        state.step("pay#1").unwrap().status,
        StepStatus::Started { .. }
    ));

    events.extend([
        in_doubt("pay#1"),
        resolved(
            "pay#1",
            Verdict::Completed {
                output: json!(1).into(),
            },
        ),
    ]);
    let state = ExecutionState::fold(&log(events.clone())).unwrap();
    assert!(!state.needs_driving(), "only a gate is pending: parked");
    events.push(resumed("a#1", "k1"));
    assert_eq!(
        ExecutionState::fold(&log(events.clone())).unwrap().status(),
        ExecutionStatus::Running
    );
    let state = ExecutionState::fold(&log(events)).unwrap();
    assert_eq!(
        state.step("pay#1").unwrap().status,
        StepStatus::Completed { seq: 8 }
    );
}

#[test]
fn refusals_name_the_seq() {
    check_refused(
        vec![done()],
        0,
        Violation::NotStarted {
            found: "EXECUTION_COMPLETED",
        },
    );
    check_refused(vec![started(), started()], 1, Violation::StartedTwice);
    check_refused(
        vec![started(), completed("s#1", "e", 0), failed("s#1")],
        2,
        Violation::DuplicateOutcome {
            step_id: "s#1".into(),
            outcome_seq: 1,
        },
    );
    check_refused(
        vec![
            started(),
            step_started("s#1", "a"),
            completed("s#1", "b", 0),
        ],
        2,
        Violation::EffectMismatch {
            step_id: "s#1".into(),
            recorded: "a".into(),
            found: "b".into(),
        },
    );
    check_refused(
        vec![started(), in_doubt("s#1")],
        1,
        Violation::InDoubtWithoutStart {
            step_id: "s#1".into(),
        },
    );
    check_refused(
        vec![
            started(),
            step_started("s#1", "e"),
            in_doubt("s#1"),
            completed("s#1", "e", 0),
        ],
        3,
        Violation::StepInDoubt {
            step_id: "s#1".into(),
            found: "STEP_COMPLETED",
        },
    );
    check_refused(
        vec![started(), resolved("s#1", Verdict::Retry)],
        1,
        Violation::ResolvedNotInDoubt {
            step_id: "s#1".into(),
        },
    );
    check_refused(
        vec![started(), decision("now#1"), decision("now#1")],
        2,
        Violation::DuplicateDecision {
            step_id: "now#1".into(),
            first_seq: 1,
        },
    );
    check_refused(
        vec![started(), suspended("g#1", "k"), suspended("g#1", "k")],
        2,
        Violation::DuplicateGate {
            gate_id: "g#1".into(),
            since: 1,
        },
    );
    check_refused(
        vec![started(), resumed("g#1", "k")],
        1,
        Violation::ResumeWithoutGate {
            gate_id: "g#1".into(),
            event_type: "Approval".into(),
            correlation_key: "k".into(),
        },
    );
    check_refused(
        vec![started(), suspended("g#1", "k"), resumed("g#1", "other")],
        2,
        Violation::ResumeMismatch {
            gate_id: "g#1".into(),
            event_type: "Approval".into(),
            correlation_key: "other".into(),
            expected_event_type: "Approval".into(),
            expected_correlation_key: "k".into(),
        },
    );
    check_refused(
        vec![started(), done(), decision("x#1")],
        2,
        Violation::AfterTerminal {
            found: "DECISION_RECORDED",
            status: ExecutionStatus::Completed,
        },
    );
}

#[test]
fn gaps_and_foreign_events_are_refused() {
    let mut events = log(vec![started(), decision("a#1"), decision("b#1")]);
    events.remove(1);
    let err = ExecutionState::fold(&events).unwrap_err();
    assert_eq!(
        (err.seq, *err.violation),
        (2, Violation::SeqGap { expected: 1 })
    );

    let mut events = log(vec![started(), decision("a#1")]);
    events[1].execution_id = ExecutionId::new("e2").unwrap();
    let err = ExecutionState::fold(&events).unwrap_err();
    assert_eq!(err.seq, 1);
    assert_eq!(
        *err.violation,
        Violation::ForeignExecution { found: "e2".into() }
    );
}

#[test]
fn a_refused_event_leaves_the_state_unchanged() {
    let events = log(vec![
        started(),
        suspended("g#1", "k"),
        resumed("g#1", "wrong"),
    ]);
    let mut state = ExecutionState::fold(&events[..2]).unwrap();
    let before = state.clone();
    assert!(state.apply(&events[2]).is_err());
    assert_eq!(state, before);
}

#[test]
fn an_ended_state_tells_its_output_failure_or_cancel_reason() {
    let state = ExecutionState::fold(&log(vec![started(), done()])).unwrap();
    assert_eq!(state.output().map(|o| o.to_value()), Some(json!(1)));
    assert_eq!(state.failure(), None);
    assert_eq!(state.cancel_reason(), None);

    let failed = Event::ExecutionFailed(ExecutionFailed {
        error: ErrorInfo::new("flow.error", "out of stock"),
    });
    let state = ExecutionState::fold(&log(vec![started(), failed])).unwrap();
    assert_eq!(state.output(), None);
    let failure = state.failure().unwrap();
    assert_eq!(
        (failure.code.as_str(), failure.message.as_str()),
        ("flow.error", "out of stock")
    );

    let cancelled = Event::ExecutionCancelled(ExecutionCancelled {
        reason: Some("customer left".into()),
    });
    let state = ExecutionState::fold(&log(vec![started(), cancelled])).unwrap();
    assert_eq!(state.cancel_reason(), Some(Some("customer left")));
    assert_eq!((state.output(), state.failure()), (None, None));

    let running = ExecutionState::fold(&log(vec![started(), suspended("g", "k")])).unwrap();
    assert_eq!(running.output(), None);
    assert_eq!(running.failure(), None);
    assert_eq!(running.cancel_reason(), None);
}

/// A non-idempotent step with a cost, started, then in doubt, then resolved by `verdict`.
fn resolved_in_doubt(max_cost: u64, verdict: Verdict) -> ExecutionState {
    let events = vec![
        started(),
        attempt_started("pay#1", "e", 1, max_cost),
        in_doubt("pay#1"),
        resolved("pay#1", verdict),
    ];
    ExecutionState::fold(&log(events)).unwrap()
}

/// Item 12 (LD-024): a `completed` verdict says the effect ran; the fold charges the
/// `max_cost` its `STEP_STARTED` recorded. A `failed` verdict charges nothing; a `retry`
/// charges nothing until the next attempt's outcome.
#[test]
fn the_fold_charges_a_completed_verdict_the_cost_recorded_at_start() {
    let completed = Verdict::Completed {
        output: json!("sent").into(),
    };
    let state = resolved_in_doubt(3, completed.clone());
    assert_eq!(state.budget_spent(), 3);
    assert!(matches!(
        state.step("pay#1").unwrap().status,
        StepStatus::Completed { .. }
    ));
    let failed = Verdict::Failed {
        error: ErrorInfo::new("not.sent", "no record of it"),
    };
    assert_eq!(resolved_in_doubt(3, failed).budget_spent(), 0);
    assert_eq!(resolved_in_doubt(3, Verdict::Retry).budget_spent(), 0);
    // A log written before `max_cost` existed reads it as 0: its verdicts charge nothing, as
    // they did when it was written.
    assert_eq!(resolved_in_doubt(0, completed).budget_spent(), 0);
}

/// A `retry` verdict then the new attempt's outcome: the step is charged once, by that
/// outcome, not also by the held cost of the attempt in doubt.
#[test]
fn a_retried_step_is_charged_by_its_last_outcome_only() {
    let events = vec![
        started(),
        attempt_started("pay#1", "e", 1, 3),
        in_doubt("pay#1"),
        resolved("pay#1", Verdict::Retry),
        attempt_started("pay#1", "e", 2, 3),
        completed("pay#1", "e", 3),
    ];
    let state = ExecutionState::fold(&log(events)).unwrap();
    assert_eq!(state.budget_spent(), 3);
}
