//! What the runtime adds to a step, on the in-memory store: 1,000 sequential steps of a
//! trivial effect, against 1,000 calls of the same handler as a bare async function.
//!
//! - `bare_call`: the handler awaited directly, no Loom;
//! - `kernel_fn_effect`: `ctx.execute` of a kernel `FnEffect` (replay bookkeeping, events,
//!   appends, the driver);
//! - `registry_effect`: the same through an `EffectDef` (admission, a timeout per attempt, the
//!   retry loop, the cancellation token, the span).
//!
//! `cargo bench -p loom-effect-runtime --bench step_overhead`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loom_effect_runtime::{EffectContext, EffectDef, EffectError, EffectRegistry};
use loom_kernel::conformance::id;
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FnEffect, Runtime, StartOptions, flow_fn,
};
use loom_kernel::{ExecutionStatus, MemoryStore};

#[path = "../../loom-kernel/benches/support/mod.rs"]
mod support;

const STEPS: u64 = 1_000;

async fn steps(ctx: FlowCtx, n: u64) -> Result<(), FlowError> {
    for i in 0..n {
        ctx.execute("noop", &i).await?;
    }
    Ok(())
}

async fn handler(_: EffectContext, n: u64) -> Result<u64, EffectError> {
    Ok(std::hint::black_box(n))
}

async fn bare(n: u64) -> Result<u64, EffectError> {
    Ok(std::hint::black_box(n))
}

fn run(tokio: &tokio::runtime::Runtime, loom: &Runtime<MemoryStore>, n: &mut u64) {
    *n += 1;
    let e = id(&format!("e{n}"));
    tokio.block_on(async {
        let options = StartOptions::new(e.clone()).grant("noop");
        loom.start("steps", &STEPS, options).await.expect("start");
        let state = loom.wait(&e).await.expect("wait");
        assert_eq!(state.status(), ExecutionStatus::Completed);
    });
}

fn overhead(c: &mut Criterion) {
    let tokio = support::tokio_runtime();
    let mut group = c.benchmark_group("step_overhead");
    group.throughput(Throughput::Elements(STEPS));
    group.bench_function("bare_call", |b| {
        b.iter(|| {
            tokio.block_on(async {
                for i in 0..STEPS {
                    std::hint::black_box(bare(i).await.expect("bare"));
                }
            })
        })
    });
    let kernel = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("steps", 1, steps))
        .effect(
            "noop",
            FnEffect::new(true, |call: EffectCall| async move {
                EffectOutcome::ok(call.input)
            }),
        )
        .build()
        .expect("runtime");
    let mut n = 0;
    group.bench_function("kernel_fn_effect", |b| {
        b.iter(|| run(&tokio, &kernel, &mut n))
    });
    let registry = EffectRegistry::new()
        .with(EffectDef::new("noop", handler).idempotent())
        .expect("registry");
    let defined = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("steps", 1, steps))
        .plugin(&registry)
        .build()
        .expect("runtime");
    group.bench_function("registry_effect", |b| {
        b.iter(|| run(&tokio, &defined, &mut n))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = overhead
}
criterion_main!(benches);
