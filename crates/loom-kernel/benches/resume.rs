//! Resume latency with 10 / 1,000 / 10,000 steps behind the gate, with parked flows kept in
//! memory (the default) and with the bound at 0 (every resume replays the log), in one run.
//!
//! Each execution runs `n` idempotent no-op steps, then waits at one gate after another; an
//! iteration resumes the next gate (timed: from `resume()` until it returns, once the resume
//! is durable) and waits for the flow to park again (not timed: `parked_in_memory()` back to 1
//! when kept, `wait()` when not). Memory store (the cost of the
//! log and its replay, without an fsync) and disk store (with one).
//! Criterion's estimate is the mean of its samples; after them each case prints a line with
//! the p50 and p99 of every resume it timed:
//! `loom resume store=memory behind=10000 kept=true p50_us=.. p99_us=.. resumes=..`.
//!
//! `cargo bench -p loom-kernel --bench resume`

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use loom_kernel::{DiskStore, EventStore, ExecutionId, MemoryStore, Payload};
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FnEffect, Runtime, StartOptions, flow_fn,
};

const BEHIND: [u64; 3] = [10, 1_000, 10_000];

/// `n` steps, then gates `g0`, `g1`, ... until the caller stops resuming.
async fn steps_then_gates(ctx: FlowCtx, n: u64) -> Result<(), FlowError> {
    for i in 0..n {
        ctx.execute("noop", &i).await?;
    }
    for gate in 0..u64::MAX {
        ctx.suspend("Go", &format!("g{gate}")).await?;
    }
    Ok(())
}

fn compose<S: EventStore>(store: S, kept: bool) -> Runtime<S> {
    let noop = FnEffect::new(true, |_call: EffectCall| async {
        EffectOutcome::ok(Payload::null())
    });
    Runtime::builder(store)
        .flow(flow_fn("steps_then_gates", 1, steps_then_gates))
        .effect("noop", noop)
        .max_parked_in_memory(if kept { 1_000 } else { 0 })
        .build()
        .expect("runtime")
}

/// One parked execution with `behind` steps behind its gate, and the next gate's number.
struct Case<S> {
    runtime: Runtime<S>,
    kept: bool,
    execution: ExecutionId,
    next_gate: u64,
    timed: Vec<Duration>,
}

impl<S: EventStore> Case<S> {
    async fn new(store: S, kept: bool, behind: u64) -> Self {
        let runtime = compose(store, kept);
        let execution = ExecutionId::new(format!("resume-{behind}-{kept}")).expect("id");
        runtime
            .start(
                "steps_then_gates",
                &behind,
                StartOptions::new(execution.clone()).grant("noop"),
            )
            .await
            .expect("start");
        runtime.wait(&execution).await.expect("parked");
        Self {
            runtime,
            kept,
            execution,
            next_gate: 0,
            timed: Vec::new(),
        }
    }

    /// Resumes the next gate; the time `resume()` took.
    async fn resume(&mut self) -> Duration {
        let key = format!("g{}", self.next_gate);
        self.next_gate += 1;
        let began = Instant::now();
        self.runtime
            .resume(&self.execution, "Go", &key, Payload::null())
            .await
            .expect("resume");
        let took = began.elapsed();
        if self.kept {
            // Parked again once its flow is back in the table.
            while self.runtime.parked_in_memory() == 0 {
                tokio::task::yield_now().await;
            }
        } else {
            self.runtime.wait(&self.execution).await.expect("parked");
        }
        self.timed.push(took);
        took
    }

    fn report(&mut self, store: &str, behind: u64, kept: bool) {
        let mut timed = std::mem::take(&mut self.timed);
        timed.sort();
        println!(
            "loom resume store={store} behind={behind} kept={kept} p50_us={:.0} p99_us={:.0} resumes={} parked_in_memory={}",
            support::percentile_us(&timed, 0.5),
            support::percentile_us(&timed, 0.99),
            timed.len(),
            self.runtime.parked_in_memory(),
        );
    }
}

fn resume(c: &mut Criterion) {
    let tokio = support::tokio_runtime();
    let dir = support::scratch_dir();
    for store in ["memory", "disk"] {
        let mut group = c.benchmark_group(format!("resume_{store}"));
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for behind in BEHIND {
            for kept in [true, false] {
                let label = if kept { "kept" } else { "replay" };
                let id = BenchmarkId::new(label, behind);
                match store {
                    "memory" => {
                        let case = tokio.block_on(Case::new(MemoryStore::new(), kept, behind));
                        let case = Arc::new(Mutex::new(Some(case)));
                        bench_case(&mut group, id, &tokio, &case);
                        if let Some(mut case) = case.lock().expect("case").take() {
                            case.report(store, behind, kept);
                        }
                    }
                    _ => {
                        let path = dir.path().join(format!("resume-{behind}-{kept}.redb"));
                        let disk = DiskStore::open(path).expect("store");
                        let case = tokio.block_on(Case::new(disk, kept, behind));
                        let case = Arc::new(Mutex::new(Some(case)));
                        bench_case(&mut group, id, &tokio, &case);
                        if let Some(mut case) = case.lock().expect("case").take() {
                            case.report(store, behind, kept);
                            tokio.block_on(case.runtime.shutdown());
                        }
                    }
                }
            }
        }
        group.finish();
    }
}

fn bench_case<S: EventStore>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    tokio: &tokio::runtime::Runtime,
    case: &Arc<Mutex<Option<Case<S>>>>,
) {
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let mut guard = case.lock().expect("case");
            let case = guard.as_mut().expect("case");
            tokio.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += case.resume().await;
                }
                total
            })
        })
    });
}

criterion_group!(benches, resume);
criterion_main!(benches);
