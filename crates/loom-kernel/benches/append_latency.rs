//! Latency distribution of one durable append against one raw write + fsync on the same disk,
//! interleaved so both see the same disk conditions. Prints one machine-readable line each.
//!
//! `cargo bench -p loom-kernel --bench append_latency`

mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use loom_kernel::conformance::{id, started};
use loom_kernel::{DiskStore, EventStore};

const SAMPLES: usize = 2000;

/// Prints the line for `name` and returns its p50 in microseconds.
fn report(name: &str, mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    let total: Duration = samples.iter().sum();
    let per_s = samples.len() as f64 / total.as_secs_f64();
    let p50 = support::percentile_us(&samples, 0.5);
    println!(
        "loom {name} ops_per_s={per_s:.0} p50_us={p50:.0} p99_us={:.0}",
        support::percentile_us(&samples, 0.99)
    );
    p50
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let runtime = support::tokio_runtime();
    let dir = support::scratch_dir();
    let store = DiskStore::open(dir.path().join("latency.redb")).expect("store");
    let e = id("latency");
    let mut head = runtime
        .block_on(store.append(&e, 0, &[started("bench")]))
        .expect("append");
    let mut raw = std::fs::File::create(dir.path().join("raw.log")).expect("raw file");
    let block = vec![b'x'; 4096];
    let (mut raw_samples, mut append_samples) = (Vec::new(), Vec::new());
    for i in 0..SAMPLES as u64 {
        let start = Instant::now();
        raw.write_all(&block).expect("write");
        raw.sync_data().expect("fsync");
        raw_samples.push(start.elapsed());

        let start = Instant::now();
        head = runtime
            .block_on(store.append(&e, head, &[support::typical_event(i)]))
            .expect("append");
        append_samples.push(start.elapsed());
    }
    let raw_p50 = report("raw_4k_write_fsync", raw_samples);
    let append_p50 = report("disk_append_one_event", append_samples);
    println!(
        "loom append_vs_raw_fsync p50_ratio={:.2}",
        append_p50 / raw_p50
    );
}
