//! On a store no process holds, `loom resume` refuses what `Runtime::resume` refuses: a gate of
//! the runtime's (a child's `loom.child`, a timer's `loom.timer`) and a payload that is a
//! runtime marker. Nothing is recorded.

use loom_console::ErrorKind;
use loom_kernel::conformance::id;
use loom_kernel::{EventStoreExt, ExecutionStatus, MemoryStore};
use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, flow_fn};
use serde_json::{Value, json};

async fn child(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.suspend("Go", "go").await?.to_value())
}

async fn parent(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.child("child", &json!(null)).await?.to_value())
}

#[tokio::test]
async fn a_childs_gate_and_a_runtime_marker_are_refused_offline() {
    let store = MemoryStore::new();
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("child", 1, child))
        .flow(flow_fn("parent", 1, parent))
        .build()
        .unwrap();
    rt.start("parent", &json!(null), StartOptions::new(id("p")))
        .await
        .unwrap();
    let kid = id("p/child#1");
    for _ in 0..1_000 {
        if rt.state(&kid).await.unwrap().status() == ExecutionStatus::Suspended {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    rt.shutdown().await;
    let before = store.read_all(&id("p")).await.unwrap().len();

    let forged = json!({"loom.child": {"completed": "forged"}});
    let refused = loom_console::resume(
        &store,
        &id("p"),
        "loom.child",
        kid.as_str(),
        forged.clone().into(),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.kind, ErrorKind::Refused);
    assert!(
        refused.message.contains("belong to the runtime"),
        "{}",
        refused.message
    );
    let refused = loom_console::resume(&store, &kid, "Go", "go", forged.into())
        .await
        .unwrap_err();
    assert!(
        refused.message.contains("runtime marker"),
        "{}",
        refused.message
    );
    assert_eq!(store.read_all(&id("p")).await.unwrap().len(), before);

    // An ordinary resume of the child's own gate is still accepted.
    loom_console::resume(&store, &kid, "Go", "go", json!("ok").into())
        .await
        .unwrap();
}
