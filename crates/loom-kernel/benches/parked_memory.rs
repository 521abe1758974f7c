//! What keeping 100,000 parked executions in memory costs, against keeping none (the bound at
//! 0: every resume replays), and what it saves when all of them are resumed.
//!
//! Each scenario runs in a fresh child process on the memory store (2 tokio workers), parks
//! 100,000 executions at a gate (after one step), and reports resident memory, the count of
//! flows kept, threads and CPU over one idle second; then it resumes every execution and
//! reports how long until all have completed:
//! - `replay`: `max_parked_in_memory(0)`, the runtime before LD-020;
//! - `kept`: `max_parked_in_memory(100_000)`: every parked flow kept.
//!
//! Compare the resident memory with `timers_idle`'s `gate` line (100,000 parked at a gate,
//! default bound: 10,000 kept).
//!
//! `cargo bench -p loom-kernel --bench parked_memory`

mod support;

use std::time::Instant;

use loom_kernel::*;
use loom_kernel::{ExecutionStatus, MemoryStore, Payload};
use serde_json::{Value, json};
use support::process::{execution_ids, idle_second, in_runtime, run_scenarios, start_all, threads};

const CHILD_ENV: &str = "LOOM_PARKED_MEMORY_CHILD";
const EXECUTIONS: usize = 100_000;

async fn gated(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("noop", &json!(1)).await?;
    ctx.suspend("Go", "go").await?;
    Ok(json!("went"))
}

fn child(mode: &str) {
    in_runtime(|rss_before| async move {
        let noop = FnEffect::new(true, |_call: EffectCall| async {
            EffectOutcome::ok(Payload::null())
        });
        let runtime = Runtime::builder(MemoryStore::new())
            .flow(flow_fn("gated", 1, gated))
            .effect("noop", noop)
            .max_parked_in_memory(if mode == "kept" { EXECUTIONS } else { 0 })
            .build()
            .expect("runtime");
        let ids = execution_ids(EXECUTIONS);
        let start_secs = start_all(&runtime, "gated", &ids, |id| {
            StartOptions::new(id.clone()).grant("noop")
        })
        .await;
        let (rss, idle_cpu_us) = idle_second().await;
        println!(
            "{mode}: {EXECUTIONS} executions parked in {start_secs:.2} s; kept in memory {}; RSS {:.1} MiB (process before the runtime: {:.1} MiB); threads {}; CPU over one idle second: {idle_cpu_us} µs",
            runtime.parked_in_memory(),
            rss as f64 / 1024.0,
            rss_before as f64 / 1024.0,
            threads(),
        );
        let resumed = Instant::now();
        for chunk in ids.chunks(1_000) {
            let resumes = chunk
                .iter()
                .map(|id| runtime.resume(id, "Go", "go", Payload::null()));
            for result in futures::future::join_all(resumes).await {
                result.expect("resume");
            }
        }
        for id in &ids {
            let state = runtime.wait(id).await.expect("state");
            assert_eq!(state.status(), ExecutionStatus::Completed);
        }
        let secs = resumed.elapsed().as_secs_f64();
        println!(
            "{mode}: all {EXECUTIONS} resumed and completed in {secs:.2} s ({:.0} resumes/s); kept in memory {}",
            EXECUTIONS as f64 / secs,
            runtime.parked_in_memory()
        );
    });
}

fn main() {
    run_scenarios(CHILD_ENV, &["replay", "kept"], child);
}
