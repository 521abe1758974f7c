//! Patch batches to A2UI wire messages: the bridge's egress cost.
//!
//! - `small_ops`: batches of 100 small `set`/`increment` ops on distinct leaves of a modest
//!   model, folded, turned into minimal `updateDataModel` messages and serialized to JSON text.
//!   Throughput is in ops.
//! - `one_op_on_1mb_model`: one small op on a ~1 MB model (the same work must not grow with
//!   the model: the fold is O(path depth) and the message carries only the touched value).
//!
//! - `small_ops_v0_9`: `small_ops` as a v0.9 session sends them: each message projected onto
//!   A2UI v0.9, checked against the v0.9 schemas, serialized.
//!
//! `cargo bench -p loom-plugin-a2ui --bench egress`

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use loom_agent_surface::SurfaceOp;
use loom_kernel::DataClassification;
use loom_plugin_a2ui::{A2UISurfaceBridge, Catalogs, V0_9Schema, project_v0_9};
use serde_json::{Map, Value, json};

const BATCH: usize = 100;

fn components() -> Vec<Value> {
    vec![json!({"id": "root", "component": "Text", "text": {"@path": "/title"}})]
}

fn rows_model(rows: usize, padding: usize) -> Value {
    let mut map = Map::new();
    for i in 0..rows {
        map.insert(
            format!("r{i}"),
            json!({"qty": i, "name": format!("row {i}"), "note": "x".repeat(padding), "secret": "s"}),
        );
    }
    json!({"title": "bench", "rows": Value::Object(map)})
}

fn ops(rows: usize, round: usize) -> Vec<SurfaceOp> {
    (0..BATCH)
        .map(|i| {
            let row = (round * BATCH + i) % rows;
            let value = if i % 2 == 0 {
                json!({"op": "set", "path": format!("rows.r{row}.name"), "value": format!("n{i}")})
            } else {
                json!({"op": "increment", "path": format!("rows.r{row}.qty"), "by": 1})
            };
            SurfaceOp::from_value(&value).expect("a valid op")
        })
        .collect()
}

fn bridge(model: Value) -> A2UISurfaceBridge {
    let catalogs = Catalogs::default_with([]).expect("the default catalogs compile");
    let masking = DataClassification::mask_paths(["rows.*.secret"]).expect("paths parse");
    let mut bridge = A2UISurfaceBridge::new("bench", catalogs, masking);
    bridge
        .create_surface(components(), model)
        .expect("the surface is created");
    bridge
}

fn egress(c: &mut Criterion) {
    let mut group = c.benchmark_group("egress");
    group.throughput(Throughput::Elements(BATCH as u64));
    let rows = 1_000;
    let mut small = bridge(rows_model(rows, 0));
    let mut round = 0;
    group.bench_function("small_ops", |b| {
        b.iter_batched(
            || {
                round += 1;
                ops(rows, round)
            },
            |batch| {
                let messages = small.apply_ops(&batch).expect("the batch applies");
                let bytes: usize = messages.iter().map(|m| m.to_json().len()).sum();
                std::hint::black_box(bytes)
            },
            BatchSize::SmallInput,
        )
    });
    let schema = V0_9Schema::shared().expect("the v0.9 schemas compile");
    let mut small_v0_9 = bridge(rows_model(rows, 0));
    let mut round_v0_9 = 0;
    group.bench_function("small_ops_v0_9", |b| {
        b.iter_batched(
            || {
                round_v0_9 += 1;
                ops(rows, round_v0_9)
            },
            |batch| {
                let messages = small_v0_9.apply_ops(&batch).expect("the batch applies");
                let mut bytes = 0;
                for message in &messages {
                    for frame in project_v0_9(message).expect("v0.9 carries it") {
                        assert!(schema.server_to_client_errors(&frame).is_empty());
                        bytes += frame.to_string().len();
                    }
                }
                std::hint::black_box(bytes)
            },
            BatchSize::SmallInput,
        )
    });
    group.throughput(Throughput::Elements(1));
    // ~10,000 rows of ~100 bytes: about 1 MB of JSON.
    let big_rows = 10_000;
    let model = rows_model(big_rows, 40);
    eprintln!("1 MB model: {} bytes of JSON", model.to_string().len());
    let mut big = bridge(model);
    let op = vec![
        SurfaceOp::from_value(&json!({"op": "set", "path": "rows.r5000.name", "value": "renamed"}))
            .expect("a valid op"),
    ];
    group.bench_function("one_op_on_1mb_model", |b| {
        b.iter(|| {
            let messages = big.apply_ops(&op).expect("the op applies");
            std::hint::black_box(messages.iter().map(|m| m.to_json().len()).sum::<usize>())
        })
    });
    group.finish();
}

criterion_group!(benches, egress);
criterion_main!(benches);
