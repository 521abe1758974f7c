//! Durable steps on PostgreSQL beside the embedded store, in one run, one line per workload:
//!
//! - `sequential`: one execution of 1,000 non-idempotent steps, each durable (its
//!   `STEP_STARTED` committed) before it runs: the like-for-like line for a peer engine that
//!   persists every step before the next.
//! - `sequential-idempotent`: the same with an idempotent effect (at-least-once, as a DBOS
//!   step is): the step runs without waiting for its `STEP_STARTED`, and its outcome rides
//!   with the next commit, so steps run ahead of the commits and share them. Not a
//!   commit-per-step figure: after a crash, the steps since the last commit run again.
//! - `concurrent`: `N` executions started at once, each of 10 non-idempotent steps: steps/s over
//!   all of them and the p50 / p99 latency of one step as the flow sees it (the await of
//!   `ctx.execute`). Group commit shares one transaction among the executions that wait together.
//! - `concurrent-sharded`: the same 1,000 executions on a `ShardedStore` over two databases of
//!   the server (`loom_shard_1` created if missing): two shards, two write paths. Prints the
//!   sharded line only (the embedded store has no shards).
//!
//! Needs a server: `cargo xtask pg-up` (or `LOOM_TEST_POSTGRES_URL`; a replicated pair's URL
//! from `cargo xtask pg-up --replica` measures what the synchronous standby costs), then
//! `cargo bench -p loom-store-postgres --bench postgres_steps`. Without one it says so and exits.
//! `LOOM_BENCH_LEASE_CONFIRM_MS` sets the store's `lease_confirm_after`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loom_kernel::{DiskStore, EventStore, ExecutionId, ExecutionStatus};
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FnEffect, Runtime, StartOptions, flow_fn,
};
use loom_store_postgres::{
    PostgresStore, PostgresStoreConfig, ShardedStore, drop_schema, fresh_schema, server_url,
};
use serde_json::{Value, json};

#[path = "../../loom-kernel/benches/support/mod.rs"]
mod support;

use support::percentile_us;

const SEQUENTIAL: u64 = 1_000;
const STEPS_PER_EXECUTION: u64 = 10;

/// Step latencies as the flows saw them, shared by every execution of one workload.
type Latencies = Arc<Mutex<Vec<Duration>>>;

fn runtime<S: EventStore>(store: S, latencies: Latencies, idempotent: bool) -> Runtime<S> {
    Runtime::builder(store)
        .flow(flow_fn("steps", 1, move |ctx: FlowCtx, n: u64| {
            let latencies = Arc::clone(&latencies);
            async move {
                for i in 0..n {
                    let begun = Instant::now();
                    ctx.execute("noop", &i).await?;
                    latencies.lock().expect("latencies").push(begun.elapsed());
                }
                Ok::<Value, FlowError>(json!(n))
            }
        }))
        .effect(
            "noop",
            FnEffect::new(idempotent, |call: EffectCall| async move {
                EffectOutcome::ok(call.input)
            }),
        )
        .build()
        .expect("runtime")
}

async fn run_workload<S: EventStore>(
    store_name: &str,
    store: S,
    executions: u64,
    steps: u64,
    idempotent: bool,
) -> (f64, f64, f64) {
    let latencies: Latencies = Arc::default();
    let loom = Arc::new(runtime(store, Arc::clone(&latencies), idempotent));
    let started = Instant::now();
    let mut waiting = Vec::new();
    for i in 0..executions {
        let loom = Arc::clone(&loom);
        let execution =
            ExecutionId::new(format!("{store_name}-{executions}-{i}")).expect("execution id");
        waiting.push(tokio::spawn(async move {
            let options = StartOptions::new(execution.clone()).grant("noop");
            loom.start("steps", &steps, options).await.expect("start");
            let state = loom.wait(&execution).await.expect("wait");
            assert_eq!(state.status(), ExecutionStatus::Completed);
        }));
    }
    for handle in waiting {
        handle.await.expect("execution task");
    }
    let elapsed = started.elapsed();
    let mut latencies = std::mem::take(&mut *latencies.lock().expect("latencies"));
    latencies.sort();
    (
        (executions * steps) as f64 / elapsed.as_secs_f64(),
        percentile_us(&latencies, 0.5),
        percentile_us(&latencies, 0.99),
    )
}

/// A sharded store over the server's database and a second one, `loom_shard_1`, and the
/// (database URL, schema) of each shard, to drop once the workload is done.
async fn two_shards(url: &str) -> (ShardedStore, Vec<(String, String)>) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let connection = tokio::spawn(connection);
    let exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'loom_shard_1')",
            &[],
        )
        .await
        .expect("look for the second database")
        .get(0);
    if !exists {
        client
            .batch_execute("CREATE DATABASE loom_shard_1")
            .await
            .expect("create the second database");
    }
    drop(client);
    let _ = connection.await;
    let (base, _) = url.rsplit_once('/').expect("a URL with a database");
    let schema = fresh_schema("bench");
    let shards = vec![
        (url.to_owned(), schema.clone()),
        (format!("{base}/loom_shard_1"), schema),
    ];
    let store = ShardedStore::connect(
        shards
            .iter()
            .map(|(url, schema)| PostgresStoreConfig::new(url).schema(schema))
            .collect(),
    )
    .await
    .expect("sharded store");
    (store, shards)
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let Some(url) = server_url("postgres_steps bench") else {
        return;
    };
    let tokio = support::tokio_runtime();
    let dir = support::scratch_dir();
    tokio.block_on(async {
        let workloads = [
            ("sequential", 1, SEQUENTIAL, false),
            ("sequential-idempotent", 1, SEQUENTIAL, true),
            ("concurrent", 1, STEPS_PER_EXECUTION, false),
            ("concurrent", 1_000, STEPS_PER_EXECUTION, false),
            ("concurrent-sharded", 1_000, STEPS_PER_EXECUTION, false),
        ];
        // `LOOM_BENCH_ONLY=sequential` runs the workloads of that name only.
        let only = std::env::var("LOOM_BENCH_ONLY").ok();
        for (index, (workload, executions, steps, idempotent)) in workloads.into_iter().enumerate()
        {
            if only.as_deref().is_some_and(|only| only != workload) {
                continue;
            }
            if workload == "concurrent-sharded" {
                let (sharded, shards) = two_shards(&url).await;
                let (per_s, p50, p99) =
                    run_workload("sharded", sharded, executions, steps, idempotent).await;
                // The scratch schemas go, or every run leaves its tables to the server.
                for (url, schema) in shards {
                    drop_schema(&url, &schema).await;
                }
                println!(
                    "{workload} executions={executions} steps={steps} store=postgres-2-shards \
                     steps_per_s={per_s:.0} step_p50_us={p50:.0} step_p99_us={p99:.0}"
                );
                continue;
            }
            // `LOOM_BENCH_LEASE_CONFIRM_MS=0`: the lease confirmed with the server before every
            // non-idempotent call (what the default bound spares).
            let schema = fresh_schema("bench");
            let config = PostgresStoreConfig::new(&url).schema(&schema);
            let config = match std::env::var("LOOM_BENCH_LEASE_CONFIRM_MS") {
                Ok(ms) => config.lease_confirm_after(Duration::from_millis(
                    ms.parse()
                        .expect("LOOM_BENCH_LEASE_CONFIRM_MS: milliseconds"),
                )),
                Err(_) => config,
            };
            let postgres = PostgresStore::connect(config)
                .await
                .expect("postgres store");
            let pg = run_workload("postgres", postgres, executions, steps, idempotent).await;
            drop_schema(&url, &schema).await;
            let disk = DiskStore::open(dir.path().join(format!("bench-{index}.redb")))
                .expect("disk store");
            let embedded = run_workload("disk", disk, executions, steps, idempotent).await;
            for (store, (per_s, p50, p99)) in [("postgres", pg), ("disk", embedded)] {
                println!(
                    "{workload} executions={executions} steps={steps} store={store} \
                     steps_per_s={per_s:.0} step_p50_us={p50:.0} step_p99_us={p99:.0}"
                );
            }
        }
    });
}
