//! Append throughput: one event per call on one execution (against a raw write + fsync on the
//! same disk), and 1,000 executions appending concurrently (group commit).

mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loom_kernel::conformance::{id, started};
use loom_kernel::{DiskStore, EventStore, MemoryStore};

fn single_appends(c: &mut Criterion) {
    let runtime = support::tokio_runtime();
    let dir = support::scratch_dir();
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Elements(1));

    let mut raw = std::fs::File::create(dir.path().join("raw.log")).expect("raw file");
    let block = vec![b'x'; 4096];
    group.bench_function("raw_4k_write_fsync", |b| {
        b.iter(|| {
            raw.write_all(&block).expect("write");
            raw.sync_data().expect("fsync");
        })
    });

    let store = DiskStore::open(dir.path().join("single.redb")).expect("store");
    let e = id("single");
    let mut head = runtime
        .block_on(store.append(&e, 0, &[started("bench")]))
        .expect("append");
    let mut i = 0;
    group.bench_function("disk_one_event_per_call", |b| {
        b.iter(|| {
            head = runtime
                .block_on(store.append(&e, head, &[support::typical_event(i)]))
                .expect("append");
            i += 1;
        })
    });

    let memory = MemoryStore::new();
    let mut head = runtime
        .block_on(memory.append(&e, 0, &[started("bench")]))
        .expect("append");
    group.bench_function("memory_one_event_per_call", |b| {
        b.iter(|| {
            head = runtime
                .block_on(memory.append(&e, head, &[support::typical_event(i)]))
                .expect("append");
            i += 1;
        })
    });
    group.finish();
}

const EXECUTIONS: usize = 1000;
const APPENDS_EACH: usize = 20;

/// 1,000 tasks, each appending one event at a time to its own execution.
fn group_commit(c: &mut Criterion) {
    let runtime = support::tokio_runtime();
    let dir = support::scratch_dir();
    let store = DiskStore::open(dir.path().join("group.redb")).expect("store");
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Elements((EXECUTIONS * APPENDS_EACH) as u64));
    group.sample_size(10);
    let mut round = 0;
    group.bench_function("disk_1000_executions_concurrently", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                round += 1;
                let start = Instant::now();
                runtime.block_on(async {
                    let tasks: Vec<_> = (0..EXECUTIONS)
                        .map(|n| {
                            let store = store.clone();
                            let e = id(&format!("r{round}-e{n}"));
                            tokio::spawn(async move {
                                let mut head = 0;
                                for i in 0..APPENDS_EACH as u64 {
                                    let event = if i == 0 {
                                        started("bench")
                                    } else {
                                        support::typical_event(i)
                                    };
                                    head = store.append(&e, head, &[event]).await.expect("append");
                                }
                            })
                        })
                        .collect();
                    for task in tasks {
                        task.await.expect("task");
                    }
                });
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, single_appends, group_commit);
criterion_main!(benches);
