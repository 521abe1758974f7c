//! Live durable steps on the disk store with a no-op idempotent effect, printed as one
//! machine-readable line per workload so Loom can be run beside other engines:
//!
//! - `seq`: one execution doing 1,000 sequential steps;
//! - `one_step_executions`: 1,000 executions of one step each, one after another (start, step,
//!   completion, each waited for);
//! - `concurrent`: 1,000 executions of 10 steps each, all at once, the process's first burst;
//! - `concurrent_warm`: the same again, once the store has settled: the first burst also pays
//!   for growing the allocator's heaps (glibc grows a thread's arena a page at a time, one
//!   `mprotect` each), which a process that keeps running pays once;
//! - `resume`: from `resume()` to the flow running again, over 200 gates;
//! - `raw_fsync`, first: one 4 KiB write + fsync at a time on the same disk, a file that grows;
//! - `floor`, next: the same-pattern floor (`support::same_pattern_floor`: 256 bytes over zeros
//!   the file already holds, then `fdatasync`, as a small commit of the store's journal). The
//!   `one_step_executions` line gives `floor_ratio`, its mean per execution (one commit each)
//!   over this floor's mean.
//!
//! Each workload after the first starts once the store's tables have caught up with what the
//! one before it wrote (`settle`).
//!
//! `cargo bench -p loom-kernel --bench live` (or `cargo xtask bench`). `LOOM_LIVE_ONLY=resume`
//! (a comma-separated list) runs those workloads only; `LOOM_LIVE_GATES=2000` resumes that many
//! gates instead of 200.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loom_kernel::conformance::id;
use loom_kernel::{DiskStore, EventStore, ExecutionStatus};
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FnEffect, Runtime, StartOptions, flow_fn,
};

type Stamps = Arc<Mutex<Vec<Instant>>>;

async fn steps(ctx: FlowCtx, n: u64) -> Result<(), FlowError> {
    for i in 0..n {
        ctx.execute("noop", &i).await?;
    }
    Ok(())
}

async fn gates(ctx: FlowCtx, n: u64) -> Result<(), FlowError> {
    for i in 0..n {
        ctx.suspend("Go", &i.to_string()).await?;
        ctx.execute("noop", &i).await?;
    }
    Ok(())
}

/// Starts the `steps` flow as `name` for `steps` steps and waits until it has completed.
async fn run_to_completion(loom: &Runtime<DiskStore>, name: &str, steps: u64) {
    let e = loom
        .start("steps", &steps, StartOptions::new(id(name)).grant("noop"))
        .await
        .expect("start");
    let state = loom.wait(&e).await.expect("wait");
    assert_eq!(state.status(), ExecutionStatus::Completed, "{name}");
}

/// Starts 1,000 executions of 10 steps at once (ids `<prefix>-<n>`) and waits for all of them:
/// how long that took, and each execution's time from its start to its end.
///
/// The burst is started and awaited by one task on the runtime, not by the thread that called
/// `block_on`: awaiting each execution's task from outside the runtime wakes that thread once
/// per execution (a futex wake from the worker that finished it, which the scheduler often
/// answers by preempting that worker), work the harness adds to the engine's two cores.
async fn burst(loom: &Runtime<DiskStore>, prefix: &str) -> (Duration, Vec<Duration>) {
    let loom = loom.clone();
    let prefix = prefix.to_owned();
    tokio::spawn(async move {
        let start = Instant::now();
        let tasks: Vec<_> = (0..1000)
            .map(|n| {
                let loom = loom.clone();
                let name = format!("{prefix}-{n}");
                tokio::spawn(async move {
                    let began = Instant::now();
                    run_to_completion(&loom, &name, 10).await;
                    began.elapsed()
                })
            })
            .collect();
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.push(task.await.expect("task"));
        }
        (start.elapsed(), latencies)
    })
    .await
    .expect("burst")
}

/// Waits until the store's tables hold everything acknowledged (an index read asks its applier
/// to catch up): a workload starts on a settled store, and the work the store defers from one
/// workload (applying its events to the tables) is not timed as the next one's, nor depends
/// on which workloads `LOOM_LIVE_ONLY` runs. `concurrent_rounds` times that work with its own
/// workload, round after round.
async fn settle(store: &DiskStore) {
    store
        .count_by_status()
        .await
        .expect("the store's tables catch up");
}

fn report(name: &str, steps: u64, elapsed: Duration, mut latencies: Vec<Duration>, unit: &str) {
    report_against(name, steps, elapsed, &mut latencies, unit, None);
}

/// `report`, with the ratio of the mean per step to `floor`'s mean when one is given.
fn report_against(
    name: &str,
    steps: u64,
    elapsed: Duration,
    latencies: &mut [Duration],
    unit: &str,
    floor: Option<support::SyncFloor>,
) {
    latencies.sort();
    let per_step_us = elapsed.as_secs_f64() * 1e6 / steps as f64;
    let ratio = floor
        .map(|floor| format!(" floor_ratio={:.2}", floor.ratio(per_step_us)))
        .unwrap_or_default();
    println!(
        "loom {name} steps_per_s={:.0} per_step_us={per_step_us:.1} p50_us={:.0} p99_us={:.0} latency_of={unit}{ratio}",
        steps as f64 / elapsed.as_secs_f64(),
        support::percentile_us(latencies, 0.5),
        support::percentile_us(latencies, 0.99),
    );
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let only = std::env::var("LOOM_LIVE_ONLY").ok();
    let runs = |workload: &str| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|name| name == workload))
    };
    let gate_count: u64 = std::env::var("LOOM_LIVE_GATES")
        .ok()
        .and_then(|gates| gates.parse().ok())
        .unwrap_or(200);
    let runtime = support::tokio_runtime();
    let dir = support::scratch_dir();
    let stamps: Stamps = Arc::default();
    let store = DiskStore::open(dir.path().join("live.redb")).expect("store");
    let tables = store.clone();
    let loom = {
        let stamps = Arc::clone(&stamps);
        Runtime::builder(store)
            .flow(flow_fn("steps", 1, steps))
            .flow(flow_fn("gates", 1, gates))
            .effect(
                "noop",
                FnEffect::new(true, move |call: EffectCall| {
                    if let Ok(mut stamps) = stamps.lock() {
                        stamps.push(Instant::now());
                    }
                    async move { EffectOutcome::ok(call.input) }
                }),
            )
            .build()
            .expect("runtime")
    };
    if runs("raw_fsync") {
        // The disk's own pace, for scale: one 4 KiB write + fsync at a time, same directory.
        {
            use std::io::Write;
            let mut raw = std::fs::File::create(dir.path().join("raw.log")).expect("raw file");
            let block = vec![b'x'; 4096];
            let mut latencies = Vec::new();
            let start = Instant::now();
            for _ in 0..500 {
                let began = Instant::now();
                raw.write_all(&block).expect("write");
                raw.sync_data().expect("fsync");
                latencies.push(began.elapsed());
            }
            report("raw_fsync", 500, start.elapsed(), latencies, "write_fsync");
        }
    }
    let floor = runs("floor").then(|| {
        let floor = support::same_pattern_floor(dir.path(), 500);
        println!(
            "loom floor steps_per_s={:.0} per_step_us={:.1} p50_us={:.0} p99_us={:.0} latency_of=pwrite_fdatasync",
            1e6 / floor.mean_us,
            floor.mean_us,
            floor.p50_us,
            floor.p99_us
        );
        floor
    });
    runtime.block_on(async {
        if runs("seq") {
            // (a) one execution, 1,000 sequential steps.
            stamps.lock().expect("stamps").clear();
            let start = Instant::now();
            run_to_completion(&loom, "seq", 1000).await;
            let elapsed = start.elapsed();
            let gaps: Vec<Duration> = {
                let stamps = stamps.lock().expect("stamps");
                stamps.windows(2).map(|w| w[1] - w[0]).collect()
            };
            report("seq", 1000, elapsed, gaps, "step");
        }
        settle(&tables).await;
        if runs("one_step_executions") {
            // (b) 1,000 one-step executions, one after another.
            let mut latencies = Vec::new();
            let start = Instant::now();
            for n in 0..1000 {
                let began = Instant::now();
                run_to_completion(&loom, &format!("one-{n}"), 1).await;
                latencies.push(began.elapsed());
            }
            report_against(
                "one_step_executions",
                1000,
                start.elapsed(),
                &mut latencies,
                "execution",
                floor,
            );
        }
        if runs("concurrent") {
            // (c) 1,000 executions of 10 steps, concurrently: the first burst, then another,
            // each on a settled store.
            for (name, prefix) in [("concurrent", "conc"), ("concurrent_warm", "warm")] {
                settle(&tables).await;
                let (elapsed, latencies) = burst(&loom, prefix).await;
                report(name, 10_000, elapsed, latencies, "execution");
            }
        }
        settle(&tables).await;
        if runs("resume") {
            // Resume: from resume() to the flow's next effect.
            let e = loom
                .start(
                    "gates",
                    &gate_count,
                    StartOptions::new(id("gates")).grant("noop"),
                )
                .await
                .expect("start");
            let mut latencies = Vec::new();
            let start = Instant::now();
            for i in 0..gate_count {
                loom.wait(&e).await.expect("parked");
                stamps.lock().expect("stamps").clear();
                let began = Instant::now();
                loom.resume(&e, "Go", &i.to_string(), loom_kernel::Payload::null())
                    .await
                    .expect("resume");
                loop {
                    if let Some(at) = stamps.lock().expect("stamps").first() {
                        latencies.push(*at - began);
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
            report(
                "resume",
                gate_count,
                start.elapsed(),
                latencies,
                "resume_to_running",
            );
        }
    });
}
