//! What the benchmarks that measure a whole process share (`parked_memory`, `timers_idle`):
//! each scenario runs in a fresh child process of the benchmark binary, parks many executions,
//! and reads its resident memory, threads and CPU time from `/proc/self`.

use std::time::{Duration, Instant};

use loom_kernel::{EventStore, ExecutionId, Runtime, StartOptions};
use serde_json::json;

/// The benchmark's `main`: in a child process (`child_env` set to a scenario) runs `child` with
/// that scenario; otherwise runs each of `modes` in a fresh child process, in order.
pub fn run_scenarios(child_env: &str, modes: &[&str], child: fn(&str)) {
    if let Ok(mode) = std::env::var(child_env) {
        child(&mode);
        return;
    }
    // `cargo bench` passes `--bench`; these benchmarks take no filter.
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    for mode in modes {
        let status = std::process::Command::new(std::env::current_exe().expect("exe"))
            .env(child_env, mode)
            .status()
            .expect("child");
        assert!(status.success(), "{mode} failed");
    }
}

/// Runs a scenario on the benchmarks' tokio runtime, handing it the process's resident memory
/// (KiB) before the scenario began.
pub fn in_runtime<F: std::future::Future<Output = ()>>(scenario: impl FnOnce(u64) -> F) {
    let tokio = super::tokio_runtime();
    let rss_before = status_kib("VmRSS:");
    tokio.block_on(scenario(rss_before));
}

/// A line of `/proc/self/status`, in KiB.
pub fn status_kib(field: &str) -> u64 {
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
pub fn cpu_ns() -> u64 {
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

/// The threads of this process.
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |tasks| tasks.count())
}

/// `count` execution ids, `e000000` on.
pub fn execution_ids(count: usize) -> Vec<ExecutionId> {
    (0..count)
        .map(|n| ExecutionId::new(format!("e{n:06}")).expect("id"))
        .collect()
}

/// Starts `flow` (input `null`) as each of `ids`, 1,000 at a time, with the options `options`
/// gives, and waits until each has parked or ended: the seconds it took.
pub async fn start_all<S: EventStore + Clone>(
    runtime: &Runtime<S>,
    flow: &str,
    ids: &[ExecutionId],
    options: impl Fn(&ExecutionId) -> StartOptions,
) -> f64 {
    let started = Instant::now();
    for chunk in ids.chunks(1_000) {
        let starts = chunk
            .iter()
            .map(|id| runtime.start(flow, &json!(null), options(id)));
        for result in futures::future::join_all(starts).await {
            result.expect("start");
        }
    }
    for id in ids {
        runtime.wait(id).await.expect("parked");
    }
    started.elapsed().as_secs_f64()
}

/// Lets everything the starts left behind settle, then watches one idle second: the resident
/// memory (KiB) and the CPU time every thread used over that second (µs).
pub async fn idle_second() -> (u64, u64) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = status_kib("VmRSS:");
    let cpu_before = cpu_ns();
    tokio::time::sleep(Duration::from_secs(1)).await;
    (rss, (cpu_ns() - cpu_before) / 1_000)
}
