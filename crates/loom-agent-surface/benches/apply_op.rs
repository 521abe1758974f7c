//! One small op on models of growing size: the cost must stay flat (O(path depth)).
//!
//! Each model is `{"order": {"rows": {"r0": {"qty": 0, "status": "new"}, ...}}}` with
//! `keys / 2` rows, so about `keys` leaf keys; the ops address a row in the middle at depth 4
//! from the root (`order.rows.rN.qty`). Models and ops are built outside the measured loop.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use loom_agent_surface::{SurfaceOp, SurfacePath, apply_surface_patches};
use serde_json::{Map, Value, json};

fn model(keys: usize) -> Value {
    let rows: Map<String, Value> = (0..keys / 2)
        .map(|i| (format!("r{i}"), json!({"qty": i, "status": "new"})))
        .collect();
    json!({"order": {"rows": rows}})
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("apply_one_op");
    group.throughput(Throughput::Elements(1));
    for keys in [1_000usize, 100_000, 1_000_000] {
        let mut m = model(keys);
        let row = keys / 4;
        let increment = [SurfaceOp::Increment {
            path: SurfacePath::parse(&format!("order.rows.r{row}.qty")).unwrap(),
            by: 1.into(),
        }];
        let set = [SurfaceOp::Set {
            path: SurfacePath::parse(&format!("order.rows.r{row}.status")).unwrap(),
            value: json!("paid"),
        }];
        group.bench_with_input(BenchmarkId::new("increment", keys), &increment, |b, ops| {
            b.iter(|| apply_surface_patches(black_box(&mut m), black_box(ops)).unwrap());
        });
        group.bench_with_input(BenchmarkId::new("set", keys), &set, |b, ops| {
            b.iter(|| apply_surface_patches(black_box(&mut m), black_box(ops)).unwrap());
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
