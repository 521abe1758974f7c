//! A complete program on Loom, as the README's "Using Loom in your crate" shows it: one flow,
//! one effect, the embedded store. Run it twice: the second run finds the execution of the
//! first, completed, and shows its output instead of starting it again.

use std::process::ExitCode;

use anyhow::Context;
use loom_effect_runtime::{EffectContext, EffectDef, EffectError, EffectRegistry};
use loom_kernel::{DiskStore, ExecutionId, ExecutionStatus, Payload};
use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, flow_fn};
use serde_json::{Value, json};

/// The flow: charge, wait for an approval, record the time, return a receipt.
async fn checkout(ctx: FlowCtx, order: Value) -> Result<Value, FlowError> {
    let receipt = ctx.execute("payments.charge", &order).await?; // recorded; replayed after a crash
    let approval = ctx.suspend("Approval", "order-42").await?; // a gate: waits for a resume
    let at = ctx.now()?; // a decision, recorded once
    Ok(json!({"receipt": receipt.to_value(), "approval": approval.to_value(), "at": at}))
}

/// The effect: a stand-in for a bank, which deduplicates on the idempotency key.
async fn charge(ctx: EffectContext, order: Value) -> Result<Value, EffectError> {
    Ok(json!({"charged": order, "key": ctx.idempotency_key()}))
}

/// Runs the checkout `order-42` on the store at `path`, to its end.
pub async fn run(path: &str) -> anyhow::Result<()> {
    let effects = EffectRegistry::new().with(
        EffectDef::new("payments.charge", charge)
            .capability("payments")
            .cost(2),
    )?;
    let store = DiskStore::open(path).with_context(|| format!("opening the store {path}"))?;
    let loom = Runtime::builder(store)
        .flow(flow_fn("checkout", 1, checkout))
        .plugin(&effects)
        .build()?;
    loom.recover().await?; // drives on whatever a previous process left running

    let id = ExecutionId::new("order-42")?;
    let options = StartOptions::new(id.clone()).grant("payments").budget(10);
    // Idempotent on the id: a second run gets the execution of the first, whatever its state.
    loom.start("checkout", &json!({"sku": "A1"}), options)
        .await?;
    let state = loom.wait(&id).await?; // until it ends or parks
    if state
        .pending_gates()
        .values()
        .any(|gate| &*gate.event_type == "Approval")
    {
        println!("{id} waits for its approval: approving it");
        loom.resume(&id, "Approval", "order-42", Payload::from(json!("yes")))
            .await?;
    } else {
        println!("{id} was started by an earlier run");
    }
    let state = loom.wait(&id).await?;
    match (state.status(), state.output(), state.failure()) {
        (ExecutionStatus::Completed, Some(output), _) => println!("{id} completed: {output}"),
        (status, _, Some(error)) => println!("{id} is {status}: {}", error.message),
        (status, _, _) => println!("{id} is {status}"),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run("loom.redb").await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The error and its causes in one sentence, each cause once (`{error:#}` would
            // repeat a cause that a Loom error's message already shows).
            eprintln!("error: {}", loom_kernel::error_sentence(&*error));
            ExitCode::FAILURE
        }
    }
}
