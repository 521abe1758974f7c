//! What a flow queues in one poll is appended in one batch, so it becomes durable together.
//! The A2UI plugin relies on this for grain-A function calls (ADR 0008): the request, recorded
//! as a decision, and the gate that waits for its answer are durable together or not at all.

use std::sync::{Arc, Mutex};

use loom_kernel::AppendError;
use loom_kernel::conformance::{Hooked, StoreHooks, id};
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FnEffect, Runtime, StartOptions, flow_fn,
};
use loom_kernel::{Event, EventStore, ExecutionId, MemoryStore};
use serde_json::{Value, json};

/// Hooks that remember the event types of each append.
#[derive(Clone, Default)]
struct Recording {
    batches: Arc<Mutex<Vec<Vec<&'static str>>>>,
}

impl StoreHooks<MemoryStore> for Recording {
    async fn append(
        &self,
        inner: &MemoryStore,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        let head = inner.append(execution, expected_seq, events).await?;
        self.batches
            .lock()
            .unwrap()
            .push(events.iter().map(Event::type_name).collect());
        Ok(head)
    }
}

async fn ask_then_wait(ctx: FlowCtx, _input: Value) -> Result<Value, FlowError> {
    ctx.execute("warm_up", &json!({})).await?;
    ctx.decide("request", || json!({"callId": "x"}))?;
    let answer = ctx.suspend("Answer", "x").await?;
    Ok(answer.to_value())
}

#[tokio::test]
async fn a_decision_and_the_gate_opened_in_the_same_poll_are_appended_in_one_batch() {
    let store = Hooked::<MemoryStore, Recording>::default();
    let runtime = Runtime::builder(store.clone())
        .flow(flow_fn("ask", 1, ask_then_wait))
        .effect(
            "warm_up",
            FnEffect::new(true, |_call: EffectCall| async {
                EffectOutcome::ok(json!(1).into())
            }),
        )
        .build()
        .unwrap();
    let e = id("batching");
    runtime
        .start(
            "ask",
            &json!({}),
            StartOptions::new(e.clone()).grant("warm_up"),
        )
        .await
        .unwrap();
    let _ = runtime.wait(&e).await;
    let batches = store.hooks.batches.lock().unwrap().clone();
    let together = batches.iter().any(|batch| {
        batch
            .windows(2)
            .any(|w| w == ["DECISION_RECORDED", "EXECUTION_SUSPENDED"])
    });
    assert!(together, "{batches:?}");
}
