//! Fencing reaches the effect: a worker that lost an execution's lease between a durable
//! `STEP_STARTED` and the call of its non-idempotent handler does not call it, and a handler
//! that runs gets the lease's fencing token.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loom_kernel::conformance::{Hooked, StoreHooks};
use loom_kernel::kit::LeaseHold;
use loom_kernel::{
    AppendError, EffectCall, EffectOutcome, Event, EventStore, EventStoreExt, ExecutionId,
    ExecutionStatus, FlowCtx, FlowError, FnEffect, ReadError, Runtime, StartOptions, Verdict,
    flow_fn,
};
use loom_store_postgres::{PostgresStore, fresh_schema, server_url};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::many_workers::worker;

async fn pay(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let receipt = ctx.execute("charge", &input).await?;
    Ok(receipt.to_value())
}

/// A non-idempotent effect that counts its calls and answers with the token it was given.
fn counted(calls: Arc<AtomicU32>) -> impl loom_kernel::Effect {
    FnEffect::new(false, move |call: EffectCall| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move { EffectOutcome::ok(json!({ "token": call.lease_token }).into()) }
    })
}

/// Told when the paused append has committed, and what it waits for to go on.
type Pause = (oneshot::Sender<()>, oneshot::Receiver<()>);

/// What makes a worker's store stop, once, between committing the append that holds a
/// `STEP_STARTED` and telling its driver (a process paused at the worst moment), and report
/// every answer of [`EventStore::hold_lease`]; every other call goes to the store as it is.
struct Pausing {
    paused: Mutex<Option<Pause>>,
    holds: mpsc::UnboundedSender<LeaseHold>,
}

impl StoreHooks<PostgresStore> for Pausing {
    async fn append(
        &self,
        inner: &PostgresStore,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        let head = inner.append(execution, expected_seq, events).await?;
        let pause = events
            .iter()
            .any(|e| matches!(e, Event::StepStarted(_)))
            .then(|| self.paused.lock().expect("lock").take())
            .flatten();
        if let Some((paused, resume)) = pause {
            let _ = paused.send(());
            let _ = resume.await;
        }
        Ok(head)
    }

    async fn hold_lease(
        &self,
        inner: &PostgresStore,
        execution: &ExecutionId,
        head: u64,
    ) -> Result<LeaseHold, ReadError> {
        let hold = inner.hold_lease(execution, head).await;
        if let Ok(hold) = &hold {
            let _ = self.holds.send(*hold);
        }
        hold
    }
}

/// Bounded, so that a step never put in doubt fails the test instead of hanging it.
async fn until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let give_up = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < give_up, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_paused_past_its_lease_does_not_call_a_non_idempotent_handler() {
    let Some(url) = server_url("fencing_paused") else {
        return;
    };
    let schema = fresh_schema("fencing_paused");
    let lease = Duration::from_millis(300);
    let a_store = worker(&url, &schema, "worker-a", lease).await;
    // A's process is paused as a whole: its leases are not renewed either.
    a_store
        .faults()
        .pause_lease_renewal
        .store(true, Ordering::SeqCst);
    let (paused_tx, paused) = oneshot::channel();
    let (resume, resume_rx) = oneshot::channel();
    let (holds_tx, mut holds) = mpsc::unbounded_channel();
    let a_calls = Arc::new(AtomicU32::new(0));
    let a = Runtime::builder(Hooked::new(
        a_store,
        Pausing {
            paused: Mutex::new(Some((paused_tx, resume_rx))),
            holds: holds_tx,
        },
    ))
    .flow(flow_fn("pay", 1, pay))
    .effect("charge", counted(Arc::clone(&a_calls)))
    .build()
    .expect("runtime a");
    let b_calls = Arc::new(AtomicU32::new(0));
    let b = Runtime::builder(worker(&url, &schema, "worker-b", lease).await)
        .flow(flow_fn("pay", 1, pay))
        .effect("charge", counted(Arc::clone(&b_calls)))
        .build()
        .expect("runtime b");

    let execution = ExecutionId::new("order-1").expect("id");
    let a = Arc::new(a);
    let starting = {
        let (a, execution) = (Arc::clone(&a), execution.clone());
        tokio::spawn(async move {
            let _ = a
                .start(
                    "pay",
                    &json!(7),
                    StartOptions::new(execution).grant("charge"),
                )
                .await;
        })
    };
    // A's STEP_STARTED is durable; A stops before its handler.
    tokio::time::timeout(Duration::from_secs(30), paused)
        .await
        .expect("a's step never started")
        .expect("a's step started");

    // B takes the execution over once A's lease ran out, and puts the step in doubt (K9).
    until("the take-over by worker B", || async {
        let _ = b.recover().await;
        let state = b.store().fold(&execution).await.expect("fold");
        state.status() == ExecutionStatus::InDoubt
    })
    .await;

    // A goes on: it must not call the handler.
    resume.send(()).expect("resume a");
    let hold = tokio::time::timeout(Duration::from_secs(30), holds.recv())
        .await
        .expect("a asks for its lease")
        .expect("an answer");
    assert_eq!(hold, LeaseHold::NotHeld);

    // The operator's retry runs the step once, on B, under B's token.
    let state = b.store().fold(&execution).await.expect("fold");
    let step = state
        .steps_in_doubt()
        .iter()
        .next()
        .expect("a step in doubt")
        .clone();
    b.resolve(&execution, &step, Verdict::Retry, Some("ops".into()))
        .await
        .expect("retry");
    let ended = b.wait_ended(&execution).await.expect("ended");
    assert_eq!(ended.status(), ExecutionStatus::Completed);
    let token = ended.output().expect("output").to_value()["token"].clone();
    assert!(token.as_u64().is_some_and(|t| t >= 2), "{token}");
    starting.await.expect("start task");
    assert_eq!(
        a_calls.load(Ordering::SeqCst),
        0,
        "the stale worker called the handler"
    );
    assert_eq!(b_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_idempotent_handler_gets_the_lease_s_token_from_memory_or_the_server() {
    let Some(url) = server_url("fencing_token") else {
        return;
    };
    let schema = fresh_schema("fencing_token");
    let store = worker(&url, &schema, "worker-a", Duration::from_secs(30)).await;
    let calls = Arc::new(AtomicU32::new(0));
    let runtime = Runtime::builder(store.clone())
        .flow(flow_fn("pay", 1, pay))
        .effect("charge", counted(Arc::clone(&calls)))
        .build()
        .expect("runtime");
    for (name, distrust) in [("fresh", false), ("asked", true)] {
        store
            .faults()
            .distrust_leases
            .store(distrust, Ordering::SeqCst);
        let execution = ExecutionId::new(name).expect("id");
        runtime
            .start(
                "pay",
                &json!(1),
                StartOptions::new(execution.clone()).grant("charge"),
            )
            .await
            .expect("start");
        let ended = runtime.wait_ended(&execution).await.expect("ended");
        assert_eq!(ended.status(), ExecutionStatus::Completed, "{name}");
        // The first lease taken on an execution has token 1; the server path renews it.
        assert_eq!(
            ended.output().expect("output").to_value(),
            json!({"token": 1}),
            "{name}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
