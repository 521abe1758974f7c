//! Replay of a whole log with no effect and no write: what it calls deterministic.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use loom_kernel::kit::{ReplayError, Replayer};
use loom_kernel::*;
use loom_kernel::{EventStoreExt, MemoryStore};
use serde_json::{Value, json};

use crate::support::{Calls, options, with_echo};

/// Pending once, after waking its own waker: what a cooperative yield does.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

async fn one_step(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.execute("echo", &1).await?.to_value())
}

async fn one_step_then_another(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let first = ctx.execute("echo", &1).await?;
    ctx.execute("echo", &2).await?;
    Ok(first.to_value())
}

async fn one_step_then_fails(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("echo", &1).await?;
    Err(FlowError::new("now", "fails"))
}

async fn one_step_then_panics(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("echo", &1).await?;
    panic!("the flow panics on replay");
}

async fn yields_often(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    for n in 0..5u64 {
        YieldOnce(false).await;
        ctx.execute("echo", &n).await?;
    }
    Ok(json!("done"))
}

/// The log of `flow` run live to its end.
async fn recorded(flow: &str, code: impl Flow) -> Vec<loom_kernel::EventEnvelope> {
    let rt = with_echo(
        MemoryStore::new(),
        FlowSet::new().with(code),
        Calls::default(),
    );
    let e = rt
        .start(flow, &json!(null), options(flow, &["echo"]))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    rt.store().read_all(&e).await.unwrap()
}

fn replaying(code: impl Flow) -> Runtime<MemoryStore> {
    with_echo(
        MemoryStore::new(),
        FlowSet::new().with(code),
        Calls::default(),
    )
}

#[tokio::test]
async fn a_completed_log_is_not_deterministic_when_the_flow_now_issues_a_step_after_its_end() {
    let log = recorded("f", flow_fn("f", 1, one_step)).await;
    let err = replaying(flow_fn("f", 1, one_step_then_another))
        .replay_log(log.clone())
        .unwrap_err();
    let ReplayError::NonDeterminism(divergence) = &err else {
        panic!("{err}")
    };
    assert_eq!(divergence.seq, log.len() as u64 - 1, "{err}");
    assert!(divergence.recorded.contains("EXECUTION_COMPLETED"), "{err}");
}

#[tokio::test]
async fn a_completed_log_is_not_deterministic_when_the_flow_now_fails() {
    let log = recorded("f", flow_fn("f", 1, one_step)).await;
    let err = replaying(flow_fn("f", 1, one_step_then_fails))
        .replay_log(log)
        .unwrap_err();
    assert!(matches!(err, ReplayError::NonDeterminism(_)), "{err}");
    assert!(err.to_string().contains("now: fails"), "{err}");
}

#[tokio::test]
async fn replay_of_a_panicking_flow_returns_a_typed_error() {
    let log = recorded("f", flow_fn("f", 1, one_step)).await;
    let err = replaying(flow_fn("f", 1, one_step_then_panics))
        .replay_log(log)
        .unwrap_err();
    assert!(
        matches!(err, ReplayError::FlowPanicked { ref message, .. } if message.contains("panics on replay")),
        "{err}"
    );
}

#[tokio::test]
async fn replay_polls_a_flow_that_yields_until_it_stops() {
    let log = recorded("y", flow_fn("y", 1, yields_often)).await;
    let report = replaying(flow_fn("y", 1, yields_often))
        .replay_log(log.clone())
        .unwrap();
    assert!(report.returned);
    assert_eq!(report.events, log.len() as u64);
}

/// A `Replayer` checks logs with no runtime, store or effect: the same findings as a runtime's
/// replay, and two flows of one name and version refused.
#[tokio::test]
async fn a_replayer_needs_no_runtime_and_finds_what_a_runtime_s_replay_finds() {
    let log = recorded("f", flow_fn("f", 1, one_step)).await;
    let same = Replayer::new(
        &FlowSet::new().with(flow_fn("f", 1, one_step)),
        DataClassification::default(),
    )
    .unwrap();
    let report = same.replay_log(log.clone()).unwrap();
    assert!(report.returned);
    assert_eq!(report.events, log.len() as u64);
    let changed = Replayer::new(
        &FlowSet::new().with(flow_fn("f", 1, one_step_then_another)),
        DataClassification::default(),
    )
    .unwrap();
    let by_replayer = changed.replay_log(log.clone()).unwrap_err();
    let by_runtime = replaying(flow_fn("f", 1, one_step_then_another))
        .replay_log(log.clone())
        .unwrap_err();
    assert_eq!(by_replayer.to_string(), by_runtime.to_string());
    let unknown = Replayer::new(
        &FlowSet::new().with(flow_fn("g", 1, one_step)),
        DataClassification::default(),
    )
    .unwrap();
    assert!(matches!(
        unknown.replay_log(log).unwrap_err(),
        ReplayError::UnknownFlow { .. }
    ));
    let twice = Replayer::new(
        &FlowSet::new()
            .with(flow_fn("f", 1, one_step))
            .with(flow_fn("f", 1, one_step_then_fails)),
        DataClassification::default(),
    );
    assert!(matches!(
        twice.unwrap_err(),
        CompositionError::DuplicateFlow { .. }
    ));
}

/// An empty log is refused by a `Replayer` as by a runtime.
#[test]
fn a_replayer_refuses_an_empty_log() {
    let replayer = Replayer::new(
        &FlowSet::new().with(flow_fn("f", 1, one_step)),
        DataClassification::default(),
    )
    .unwrap();
    assert!(matches!(
        replayer.replay_log(Vec::new()),
        Err(ReplayError::Empty)
    ));
}
