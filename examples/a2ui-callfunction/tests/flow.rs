//! The checkout flow in one process: the Approve wait times out on the durable timer, a second
//! click is refused, and the operator's commands work on the store file when no server holds it.

use std::sync::Arc;
use std::time::Duration;

use a2ui_callfunction::app::{self, APPROVE_TIMEOUT, FLOW, Order, SURFACE};
use a2ui_callfunction::operator::{self, Target, VerdictArg};
use a2ui_callfunction::transport::NoRenderer;
use futures::FutureExt;
use futures::future::BoxFuture;
use loom_kernel::{
    DiskStore, EventStore, EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore,
};
use loom_kernel::{ManualClock, StartOptions};
use loom_plugin_a2ui::AgentMessage;
use loom_plugin_a2ui::{CALL_FUNCTION_EFFECT, SurfaceHub, Transport, TransportError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn locale_reply(execution: &ExecutionId) -> Vec<u8> {
    json!({"version": "v1.0", "rendererFunctionResponse": {
        "functionCallId": format!("{}:getLocale#1", execution.as_str()), "value": "fr-CH"}})
    .to_string()
    .into_bytes()
}

fn approve() -> Vec<u8> {
    json!({"version": "v1.0", "action": {"name": "approve", "surfaceId": SURFACE,
        "sourceComponentId": "approve", "timestamp": "2026-12-01T00:00:00Z", "context": {}}})
    .to_string()
    .into_bytes()
}

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
    runtime
        .start(
            FLOW,
            &Order::demo(),
            StartOptions::new(e.clone()).grant(CALL_FUNCTION_EFFECT),
        )
        .await
        .unwrap();
    let _ = runtime.wait(&e).await;
    hub.deliver_function_response(&runtime, SURFACE, &locale_reply(&e))
        .await
        .unwrap();
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
    let late = hub.deliver_action(&runtime, &e, SURFACE, &approve()).await;
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
    runtime
        .start(
            FLOW,
            &Order::demo(),
            StartOptions::new(e.clone()).grant(CALL_FUNCTION_EFFECT),
        )
        .await
        .unwrap();
    let _ = runtime.wait(&e).await;
    hub.deliver_function_response(&runtime, SURFACE, &locale_reply(&e))
        .await
        .unwrap();
    let _ = runtime.wait(&e).await;
    hub.deliver_action(&runtime, &e, SURFACE, &approve())
        .await
        .unwrap();
    let _ = runtime.wait(&e).await;
    let before = store.read_all(&e).await.unwrap().len();
    assert!(
        hub.deliver_action(&runtime, &e, SURFACE, &approve())
            .await
            .is_err()
    );
    assert_eq!(store.read_all(&e).await.unwrap().len(), before);
}

/// A renderer that took the request and never answered: the reply is lost.
struct LosesReplies;

impl Transport for LosesReplies {
    fn call(
        &self,
        _request: AgentMessage,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Vec<u8>, TransportError>> {
        async { Err(TransportError::Lost("the socket closed".into())) }.boxed()
    }
}

/// Runs `future` on a runtime of its own, dropped after: its tasks, and the store handles they
/// hold, are gone when it returns, as when an operator command's process exits.
fn in_own_runtime<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn on_the_store_file_the_operator_lists_the_step_and_a_completed_verdict_finishes_the_flow() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    let e = ExecutionId::new("offline").unwrap();
    in_own_runtime(async {
        let store = DiskStore::open(&path).unwrap();
        let hub = app::hub();
        let runtime = app::compose(store.clone(), &hub, Arc::new(LosesReplies))
            .unwrap()
            .build()
            .unwrap();
        runtime
            .start(
                FLOW,
                &Order::demo(),
                StartOptions::new(e.clone()).grant(CALL_FUNCTION_EFFECT),
            )
            .await
            .unwrap();
        let _ = runtime.wait(&e).await;
        hub.deliver_function_response(&runtime, SURFACE, &locale_reply(&e))
            .await
            .unwrap();
        let _ = runtime.wait(&e).await;
        hub.deliver_action(&runtime, &e, SURFACE, &approve())
            .await
            .unwrap();
        let state = runtime.wait(&e).await.unwrap();
        assert_eq!(state.status(), ExecutionStatus::InDoubt);
    });
    // The server is gone: the operator works on the file.
    let target = Target::Store(path.clone());
    let notes = in_own_runtime(operator::list(&target)).unwrap();
    assert_eq!(notes.len(), 1);
    let a2ui_callfunction::narrate::Note::InDoubt { step, key, .. } = &notes[0] else {
        panic!("{notes:?}")
    };
    assert_eq!(key, &format!("offline:{step}"));
    let retry = in_own_runtime(operator::resolve(
        &target,
        "offline",
        step,
        VerdictArg::Retry,
    ));
    assert!(
        retry.is_err(),
        "a retry needs the renderer: refused offline"
    );
    let wrong = in_own_runtime(operator::resolve(
        &target,
        "offline",
        "no-such-step",
        VerdictArg::Failed {
            message: "x".into(),
        },
    ));
    assert!(wrong.is_err(), "a step not in doubt is refused");
    in_own_runtime(operator::resolve(
        &target,
        "offline",
        step,
        VerdictArg::Completed {
            output: json!({"confirmation": "CONF-0042", "placed": true}),
        },
    ))
    .unwrap();
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
