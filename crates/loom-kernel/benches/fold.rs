//! Fold throughput: over events in memory, and reading one stored execution from the disk store.

mod support;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loom_kernel::conformance::id;
use loom_kernel::{DiskStore, EventStore, EventStoreExt, ExecutionState};

const EVENTS: u64 = 100_000;

fn fold_in_memory(c: &mut Criterion) {
    let log = support::typical_log(&id("bench"), EVENTS);
    let mut group = c.benchmark_group("fold");
    group.throughput(Throughput::Elements(EVENTS));
    group.bench_function("in_memory_100k", |b| {
        b.iter(|| ExecutionState::fold(&log).expect("valid log"))
    });
    group.finish();
}

fn decode_records(c: &mut Criterion) {
    let e = id("bench");
    let records: Vec<Vec<u8>> = support::typical_events(EVENTS)
        .iter()
        .map(|event| loom_kernel::kit::encode_record(event, Some(1_764_490_000_000)))
        .collect();
    let bytes: usize = records.iter().map(Vec::len).sum();
    eprintln!("typical record: {} bytes on average", bytes / records.len());
    let mut group = c.benchmark_group("fold");
    group.throughput(Throughput::Elements(EVENTS));
    group.bench_function("decode_records_100k", |b| {
        b.iter(|| {
            for (seq, record) in records.iter().enumerate() {
                loom_kernel::kit::decode_record(&e, seq as u64, record).expect("decode");
            }
        })
    });
    group.finish();
}

fn fold_from_disk(c: &mut Criterion) {
    let runtime = support::tokio_runtime();
    let dir = support::scratch_dir();
    let store = DiskStore::open(dir.path().join("fold.redb")).expect("store");
    let e = id("bench");
    runtime.block_on(async {
        let events = support::typical_events(EVENTS);
        let mut head = 0;
        for chunk in events.chunks(10_000) {
            head = store.append(&e, head, chunk).await.expect("append");
        }
        store.fold(&e).await.expect("warm the cache");
    });
    let mut group = c.benchmark_group("fold");
    group.throughput(Throughput::Elements(EVENTS));
    group.sample_size(20);
    group.bench_function("read_disk_100k", |b| {
        b.iter(|| runtime.block_on(store.read_all(&e)).expect("read"))
    });
    group.bench_function("read_and_fold_disk_100k", |b| {
        b.iter(|| runtime.block_on(store.fold(&e)).expect("fold"))
    });
    group.finish();
}

criterion_group!(benches, fold_in_memory, decode_records, fold_from_disk);
criterion_main!(benches);
