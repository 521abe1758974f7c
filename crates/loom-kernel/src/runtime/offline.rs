//! An operator's write on an execution that no process runs (`loom resume`, `resolve`,
//! `cancel` on a store the console holds): the execution's machine ([`Execution`]) is taken
//! up from the log alone and stepped with the message, as a driver would step it, and what it
//! would append is handed back for the caller to append at the durable head. Every rule is the
//! machine's: reserved gates and payloads, the gate a resume reaches, a `first_of` whose
//! other gates close with it, a deadline that has passed, the steps a cancel or a verdict
//! finds in flight (recorded in doubt first, `loom.worker_stopped`), what a cancel ends.
//!
//! What only a process that runs the flows can do is refused: a `retry` verdict (it runs the
//! effect again), and a resume of a gate that a build before `first_of` notes opened together
//! with other pending gates (whether they form a `first_of`, whose first resume closes the
//! others, only the flow knows).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::classify::DataClassification;
use crate::envelope::EventEnvelope;
use crate::event::{Event, Verdict};
use crate::fold::{ExecutionState, ExecutionStatus, StepStatus};
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::ctx::FlowCtx;
use crate::runtime::errors::{CancelError, ResolveError, ResumeError};
use crate::runtime::execution::{Action, Execution, Input};
use crate::runtime::history::History;
use crate::runtime::mailbox::{Answer, DriverMsg, ResolveMsg, ResumeMsg};
use crate::runtime::markers::is_reserved_event_type;
use crate::runtime::timers::ManualClock;

/// Events to append to an execution's log at `expected` (its durable head), as its machine
/// would append them.
#[derive(Debug, Clone, PartialEq)]
pub struct OfflineWrite {
    /// The seq the first event gets: the append must find the log's head there.
    pub expected: u64,
    /// The events, in order.
    pub events: Vec<Event>,
}

/// Why an offline write records nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OfflineRefusal {
    /// The log is empty.
    #[error("execution {execution} does not exist")]
    UnknownExecution {
        /// The execution.
        execution: ExecutionId,
    },
    /// The log does not fold, does not begin with `EXECUTION_STARTED`, or is another
    /// execution's.
    #[error("the log of execution {execution} cannot be read: {detail}")]
    Log {
        /// The execution.
        execution: ExecutionId,
        /// What is wrong with it.
        detail: String,
    },
    /// The execution has ended; `steps_in_doubt` are those it ended with.
    #[error("execution {execution} has already ended")]
    Ended {
        /// The execution.
        execution: ExecutionId,
        /// How it ended.
        status: ExecutionStatus,
        /// The steps it ended with in doubt.
        steps_in_doubt: BTreeSet<String>,
    },
    /// The machine refused the resume.
    #[error(transparent)]
    Resume(ResumeError),
    /// The gate's deadline passed at `deadline_ms`: the runtime records the time-out when it
    /// next runs the execution, and a resume now would beat it.
    #[error("gate '{gate_id}' of execution {execution} timed out (its deadline passed)")]
    TimedOut {
        /// The execution.
        execution: ExecutionId,
        /// The gate.
        gate_id: String,
        /// Its deadline (unix ms).
        deadline_ms: u64,
    },
    /// A build before `first_of` notes opened the gate together with `others`.
    #[error("gate '{gate_id}' of execution {execution} was opened together with {others:?}")]
    GroupUnknown {
        /// The execution.
        execution: ExecutionId,
        /// The gate.
        gate_id: String,
        /// The other pending gates opened with it.
        others: Vec<String>,
    },
    /// The machine refused the verdict.
    #[error(transparent)]
    Resolve(ResolveError),
    /// A `retry` verdict runs the step's effect again: only a process that runs the flows can.
    #[error("a retry of step '{step_id}' of execution {execution} runs effect '{effect}' again")]
    RetryNeedsRuntime {
        /// The execution.
        execution: ExecutionId,
        /// The step.
        step_id: String,
        /// Its effect.
        effect: String,
    },
    /// The machine refused the cancel.
    #[error(transparent)]
    Cancel(CancelError),
}

/// A resume of the gate of `log`'s execution that waits for (`event_type`,
/// `correlation_key`), at `now_ms` (a gate whose deadline has passed is refused as timed out).
pub fn offline_resume(
    execution: &ExecutionId,
    log: &[EventEnvelope],
    event_type: &str,
    correlation_key: &str,
    payload: Payload,
    now_ms: u64,
) -> Result<OfflineWrite, OfflineRefusal> {
    let (mut machine, ctx, unknown_groups) = take_up(execution, log)?;
    // A runtime's gate type is refused by the machine whatever the gate's group or deadline.
    let gate = match is_reserved_event_type(event_type) {
        true => None,
        false => ctx.state().gate_for(event_type, correlation_key),
    };
    if let Some(gate_id) = &gate
        && let Some(others) = unknown_groups.get(gate_id)
    {
        return Err(OfflineRefusal::GroupUnknown {
            execution: execution.clone(),
            gate_id: gate_id.clone(),
            others: others.clone(),
        });
    }
    let due = gate.and_then(|_| {
        ctx.state()
            .due_deadline(event_type, correlation_key, now_ms)
    });
    if let Some((gate_id, deadline_ms)) = &due {
        // The machine closes the gate as the runtime will, and the resume finds it closed.
        machine.step(Input::Message(DriverMsg::Deadline {
            gate_id: gate_id.clone(),
            deadline_ms: *deadline_ms,
        }));
    }
    let (reply, _answer) = tokio::sync::oneshot::channel();
    let resume = DriverMsg::Resume(ResumeMsg {
        event_type: event_type.to_owned(),
        correlation_key: correlation_key.to_owned(),
        payload,
        gate_id: None,
        reply,
    });
    match (written(machine, resume), due) {
        (
            Err(OfflineRefusal::Resume(ResumeError::TimedOut { .. })),
            Some((gate_id, deadline_ms)),
        ) => Err(OfflineRefusal::TimedOut {
            execution: execution.clone(),
            gate_id,
            deadline_ms,
        }),
        (written, _) => written,
    }
}

/// An operator's verdict on step `step_id` of `log`'s execution, in doubt or in flight (its
/// process stopped: it is recorded in doubt first).
pub fn offline_resolve(
    execution: &ExecutionId,
    log: &[EventEnvelope],
    step_id: &str,
    verdict: Verdict,
    operator: Option<String>,
) -> Result<OfflineWrite, OfflineRefusal> {
    let (machine, ctx, _) = take_up(execution, log)?;
    if matches!(verdict, Verdict::Retry) {
        let state = ctx.state();
        let step = state.fold().step(step_id);
        if let Some(record) = step
            && matches!(
                record.status,
                StepStatus::Started { .. } | StepStatus::InDoubt { .. }
            )
        {
            return Err(OfflineRefusal::RetryNeedsRuntime {
                execution: execution.clone(),
                step_id: step_id.to_owned(),
                effect: record.effect.to_string(),
            });
        }
    }
    let (reply, _answer) = tokio::sync::oneshot::channel();
    written(
        machine,
        DriverMsg::Resolve(ResolveMsg {
            step_id: step_id.to_owned(),
            verdict,
            operator,
            reply,
        }),
    )
}

/// A cancel of `log`'s execution: the steps in flight are recorded in doubt first (their
/// process stopped), then `EXECUTION_CANCELLED`.
pub fn offline_cancel(
    execution: &ExecutionId,
    log: &[EventEnvelope],
    reason: Option<String>,
) -> Result<OfflineWrite, OfflineRefusal> {
    let (machine, _, _) = take_up(execution, log)?;
    let (reply, _answer) = tokio::sync::oneshot::channel();
    written(machine, DriverMsg::Cancel { reason, reply })
}

type TakenUp = (Execution, FlowCtx, BTreeMap<String, Vec<String>>);

/// The execution's machine, taken up from its log.
fn take_up(execution: &ExecutionId, log: &[EventEnvelope]) -> Result<TakenUp, OfflineRefusal> {
    let Some(first) = log.first() else {
        return Err(OfflineRefusal::UnknownExecution {
            execution: execution.clone(),
        });
    };
    let unreadable = |detail: String| OfflineRefusal::Log {
        execution: execution.clone(),
        detail,
    };
    if first.execution_id != *execution {
        return Err(unreadable(format!(
            "the log given is execution {}'s",
            first.execution_id
        )));
    }
    let Event::ExecutionStarted(started) = &first.event else {
        return Err(unreadable(
            "the first event is not EXECUTION_STARTED".into(),
        ));
    };
    let state = ExecutionState::fold(log)
        .map_err(|error| unreadable(crate::store::FoldStoredError::from(error).to_string()))?;
    if state.status().is_terminal() {
        return Err(OfflineRefusal::Ended {
            execution: execution.clone(),
            status: state.status(),
            steps_in_doubt: state.steps_in_doubt().clone(),
        });
    }
    let ctx = FlowCtx::new(
        execution.clone(),
        Arc::new(BTreeMap::new()),
        Arc::new(DataClassification::default()),
        Arc::new(ManualClock::new(0)),
        started,
        History::default(),
        state,
    );
    let unknown_groups = ctx.state().take_up_offline(log);
    Ok((Execution::offline(ctx.clone()), ctx, unknown_groups))
}

/// Steps the machine with `message`: what it would append, or its refusal.
fn written(mut machine: Execution, message: DriverMsg) -> Result<OfflineWrite, OfflineRefusal> {
    machine.step(Input::Message(message));
    let mut ready = machine.take_ready();
    let answers = ready.actions.drain(..).filter_map(|action| match action {
        Action::Answer(answer) => Some(answer),
        _ => None,
    });
    for answer in answers {
        match answer {
            Answer::Resume(_, error) => return Err(OfflineRefusal::Resume(error)),
            Answer::Resolve(_, error) => return Err(OfflineRefusal::Resolve(error)),
            Answer::Cancel(_, error) => return Err(OfflineRefusal::Cancel(error)),
            // An `Ok` waits for the append, which is the caller's.
            Answer::Ok(_) | Answer::Failed(..) | Answer::LogMoved(_) | Answer::Exists(_) => {}
        }
    }
    let batch = ready.append.take();
    Ok(batch.map_or_else(
        || OfflineWrite {
            expected: 0,
            events: Vec::new(),
        },
        |batch| OfflineWrite {
            expected: batch.expected,
            events: batch.events,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{
        DecisionRecorded, ExecutionCancelled, ExecutionCompleted, ExecutionSuspended, StepStarted,
    };
    use crate::runtime::markers::{
        DEADLINE_KIND, FIRST_OF_KIND, deadline_value, first_of_note, first_of_step_id,
    };

    fn id() -> ExecutionId {
        ExecutionId::new("offline").unwrap()
    }

    fn log(events: Vec<Event>) -> Vec<EventEnvelope> {
        let mut all = vec![Event::ExecutionStarted(crate::event::ExecutionStarted {
            flow: "f".into(),
            flow_version: 1,
            input: Payload::null(),
            capabilities: Default::default(),
            budget: None,
        })];
        all.extend(events);
        all.into_iter()
            .enumerate()
            .map(|(seq, event)| EventEnvelope::new(id(), seq as u64, event))
            .collect()
    }

    fn gate(gate_id: &str, key: &str) -> Event {
        Event::ExecutionSuspended(ExecutionSuspended {
            gate_id: gate_id.into(),
            event_type: "Approval".into(),
            correlation_key: key.into(),
        })
    }

    fn deadline(gate_id: &str, at: u64) -> Event {
        Event::DecisionRecorded(DecisionRecorded {
            step_id: gate_id.into(),
            kind: DEADLINE_KIND.into(),
            value: Payload::from_value(&deadline_value(at)),
        })
    }

    fn started(step_id: &str) -> Event {
        Event::StepStarted(StepStarted {
            step_id: step_id.into(),
            effect: "charge".into(),
            input_digest: "d".into(),
            attempt: 1,
            max_cost: 0,
        })
    }

    /// The gates `write` resumes, in order.
    fn resumed_gates(write: &OfflineWrite) -> Vec<&str> {
        write
            .events
            .iter()
            .filter_map(|e| match e {
                Event::ExecutionResumed(r) => Some(r.gate_id.as_str()),
                _ => None,
            })
            .collect()
    }

    fn kinds(write: &OfflineWrite) -> Vec<&'static str> {
        write.events.iter().map(Event::type_name).collect()
    }

    #[test]
    fn a_resume_is_what_the_machine_records_at_the_durable_head() {
        let log = log(vec![gate("Approval#1", "k")]);
        let write = offline_resume(&id(), &log, "Approval", "k", Payload::null(), 0).unwrap();
        assert_eq!(write.expected, 2);
        assert_eq!(kinds(&write), vec!["EXECUTION_RESUMED"]);
        let refused = offline_resume(&id(), &log, "Approval", "other", Payload::null(), 0);
        assert!(matches!(
            refused,
            Err(OfflineRefusal::Resume(ResumeError::NoPendingGate { .. }))
        ));
        let reserved = offline_resume(&id(), &log, "loom.timer", "k", Payload::null(), 0);
        assert!(matches!(
            reserved,
            Err(OfflineRefusal::Resume(ResumeError::ReservedGate { .. }))
        ));
    }

    #[test]
    fn a_resume_after_the_deadline_is_refused_and_one_before_it_recorded() {
        let log = log(vec![deadline("Approval#1", 1_000), gate("Approval#1", "k")]);
        let late = offline_resume(&id(), &log, "Approval", "k", Payload::null(), 1_000);
        assert!(matches!(
            late,
            Err(OfflineRefusal::TimedOut {
                deadline_ms: 1_000,
                ..
            })
        ));
        let early = offline_resume(&id(), &log, "Approval", "k", Payload::null(), 999).unwrap();
        assert_eq!(kinds(&early), vec!["EXECUTION_RESUMED"]);
    }

    #[test]
    fn a_resume_of_one_gate_of_a_first_of_closes_the_others() {
        let gates = vec!["Approval#1".to_owned(), "Approval#2".to_owned()];
        let note = Event::DecisionRecorded(DecisionRecorded {
            step_id: first_of_step_id("Approval#1"),
            kind: FIRST_OF_KIND.into(),
            value: first_of_note(&gates),
        });
        let log = log(vec![note, gate("Approval#1", "a"), gate("Approval#2", "b")]);
        let write = offline_resume(&id(), &log, "Approval", "b", Payload::null(), 0).unwrap();
        let resumed = resumed_gates(&write);
        assert_eq!(resumed, vec!["Approval#2", "Approval#1"]);
    }

    /// A note that is not what the runtime writes (no `gates`, not strings, not naming the
    /// gate) groups nothing, so its gates are refused as opened together; a gate a note names
    /// that is not pending is not closed.
    #[test]
    fn a_first_of_note_of_another_shape_groups_nothing() {
        let noted = |value: serde_json::Value| {
            log(vec![
                Event::DecisionRecorded(DecisionRecorded {
                    step_id: first_of_step_id("Approval#1"),
                    kind: FIRST_OF_KIND.into(),
                    value: Payload::from_value(&value),
                }),
                gate("Approval#1", "a"),
                gate("Approval#2", "b"),
            ])
        };
        for value in [
            serde_json::json!(null),
            serde_json::json!({"gates": "Approval#1"}),
            serde_json::json!({"gates": [1, 2]}),
            serde_json::json!({"gates": ["C#1", "D#1"]}),
        ] {
            let refused = offline_resume(
                &id(),
                &noted(value.clone()),
                "Approval",
                "a",
                Payload::null(),
                0,
            );
            assert!(
                matches!(refused, Err(OfflineRefusal::GroupUnknown { .. })),
                "{value}: {refused:?}"
            );
        }
        let log = noted(serde_json::json!({"gates": ["Approval#1", "Approval#2", "Z#1"]}));
        let write = offline_resume(&id(), &log, "Approval", "a", Payload::null(), 0).unwrap();
        let resumed = resumed_gates(&write);
        assert_eq!(resumed, ["Approval#1", "Approval#2"], "Z#1 is not pending");
    }

    /// The same write asked twice decides the same events at the same head (the append at
    /// that head takes one of them); a payload nested 10,000 deep does not unwind it.
    #[test]
    fn a_write_asked_twice_is_decided_alike_and_a_deep_payload_is_no_panic() {
        let log = log(vec![gate("Approval#1", "k"), started("charge#1")]);
        let once = offline_cancel(&id(), &log, None).unwrap();
        assert_eq!(offline_cancel(&id(), &log, None).unwrap(), once);
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        // Past the depth a new payload may have: as a log written before the check holds it.
        if let Ok(payload) = Payload::from_stored_json(deep) {
            let _ = offline_resume(&id(), &log, "Approval", "k", payload, 0);
        }
    }

    #[test]
    fn gates_opened_together_by_a_build_before_the_note_are_refused() {
        let log = log(vec![gate("Approval#1", "a"), gate("Approval#2", "b")]);
        let refused = offline_resume(&id(), &log, "Approval", "a", Payload::null(), 0);
        assert!(
            matches!(refused, Err(OfflineRefusal::GroupUnknown { others, .. }) if others == vec!["Approval#2".to_owned()])
        );
    }

    #[test]
    fn a_verdict_on_a_stopped_step_records_it_in_doubt_first_and_a_retry_is_refused() {
        let log = log(vec![started("charge#1")]);
        let write = offline_resolve(
            &id(),
            &log,
            "charge#1",
            Verdict::Completed {
                output: Payload::null(),
            },
            None,
        )
        .unwrap();
        assert_eq!(kinds(&write), vec!["EFFECT_INDOUBT", "EFFECT_RESOLVED"]);
        let retry = offline_resolve(&id(), &log, "charge#1", Verdict::Retry, None);
        assert!(matches!(
            retry,
            Err(OfflineRefusal::RetryNeedsRuntime { .. })
        ));
        let unknown = offline_resolve(&id(), &log, "nope#1", Verdict::Retry, None);
        assert!(matches!(
            unknown,
            Err(OfflineRefusal::Resolve(ResolveError::NotInDoubt { .. }))
        ));
    }

    #[test]
    fn a_cancel_records_the_stopped_steps_in_doubt_then_the_end() {
        let log = log(vec![started("b#1"), started("a#1")]);
        let write = offline_cancel(&id(), &log, None).unwrap();
        assert_eq!(
            kinds(&write),
            vec!["EFFECT_INDOUBT", "EFFECT_INDOUBT", "EXECUTION_CANCELLED"]
        );
        let Event::EffectInDoubt(first) = &write.events[0] else {
            unreachable!()
        };
        assert_eq!(first.step_id, "a#1", "in step-id order");
        assert_eq!(
            first.reason.as_ref().map(|r| r.code.as_str()),
            Some(crate::runtime::codes::WORKER_STOPPED)
        );
    }

    #[test]
    fn an_ended_missing_or_unreadable_log_is_refused() {
        let ended = log(vec![Event::ExecutionCancelled(ExecutionCancelled {
            reason: None,
        })]);
        assert!(matches!(
            offline_cancel(&id(), &ended, None),
            Err(OfflineRefusal::Ended { .. })
        ));
        assert!(matches!(
            offline_cancel(&id(), &[], None),
            Err(OfflineRefusal::UnknownExecution { .. })
        ));
        let headless = vec![EventEnvelope::new(
            id(),
            0,
            Event::ExecutionCompleted(ExecutionCompleted {
                output: Payload::null(),
            }),
        )];
        assert!(matches!(
            offline_cancel(&id(), &headless, None),
            Err(OfflineRefusal::Log { .. })
        ));
        let another = ExecutionId::new("another").unwrap();
        let refused = offline_cancel(&another, &log(vec![]), None);
        assert!(
            matches!(&refused, Err(OfflineRefusal::Log { detail, .. }) if detail.contains("offline")),
            "another execution's log is refused: {refused:?}"
        );
    }
}
