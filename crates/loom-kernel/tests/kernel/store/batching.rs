//! What a flow queues in one poll is appended in one batch, so it becomes durable together.
//! The A2UI plugin relies on this for grain-A function calls (LD-008): the request, recorded
//! as a decision, and the gate that waits for its answer are durable together or not at all.

use std::sync::{Arc, Mutex};

use crate::support::append_hook::{AppendHooked, on_append};
use loom_kernel::conformance::id;
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FnEffect, Runtime, StartOptions, flow_fn,
};
use loom_kernel::{Event, MemoryStore};
use serde_json::{Value, json};

/// A memory store that remembers the event types of each append, and what it remembers.
fn recording() -> (AppendHooked, Arc<Mutex<Vec<Vec<&'static str>>>>) {
    let batches: Arc<Mutex<Vec<Vec<&'static str>>>> = Arc::default();
    let seen = Arc::clone(&batches);
    let store = on_append(MemoryStore::new(), move |append| {
        let seen = Arc::clone(&seen);
        async move {
            let head = append.forward().await?;
            let types = append.events.iter().map(Event::type_name).collect();
            seen.lock().unwrap().push(types);
            Ok(head)
        }
    });
    (store, batches)
}

async fn ask_then_wait(ctx: FlowCtx, _input: Value) -> Result<Value, FlowError> {
    ctx.execute("warm_up", &json!({})).await?;
    ctx.decide("request", || json!({"callId": "x"}))?;
    let answer = ctx.suspend("Answer", "x").await?;
    Ok(answer.to_value())
}

#[tokio::test]
async fn a_decision_and_the_gate_opened_in_the_same_poll_are_appended_in_one_batch() {
    let (store, batches) = recording();
    let runtime = Runtime::builder(store)
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
    let batches = batches.lock().unwrap().clone();
    let together = batches.iter().any(|batch| {
        batch
            .windows(2)
            .any(|w| w == ["DECISION_RECORDED", "EXECUTION_SUSPENDED"])
    });
    assert!(together, "{batches:?}");
}
