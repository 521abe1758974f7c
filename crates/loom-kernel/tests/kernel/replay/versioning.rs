//! Changing a flow's code under recorded executions with `ctx.patched` (LD-017): executions
//! recorded by the old code replay the old branch and complete under the new code; new ones
//! take the new branch and record it; an unguarded change is a divergence.

use std::time::Duration;

use loom_kernel::Event;
use loom_kernel::*;
use loom_kernel::{EventStore, EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore, Payload};
use serde_json::{Value, json};

use crate::support::{Calls, echo, events_of, id};

/// The old code: a step, a gate, a step.
async fn order_v1(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("echo", &"reserve").await?;
    ctx.suspend("Approval", "a").await?;
    ctx.execute("echo", &"charge").await?;
    Ok(json!("done"))
}

/// The new code: a fraud check before the gate, guarded; the old branch kept.
async fn order_patched(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("echo", &"reserve").await?;
    let checked = if ctx.patched("fraud-check")? {
        ctx.execute("echo", &"fraud-check").await?;
        true
    } else {
        false
    };
    // Asking twice gives the same answer and records nothing more.
    assert_eq!(ctx.patched("fraud-check")?, checked);
    ctx.suspend("Approval", "a").await?;
    ctx.execute("echo", &"charge").await?;
    Ok(json!(if checked { "done, checked" } else { "done" }))
}

/// The same change, unguarded.
async fn order_unguarded(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("echo", &"reserve").await?;
    ctx.execute("echo", &"fraud-check").await?;
    ctx.suspend("Approval", "a").await?;
    ctx.execute("echo", &"charge").await?;
    Ok(json!("done, checked"))
}

/// A change after the gate: a parked old execution reaches it live, so it takes it.
async fn order_receipt(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("echo", &"reserve").await?;
    ctx.suspend("Approval", "a").await?;
    if ctx.patched("receipt")? {
        ctx.execute("echo", &"receipt").await?;
    }
    ctx.execute("echo", &"charge").await?;
    Ok(json!("done"))
}

fn runtime<S: EventStore>(store: S, flow: impl Flow, calls: &Calls) -> Runtime<S> {
    Runtime::builder(store)
        .flow(flow)
        .effect("echo", echo(calls.clone()))
        .build()
        .unwrap()
}

fn opts(execution: &str) -> StartOptions {
    StartOptions::new(id(execution)).grant("echo")
}

async fn ended<S: EventStore>(rt: &Runtime<S>, execution: &ExecutionId) -> Value {
    for _ in 0..5_000 {
        let state = rt.state(execution).await.unwrap();
        if state.status().is_terminal() {
            let state = rt.wait(execution).await.unwrap();
            assert_eq!(state.status(), ExecutionStatus::Completed);
            return state.output().map(Payload::to_value).unwrap_or_default();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("{execution} never ended");
}

/// Step ids and decisions in the order the log first records them.
async fn steps<S: EventStore>(store: &S, execution: &str) -> Vec<String> {
    let mut seen = Vec::new();
    events_of(store, &id(execution))
        .await
        .into_iter()
        .filter_map(|event| match event {
            Event::StepStarted(s) => Some(s.step_id),
            Event::StepCompleted(s) => Some(s.step_id),
            Event::DecisionRecorded(d) => Some(format!("{} ({})", d.step_id, d.kind)),
            _ => None,
        })
        .for_each(|step| {
            if !seen.contains(&step) {
                seen.push(step);
            }
        });
    seen
}

/// One execution parked at the gate and one completed, both recorded by the old code.
async fn recorded_by_v1() -> MemoryStore {
    let rt = runtime(
        MemoryStore::new(),
        flow_fn("order", 1, order_v1),
        &Calls::default(),
    );
    rt.start("order", &json!({}), opts("old-parked"))
        .await
        .unwrap();
    rt.start("order", &json!({}), opts("old-done"))
        .await
        .unwrap();
    rt.wait(&id("old-done")).await.unwrap();
    rt.resume(&id("old-done"), "Approval", "a", json!("ok").into())
        .await
        .unwrap();
    ended(&rt, &id("old-done")).await;
    assert_eq!(
        rt.state(&id("old-parked")).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    rt.store().clone()
}

#[tokio::test]
async fn an_execution_recorded_by_the_old_code_completes_on_the_old_branch() {
    let store = recorded_by_v1().await;
    let calls = Calls::default();
    let rt = runtime(store, flow_fn("order", 1, order_patched), &calls);
    rt.resume(&id("old-parked"), "Approval", "a", json!("ok").into())
        .await
        .unwrap();
    assert_eq!(ended(&rt, &id("old-parked")).await, json!("done"));
    assert_eq!(calls.count(), 1, "only the charge ran; no fraud check");
    let recorded = steps(rt.store(), "old-parked").await;
    assert_eq!(recorded, ["echo#1", "echo#2"], "no marker: {recorded:?}");
}

#[tokio::test]
async fn a_new_execution_takes_the_new_branch_and_records_it() {
    let calls = Calls::default();
    let rt = runtime(
        MemoryStore::new(),
        flow_fn("order", 1, order_patched),
        &calls,
    );
    rt.start("order", &json!({}), opts("new")).await.unwrap();
    rt.wait(&id("new")).await.unwrap();
    rt.resume(&id("new"), "Approval", "a", json!("ok").into())
        .await
        .unwrap();
    assert_eq!(ended(&rt, &id("new")).await, json!("done, checked"));
    assert_eq!(
        steps(rt.store(), "new").await,
        [
            "echo#1",
            "patch:fraud-check (loom.patch)",
            "echo#2",
            "echo#3"
        ]
    );
    // Its own replay takes the new branch again.
    let log = rt.store().read_all(&id("new")).await.unwrap();
    assert!(rt.replay_log(log).unwrap().returned);
}

#[tokio::test]
async fn a_parked_old_execution_takes_a_change_it_reaches_live() {
    let store = recorded_by_v1().await;
    let calls = Calls::default();
    let rt = runtime(store, flow_fn("order", 1, order_receipt), &calls);
    rt.resume(&id("old-parked"), "Approval", "a", json!("ok").into())
        .await
        .unwrap();
    ended(&rt, &id("old-parked")).await;
    assert_eq!(calls.count(), 2, "receipt and charge");
    assert!(
        steps(rt.store(), "old-parked")
            .await
            .contains(&"patch:receipt (loom.patch)".to_owned())
    );
    // The completed one replays without the receipt: it ended before reaching it live.
    let log = rt.store().read_all(&id("old-done")).await.unwrap();
    assert!(rt.replay_log(log).unwrap().returned);
}

#[tokio::test]
async fn replay_agrees_with_patched_and_catches_the_unguarded_change() {
    let store = recorded_by_v1().await;
    let patched = runtime(
        MemoryStore::new(),
        flow_fn("order", 1, order_patched),
        &Calls::default(),
    );
    let unguarded = runtime(
        MemoryStore::new(),
        flow_fn("order", 1, order_unguarded),
        &Calls::default(),
    );
    for execution in ["old-parked", "old-done"] {
        let log = store.read_all(&id(execution)).await.unwrap();
        patched.replay_log(log.clone()).unwrap();
        let error = unguarded.replay_log(log).unwrap_err().to_string();
        assert!(
            // seq 2: the first step is one event (its outcome), the store having claimed the id.
            error.contains("at seq 2") && error.contains("calls effect 'echo' as step 'echo#2'"),
            "{execution}: {error}"
        );
    }
}

#[tokio::test]
async fn removing_a_patch_call_that_a_log_recorded_is_a_divergence() {
    let rt = runtime(
        MemoryStore::new(),
        flow_fn("order", 1, order_patched),
        &Calls::default(),
    );
    rt.start("order", &json!({}), opts("n")).await.unwrap();
    rt.wait(&id("n")).await.unwrap();
    let log = rt.store().read_all(&id("n")).await.unwrap();
    let old = runtime(
        MemoryStore::new(),
        flow_fn("order", 1, order_v1),
        &Calls::default(),
    );
    let error = old.replay_log(log).unwrap_err().to_string();
    assert!(
        error.contains("DECISION_RECORDED 'patch:fraud-check' (loom.patch)"),
        "{error}"
    );
}

/// The change, everywhere now: the old branch removed, the marker still accepted.
async fn order_deprecated(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("echo", &"reserve").await?;
    ctx.deprecate_patch("fraud-check")?;
    ctx.execute("echo", &"fraud-check").await?;
    ctx.suspend("Approval", "a").await?;
    ctx.execute("echo", &"charge").await?;
    Ok(json!("done, checked"))
}

#[tokio::test]
async fn a_deprecated_patch_accepts_logs_with_the_marker_and_records_none() {
    let rt = runtime(
        MemoryStore::new(),
        flow_fn("order", 1, order_patched),
        &Calls::default(),
    );
    rt.start("order", &json!({}), opts("with-marker"))
        .await
        .unwrap();
    rt.wait(&id("with-marker")).await.unwrap();
    let store = rt.store().clone();

    let calls = Calls::default();
    let rt = runtime(store.clone(), flow_fn("order", 1, order_deprecated), &calls);
    let log = store.read_all(&id("with-marker")).await.unwrap();
    rt.replay_log(log).unwrap();
    rt.resume(&id("with-marker"), "Approval", "a", json!("ok").into())
        .await
        .unwrap();
    assert_eq!(ended(&rt, &id("with-marker")).await, json!("done, checked"));

    rt.start("order", &json!({}), opts("fresh")).await.unwrap();
    rt.wait(&id("fresh")).await.unwrap();
    let recorded = steps(rt.store(), "fresh").await;
    assert_eq!(recorded, ["echo#1", "echo#2"], "no marker: {recorded:?}");
    let log = rt.store().read_all(&id("fresh")).await.unwrap();
    rt.replay_log(log).unwrap();
}

/// Deprecates the change, then asks about it again.
async fn order_deprecated_then_patched(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.deprecate_patch("fraud-check")?;
    match ctx.patched("fraud-check") {
        Err(StepError::DeprecatedPatch(change)) => Ok(json!({ "refused": change })),
        other => Ok(json!({ "answered": format!("{other:?}") })),
    }
}

#[tokio::test]
async fn patched_after_deprecate_patch_of_the_same_change_is_refused_not_answered_unrecorded() {
    let rt = runtime(
        MemoryStore::new(),
        flow_fn("order", 1, order_deprecated_then_patched),
        &Calls::default(),
    );
    rt.start("order", &json!({}), opts("both")).await.unwrap();
    let state = rt.wait(&id("both")).await.unwrap();
    assert_eq!(
        state.output().map(Payload::to_value),
        Some(json!({ "refused": "fraud-check" }))
    );
    let log = rt.store().read_all(&id("both")).await.unwrap();
    rt.replay_log(log).unwrap();
}
