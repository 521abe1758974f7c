//! What the kernel's benchmarks share: a realistic log and a scratch directory on the
//! benchmark disk.
#![allow(dead_code)]

pub mod process;

use loom_kernel::conformance::{echo_effect, started};
use loom_kernel::*;
use loom_kernel::{Event, EventEnvelope, ExecutionId};
use serde_json::json;

/// The runtime every benchmark drives Loom on: both cores, or `LOOM_BENCH_WORKERS` worker
/// threads (to see whether a workload waits on something other than the CPU).
pub fn tokio_runtime() -> tokio::runtime::Runtime {
    let workers = std::env::var("LOOM_BENCH_WORKERS")
        .ok()
        .and_then(|workers| workers.parse().ok())
        .unwrap_or(2);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A scratch directory under the target directory, on the same disk as the build.
pub fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(option_env!("CARGO_TARGET_TMPDIR").unwrap_or("target"))
        .expect("scratch dir")
}

/// Sequential steps of the no-op effect `noop`, as the replay benchmarks record them.
async fn noop_steps(ctx: FlowCtx, steps: u64) -> Result<u64, FlowError> {
    let mut total = 0;
    for i in 0..steps {
        let out: u64 = ctx.call("noop", &i).await?;
        total += out;
    }
    Ok(total)
}

/// A runtime on `store` whose execution `recorded` ran `steps` sequential no-op steps to
/// completion, and that execution's log.
pub fn run_steps<S: EventStore + 'static>(
    tokio: &tokio::runtime::Runtime,
    store: S,
    steps: u64,
) -> (Runtime<S>, ExecutionId, Vec<EventEnvelope>) {
    let loom = Runtime::builder(store)
        .flow(flow_fn("many", 1, noop_steps))
        .effect("noop", echo_effect())
        .build()
        .expect("runtime");
    let e = ExecutionId::new("recorded").expect("id");
    let log = tokio.block_on(async {
        loom.start("many", &steps, StartOptions::new(e.clone()).grant("noop"))
            .await
            .expect("start");
        let state = loom.wait(&e).await.expect("wait");
        assert_eq!(state.status(), ExecutionStatus::Completed);
        loom.store().read_all(&e).await.expect("read")
    });
    (loom, e, log)
}

/// A runtime on a disk store in `dir` whose execution `recorded` ran `steps` sequential no-op
/// steps to completion, and that execution's log: what the replay benchmarks replay.
pub fn recorded_steps(
    tokio: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    steps: u64,
) -> (Runtime<DiskStore>, ExecutionId, Vec<EventEnvelope>) {
    let store = DiskStore::open(dir.join("replay.redb")).expect("store");
    run_steps(tokio, store, steps)
}

/// The `i`-th event of a typical agent flow: steps with outputs, decisions, surface patches,
/// and gates opened and resumed (about 150 bytes of JSON each).
pub fn typical_event(i: u64) -> Event {
    let step = format!("step#{}", i / 5);
    match i % 5 {
        0 => Event::StepCompleted(StepCompleted {
            step_id: step,
            effect: "llm.complete".into(),
            input_digest: "9f86d081884c7d65".into(),
            output: json!({"text": "a short answer", "tokens": 42}).into(),
            cost: 1,
        }),
        1 => Event::DecisionRecorded(DecisionRecorded {
            step_id: format!("now#{}", i / 5),
            kind: "now".into(),
            value: json!(1_764_490_000_000u64 + i).into(),
        }),
        2 => Event::SurfacePatch(SurfacePatch {
            step_id: format!("surface:main#{}", i / 5),
            surface_id: "main".into(),
            ops: json!([{"op": "set", "path": "order.status", "value": "pending"}]).into(),
        }),
        3 => Event::ExecutionSuspended(ExecutionSuspended {
            gate_id: format!("approve#{}", i / 5),
            event_type: "A2UIAction".into(),
            correlation_key: format!("approve-{}", i / 5),
        }),
        _ => Event::ExecutionResumed(ExecutionResumed {
            gate_id: format!("approve#{}", i / 5),
            event_type: "A2UIAction".into(),
            correlation_key: format!("approve-{}", i / 5),
            payload: json!({"approved": true}).into(),
        }),
    }
}

/// EXECUTION_STARTED followed by `n - 1` typical events.
pub fn typical_events(n: u64) -> Vec<Event> {
    std::iter::once(started("bench"))
        .chain((0..n.saturating_sub(1)).map(typical_event))
        .collect()
}

/// The same, as envelopes of execution `id`.
pub fn typical_log(id: &ExecutionId, n: u64) -> Vec<EventEnvelope> {
    loom_kernel::conformance::log_of(id, typical_events(n))
}

/// The `p` quantile (0 to 1) of sorted durations, in microseconds.
pub fn percentile_us(sorted: &[std::time::Duration], p: f64) -> f64 {
    let index = (sorted.len().saturating_sub(1) as f64 * p).round() as usize;
    sorted.get(index).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

/// One `fdatasync` of the kind the disk store's journal makes, timed in the benchmark's own
/// run: the floor its durable workloads are compared with.
#[derive(Debug, Clone, Copy)]
pub struct SyncFloor {
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

impl SyncFloor {
    /// `elapsed_us` (a mean per step or per execution) as a multiple of one sync's mean.
    pub fn ratio(&self, elapsed_us: f64) -> f64 {
        elapsed_us / self.mean_us
    }

    /// The floor's machine-readable line.
    pub fn line(&self, ops: usize) -> String {
        format!(
            "floor same_pattern ops={ops} per_s={:.0} mean_us={:.1} p50_us={:.1} p99_us={:.1}",
            1e6 / self.mean_us,
            self.mean_us,
            self.p50_us,
            self.p99_us
        )
    }
}

/// The same write pattern as a small commit of the disk store's journal: 256 bytes written
/// with one `pwrite` over zeros the file already holds (the journal grows its file ahead of its
/// records, so a commit changes no size and allocates no block), then one `fdatasync`, `ops`
/// times at successive offsets in `dir`. A 4 KiB append that grows its file costs more (each
/// sync also commits the file system's own journal) and is no floor for the store.
pub fn same_pattern_floor(dir: &std::path::Path, ops: usize) -> SyncFloor {
    use std::os::unix::fs::FileExt;
    const RECORD: usize = 256;
    let path = dir.join("floor.journal");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .expect("floor file");
    file.write_all_at(&vec![0u8; ops * RECORD + (64 << 10)], 0)
        .expect("zeros");
    file.sync_all().expect("fsync");
    let record = [0x5au8; RECORD];
    let mut latencies = Vec::with_capacity(ops);
    let started = std::time::Instant::now();
    for op in 0..ops {
        let began = std::time::Instant::now();
        file.write_all_at(&record, (op * RECORD) as u64)
            .expect("pwrite");
        file.sync_data().expect("fdatasync");
        latencies.push(began.elapsed());
    }
    let mean_us = started.elapsed().as_secs_f64() * 1e6 / ops.max(1) as f64;
    drop(file);
    let _ = std::fs::remove_file(&path);
    latencies.sort();
    SyncFloor {
        mean_us,
        p50_us: percentile_us(&latencies, 0.5),
        p99_us: percentile_us(&latencies, 0.99),
    }
}
