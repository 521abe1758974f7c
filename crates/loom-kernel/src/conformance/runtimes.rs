//! Runtimes, effects and filled stores for the benches and the tests of code built on the
//! kernel.

use serde_json::{Value, json};

use crate::event::Event;
use crate::id::ExecutionId;
use crate::store::EventStore;

/// An idempotent effect that answers with its input: the no-op step of benchmarks and tests.
pub fn echo_effect() -> impl crate::Effect {
    crate::FnEffect::new(true, |call: crate::EffectCall| async move {
        crate::EffectOutcome::ok(call.input)
    })
}

/// A runtime on `store` with one flow, `stuck`, whose one idempotent step (effect `stuck`)
/// never answers: an execution of it stays running for good (recovery benches, to have
/// executions a worker must drive).
pub fn stuck_runtime<S: EventStore>(store: S) -> crate::Runtime<S> {
    async fn stuck_flow(ctx: crate::FlowCtx, _: Value) -> Result<Value, crate::FlowError> {
        Ok(ctx.execute("stuck", &1).await?.to_value())
    }
    let stuck = crate::FnEffect::new(true, |_call: crate::EffectCall| async {
        std::future::pending::<()>().await;
        crate::EffectOutcome::ok(Value::Null.into())
    });
    crate::Runtime::builder(store)
        .flow(crate::flow_fn("stuck", 1, stuck_flow))
        .effect("stuck", stuck)
        .build()
        .expect("the stuck flow and its effect compose")
}

/// Fills `store` for the recovery benches: [`fill_logs`], then [`RUNNING_LEFT`] executions of
/// [`stuck_runtime`]'s flow (`running-000`...) left running.
pub async fn fill_for_recovery<S: EventStore + Clone + 'static>(
    store: &S,
    prefix: &str,
    count: usize,
    events: &[Event],
) {
    fill_logs(store, prefix, count, events).await;
    let rt = stuck_runtime(store.clone());
    for n in 0..RUNNING_LEFT {
        rt.start(
            "stuck",
            &json!(n),
            crate::StartOptions::new(
                ExecutionId::new(format!("running-{n:03}")).expect("a valid id"),
            )
            .grant("stuck"),
        )
        .await
        .expect("the execution starts");
    }
    rt.shutdown().await;
}

/// Fills `store` with `count` executions `{prefix}-00000000`... whose logs are `events`,
/// appended 20,000 at a time (the store's writer groups them into large commits).
pub async fn fill_logs<S: EventStore>(store: &S, prefix: &str, count: usize, events: &[Event]) {
    let ids: Vec<ExecutionId> = (0..count)
        .map(|n| ExecutionId::new(format!("{prefix}-{n:08}")).expect("a valid id"))
        .collect();
    for chunk in ids.chunks(20_000) {
        let appends = chunk.iter().map(|id| store.append(id, 0, events));
        for appended in futures::future::join_all(appends).await {
            appended.expect("the append is stored");
        }
    }
}

/// How many running executions [`fill_for_recovery`] leaves.
pub const RUNNING_LEFT: usize = 100;
