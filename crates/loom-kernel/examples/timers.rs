//! Durable timers and a gate with a deadline ("approve within a time, else escalate"), on the
//! embedded disk store, with the system clock and short durations so that it runs in a second.
//!
//! `cargo run -p loom-kernel --example timers`
//!
//! Four executions: one approved in time, one whose deadline passes first, one that takes the
//! first of two gates (approval or rejection), and one that sleeps across a restart of the
//! runtime (the first runtime is dropped while the timer waits; the
//! second recovers it from the log and it fires at its recorded deadline).

use std::time::Duration;

use loom_kernel::{DiskStore, Event, EventStoreExt, ExecutionId};
use loom_kernel::{
    FlowCtx, FlowError, GateOutcome, Runtime, Selected, StartOptions, SystemClock, flow_fn,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: String,
    /// How long the approver has, in ms (a day in real life).
    approve_within_ms: u64,
}

/// Waits for an approval; escalates if none comes in time.
async fn approve_order(ctx: FlowCtx, order: Order) -> Result<Value, FlowError> {
    let within = Duration::from_millis(order.approve_within_ms);
    match ctx
        .suspend_with_timeout("Approval", &order.id, within)
        .await?
    {
        GateOutcome::Resumed(answer) => {
            Ok(json!({"order": order.id, "approved_by": answer.to_value()}))
        }
        GateOutcome::TimedOut => Ok(json!({"order": order.id, "escalated": true})),
    }
}

/// Approval or rejection, whichever comes first, within a minute.
async fn review(ctx: FlowCtx, id: String) -> Result<Value, FlowError> {
    let gates = [("Approval", id.as_str()), ("Rejection", id.as_str())];
    Ok(
        match ctx.first_of(&gates, Some(Duration::from_secs(60))).await? {
            Selected::Gate { index: 0, payload } => json!({"approved_by": payload.to_value()}),
            Selected::Gate { payload, .. } => json!({"rejected_by": payload.to_value()}),
            Selected::TimedOut => json!("escalated"),
        },
    )
}

/// Sleeps, then says when it woke (recorded, like every reading of the clock).
async fn reminder(ctx: FlowCtx, after_ms: u64) -> Result<Value, FlowError> {
    let set_at = ctx.now()?;
    ctx.sleep(Duration::from_millis(after_ms)).await?;
    let woke_at = ctx.now()?;
    Ok(json!({"slept_ms": woke_at - set_at}))
}

fn compose(store: DiskStore) -> Runtime<DiskStore> {
    Runtime::builder(store)
        .flow(flow_fn("approve_order", 1, approve_order))
        .flow(flow_fn("reminder", 1, reminder))
        .flow(flow_fn("review", 1, review))
        .clock(SystemClock)
        .build()
        .expect("the flows compose")
}

async fn show(
    store: &DiskStore,
    execution: &ExecutionId,
) -> Result<(), Box<dyn std::error::Error>> {
    for envelope in store.read_all(execution).await? {
        let detail = match &envelope.event {
            Event::DecisionRecorded(d) => {
                format!("{} {} = {}", d.step_id, d.kind, d.value.as_json())
            }
            Event::ExecutionSuspended(g) => format!(
                "{} ({}, key '{}')",
                g.gate_id, g.event_type, g.correlation_key
            ),
            Event::ExecutionResumed(r) => format!("{} with {}", r.gate_id, r.payload.as_json()),
            Event::ExecutionCompleted(c) => c.output.as_json().to_owned(),
            _ => String::new(),
        };
        println!(
            "  {:>2} {:<20} {detail}",
            envelope.seq,
            envelope.event.type_name()
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("timers.redb");
    let approved = ExecutionId::new("order-1")?;
    let escalated = ExecutionId::new("order-2")?;
    let sleeper = ExecutionId::new("reminder-1")?;
    let reviewed = ExecutionId::new("order-3")?;
    let store = DiskStore::open(&path)?;
    {
        let runtime = compose(store.clone());
        for (execution, within) in [(&approved, 60_000), (&escalated, 200)] {
            let order = Order {
                id: execution.to_string(),
                approve_within_ms: within,
            };
            runtime
                .start(
                    "approve_order",
                    &order,
                    StartOptions::new(execution.clone()),
                )
                .await?;
        }
        runtime
            .start("reminder", &300u64, StartOptions::new(sleeper.clone()))
            .await?;
        runtime
            .start("review", &"order-3", StartOptions::new(reviewed.clone()))
            .await?;
        runtime
            .resume(&reviewed, "Rejection", "order-3", json!("cy").into())
            .await?;
        runtime
            .resume(&approved, "Approval", "order-1", json!("ana").into())
            .await?;
        runtime.wait(&approved).await?;
        tokio::time::sleep(Duration::from_millis(250)).await;
        let late = runtime
            .resume(&escalated, "Approval", "order-2", json!("bo").into())
            .await;
        println!(
            "a resume after order-2's deadline: {}",
            late.err().map(|e| e.to_string()).unwrap_or_default()
        );
        println!(
            "the runtime stops while reminder-1 sleeps ({} timer pending)",
            runtime.pending_timers()
        );
    }
    // A new runtime on the same store (a new process would open the file again), then recover.
    let runtime = compose(store.clone());
    let report = runtime.recover_report().await?;
    println!("recovered: {} timer(s) armed from the log", report.timers);
    loop {
        let state = runtime.wait(&sleeper).await?;
        if state.status().is_terminal() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for execution in [&approved, &escalated, &reviewed, &sleeper] {
        println!("{execution}:");
        show(&store, execution).await?;
    }
    Ok(())
}
