//! Every flow shape is driven to its end or parks only at a gate or a step in doubt: flows
//! that await timers, yields, channels and joined tasks besides their commands.

use loom_kernel::*;
use loom_kernel::{EventStore, ExecutionStatus, MemoryStore};
use serde_json::{Value, json};

use crate::support::{Calls, id, options, start_parked, with_echo};

async fn sleeps_between_steps(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let first = ctx.execute("echo", &1).await?;
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    let second = ctx.execute("echo", &2).await?;
    Ok(json!([first.to_value()["echo"], second.to_value()["echo"]]))
}

async fn yields_between_steps(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("echo", &1).await?;
    tokio::task::yield_now().await;
    ctx.execute("echo", &2).await?;
    Ok(json!("done"))
}

async fn awaits_a_channel(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let (send, receive) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        tokio::task::yield_now().await;
        let _ = send.send(5u64);
    });
    let got = receive
        .await
        .map_err(|_| FlowError::new("test", "closed"))?;
    ctx.execute("echo", &got).await?;
    Ok(json!(got))
}

async fn awaits_a_joined_task(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let task = tokio::spawn(async {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        7u64
    });
    let got = task.await.map_err(|_| FlowError::new("test", "join"))?;
    ctx.execute("echo", &got).await?;
    Ok(json!(got))
}

async fn yields_then_waits_at_a_gate(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    tokio::task::yield_now().await;
    let approval = ctx.suspend("Approval", "k").await?;
    Ok(approval.to_value())
}

async fn joins_a_gate_with_a_yielding_branch(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let branch = async {
        tokio::task::yield_now().await;
        ctx.execute("echo", &1).await
    };
    let (approval, echoed) = futures::join!(ctx.suspend("Approval", "k"), branch);
    echoed?;
    Ok(approval?.to_value())
}

fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("sleeps", 1, sleeps_between_steps))
        .with(flow_fn("yields", 1, yields_between_steps))
        .with(flow_fn("channel", 1, awaits_a_channel))
        .with(flow_fn("joined", 1, awaits_a_joined_task))
        .with(flow_fn("yield_gate", 1, yields_then_waits_at_a_gate))
        .with(flow_fn("join_gate", 1, joins_a_gate_with_a_yielding_branch))
}

async fn runs_to_completion(flow: &str) {
    let calls = Calls::default();
    let rt = with_echo(MemoryStore::new(), flows(), calls.clone());
    let e = rt
        .start(flow, &json!(null), options(flow, &["echo"]))
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed, "{flow}");
}

#[tokio::test]
async fn a_flow_awaiting_a_tokio_sleep_runs_to_the_end() {
    runs_to_completion("sleeps").await;
}

#[tokio::test]
async fn a_flow_awaiting_yield_now_runs_to_the_end() {
    runs_to_completion("yields").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_awaiting_a_channel_runs_to_the_end() {
    runs_to_completion("channel").await;
}

#[tokio::test]
async fn a_flow_awaiting_a_joined_task_runs_to_the_end() {
    runs_to_completion("joined").await;
}

#[tokio::test]
async fn recover_drives_a_flow_that_awaits_a_timer_to_the_end() {
    let store = MemoryStore::new();
    let e = id("sleeps");
    store
        .append(&e, 0, &[loom_kernel::conformance::started("sleeps")])
        .await
        .unwrap();
    let rt = with_echo(store, flows(), Calls::default());
    // The execution as started by `conformance::started` was granted nothing; grant-free
    // effects are not what this test is about, so the flow's steps may fail: it must end.
    assert_eq!(rt.recover().await.unwrap(), 1);
    let state = rt.wait(&e).await.unwrap();
    assert!(state.status().is_terminal(), "{:?}", state.status());
}

#[tokio::test]
async fn after_a_restart_a_gate_reached_after_a_yield_resumes() {
    let store = MemoryStore::new();
    let rt = with_echo(store.clone(), flows(), Calls::default());
    let e = start_parked(&rt, "yield_gate", options("g", &[])).await;
    drop(rt);
    let rt = with_echo(store, flows(), Calls::default());
    rt.resume(&e, "Approval", "k", json!("yes").into())
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
}

#[tokio::test]
async fn a_gate_joined_with_a_yielding_branch_parks_only_after_the_branch_ran() {
    let store = MemoryStore::new();
    let calls = Calls::default();
    let rt = with_echo(store.clone(), flows(), calls.clone());
    let e = start_parked(&rt, "join_gate", options("jg", &["echo"])).await;
    assert_eq!(
        calls.count(),
        1,
        "the branch after the yield ran before parking"
    );
    drop(rt);
    let rt = with_echo(store, flows(), calls.clone());
    rt.resume(&e, "Approval", "k", json!("yes").into())
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(calls.count(), 1, "replay ran no effect");
}
