//! `Runtime::shutdown`: it refuses new work, lets the append in flight finish, joins every
//! task, and releases the store, so the same process can open the file again at once.

use std::sync::Arc;

use loom_kernel::*;
use loom_kernel::{DiskStore, EventStoreExt, ExecutionStatus, MemoryStore, Payload};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support;
use crate::support::{Calls, id, options};

/// One step on `slow`, then a gate resumed by `go`.
async fn slow_then_gate(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let out = ctx.execute("slow", &1).await?;
    let resumed = ctx.suspend("go", "k").await?;
    Ok(json!({"step": out.to_value(), "resumed": resumed.to_value()}))
}

/// An idempotent effect that signals `running` and then never answers.
fn stuck(running: Arc<Notify>) -> impl Effect {
    FnEffect::new(true, move |_call: EffectCall| {
        running.notify_one();
        async move {
            std::future::pending::<()>().await;
            EffectOutcome::ok(json!(null).into())
        }
    })
}

/// An idempotent effect that answers at once.
fn quick() -> impl Effect {
    FnEffect::new(true, move |_call: EffectCall| async move {
        EffectOutcome::ok(json!("done").into())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_mid_step_releases_the_file_and_the_next_runtime_recovers_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let running = Arc::new(Notify::new());
    let rt = Runtime::builder(DiskStore::open(&path).unwrap())
        .flow(flow_fn("slow", 1, slow_then_gate))
        .effect("slow", stuck(Arc::clone(&running)))
        .build()
        .unwrap();
    let execution = id("mid-step");
    let notified = running.notified();
    rt.start("slow", &json!(null), options("mid-step", &["slow"]))
        .await
        .unwrap();
    notified.await;
    // The effect never answers: shutdown must not wait for it.
    rt.clone().shutdown().await;
    // Twice is harmless.
    rt.shutdown().await;

    // The file is free: the same process opens it again and recovers the execution.
    let store = DiskStore::open(&path).expect("the runtime released the store file");
    let rt = Runtime::builder(store)
        .flow(flow_fn("slow", 1, slow_then_gate))
        .effect("slow", quick())
        .build()
        .unwrap();
    assert_eq!(rt.recover().await.unwrap(), 1);
    let parked = rt.wait(&execution).await.unwrap();
    assert_eq!(parked.status(), ExecutionStatus::Suspended);
    rt.resume(&execution, "go", "k", Payload::from_value(&json!("yes")))
        .await
        .unwrap();
    let done = rt.wait(&execution).await.unwrap();
    assert_eq!(done.status(), ExecutionStatus::Completed);
    let log = rt.store().read_all(&execution).await.unwrap();
    let started = log
        .iter()
        .filter(|envelope| envelope.event.type_name() == "EXECUTION_STARTED")
        .count();
    assert_eq!(started, 1);
    rt.shutdown().await;
    DiskStore::open(&path).expect("released again");
}

#[tokio::test]
async fn work_after_shutdown_is_refused_with_a_typed_error() {
    let calls = Calls::default();
    let rt = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("slow", 1, slow_then_gate))
        .effect("slow", support::echo(calls.clone()))
        .build()
        .unwrap();
    let parked = id("parked");
    rt.start("slow", &json!(null), options("parked", &["slow"]))
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&parked).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    let other = rt.clone();
    rt.shutdown().await;
    assert!(other.is_shut_down());

    let start = other
        .start("slow", &json!(null), options("late", &["slow"]))
        .await;
    assert!(matches!(start, Err(StartError::ShutDown)), "{start:?}");
    let resume = other
        .resume(&parked, "go", "k", Payload::from_value(&json!(1)))
        .await;
    assert_eq!(resume, Err(ResumeError::ShutDown));
    let resolve = other
        .resolve(&parked, "s", loom_kernel::Verdict::Retry, None)
        .await;
    assert_eq!(resolve, Err(ResolveError::ShutDown));
    assert_eq!(
        other.cancel(&parked, None).await,
        Err(CancelError::ShutDown)
    );
    assert_eq!(other.recover().await.unwrap(), 0);
    // Nothing was recorded after the shutdown: the execution is still parked, never started
    // again, and the late one does not exist.
    assert_eq!(
        other.state(&parked).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    assert_eq!(
        other.state(&id("late")).await.unwrap().status(),
        ExecutionStatus::New
    );
    assert_eq!(calls.count(), 1);
    other.shutdown().await;
}

/// A memory store whose appends, once `hold` is set, wait for `release` after signalling
/// `entered`.
#[derive(Clone, Default)]
struct HeldAppends {
    inner: MemoryStore,
    hold: Arc<std::sync::atomic::AtomicBool>,
    entered: Arc<Notify>,
    release: Arc<Notify>,
}

impl loom_kernel::EventStore for HeldAppends {
    async fn append(
        &self,
        execution: &loom_kernel::ExecutionId,
        expected_seq: u64,
        events: &[loom_kernel::Event],
    ) -> Result<u64, loom_kernel::AppendError> {
        if self.hold.load(std::sync::atomic::Ordering::SeqCst) {
            let released = self.release.notified();
            self.entered.notify_one();
            released.await;
        }
        self.inner.append(execution, expected_seq, events).await
    }

    async fn read(
        &self,
        execution: &loom_kernel::ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<loom_kernel::EventEnvelope>, loom_kernel::ReadError> {
        self.inner.read(execution, from, limit).await
    }

    async fn head(
        &self,
        execution: &loom_kernel::ExecutionId,
    ) -> Result<u64, loom_kernel::ReadError> {
        self.inner.head(execution).await
    }

    async fn list_executions(
        &self,
        after: Option<&loom_kernel::ExecutionId>,
        limit: usize,
    ) -> Result<loom_kernel::kit::ExecutionPage, loom_kernel::ReadError> {
        self.inner.list_executions(after, limit).await
    }

    async fn wait_for(
        &self,
        execution: &loom_kernel::ExecutionId,
        seq: u64,
    ) -> Result<(), loom_kernel::ReadError> {
        self.inner.wait_for(execution, seq).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_append_in_flight_finish_and_answers_its_caller() {
    let store = HeldAppends::default();
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("slow", 1, slow_then_gate))
        .effect("slow", quick())
        .build()
        .unwrap();
    let execution = id("held");
    rt.start("slow", &json!(null), options("held", &["slow"]))
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&execution).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    store.hold.store(true, std::sync::atomic::Ordering::SeqCst);
    let entered = store.entered.notified();
    let resume = tokio::spawn({
        let rt = rt.clone();
        let execution = execution.clone();
        async move {
            rt.resume(&execution, "go", "k", Payload::from_value(&json!("yes")))
                .await
        }
    });
    // The resume's append has reached the store and waits there.
    entered.await;
    let shutdown = tokio::spawn(rt.clone().shutdown());
    while !rt.is_shut_down() {
        tokio::task::yield_now().await;
    }
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert!(
        !shutdown.is_finished(),
        "shutdown waits for the append in flight"
    );
    store.hold.store(false, std::sync::atomic::Ordering::SeqCst);
    store.release.notify_one();
    assert_eq!(
        resume.await.unwrap(),
        Ok(()),
        "the append's caller is answered"
    );
    shutdown.await.unwrap();
    // The resume is durable (with whatever the flow did next in the same append); anything
    // later is left for recovery.
    let names = support::event_names(&store.inner, &execution).await;
    assert!(names.contains(&"EXECUTION_RESUMED"), "{names:?}");
    drop(rt);
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("slow", 1, slow_then_gate))
        .effect("slow", quick())
        .build()
        .unwrap();
    rt.recover().await.unwrap();
    assert_eq!(
        rt.wait(&execution).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    rt.shutdown().await;
}
