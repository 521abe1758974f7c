//! Replay of a recorded 10,000-step execution from the disk store, running no effect.

mod support;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loom_kernel::EventStoreExt;

const STEPS: u64 = 10_000;

fn replay(c: &mut Criterion) {
    let runtime = support::tokio_runtime();
    let dir = support::scratch_dir();
    let (loom, e, log) = support::recorded_steps(&runtime, dir.path(), STEPS);
    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Elements(STEPS));
    group.sample_size(20);
    group.bench_function("read_and_replay_10k_steps_disk", |b| {
        b.iter(|| {
            let log = runtime.block_on(loom.store().read_all(&e)).expect("read");
            loom.replay_log(log).expect("deterministic")
        })
    });
    group.bench_function("replay_10k_steps_in_memory", |b| {
        b.iter_batched(
            || log.clone(),
            |log| loom.replay_log(log).expect("deterministic"),
            criterion::BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
