//! The durable cost of a non-idempotent step against an idempotent one, on the disk store,
//! printed as one line per workload with the disk's own floor beside it:
//!
//! - `floor same_pattern`: one 256-byte `pwrite` over zeros the file already holds, then one
//!   `fdatasync`, the pattern of a small commit of the store's journal (`support`'s
//!   `same_pattern_floor`). Measured before each workload in the same run, and each workload's
//!   `floor_ratio` is its mean (per execution or per step) over that floor's mean.
//! - `one_step_executions`: 300 executions of one step each, one after another. An idempotent
//!   step needs one commit (started, step and completion together); a non-idempotent one two
//!   ordered commits (its `STEP_STARTED` must be durable before it runs).
//! - `sequential`: one execution of 1,000 steps. A non-idempotent step waits for its
//!   `STEP_STARTED` to be durable (its outcome shares that commit with the next step's start):
//!   one commit per step, so its `floor_ratio` is what the store adds to the disk's sync.
//!   Idempotent steps run ahead of the disk and share commits.
//! - `raw_fsync`: one 4 KiB write + fsync at a time in the same directory, a file that grows
//!   (each sync then also commits the file system's journal): the figure earlier runs gave.
//!
//! `cargo bench -p loom-effect-runtime --bench durable_steps`; `LOOM_DURABLE_REPS=N` runs the
//! workloads N times over (each after its own floor); `LOOM_DURABLE_ONLY=sequential` (or
//! `one_step_executions`, or either with `:idempotent` or `:non_idempotent`) runs those only.

use std::time::Instant;

use loom_effect_runtime::{EffectContext, EffectDef, EffectError, EffectRegistry};
use loom_kernel::conformance::id;
use loom_kernel::{DiskStore, ExecutionStatus};
use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, flow_fn};

#[path = "../../loom-kernel/benches/support/mod.rs"]
mod support;

use support::{SyncFloor, percentile_us, same_pattern_floor};

const EXECUTIONS: u64 = 300;
const SEQUENTIAL: u64 = 1_000;

async fn steps(ctx: FlowCtx, (effect, n): (String, u64)) -> Result<(), FlowError> {
    for i in 0..n {
        ctx.execute(&effect, &i).await?;
    }
    Ok(())
}

async fn handler(_: EffectContext, n: u64) -> Result<u64, EffectError> {
    Ok(n)
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let tokio = support::tokio_runtime();
    let dir = support::scratch_dir();
    let registry = EffectRegistry::new()
        .with(EffectDef::new("idempotent", handler).idempotent())
        .and_then(|r| r.with(EffectDef::new("non_idempotent", handler)))
        .expect("registry");
    let store = DiskStore::open(dir.path().join("durable.redb")).expect("store");
    let loom = Runtime::builder(store)
        .flow(flow_fn("steps", 1, steps))
        .plugin(&registry)
        .build()
        .expect("runtime");

    {
        use std::io::Write;
        let mut raw = std::fs::File::create(dir.path().join("raw.log")).expect("raw file");
        let block = vec![7u8; 4096];
        let started = Instant::now();
        for _ in 0..EXECUTIONS {
            raw.write_all(&block).expect("write");
            raw.sync_data().expect("fsync");
        }
        let elapsed = started.elapsed();
        println!(
            "raw_fsync per_s={:.0} per_op_us={:.0}",
            EXECUTIONS as f64 / elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / EXECUTIONS as f64
        );
    }

    let reps: usize = std::env::var("LOOM_DURABLE_REPS")
        .ok()
        .and_then(|reps| reps.parse().ok())
        .unwrap_or(1);
    let floor = || {
        let floor = same_pattern_floor(dir.path(), EXECUTIONS as usize);
        println!("{}", floor.line(EXECUTIONS as usize));
        floor
    };
    let only = std::env::var("LOOM_DURABLE_ONLY").ok();
    let runs = |workload: &str, effect: &str| {
        only.as_deref().is_none_or(|only| {
            only.split(',')
                .any(|name| name == workload || name == format!("{workload}:{effect}"))
        })
    };
    tokio.block_on(async {
        for rep in 0..reps {
            for effect in ["idempotent", "non_idempotent"] {
                if runs("one_step_executions", effect) {
                    let floor = floor();
                    one_step_executions(&loom, effect, rep, floor).await;
                }
            }
            for effect in ["idempotent", "non_idempotent"] {
                if runs("sequential", effect) {
                    let floor = floor();
                    sequential(&loom, effect, rep, floor).await;
                }
            }
        }
    });
}

/// `EXECUTIONS` one-step executions of `effect`, one after another, each waited for.
async fn one_step_executions(
    loom: &Runtime<DiskStore>,
    effect: &str,
    rep: usize,
    floor: SyncFloor,
) {
    let mut latencies = Vec::new();
    let started = Instant::now();
    for i in 0..EXECUTIONS {
        let e = id(&format!("one-{effect}-{rep}-{i}"));
        let begun = Instant::now();
        let options = StartOptions::new(e.clone()).grant(effect);
        loom.start("steps", &(effect, 1u64), options)
            .await
            .expect("start");
        let state = loom.wait(&e).await.expect("wait");
        assert_eq!(state.status(), ExecutionStatus::Completed);
        latencies.push(begun.elapsed());
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let mean_us = elapsed.as_secs_f64() * 1e6 / EXECUTIONS as f64;
    println!(
        "one_step_executions effect={effect} per_s={:.0} mean_us={mean_us:.0} p50_us={:.0} p99_us={:.0} commits={} floor_ratio={:.2}",
        EXECUTIONS as f64 / elapsed.as_secs_f64(),
        percentile_us(&latencies, 0.5),
        percentile_us(&latencies, 0.99),
        if effect == "idempotent" { 1 } else { 2 },
        floor.ratio(mean_us),
    );
}

/// One execution of `SEQUENTIAL` steps of `effect`.
async fn sequential(loom: &Runtime<DiskStore>, effect: &str, rep: usize, floor: SyncFloor) {
    let e = id(&format!("seq-{effect}-{rep}"));
    let started = Instant::now();
    let options = StartOptions::new(e.clone()).grant(effect);
    loom.start("steps", &(effect, SEQUENTIAL), options)
        .await
        .expect("start");
    let state = loom.wait(&e).await.expect("wait");
    assert_eq!(state.status(), ExecutionStatus::Completed);
    let elapsed = started.elapsed();
    let per_step_us = elapsed.as_secs_f64() * 1e6 / SEQUENTIAL as f64;
    println!(
        "sequential effect={effect} steps_per_s={:.0} per_step_us={per_step_us:.0} floor_ratio={:.2}",
        SEQUENTIAL as f64 / elapsed.as_secs_f64(),
        floor.ratio(per_step_us),
    );
}
