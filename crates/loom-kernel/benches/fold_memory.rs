//! Peak memory of folding a stored execution: the fold streams the log page by page, so the
//! peak must not grow with the log's length. Each fold runs in a fresh child process that
//! reports its own peak RSS (VmHWM), so building the logs does not count.
//!
//! `cargo bench -p loom-kernel --bench fold_memory`

mod support;

use loom_kernel::conformance::{id, started};
use loom_kernel::{DiskStore, Event, EventStore, EventStoreExt};
use loom_kernel::{ExecutionResumed, ExecutionSuspended, SurfacePatch};
use serde_json::json;

const CHILD_ENV: &str = "LOOM_FOLD_MEMORY_CHILD";

/// Events whose fold state stays constant: surface patches carrying ~500 bytes and a gate
/// opened and resumed again and again. Only the log grows.
fn flat_event(i: u64) -> Event {
    match i % 4 {
        0 => Event::ExecutionSuspended(ExecutionSuspended {
            gate_id: "approve#1".into(),
            event_type: "A2UIAction".into(),
            correlation_key: "approve".into(),
        }),
        1 => Event::ExecutionResumed(ExecutionResumed {
            gate_id: "approve#1".into(),
            event_type: "A2UIAction".into(),
            correlation_key: "approve".into(),
            payload: json!({"approved": true}).into(),
        }),
        _ => Event::SurfacePatch(SurfacePatch {
            step_id: "surface:main#1".into(),
            surface_id: "main".into(),
            ops: json!([{"op": "set", "path": "log", "value": "x".repeat(500)}]).into(),
        }),
    }
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmHWM:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

fn child(path: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cache_mib: usize = std::env::var("LOOM_FOLD_MEMORY_CACHE_MIB")
        .ok()
        .and_then(|mib| mib.parse().ok())
        .unwrap_or(64);
    let config = loom_kernel::DiskStoreConfig {
        cache_size_bytes: cache_mib << 20,
        ..Default::default()
    };
    let store = DiskStore::open_with(path, config).expect("store");
    let start = std::time::Instant::now();
    let state = runtime.block_on(store.fold(&id("long"))).expect("fold");
    println!(
        "{} {} {:.3}",
        state.next_seq(),
        peak_rss_kib(),
        start.elapsed().as_secs_f64()
    );
}

fn build(path: &std::path::Path, events: u64) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let store = DiskStore::open(path).expect("store");
    runtime.block_on(async {
        let e = id("long");
        let mut head = store
            .append(&e, 0, &[started("bench")])
            .await
            .expect("append");
        while head < events {
            let batch: Vec<Event> = (head..(head + 10_000).min(events))
                .map(|seq| flat_event(seq - 1))
                .collect();
            head = store.append(&e, head, &batch).await.expect("append");
        }
    });
}

fn main() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(&path);
        return;
    }
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let dir = support::scratch_dir();
    for events in [100_000u64, 1_000_000] {
        let path = dir.path().join(format!("fold-{events}.redb"));
        build(&path, events);
        for cache_mib in [64, 8] {
            let file_mib =
                std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64 / 1048576.0;
            let output = std::process::Command::new(std::env::current_exe().expect("exe"))
                .env(CHILD_ENV, &path)
                .env("LOOM_FOLD_MEMORY_CACHE_MIB", cache_mib.to_string())
                .output()
                .expect("child");
            if !output.status.success() {
                eprintln!(
                    "fold child failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            let line = String::from_utf8_lossy(&output.stdout);
            let mut fields = line.split_whitespace();
            let (folded, rss_kib, seconds) = (
                fields.next().unwrap_or("?"),
                fields.next().unwrap_or("?"),
                fields.next().unwrap_or("?"),
            );
            println!(
                "loom fold_memory events={folded} store_mib={file_mib:.0} cache_mib={cache_mib} peak_rss_kib={rss_kib} seconds={seconds}"
            );
        }
    }
}
