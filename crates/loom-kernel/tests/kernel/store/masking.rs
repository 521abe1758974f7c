//! K10-R6: the runtime's data classification masks every text that leaves it; the log keeps
//! true values.

use loom_kernel::DataClassification;
use loom_kernel::*;
use loom_kernel::{EventStoreExt, MemoryStore};
use serde_json::{Value, json};

use crate::support;
use crate::support::{Calls, options};

const CARD: &str = "4111111111111111";
const OTHER_CARD: &str = "4222222222222222";

async fn shows_card(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    ctx.emit_surface_patch(
        "main",
        json!([{"op": "set", "path": "card.number", "value": input["card"]}]).into(),
    )?;
    ctx.suspend("Approval", "k").await?;
    Ok(json!({"card": {"number": input["card"]}}))
}

async fn shows_other_card(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.emit_surface_patch(
        "main",
        json!([{"op": "set", "path": "card.number", "value": OTHER_CARD}]).into(),
    )?;
    ctx.suspend("Approval", "k").await?;
    Ok(json!({"card": {"number": OTHER_CARD}}))
}

fn classified() -> DataClassification {
    DataClassification::mask_paths(["card.number"]).unwrap()
}

fn runtime(store: MemoryStore, flow: impl Flow) -> Runtime<MemoryStore> {
    Runtime::builder(store)
        .flow(flow)
        .effect("echo", support::echo(Calls::default()))
        .classification(classified())
        .build()
        .unwrap()
}

fn assert_masked(text: &str) {
    assert!(!text.contains(CARD), "card number in clear: {text}");
    assert!(!text.contains(OTHER_CARD), "card number in clear: {text}");
    assert!(text.contains(loom_kernel::MASK), "{text}");
}

#[tokio::test]
async fn a_non_determinism_error_masks_classified_values() {
    let store = MemoryStore::new();
    let rt = runtime(store.clone(), flow_fn("f", 1, shows_card));
    let e = rt
        .start("f", &json!({"card": CARD}), options("m", &[]))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    drop(rt);
    let rt = runtime(store.clone(), flow_fn("f", 1, shows_other_card));
    let err = rt
        .resume(&e, "Approval", "k", json!("yes").into())
        .await
        .unwrap_err();
    assert_masked(&err.to_string());
    let err = rt.wait(&e).await.unwrap_err();
    assert_masked(&err.to_string());
    // The log keeps the true value.
    let log = store.read_all(&e).await.unwrap();
    assert!(format!("{:?}", log[1].event).contains(CARD));
}

#[tokio::test]
async fn replay_errors_mask_classified_values() {
    let store = MemoryStore::new();
    let rt = runtime(store.clone(), flow_fn("f", 1, shows_card));
    let e = rt
        .start("f", &json!({"card": CARD}), options("r", &[]))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    rt.resume(&e, "Approval", "k", json!("yes").into())
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    let log = store.read_all(&e).await.unwrap();
    let err = runtime(MemoryStore::new(), flow_fn("f", 1, shows_other_card))
        .replay_log(log)
        .unwrap_err();
    assert_masked(&err.to_string());
}
