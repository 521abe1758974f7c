//! The checkout flow in one process: the Approve wait times out on the durable timer, a second
//! click is refused, and the operator's commands work on the store file when no server holds it.

use std::sync::Arc;
use std::time::Duration;

use a2ui_callfunction::app::{self, APPROVE_TIMEOUT, SURFACE};
use a2ui_callfunction::operator::Target;
use a2ui_callfunction::transport::NoRenderer;
use loom_kernel::ManualClock;
use loom_kernel::{
    DiskStore, EventStore, EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore,
};
use loom_plugin_a2ui::AgentMessage;
use loom_plugin_a2ui::SurfaceHub;
use serde_json::{Value, json};

use crate::support::{
    approve, checkout_in_doubt, in_own_runtime, operator_completes_the_step,
    start_and_answer_the_locale,
};

async fn output<S: EventStore>(store: &S, execution: &ExecutionId) -> Value {
    let log = store.read_all(execution).await.unwrap();
    match &log.last().unwrap().event {
        loom_kernel::Event::ExecutionCompleted(done) => done.output.to_value(),
        other => panic!("not completed: {other:?}"),
    }
}

#[tokio::test]
async fn without_approval_the_order_expires_on_the_durable_timer_and_a_late_click_is_refused() {
    let store = MemoryStore::new();
    let hub = app::hub();
    let clock = ManualClock::new(1_000_000);
    let runtime = app::compose(store.clone(), &hub, Arc::new(NoRenderer))
        .unwrap()
        .clock(clock.clone())
        .build()
        .unwrap();
    let e = ExecutionId::new("expires").unwrap();
    start_and_answer_the_locale(&runtime, &hub, &e).await;
    let state = runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Suspended);
    let mut sub = hub.subscribe(&store, &e, SURFACE).await.unwrap();

    clock.advance(APPROVE_TIMEOUT + Duration::from_secs(1));
    let mut state = runtime.wait(&e).await.unwrap();
    for _ in 0..100 {
        if state.status().is_terminal() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        state = runtime.wait(&e).await.unwrap();
    }
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(output(&store, &e).await["status"], json!("expired"));
    assert_eq!(
        hub.masked_model(&e, SURFACE).unwrap()["order"]["status"],
        json!("expired")
    );
    let mut deleted = false;
    while let Some(message) = sub.next().await {
        deleted |= matches!(message, AgentMessage::DeleteSurface(_));
    }
    assert!(deleted, "the surface is deleted when the order expires");
    let late = hub
        .deliver_action(&runtime, &e, SURFACE, &approve(&e))
        .await;
    assert!(late.is_err(), "a click after the deadline is refused");
}

#[tokio::test]
async fn a_second_click_is_refused_and_records_nothing() {
    let store = MemoryStore::new();
    let hub = app::hub();
    let runtime = app::compose(store.clone(), &hub, Arc::new(NoRenderer))
        .unwrap()
        .build()
        .unwrap();
    let e = ExecutionId::new("twice").unwrap();
    start_and_answer_the_locale(&runtime, &hub, &e).await;
    let _ = runtime.wait(&e).await;
    hub.deliver_action(&runtime, &e, SURFACE, &approve(&e))
        .await
        .unwrap();
    let _ = runtime.wait(&e).await;
    let before = store.read_all(&e).await.unwrap().len();
    assert!(
        hub.deliver_action(&runtime, &e, SURFACE, &approve(&e))
            .await
            .is_err()
    );
    assert_eq!(store.read_all(&e).await.unwrap().len(), before);
}

#[test]
fn on_the_store_file_the_operator_lists_the_step_and_a_completed_verdict_finishes_the_flow() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    let e = ExecutionId::new("offline").unwrap();
    in_own_runtime(async { checkout_in_doubt(DiskStore::open(&path).unwrap(), &e).await });
    // The server is gone: the operator works on the file.
    operator_completes_the_step(&Target::Store(path.clone()), "offline");
    in_own_runtime(async {
        let store = DiskStore::open_read_only(&path, Default::default()).unwrap();
        let state = store.fold(&e).await.unwrap();
        assert_eq!(state.status(), ExecutionStatus::Completed);
        assert_eq!(
            output(&store, &e).await["receipt"]["confirmation"],
            json!("CONF-0042")
        );
        let hub = SurfaceHub::clone(&app::hub());
        hub.catch_up(&store, &e).await.unwrap();
        assert_eq!(
            hub.masked_model(&e, SURFACE).unwrap()["payment"]["card"],
            json!("***")
        );
    });
}
