//! `EffectDef::for_handle`: the effect a flow runs through a typed handle, defined with the
//! handle's name and types (LD-023).

use loom_effect_runtime::{EffectContext, EffectDef, EffectError, EffectRegistry};
use loom_kernel::conformance::id;
use loom_kernel::{
    CompositionError, EffectHandle, FlowCtx, FlowError, Runtime, StartOptions, flow_fn,
};
use loom_kernel::{ExecutionStatus, MemoryStore};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    cents: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Receipt {
    charged: u64,
    key: String,
}

const CHARGE: EffectHandle<Order, Receipt> = EffectHandle::new("payments.charge");
const REFUND: EffectHandle<Order, Receipt> = EffectHandle::new("payments.refund");

async fn charge(ctx: EffectContext, order: Order) -> Result<Receipt, EffectError> {
    Ok(Receipt {
        charged: order.cents,
        key: ctx.idempotency_key().to_owned(),
    })
}

async fn checkout(ctx: FlowCtx, order: Order) -> Result<String, FlowError> {
    let receipt = ctx.execute(&CHARGE, &order).await?;
    Ok(format!("{} under {}", receipt.charged, receipt.key))
}

#[tokio::test]
async fn a_definition_for_a_handle_serves_the_flow_that_uses_it() {
    let effects = EffectRegistry::new()
        .with(EffectDef::for_handle(&CHARGE, charge))
        .unwrap();
    let loom = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("checkout", 1, checkout).uses(&[&CHARGE]))
        .plugin(&effects)
        .build()
        .unwrap();
    let options = StartOptions::new(id("order-1")).grant(CHARGE.name());
    loom.start("checkout", &Order { cents: 250 }, options)
        .await
        .unwrap();
    let state = loom.wait(&id("order-1")).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(
        state.output().unwrap().to_value(),
        "250 under order-1:payments.charge#1"
    );
}

#[test]
fn a_flow_using_a_handle_no_definition_serves_is_refused_when_built() {
    let effects = EffectRegistry::new()
        .with(EffectDef::for_handle(&CHARGE, charge))
        .unwrap();
    let error = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("checkout", 1, checkout).uses(&[&CHARGE, &REFUND]))
        .plugin(&effects)
        .build()
        .unwrap_err();
    assert!(matches!(
        error,
        CompositionError::UnregisteredEffect { ref flow, ref effect, .. }
            if flow == "checkout" && effect == "payments.refund"
    ));
}
