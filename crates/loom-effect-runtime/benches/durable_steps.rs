//! The durable cost of a non-idempotent step against an idempotent one, on the disk store,
//! printed as one line per workload with the disk's own pace beside it:
//!
//! - `one_step_executions`: 300 executions of one step each, one after another. An idempotent
//!   step needs one commit (started, step and completion together); a non-idempotent one two
//!   ordered commits (its `STEP_STARTED` must be durable before it runs).
//! - `sequential`: one execution of 1,000 steps. A non-idempotent step waits for its
//!   `STEP_STARTED` to be durable (its outcome shares that commit with the next step's start);
//!   idempotent steps run ahead of the disk and share commits.
//! - `raw_fsync`: one 4 KiB write + fsync at a time in the same directory.
//!
//! `cargo bench -p loom-effect-runtime --bench durable_steps`

use std::time::Instant;

use loom_effect_runtime::{EffectContext, EffectDef, EffectError, EffectRegistry};
use loom_kernel::conformance::id;
use loom_kernel::{DiskStore, ExecutionStatus};
use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, flow_fn};

#[path = "../../loom-kernel/benches/support/mod.rs"]
mod support;

use support::percentile_us;

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

    tokio.block_on(async {
        for effect in ["idempotent", "non_idempotent"] {
            let mut latencies = Vec::new();
            let started = Instant::now();
            for i in 0..EXECUTIONS {
                let e = id(&format!("one-{effect}-{i}"));
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
            println!(
                "one_step_executions effect={effect} per_s={:.0} p50_us={:.0} p99_us={:.0}",
                EXECUTIONS as f64 / elapsed.as_secs_f64(),
                percentile_us(&latencies, 0.5),
                percentile_us(&latencies, 0.99),
            );
        }
        for effect in ["idempotent", "non_idempotent"] {
            let e = id(&format!("seq-{effect}"));
            let started = Instant::now();
            let options = StartOptions::new(e.clone()).grant(effect);
            loom.start("steps", &(effect, SEQUENTIAL), options)
                .await
                .expect("start");
            let state = loom.wait(&e).await.expect("wait");
            assert_eq!(state.status(), ExecutionStatus::Completed);
            let elapsed = started.elapsed();
            println!(
                "sequential effect={effect} steps_per_s={:.0} per_step_us={:.0}",
                SEQUENTIAL as f64 / elapsed.as_secs_f64(),
                elapsed.as_secs_f64() * 1e6 / SEQUENTIAL as f64
            );
        }
    });
}
