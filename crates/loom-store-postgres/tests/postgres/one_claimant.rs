//! One worker claims a due timer or a recovery: of two runtimes on one schema that both armed a
//! parked execution's deadline, or both recovered an execution in flight, only the one holding
//! (or first taking) its lease replays it and dispatches its idempotent step.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use loom_kernel::{
    EffectCall, EffectOutcome, Event, EventStoreExt, ExecutionId, ExecutionStatus, FlowCtx,
    FlowError, FnEffect, ManualClock, Runtime, StartOptions, flow_fn,
};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig, fresh_schema, server_url};
use serde_json::{Value, json};
use tokio::sync::Notify;

const EXECUTIONS: usize = 8;

async fn nap_then_fetch(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    ctx.sleep(Duration::from_secs(3600)).await?;
    Ok(ctx.execute("fetch", &input).await?.to_value())
}

async fn fetch(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    Ok(ctx.execute("fetch", &input).await?.to_value())
}

async fn store(url: &str, schema: &str, name: &str) -> PostgresStore {
    // Long enough that no lease runs out while the machine is loaded: this is about workers
    // that are alive.
    PostgresStore::connect(
        PostgresStoreConfig::new(url)
            .schema(schema)
            .worker_id(name)
            .lease(Duration::from_secs(20)),
    )
    .await
    .expect("connect")
}

/// An idempotent effect that counts its calls.
fn counted(calls: Arc<AtomicU32>) -> impl loom_kernel::Effect {
    FnEffect::new(true, move |call: EffectCall| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move { EffectOutcome::ok(call.input) }
    })
}

async fn until_all_completed(store: &PostgresStore, executions: &[ExecutionId]) {
    let give_up = Instant::now() + Duration::from_secs(30);
    for execution in executions {
        loop {
            let status = store.fold(execution).await.expect("fold").status();
            if status == ExecutionStatus::Completed {
                break;
            }
            assert!(Instant::now() < give_up, "{execution} is still {status:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_armed_on_two_workers_fires_and_dispatches_on_one() {
    let Some(url) = server_url("one_claimant_timer") else {
        return;
    };
    let schema = fresh_schema("one_claimant_timer");
    let clock = ManualClock::new(1_800_000_000_000);
    let calls = [Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0))];
    let mut runtimes = Vec::new();
    for (name, calls) in ["worker-a", "worker-b"].into_iter().zip(&calls) {
        runtimes.push(
            Runtime::builder(store(&url, &schema, name).await)
                .flow(flow_fn("nap", 1, nap_then_fetch))
                .effect("fetch", counted(Arc::clone(calls)))
                .clock(clock.clone())
                .build()
                .expect("runtime"),
        );
    }
    let executions: Vec<ExecutionId> = (0..EXECUTIONS)
        .map(|n| ExecutionId::new(format!("nap-{n}")).expect("id"))
        .collect();
    for execution in &executions {
        runtimes[0]
            .start(
                "nap",
                &json!(execution.as_str()),
                StartOptions::new(execution.clone()).grant("fetch"),
            )
            .await
            .expect("start");
    }
    // A armed each deadline as the flow parked; B arms them from the wake-up index once
    // their window comes (they are an hour away: none at recovery, LD-033).
    let report = runtimes[1].recover_report().await.expect("recover");
    assert_eq!(report.timers, 0, "{report:?}");

    clock.advance(Duration::from_secs(2 * 3600));
    let a_store = runtimes[0].store().clone();
    until_all_completed(&a_store, &executions).await;
    for execution in &executions {
        let resumes = a_store
            .read_all(execution)
            .await
            .expect("read")
            .iter()
            .filter(|e| matches!(e.event, Event::ExecutionResumed(_)))
            .count();
        assert_eq!(resumes, 1, "{execution}: the deadline is recorded once");
    }
    let dispatched: u32 = calls.iter().map(|c| c.load(Ordering::SeqCst)).sum();
    assert_eq!(
        dispatched,
        EXECUTIONS as u32,
        "each step dispatched once (a: {}, b: {})",
        calls[0].load(Ordering::SeqCst),
        calls[1].load(Ordering::SeqCst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_pass_leaves_an_execution_another_worker_drives() {
    let Some(url) = server_url("one_claimant_recover") else {
        return;
    };
    let schema = fresh_schema("one_claimant_recover");
    let (running, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let a_calls = Arc::new(AtomicU32::new(0));
    let slow = {
        let (running, release, calls) = (
            Arc::clone(&running),
            Arc::clone(&release),
            Arc::clone(&a_calls),
        );
        FnEffect::new(true, move |call: EffectCall| {
            calls.fetch_add(1, Ordering::SeqCst);
            let (running, release) = (Arc::clone(&running), Arc::clone(&release));
            async move {
                running.notify_one();
                release.notified().await;
                EffectOutcome::ok(call.input)
            }
        })
    };
    let a = Runtime::builder(store(&url, &schema, "worker-a").await)
        .flow(flow_fn("fetch", 1, fetch))
        .effect("fetch", slow)
        .build()
        .expect("runtime a");
    let b_calls = Arc::new(AtomicU32::new(0));
    let b = Runtime::builder(store(&url, &schema, "worker-b").await)
        .flow(flow_fn("fetch", 1, fetch))
        .effect("fetch", counted(Arc::clone(&b_calls)))
        .build()
        .expect("runtime b");

    let execution = ExecutionId::new("fetch-1").expect("id");
    a.start(
        "fetch",
        &json!(1),
        StartOptions::new(execution.clone()).grant("fetch"),
    )
    .await
    .expect("start");
    tokio::time::timeout(Duration::from_secs(30), running.notified())
        .await
        .expect("a runs the step");

    // B finds the execution in flight, but A holds its lease: B replays nothing, runs nothing.
    let report = b.recover_report().await.expect("recover");
    assert_eq!((report.started, report.elsewhere), (0, 1), "{report:?}");

    release.notify_one();
    until_all_completed(a.store(), std::slice::from_ref(&execution)).await;
    assert_eq!(a_calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        b_calls.load(Ordering::SeqCst),
        0,
        "a worker without the lease dispatched"
    );
}
