//! `live`'s `concurrent` workload (1,000 executions of 10 idempotent steps, all at once, each
//! started and waited for) run round after round on one disk store, one line per round: the
//! sustained figure, with the store's applier bringing its tables up to the journal behind
//! the commits (LD-035), where `live` times one round. The rounds run on one task of the
//! runtime, not on the thread that called `block_on` (see `live`'s `burst`). `MEM=1` runs it on the memory store,
//! the runtime's own ceiling; `ROUNDS=N` (10 by default). `BEFORE=N` first runs N one-step
//! executions one after another on a second disk store in the same process, then pauses
//! 300 ms: the first round then follows other work, as `live`'s burst follows its sequential
//! workloads (`docs/PERFORMANCE.md`, "A burst after other work").
//!
//! `cargo bench -p loom-kernel --bench concurrent_rounds`.

mod support;

use std::time::Instant;

use loom_kernel::conformance::id;
use loom_kernel::{
    DiskStore, EffectCall, EffectOutcome, EventStore, ExecutionStatus, FlowCtx, FlowError,
    FnEffect, MemoryStore, Runtime, StartOptions, flow_fn,
};

async fn steps(ctx: FlowCtx, n: u64) -> Result<(), FlowError> {
    for i in 0..n {
        ctx.execute("noop", &i).await?;
    }
    Ok(())
}

/// A runtime on `store` with the `steps` flow and its no-op idempotent effect.
fn steps_runtime<S: EventStore + 'static>(store: S) -> Runtime<S> {
    Runtime::builder(store)
        .flow(flow_fn("steps", 1, steps))
        .effect(
            "noop",
            FnEffect::new(true, |call: EffectCall| async move {
                EffectOutcome::ok(call.input)
            }),
        )
        .build()
        .expect("runtime")
}

fn run<S: EventStore + 'static>(store: S, rounds: usize, label: &str) {
    let runtime = support::tokio_runtime();
    let before: usize = std::env::var("BEFORE")
        .ok()
        .and_then(|before| before.parse().ok())
        .unwrap_or(0);
    if before > 0 {
        runtime
            .block_on(async { tokio::spawn(one_step_executions(before)).await })
            .expect("before");
    }
    let loom = steps_runtime(store);
    // The rounds are run by one task on the runtime, as `live`'s burst is: awaited from the
    // thread that called `block_on`, each execution's end would wake that thread.
    let label = label.to_owned();
    let rounds_task = async move {
        let mut rates = Vec::new();
        for round in 0..rounds {
            let start = Instant::now();
            let tasks: Vec<_> = (0..1000)
                .map(|n| {
                    let loom = loom.clone();
                    tokio::spawn(async move {
                        let options = StartOptions::new(id(&format!("r{round}-{n}"))).grant("noop");
                        let e = loom.start("steps", &10u64, options).await.expect("start");
                        let state = loom.wait(&e).await.expect("wait");
                        assert_eq!(state.status(), ExecutionStatus::Completed);
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("task");
            }
            let rate = 10_000.0 / start.elapsed().as_secs_f64();
            rates.push(rate);
            println!("loom concurrent_round store={label} round={round} steps_per_s={rate:.0}");
        }
        rates.sort_by(f64::total_cmp);
        let total: f64 = rates.iter().map(|rate| 10_000.0 / rate).sum();
        println!(
            "loom concurrent_rounds store={label} rounds={rounds} median_steps_per_s={:.0} overall_steps_per_s={:.0}",
            rates[rates.len() / 2],
            10_000.0 * rounds as f64 / total
        );
    };
    runtime.block_on(async { tokio::spawn(rounds_task).await.expect("rounds") });
}

/// `count` one-step executions, one after another, on a disk store of their own, then a pause.
async fn one_step_executions(count: usize) {
    let dir = support::scratch_dir();
    let store = DiskStore::open(dir.path().join("before.redb")).expect("store");
    let loom = steps_runtime(store);
    for n in 0..count {
        let options = StartOptions::new(id(&format!("before-{n}"))).grant("noop");
        let e = loom.start("steps", &1u64, options).await.expect("start");
        loom.wait(&e).await.expect("wait");
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let rounds = std::env::var("ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(10usize)
        .max(1);
    if std::env::var_os("MEM").is_some() {
        run(MemoryStore::new(), rounds, "memory");
    } else {
        let dir = support::scratch_dir();
        let store = DiskStore::open(dir.path().join("rounds.redb")).expect("store");
        run(store, rounds, "disk");
    }
}
