//! Replay-check of 10,000 executions of 100 events each from the disk store, on every core.
//!
//! `cargo bench -p loom-replay-check --bench check_store`
//!
//! For profiling: `LOOM_BENCH_EXECUTIONS` sets how many executions (10,000 by default),
//! `LOOM_BENCH_JOBS` which `--jobs` values to run (`2,4` by default), and `LOOM_BENCH_STORE`
//! keeps the store at that path and reuses it when it exists (made with the same number of
//! executions), so that a profiler can be run on the check alone, e.g. `LOOM_BENCH_EXECUTIONS=1000
//! LOOM_BENCH_JOBS=1 LOOM_BENCH_STORE=/tmp/check.redb valgrind --tool=callgrind <bench binary>
//! --bench` after one run without valgrind.

use std::time::Instant;

use loom_kernel::conformance::id;
use loom_kernel::{DiskStore, Event, EventStore, EventStoreExt, MemoryStore};
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FlowSet, FnEffect, Runtime, StartOptions,
    flow_fn,
};

fn setting(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// 98 steps: with its start and its end, a log of 100 events (101 when the first step's start
/// is recorded apart).
async fn steps(ctx: FlowCtx, n: u64) -> Result<u64, FlowError> {
    let mut sum = 0;
    for i in 0..n {
        let out: u64 = ctx.call("double", &i).await?;
        sum += out;
    }
    Ok(sum)
}

fn flows() -> FlowSet {
    FlowSet::new().with(flow_fn("steps", 1, steps))
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let executions: usize = setting("LOOM_BENCH_EXECUTIONS", "10000")
        .parse()
        .expect("LOOM_BENCH_EXECUTIONS");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir_in(option_env!("CARGO_TARGET_TMPDIR").unwrap_or("target"))
        .expect("scratch dir");
    let path = std::env::var_os("LOOM_BENCH_STORE")
        .map_or_else(|| dir.path().join("check.redb"), std::path::PathBuf::from);
    let reuse = path.exists();
    let events: Vec<Event> = runtime.block_on(async {
        let store = MemoryStore::new();
        let rt = Runtime::builder(store.clone())
            .flows(&flows())
            .effect(
                "double",
                FnEffect::new(true, |call: EffectCall| async move {
                    let n: u64 = call.input.decode().unwrap_or(0);
                    EffectOutcome::ok(loom_kernel::Payload::from(serde_json::json!(n * 2)))
                }),
            )
            .build()
            .expect("runtime");
        let e = rt
            .start(
                "steps",
                &98u64,
                StartOptions::new(id("template")).grant("double"),
            )
            .await
            .expect("start");
        rt.wait(&e).await.expect("wait");
        store
            .read_all(&e)
            .await
            .expect("read")
            .into_iter()
            .map(|x| x.event)
            .collect()
    });
    // A quick step's start is recorded with its outcome, except when the step is issued while
    // the execution's first append is in flight: then its `STEP_STARTED` goes out with
    // `EXECUTION_STARTED` (one more event).
    assert!(
        (100..=101).contains(&events.len()),
        "{} events",
        events.len()
    );
    runtime.block_on(async {
        if reuse {
            return;
        }
        let store = DiskStore::open(&path).expect("store");
        let tasks: Vec<_> = (0..executions)
            .map(|n| {
                let (store, events) = (store.clone(), events.clone());
                tokio::spawn(async move {
                    store
                        .append(&id(&format!("e{n:05}")), 0, &events)
                        .await
                        .expect("append")
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
    });
    let path = path.to_str().expect("utf-8 path").to_owned();
    for jobs in setting("LOOM_BENCH_JOBS", "2,4").split(',') {
        let start = Instant::now();
        let cpu_before = cpu_seconds();
        let status = loom_replay_check::check_command(
            &flows(),
            ["replay-check", "--store", &path, "--json", "--jobs", jobs],
        );
        let seconds = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu_before;
        assert_eq!(status, 0);
        let total = (executions * events.len()) as f64;
        println!(
            "loom replay_check jobs={jobs} executions={executions} events={total:.0} seconds={seconds:.2} cpu_seconds={cpu:.2} events_per_s={:.0}",
            total / seconds
        );
    }
}

/// User + system CPU time of this process so far, from /proc (0 elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the full line: 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}
