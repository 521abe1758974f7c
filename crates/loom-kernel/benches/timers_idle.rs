//! What 100,000 pending timers cost while they wait, and how fast they fire.
//!
//! Each scenario runs in a fresh child process on the memory store and reports its resident
//! memory and the CPU time all its threads used over one idle second:
//! - `gate`: 100,000 executions parked at an ordinary gate (the baseline: no timer);
//! - `timer`: 100,000 executions each in `ctx.sleep(1 hour)` on the system clock;
//! - `fire`: the same on a manual clock, which then jumps past every deadline: how long until
//!   all 100,000 have completed.
//!
//! `cargo bench -p loom-kernel --bench timers_idle`

mod support;

use std::time::{Duration, Instant};

use loom_kernel::*;
use loom_kernel::{ExecutionStatus, MemoryStore};
use serde_json::{Value, json};
use support::process::{execution_ids, idle_second, in_runtime, run_scenarios, start_all, threads};

const CHILD_ENV: &str = "LOOM_TIMERS_IDLE_CHILD";
const EXECUTIONS: usize = 100_000;

async fn sleeper(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.sleep(Duration::from_secs(3600)).await?;
    Ok(json!("woke"))
}

async fn gated(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.suspend("Go", "go").await?;
    Ok(json!("went"))
}

fn child(mode: &str) {
    in_runtime(|rss_before| async move {
        let clock = ManualClock::new(1_800_000_000_000);
        let builder = Runtime::builder(MemoryStore::new())
            .flow(flow_fn("sleeper", 1, sleeper))
            .flow(flow_fn("gated", 1, gated));
        let runtime = match mode {
            "fire" => builder.clock(clock.clone()),
            _ => builder,
        }
        .build()
        .expect("runtime");
        let flow = if mode == "gate" { "gated" } else { "sleeper" };
        let ids = execution_ids(EXECUTIONS);
        let start_secs = start_all(&runtime, flow, &ids, |id| StartOptions::new(id.clone())).await;
        let (rss, idle_cpu_us) = idle_second().await;
        println!(
            "{mode}: {EXECUTIONS} executions parked in {start_secs:.2} s; pending timers {}; RSS {:.1} MiB (process before the runtime: {:.1} MiB); threads {}; CPU over one idle second: {idle_cpu_us} µs",
            runtime.pending_timers(),
            rss as f64 / 1024.0,
            rss_before as f64 / 1024.0,
            threads(),
        );
        if mode == "fire" {
            let fired = Instant::now();
            clock.advance(Duration::from_secs(3600));
            for id in &ids {
                loop {
                    let state = runtime.wait(id).await.expect("state");
                    if state.status() == ExecutionStatus::Completed {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            let secs = fired.elapsed().as_secs_f64();
            println!(
                "fire: all {EXECUTIONS} timers fired and their executions completed in {secs:.2} s ({:.0} timers/s); pending timers {}",
                EXECUTIONS as f64 / secs,
                runtime.pending_timers()
            );
        }
    });
}

fn main() {
    run_scenarios(CHILD_ENV, &["gate", "timer", "fire"], child);
}
