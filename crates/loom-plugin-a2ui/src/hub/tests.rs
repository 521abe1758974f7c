//! The hub's unit tests: slow subscribers, and ended executions kept and forgotten.

use loom_kernel::{Event, EventStore, MemoryStore, Payload, SurfacePatch};
use serde_json::json;

use super::*;

const SURFACE: &str = "main";

fn hub() -> SurfaceHub {
    let catalogs = Catalogs::default_with([]).expect("the default catalogs compile");
    SurfaceHub::one_surface(
        catalogs,
        DataClassification::default(),
        SURFACE,
        vec![json!({"id": "root", "component": "Text", "text": "count"})],
    )
}

/// A durable `SURFACE_PATCH` at `seq` that sets `count` to `seq`.
fn patch(execution: &ExecutionId, seq: u64) -> EventEnvelope {
    let ops = json!([{"op": "set", "path": "count", "value": seq}]);
    EventEnvelope::new(
        execution.clone(),
        seq,
        Event::SurfacePatch(SurfacePatch {
            step_id: format!("surface#{seq}"),
            surface_id: SURFACE.to_owned(),
            ops: Payload::from(ops),
        }),
    )
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_is_dropped_and_resyncs_by_subscribing_again() {
    let hub = hub().with_subscriber_buffer(2);
    let store = MemoryStore::new();
    let execution = ExecutionId::new("counter-1").expect("a valid id");
    Projection::apply(&hub, &patch(&execution, 0));
    let mut slow = hub.subscribe(&store, &execution, SURFACE).await.unwrap();
    let mut reader = hub.subscribe(&store, &execution, SURFACE).await.unwrap();
    let mut read = Vec::new();
    for seq in 1..=5 {
        Projection::apply(&hub, &patch(&execution, seq));
        read.extend(std::iter::from_fn(|| reader.try_next()));
    }
    // The subscriber that keeps up gets every update and stays subscribed.
    assert_eq!(read.len(), 5);
    assert!(!reader.lagged());
    // The one that did not read holds two updates, no more, and then ends.
    assert!(slow.lagged());
    assert!(slow.try_next().is_some());
    assert!(slow.try_next().is_some());
    assert!(slow.next().await.is_none(), "a dropped subscription ends");
    // Subscribing again starts from `createSurface` with the current model.
    let again = hub.subscribe(&store, &execution, SURFACE).await.unwrap();
    assert!(!again.lagged());
    let AgentMessage::CreateSurface(create) = &again.initial[0] else {
        panic!(
            "a subscription starts with createSurface: {:?}",
            again.initial
        );
    };
    assert_eq!(create.data_model.as_ref().unwrap()["count"], json!(5));
}

#[tokio::test]
async fn the_subscriber_buffer_is_at_least_one_message() {
    let hub = hub().with_subscriber_buffer(0);
    let store = MemoryStore::new();
    let execution = ExecutionId::new("counter-2").expect("a valid id");
    Projection::apply(&hub, &patch(&execution, 0));
    let mut subscription = hub.subscribe(&store, &execution, SURFACE).await.unwrap();
    Projection::apply(&hub, &patch(&execution, 1));
    assert!(!subscription.lagged());
    assert!(subscription.try_next().is_some());
}

#[tokio::test]
async fn ended_executions_past_the_retention_are_forgotten_and_folded_again_when_asked() {
    let hub = hub().with_ended_retention(2);
    let store = MemoryStore::new();
    let ids: Vec<ExecutionId> = (1..=3)
        .map(|n| ExecutionId::new(format!("ended-{n}")).expect("a valid id"))
        .collect();
    for execution in &ids {
        let events = [
            loom_kernel::conformance::started("counter"),
            patch(execution, 1).event,
            Event::ExecutionCompleted(loom_kernel::ExecutionCompleted {
                output: Payload::from(json!(null)),
            }),
        ];
        store.append(execution, 0, &events).await.unwrap();
        for envelope in store.read(execution, 0, 10).await.unwrap() {
            Projection::apply(&hub, &envelope);
        }
    }
    // The two most recent are kept; the first is forgotten.
    assert!(hub.model(&ids[0], SURFACE).is_none());
    assert!(hub.model(&ids[1], SURFACE).is_some());
    assert!(hub.model(&ids[2], SURFACE).is_some());
    // Asked for, it is folded again from the store, and kept while watched.
    let late = hub.subscribe(&store, &ids[0], SURFACE).await.unwrap();
    let AgentMessage::CreateSurface(create) = &late.initial[0] else {
        panic!("{:?}", late.initial)
    };
    assert_eq!(create.data_model.as_ref().unwrap()["count"], json!(1));
    assert!(hub.model(&ids[0], SURFACE).is_some());
    // Folded again, it counts as recently ended: the oldest other one is forgotten, and
    // what the hub holds stays at the retention once nobody watches.
    drop(late);
    assert!(hub.model(&ids[1], SURFACE).is_none());
    assert_eq!(hub.state().executions.len(), 2);
}

#[tokio::test]
async fn with_no_retention_an_ended_execution_stays_while_watched_and_goes_after() {
    let hub = hub().with_ended_retention(0);
    let store = MemoryStore::new();
    let execution = ExecutionId::new("ended-0").expect("a valid id");
    let events = [
        loom_kernel::conformance::started("counter"),
        patch(&execution, 1).event,
        Event::ExecutionCompleted(loom_kernel::ExecutionCompleted {
            output: Payload::from(json!(null)),
        }),
    ];
    store.append(&execution, 0, &events).await.unwrap();
    // Folded by the subscribe's own catch-up, it is not forgotten under its subscriber.
    let watching = hub.subscribe(&store, &execution, SURFACE).await.unwrap();
    let AgentMessage::CreateSurface(create) = &watching.initial[0] else {
        panic!("{:?}", watching.initial)
    };
    assert_eq!(create.data_model.as_ref().unwrap()["count"], json!(1));
    assert!(hub.model(&execution, SURFACE).is_some());
    drop(watching);
    assert!(hub.model(&execution, SURFACE).is_none());
}
