//! Durable gate requests (LD-018): `ctx.suspend_with_request` records what the flow asks the
//! outside for in the batch of its gate, before the gate; a new runtime on the same store
//! lists the pending request with the same correlation key; replay serves the recorded request;
//! a request the log could not hold is refused when it is made; hostile callers (a resume of a
//! request never asked, an answer sent twice, a reserved event type) are refused with a typed
//! error and nothing is recorded.

use std::collections::BTreeMap;
use std::time::Duration;

use loom_kernel::DataClassification;
use loom_kernel::Event;
use loom_kernel::conformance::nested;
use loom_kernel::kit::{REQUEST_KIND, request_step_id};
use loom_kernel::*;
use loom_kernel::{DiskStore, EventStore, EventStoreExt, ExecutionStatus, MemoryStore, Payload};
use serde_json::{Value, json};

use crate::support;
use crate::support::id;

const T0: u64 = 1_800_000_000_000;

/// Asks for an approval of the order in its input, and returns the answer.
async fn approve(ctx: FlowCtx, order: Value) -> Result<Value, FlowError> {
    let key = format!("approve:{}", order["id"].as_str().unwrap_or("?"));
    let request = json!({"order": order, "question": "approve?"});
    let answer = ctx.suspend_with_request("Approval", &key, &request).await?;
    Ok(json!({"answer": answer.to_value()}))
}

/// The same with a one-hour timeout.
async fn approve_within_an_hour(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    match ctx
        .suspend_with_request_and_timeout(
            "Approval",
            "order-9",
            &json!({"card": "4111", "sum": 9}),
            Duration::from_secs(3600),
        )
        .await?
    {
        GateOutcome::Resumed(answer) => Ok(json!({"answer": answer.to_value()})),
        GateOutcome::TimedOut => Ok(json!("escalated")),
    }
}

/// Tries requests the log could not hold, then a reserved event type; reports each refusal.
async fn hostile(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let mut refusals = Vec::new();
    let too_deep = ctx
        .suspend_with_request("Approval", "deep", &nested(200))
        .await;
    refusals.push(format!("{too_deep:?}"));
    let mut tuple_keys = BTreeMap::new();
    tuple_keys.insert((1u8, 2u8), "x");
    let unserializable = ctx
        .suspend_with_request("Approval", "keys", &tuple_keys)
        .await;
    refusals.push(format!("{unserializable:?}"));
    let reserved = ctx
        .suspend_with_request("loom.timer", "mine", &json!({}))
        .await;
    refusals.push(format!("{reserved:?}"));
    Ok(json!(refusals))
}

/// Two requested gates on one key: the second is refused.
async fn twice(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let first = ctx.suspend_with_request("Approval", "same", &json!(1));
    let second = ctx
        .suspend_with_request("Approval", "same", &json!(2))
        .await;
    let second = format!("{second:?}");
    let first = first.await?;
    Ok(json!({"first": first.to_value(), "second": second}))
}

fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("approve", 1, approve))
        .with(flow_fn("approve_within_an_hour", 1, approve_within_an_hour))
        .with(flow_fn("hostile", 1, hostile))
        .with(flow_fn("twice", 1, twice))
}

fn runtime<S: EventStore>(store: S) -> Runtime<S> {
    Runtime::builder(store)
        .flows(&flows())
        .clock(ManualClock::new(T0))
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_request_is_recorded_just_before_its_gate() {
    let loom = runtime(MemoryStore::new());
    let e = id("order-1");
    loom.start(
        "approve",
        &json!({"id": "1", "sum": 30}),
        StartOptions::new(e.clone()),
    )
    .await
    .unwrap();
    assert_eq!(
        loom.wait(&e).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    let log = loom.store().read_all(&e).await.unwrap();
    let kinds: Vec<_> = log
        .iter()
        .map(|envelope| envelope.event.type_name())
        .collect();
    assert_eq!(
        kinds,
        [
            "EXECUTION_STARTED",
            "DECISION_RECORDED",
            "EXECUTION_SUSPENDED"
        ]
    );
    let Event::DecisionRecorded(request) = &log[1].event else {
        unreachable!()
    };
    assert_eq!(request.kind, REQUEST_KIND);
    assert_eq!(request.step_id, request_step_id("Approval#1"));
    assert_eq!(request.step_id, "Approval#1:request");
    assert_eq!(
        request.value.to_value(),
        json!({"order": {"id": "1", "sum": 30}, "question": "approve?"})
    );
    let Event::ExecutionSuspended(gate) = &log[2].event else {
        unreachable!()
    };
    assert_eq!(gate.gate_id, "Approval#1");
    assert_eq!(gate.correlation_key, "approve:1");

    let pending = loom.pending_requests().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].execution, e);
    assert_eq!(pending[0].gate_id, "Approval#1");
    assert_eq!(pending[0].event_type, "Approval");
    assert_eq!(pending[0].correlation_key, "approve:1");
    assert_eq!(pending[0].seq, 1);
    assert_eq!(pending[0].request, request.value);
    assert_eq!(loom.pending_requests_of(&e).await.unwrap(), pending);

    loom.resume(&e, "Approval", "approve:1", json!("yes").into())
        .await
        .unwrap();
    let done = loom.wait(&e).await.unwrap();
    assert_eq!(done.status(), ExecutionStatus::Completed);
    assert!(loom.pending_requests().await.unwrap().is_empty());
    assert!(loom.pending_requests_of(&e).await.unwrap().is_empty());
}

#[tokio::test]
async fn after_a_restart_the_pending_request_is_listed_with_its_key_and_a_resume_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("requests.redb");
    let ids: Vec<_> = (0..3).map(|n| id(&format!("order-{n}"))).collect();
    {
        let loom = runtime(DiskStore::open(&path).unwrap());
        for (n, e) in ids.iter().enumerate() {
            loom.start(
                "approve",
                &json!({"id": n.to_string()}),
                StartOptions::new(e.clone()),
            )
            .await
            .unwrap();
            loom.wait(e).await.unwrap();
        }
        loom.shutdown().await;
    }
    let loom = runtime(DiskStore::open(&path).unwrap());
    loom.recover().await.unwrap();
    let pending = loom.pending_requests().await.unwrap();
    let keys: Vec<_> = pending
        .iter()
        .map(|p| (p.execution.as_str(), p.correlation_key.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("order-0", "approve:0"),
            ("order-1", "approve:1"),
            ("order-2", "approve:2")
        ]
    );
    // Sent again by the application; the one answer resumes the gate.
    for request in &pending {
        loom.resume(
            &request.execution,
            &request.event_type,
            &request.correlation_key,
            json!({"ok": request.request.to_value()["order"]["id"]}).into(),
        )
        .await
        .unwrap();
    }
    for (n, e) in ids.iter().enumerate() {
        let done = loom.wait(e).await.unwrap();
        assert_eq!(done.status(), ExecutionStatus::Completed);
        assert_eq!(
            done.output().unwrap().to_value(),
            json!({"answer": {"ok": n.to_string()}})
        );
        let log = loom.store().read_all(e).await.unwrap();
        loom.replay_log(log).unwrap();
    }
    assert!(loom.pending_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn replay_serves_the_recorded_request_and_a_flow_that_drops_it_diverges() {
    let loom = runtime(MemoryStore::new());
    let e = id("order-5");
    loom.start("approve", &json!({"id": "5"}), StartOptions::new(e.clone()))
        .await
        .unwrap();
    loom.wait(&e).await.unwrap();
    let parked = loom.store().read_all(&e).await.unwrap();
    let report = loom.replay_log(parked.clone()).unwrap();
    assert!(!report.returned);
    loom.resume(&e, "Approval", "approve:5", json!("yes").into())
        .await
        .unwrap();
    loom.wait(&e).await.unwrap();
    let log = loom.store().read_all(&e).await.unwrap();
    // Replayed twice: the same commands, nothing new.
    for _ in 0..2 {
        let report = loom.replay_log(log.clone()).unwrap();
        assert!(report.returned);
        assert_eq!(report.events, log.len() as u64);
    }

    // A build whose flow asks with another request replays: the recorded request stands.
    async fn other_request(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
        let answer = ctx
            .suspend_with_request("Approval", "approve:5", &json!("changed"))
            .await?;
        Ok(json!({"answer": answer.to_value()}))
    }
    let changed = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("approve", 1, other_request))
        .build()
        .unwrap();
    assert!(changed.replay_log(log.clone()).unwrap().returned);

    // A build that opens the gate without its request diverges at the request.
    async fn no_request(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
        let answer = ctx.suspend("Approval", "approve:5").await?;
        Ok(json!({"answer": answer.to_value()}))
    }
    let dropped = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("approve", 1, no_request))
        .build()
        .unwrap();
    let error = dropped.replay_log(log).unwrap_err().to_string();
    assert!(error.contains("Approval#1:request"), "{error}");
}

#[tokio::test]
async fn a_request_the_log_could_not_hold_or_a_reserved_gate_is_refused_when_made() {
    let loom = runtime(MemoryStore::new());
    let e = id("hostile");
    loom.start("hostile", &json!(null), StartOptions::new(e.clone()))
        .await
        .unwrap();
    let done = loom.wait(&e).await.unwrap();
    assert_eq!(done.status(), ExecutionStatus::Completed);
    let refusals: Vec<String> = done.output().unwrap().decode().unwrap();
    assert!(refusals[0].contains("InvalidRequest"), "{}", refusals[0]);
    assert!(refusals[0].contains("deeper than 127"), "{}", refusals[0]);
    assert!(refusals[1].contains("InvalidRequest"), "{}", refusals[1]);
    assert!(
        refusals[1].contains("does not serialize"),
        "{}",
        refusals[1]
    );
    assert!(refusals[2].contains("ReservedEventType"), "{}", refusals[2]);
    // Nothing of the three was recorded.
    let kinds: Vec<_> = loom
        .store()
        .read_all(&e)
        .await
        .unwrap()
        .iter()
        .map(|envelope| envelope.event.type_name())
        .collect();
    assert_eq!(kinds, ["EXECUTION_STARTED", "EXECUTION_COMPLETED"]);
    // And the refusals replay the same way.
    let log = loom.store().read_all(&e).await.unwrap();
    assert!(loom.replay_log(log).unwrap().returned);
}

#[tokio::test]
async fn a_second_gate_on_the_same_key_is_refused_and_records_nothing() {
    let loom = runtime(MemoryStore::new());
    let e = id("twice");
    loom.start("twice", &json!(null), StartOptions::new(e.clone()))
        .await
        .unwrap();
    loom.wait(&e).await.unwrap();
    let pending = loom.pending_requests_of(&e).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].request.to_value(), json!(1));
    loom.resume(&e, "Approval", "same", json!("a").into())
        .await
        .unwrap();
    let done = loom.wait(&e).await.unwrap();
    let output = done.output().unwrap().to_value();
    assert_eq!(output["first"], json!("a"));
    assert!(output["second"].as_str().unwrap().contains("DuplicateGate"));
}

#[tokio::test]
async fn hostile_resumes_are_refused_and_record_nothing() {
    let loom = runtime(MemoryStore::new());
    let e = id("order-7");
    loom.start("approve", &json!({"id": "7"}), StartOptions::new(e.clone()))
        .await
        .unwrap();
    loom.wait(&e).await.unwrap();
    let before = loom.store().read_all(&e).await.unwrap().len();
    // A resume for a request that was never asked.
    let never = loom
        .resume(&e, "Approval", "approve:8", json!("yes").into())
        .await;
    assert!(
        matches!(never, Err(ResumeError::NoPendingGate { .. })),
        "{never:?}"
    );
    // A resume that forges the runtime's timeout marker, or names a reserved gate.
    let marker = loom
        .resume(
            &e,
            "Approval",
            "approve:7",
            json!({"loom.timedOut": {"deadlineMs": 1}}).into(),
        )
        .await;
    assert!(
        matches!(marker, Err(ResumeError::ReservedPayload { .. })),
        "{marker:?}"
    );
    let reserved = loom
        .resume(&e, "loom.timer", "approve:7", json!("yes").into())
        .await;
    assert!(
        matches!(reserved, Err(ResumeError::ReservedGate { .. })),
        "{reserved:?}"
    );
    assert_eq!(loom.store().read_all(&e).await.unwrap().len(), before);

    // The request resent twice, answered twice: the first answer is recorded, the second
    // refused.
    loom.resume(&e, "Approval", "approve:7", json!("first").into())
        .await
        .unwrap();
    loom.wait(&e).await.unwrap();
    let after = loom.store().read_all(&e).await.unwrap().len();
    let again = loom
        .resume(&e, "Approval", "approve:7", json!("second").into())
        .await;
    assert!(again.is_err(), "{again:?}");
    assert_eq!(loom.store().read_all(&e).await.unwrap().len(), after);
    let resumes = loom
        .store()
        .read_all(&e)
        .await
        .unwrap()
        .iter()
        .filter(|envelope| matches!(envelope.event, Event::ExecutionResumed(_)))
        .count();
    assert_eq!(resumes, 1);
}

#[tokio::test]
async fn a_request_with_a_timeout_records_request_deadline_gate_and_is_no_longer_pending_once_timed_out()
 {
    let clock = ManualClock::new(T0);
    let loom = Runtime::builder(MemoryStore::new())
        .flows(&flows())
        .clock(clock.clone())
        .classification(DataClassification::mask_paths(["card"]).unwrap())
        .build()
        .unwrap();
    let e = id("order-9");
    loom.start(
        "approve_within_an_hour",
        &json!(null),
        StartOptions::new(e.clone()),
    )
    .await
    .unwrap();
    loom.wait(&e).await.unwrap();
    let log = loom.store().read_all(&e).await.unwrap();
    let steps: Vec<_> = log
        .iter()
        .map(|envelope| match &envelope.event {
            Event::DecisionRecorded(d) => format!("{} {}", d.kind, d.step_id),
            Event::ExecutionSuspended(g) => format!("gate {}", g.gate_id),
            other => other.type_name().to_owned(),
        })
        .collect();
    assert_eq!(
        steps,
        [
            "EXECUTION_STARTED",
            "loom.request Approval#1:request",
            "loom.deadline Approval#1",
            "gate Approval#1"
        ]
    );
    let pending = loom.pending_requests().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        pending[0].request.to_value(),
        json!({"card": "4111", "sum": 9})
    );
    // K10-R6: what is shown or logged is masked; the listing itself keeps the true value.
    let shown = pending[0].masked(&DataClassification::mask_paths(["card"]).unwrap());
    assert_eq!(shown.request.to_value(), json!({"card": "***", "sum": 9}));

    clock.advance(Duration::from_secs(3601));
    let mut status = ExecutionStatus::Suspended;
    for _ in 0..500 {
        status = loom.wait(&e).await.unwrap().status();
        if status == ExecutionStatus::Completed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(status, ExecutionStatus::Completed);
    let state = loom.state(&e).await.unwrap();
    assert_eq!(state.output().unwrap().to_value(), json!("escalated"));
    assert!(loom.pending_requests().await.unwrap().is_empty());
    let late = loom
        .resume(&e, "Approval", "order-9", Payload::from(json!("yes")))
        .await;
    assert!(late.is_err(), "{late:?}");
    let log = loom.store().read_all(&e).await.unwrap();
    assert!(loom.replay_log(log).unwrap().returned);
}

#[tokio::test]
async fn a_request_of_an_execution_in_doubt_is_listed_too() {
    async fn charge_and_ask(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
        let asked = ctx.suspend_with_request("Receipt", "r-1", &json!({"send": "receipt"}));
        let charged = ctx.execute("charge", &json!({"sum": 5}));
        let (asked, charged) = futures::join!(asked, charged);
        Ok(json!([asked?.to_value(), charged?.to_value()]))
    }
    let loom = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("charge_and_ask", 1, charge_and_ask))
        .effect(
            "charge",
            FnEffect::new(false, |_call| async {
                EffectOutcome::in_doubt(loom_kernel::ErrorInfo::new("test.silent", "no answer"))
            }),
        )
        .build()
        .unwrap();
    let e = id("in-doubt");
    loom.start(
        "charge_and_ask",
        &json!(null),
        StartOptions::new(e.clone()).grant("charge"),
    )
    .await
    .unwrap();
    let state = loom.wait(&e).await.unwrap();
    let names = support::event_names(loom.store(), &e).await;
    assert_eq!(state.status(), ExecutionStatus::InDoubt, "{names:?}");
    let pending = loom.pending_requests().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].gate_id, "Receipt#1");
    assert_eq!(pending[0].request.to_value(), json!({"send": "receipt"}));
}
