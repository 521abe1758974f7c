//! The log never holds what the fold cannot read (issue 10, item 9): a surface patch nested
//! deeper than a payload may be is refused when it is emitted, nothing is recorded, and the
//! projection of the log reads everything it holds.

use loom_agent_surface::{SurfaceExt, SurfaceProjection};
use loom_kernel::Event;
use loom_kernel::conformance::{id, nested};
use loom_kernel::*;
use loom_kernel::{EventStoreExt, ExecutionStatus, MAX_PAYLOAD_DEPTH, MemoryStore};
use serde_json::{Value, json};

async fn deep(ctx: FlowCtx, depth: usize) -> Result<Value, FlowError> {
    let refused = ctx.surface("main").set("deep", nested(depth)).is_err();
    ctx.surface("main").set("shallow", nested(3))?;
    Ok(json!({"refused": refused}))
}

#[tokio::test]
async fn a_patch_too_deep_to_read_back_is_refused_when_emitted_and_the_log_projects_whole() {
    let store = MemoryStore::new();
    let loom = Runtime::builder(store.clone())
        .flow(flow_fn("deep", 1, deep))
        .build()
        .unwrap();
    for (execution, depth, refused) in [("deep-200", 200, true), ("deep-ok", 10, false)] {
        loom.start("deep", &depth, StartOptions::new(id(execution)))
            .await
            .unwrap();
        let state = loom.wait(&id(execution)).await.unwrap();
        assert_eq!(state.status(), ExecutionStatus::Completed, "{execution}");
        assert_eq!(
            state.output().unwrap().to_value(),
            json!({"refused": refused})
        );
        let events: Vec<Event> = store
            .read_all(&id(execution))
            .await
            .unwrap()
            .into_iter()
            .map(|envelope| envelope.event)
            .collect();
        let mut projection = SurfaceProjection::new();
        for event in &events {
            projection.apply_event(event).unwrap();
        }
        let model = projection.model("main").unwrap();
        assert_eq!(model["shallow"], nested(3));
        assert_eq!(model.get("deep").is_some(), !refused, "{execution}");
    }
    const { assert!(200 > MAX_PAYLOAD_DEPTH) };
}
