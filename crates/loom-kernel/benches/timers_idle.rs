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

use std::time::{Duration, Instant};

use loom_kernel::*;
use loom_kernel::{ExecutionId, ExecutionStatus, MemoryStore};
use serde_json::{Value, json};

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

/// A line of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with(field))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time of every thread of this process so far (`/proc/self/task/*/schedstat`), in ns.
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|task| {
            let path = task.ok()?.path().join("schedstat");
            let text = std::fs::read_to_string(path).ok()?;
            text.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |tasks| tasks.count())
}

fn child(mode: &str) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let rss_before = status_kib("VmRSS:");
    tokio.block_on(async {
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
        let ids: Vec<ExecutionId> = (0..EXECUTIONS)
            .map(|n| ExecutionId::new(format!("e{n:06}")).expect("id"))
            .collect();
        let started = Instant::now();
        for chunk in ids.chunks(1_000) {
            let starts = chunk.iter().map(|id| {
                runtime.start(flow, &json!(null), StartOptions::new(id.clone()))
            });
            for result in futures::future::join_all(starts).await {
                result.expect("start");
            }
        }
        for id in &ids {
            runtime.wait(id).await.expect("parked");
        }
        let start_secs = started.elapsed().as_secs_f64();
        // Let everything the starts left behind settle, then watch one idle second.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rss = status_kib("VmRSS:");
        let cpu_before = cpu_ns();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle_cpu_us = (cpu_ns() - cpu_before) / 1_000;
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
    if let Ok(mode) = std::env::var(CHILD_ENV) {
        child(&mode);
        return;
    }
    // `cargo bench` passes `--bench`; this benchmark takes no filter.
    for mode in ["gate", "timer", "fire"] {
        let status = std::process::Command::new(std::env::current_exe().expect("exe"))
            .env(CHILD_ENV, mode)
            .status()
            .expect("child");
        assert!(status.success(), "{mode} failed");
    }
}
