//! Replay of a recorded 10,000-step execution from the disk store, running no effect.

mod support;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loom_kernel::conformance::id;
use loom_kernel::{DiskStore, EventStoreExt, ExecutionStatus, Payload};
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FnEffect, Runtime, StartOptions, flow_fn,
};

const STEPS: u64 = 10_000;

async fn many_steps(ctx: FlowCtx, steps: u64) -> Result<u64, FlowError> {
    let mut total = 0;
    for i in 0..steps {
        let out: u64 = ctx.call("noop", &i).await?;
        total += out;
    }
    Ok(total)
}

fn replay(c: &mut Criterion) {
    let runtime = support::tokio_runtime();
    let dir = support::scratch_dir();
    let store = DiskStore::open(dir.path().join("replay.redb")).expect("store");
    let loom = Runtime::builder(store)
        .flow(flow_fn("many", 1, many_steps))
        .effect(
            "noop",
            FnEffect::new(true, |call: EffectCall| async move {
                EffectOutcome::ok(call.input)
            }),
        )
        .build()
        .expect("runtime");
    let e = id("recorded");
    runtime.block_on(async {
        let _guard = ();
        loom.start("many", &STEPS, StartOptions::new(e.clone()).grant("noop"))
            .await
            .expect("start");
        let state = loom.wait(&e).await.expect("wait");
        assert_eq!(state.status(), ExecutionStatus::Completed);
    });
    let _ = Payload::null();
    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Elements(STEPS));
    group.sample_size(20);
    group.bench_function("read_and_replay_10k_steps_disk", |b| {
        b.iter(|| {
            let log = runtime.block_on(loom.store().read_all(&e)).expect("read");
            loom.replay_log(log).expect("deterministic")
        })
    });
    let log = runtime.block_on(loom.store().read_all(&e)).expect("read");
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
