//! What `Runtime::recover` costs on a disk store holding many ended executions and a few
//! running ones: it lists through the status index, so the ended ones should cost nothing.
//!
//! For each count of ended executions (`LOOM_RECOVER_ENDED`, comma-separated; default
//! `0,100000`), it builds a fresh `DiskStore` with that many ended executions (two events
//! each, appended in large concurrent batches so the writer groups them) and 100 running
//! ones (each started by a runtime and left mid-step), reopens the file, and times
//! `recover()` on a new runtime several times (each run ends with `shutdown`, which leaves the
//! executions running again).
//!
//! `LOOM_RECOVER_ENDED=0,100000,1000000 cargo bench -p loom-kernel --bench recover`
//!
//! With `LOOM_RECOVER_PARKED` (comma-separated counts) it does the same with that many
//! *parked* executions instead of ended ones, each asleep on a timer a day away (three
//! events: started, its `loom.deadline` decision, its timer gate): recovery reads them through
//! the wake-up index and arms none (LD-033).
//!
//! `LOOM_RECOVER_ENDED= LOOM_RECOVER_PARKED=1000000 cargo bench -p loom-kernel --bench recover`

use std::time::{Duration, Instant};

use loom_kernel::DiskStore;
use loom_kernel::DiskStoreConfig;
use loom_kernel::conformance::{
    RUNNING_LEFT, asleep_on_timer, completed, fill_for_recovery, started, stuck_runtime,
};
use loom_kernel::*;

const RUNNING: usize = RUNNING_LEFT;
const RUNS: usize = 7;

fn config() -> DiskStoreConfig {
    DiskStoreConfig {
        max_batch_events: 100_000,
        ..DiskStoreConfig::default()
    }
}

/// What the store holds besides the running executions.
#[derive(Debug, Clone, Copy)]
enum Filler {
    Ended(usize),
    Parked(usize),
}

async fn build(path: &std::path::Path, filler: Filler) -> Duration {
    let began = Instant::now();
    let store = DiskStore::open_with(path, config()).expect("the store opens");
    let (count, prefix, events) = match filler {
        Filler::Ended(n) => (n, "ended", vec![started("done"), completed()]),
        Filler::Parked(n) => {
            let a_day_away = SystemClock.now_ms() + 86_400_000;
            (n, "parked", asleep_on_timer(a_day_away))
        }
    };
    fill_for_recovery(&store, prefix, count, &events).await;
    began.elapsed()
}

fn label_of(filler: Filler) -> String {
    match filler {
        Filler::Ended(n) => format!("{n}_ended"),
        Filler::Parked(n) => format!("{n}_parked"),
    }
}

fn counts(variable: &str, default: &str) -> Vec<usize> {
    std::env::var(variable)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter_map(|count| count.trim().parse().ok())
        .collect()
}

fn main() {
    let fillers: Vec<Filler> = counts("LOOM_RECOVER_ENDED", "0,100000")
        .into_iter()
        .map(Filler::Ended)
        .chain(
            counts("LOOM_RECOVER_PARKED", "")
                .into_iter()
                .map(Filler::Parked),
        )
        .collect();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    tokio.block_on(async {
        for filler in fillers {
            // LOOM_RECOVER_KEEP=DIR keeps the stores there (to time other opens of them).
            let dir = tempfile::tempdir().expect("a temporary directory");
            let kept = std::env::var_os("LOOM_RECOVER_KEEP").map(std::path::PathBuf::from);
            let path = match &kept {
                Some(keep) => {
                    std::fs::create_dir_all(keep).expect("the directory to keep stores in");
                    keep.join(format!("recover-{}.redb", label_of(filler)))
                }
                None => dir.path().join("recover.redb"),
            };
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(path.with_extension("redb.journal"));
            let built = build(&path, filler).await;
            let label = label_of(filler);
            let size_mb = std::fs::metadata(&path).map_or(0, |m| m.len()) / 1_000_000;
            // The open without redb's check of every page (the default since LD-039, its scrub
            // off here so that it does not share the cores with what is timed), then with it.
            let fast = DiskStoreConfig {
                scrub_after_open: false,
                ..config()
            };
            let opening = Instant::now();
            let store = DiskStore::open_with(&path, fast.clone()).expect("the store opens");
            let opened_unverified = opening.elapsed();
            let rt = stuck_runtime(store);
            let began = Instant::now();
            let recovered = rt.recover().await.expect("recover lists the store");
            let open_and_recover = opened_unverified + began.elapsed();
            assert_eq!(recovered, RUNNING);
            rt.shutdown().await;
            let opening = Instant::now();
            let verified = DiskStoreConfig {
                verify_on_open: true,
                ..fast.clone()
            };
            let store = DiskStore::open_with(&path, verified).expect("the store opens again");
            let opened = opening.elapsed();
            let mut times = Vec::new();
            for _ in 0..RUNS {
                let rt = stuck_runtime(store.clone());
                let began = Instant::now();
                let recovered = rt.recover().await.expect("recover lists the store");
                times.push(began.elapsed());
                assert_eq!(recovered, RUNNING, "every running execution is recovered");
                rt.shutdown().await;
            }
            times.sort();
            drop(store);
            // The default open, then how long its scrub takes to read every row.
            let opening = Instant::now();
            let store = DiskStore::open_with(&path, config()).expect("the store opens again");
            let opened_default = opening.elapsed();
            let scrub = loop {
                match store.scrub_status() {
                    Some(status) if !status.finished => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    status => break status,
                }
            };
            let scrubbed = opening.elapsed();
            drop(store);
            println!(
                "open/{label}: default {:.1} ms (scrub read {} rows, {} damaged, done {:.2} s after the open), with verify_on_open {:.1} ms",
                opened_default.as_secs_f64() * 1e3,
                scrub.as_ref().map_or(0, |status| status.rows),
                scrub.as_ref().map_or(0, |status| status.damaged),
                scrubbed.as_secs_f64(),
                opened.as_secs_f64() * 1e3,
            );
            println!(
                "recover/{label}_{RUNNING}_running: min {:.2} ms, median {:.2} ms, max {:.2} ms over {RUNS} runs (store built in {:.1} s, {size_mb} MB, reopened with verify_on_open in {:.1} ms; without: opened in {:.1} ms, open + recover {:.1} ms)",
                times[0].as_secs_f64() * 1e3,
                times[RUNS / 2].as_secs_f64() * 1e3,
                times[RUNS - 1].as_secs_f64() * 1e3,
                built.as_secs_f64(),
                opened.as_secs_f64() * 1e3,
                opened_unverified.as_secs_f64() * 1e3,
                open_and_recover.as_secs_f64() * 1e3,
            );
        }
    });
}
