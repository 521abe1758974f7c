//! Shared fixtures of the runtime's tests: effects that count their calls, a runtime over a
//! memory store, and readers of what a log holds.
#![allow(dead_code)]

pub mod append_hook;
pub mod child;
pub mod divergence;
pub mod kill;
pub mod older_layouts;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loom_kernel::Event;
use loom_kernel::*;
use loom_kernel::{EventStore, EventStoreExt, ExecutionId, MemoryStore};
use serde_json::json;

pub use loom_kernel::conformance::id;

/// Calls of an effect, shared between a test and the effect.
#[derive(Debug, Clone, Default)]
pub struct Calls(Arc<AtomicUsize>);

impl Calls {
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// An idempotent effect that answers `{"echo": input, "key": idempotency key}` at cost 1.
pub fn echo(calls: Calls) -> impl Effect {
    FnEffect::new(true, move |call: EffectCall| {
        calls.bump();
        async move {
            EffectOutcome::ok(
                json!({"echo": call.input.to_value(), "key": call.idempotency_key()}).into(),
            )
            .with_cost(1)
        }
    })
}

/// Start options that grant `capabilities`.
pub fn options(execution: &str, capabilities: &[&str]) -> StartOptions {
    capabilities
        .iter()
        .fold(StartOptions::new(id(execution)), |options, capability| {
            options.grant(*capability)
        })
}

/// The type names of a log's events, in order.
pub async fn event_names<S: EventStore>(store: &S, execution: &ExecutionId) -> Vec<&'static str> {
    store
        .read_all(execution)
        .await
        .unwrap()
        .iter()
        .map(|envelope| envelope.event.type_name())
        .collect()
}

/// A log's events.
pub async fn events_of<S: EventStore>(store: &S, execution: &ExecutionId) -> Vec<Event> {
    store
        .read_all(execution)
        .await
        .unwrap()
        .into_iter()
        .map(|envelope| envelope.event)
        .collect()
}

/// A runtime over `store` with the flows given and the effect `echo`.
pub fn with_echo(store: MemoryStore, flows: FlowSet, calls: Calls) -> Runtime<MemoryStore> {
    Runtime::builder(store)
        .flows(&flows)
        .effect("echo", echo(calls))
        .build()
        .unwrap()
}

/// Start options granting every effect the runtime's tests register (K2 holds for raw effects
/// too).
pub fn grant_all(execution: ExecutionId) -> StartOptions {
    ["echo", "payments.charge", "email.send", "pay", "gated"]
        .into_iter()
        .fold(StartOptions::new(execution), StartOptions::grant)
}

/// Three gates opened at once (`Pick` a, b and c); returns their payloads in that order.
pub async fn three_gates(
    ctx: FlowCtx,
    _: serde_json::Value,
) -> Result<Vec<serde_json::Value>, FlowError> {
    let (a, b, c) = futures::join!(
        ctx.suspend("Pick", "a"),
        ctx.suspend("Pick", "b"),
        ctx.suspend("Pick", "c")
    );
    Ok(vec![a?.to_value(), b?.to_value(), c?.to_value()])
}

/// A charge (step `charge#1` of `payments.charge`), then a gate (`Approval`, key `k`).
pub async fn charge_then_mail(ctx: FlowCtx, _: serde_json::Value) -> Result<(), FlowError> {
    ctx.execute_as(StepName::Counted("charge".into()), "payments.charge", &1)
        .await?;
    ctx.suspend("Approval", "k").await?;
    Ok(())
}

/// Starts `flow` (input `null`) with `options` and waits until it parks: the execution.
pub async fn start_parked<S: EventStore>(
    runtime: &Runtime<S>,
    flow: &str,
    options: StartOptions,
) -> ExecutionId {
    let e = runtime.start(flow, &json!(null), options).await.unwrap();
    let status = runtime.wait(&e).await.unwrap().status();
    assert_eq!(status, ExecutionStatus::Suspended, "{flow} parks");
    e
}

/// Polls the log until the execution's status satisfies `done` (timer tasks and the drivers
/// they wake run on their own tasks), then waits for its driver to finish what follows.
pub async fn until<S: EventStore>(
    runtime: &Runtime<S>,
    execution: &ExecutionId,
    done: impl Fn(ExecutionStatus) -> bool,
) -> ExecutionState {
    for _ in 0..5_000 {
        let state = runtime.state(execution).await.unwrap();
        if done(state.status()) {
            return runtime.wait(execution).await.unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    panic!("execution {execution} never reached the expected status");
}
