//! What `Runtime::recover` costs on PostgreSQL with many parked executions and a few running
//! ones (LD-033): it reads the running ones through the status index and the parked ones'
//! deadlines through the wake-up index, a time window at a time, so the parked ones (asleep
//! on a timer a day away) should cost nothing.
//!
//! For each count (`LOOM_RECOVER_PARKED`, comma-separated; default `100000`) it fills a fresh
//! schema through the store's API (appends issued 20,000 at a time, which the writer groups
//! into large commits), starts 100 executions left mid-step, and times `recover()` on a new
//! runtime over the same store 7 times (each ends with `shutdown`). The schema is dropped after.
//!
//! Needs a server: `cargo xtask pg-up`, then
//! `LOOM_RECOVER_PARKED=1000000 cargo bench -p loom-store-postgres --bench recover_parked`.

use std::time::{Duration, Instant};

use loom_kernel::conformance::{RUNNING_LEFT, asleep_on_timer, fill_for_recovery, stuck_runtime};
use loom_kernel::*;
use loom_store_postgres::{
    PostgresStore, PostgresStoreConfig, drop_schema, fresh_schema, server_url,
};

const RUNNING: usize = RUNNING_LEFT;
const RUNS: usize = 7;

async fn build(store: &PostgresStore, parked: usize) -> Duration {
    let began = Instant::now();
    let events = asleep_on_timer(SystemClock.now_ms() + 86_400_000);
    fill_for_recovery(store, "parked", parked, &events).await;
    began.elapsed()
}

fn main() {
    let Some(url) = server_url("recover_parked") else {
        eprintln!("recover_parked: no PostgreSQL server (cargo xtask pg-up); nothing measured");
        return;
    };
    let counts: Vec<usize> = std::env::var("LOOM_RECOVER_PARKED")
        .unwrap_or_else(|_| "100000".into())
        .split(',')
        .filter_map(|count| count.trim().parse().ok())
        .collect();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    tokio.block_on(async {
        for parked in counts {
            let schema = fresh_schema("recover_parked");
            let store = PostgresStore::connect(PostgresStoreConfig::new(&url).schema(&schema))
                .await
                .expect("the store connects");
            let built = build(&store, parked).await;
            let mut times = Vec::new();
            let mut report = None;
            for _ in 0..RUNS {
                let rt = stuck_runtime(store.clone());
                let began = Instant::now();
                let recovered = rt.recover_report().await.expect("recover lists the store");
                times.push(began.elapsed());
                assert_eq!(
                    recovered.started + recovered.elsewhere,
                    RUNNING,
                    "{recovered:?}"
                );
                report = Some(recovered);
                rt.shutdown().await;
            }
            times.sort();
            println!(
                "recover_postgres/{parked}_parked_{RUNNING}_running: min {:.2} ms, median {:.2} ms, max {:.2} ms over {RUNS} runs (store filled in {:.1} s; last report {report:?})",
                times[0].as_secs_f64() * 1e3,
                times[RUNS / 2].as_secs_f64() * 1e3,
                times[RUNS - 1].as_secs_f64() * 1e3,
                built.as_secs_f64(),
            );
            drop(store);
            drop_schema(&url, &schema).await;
        }
    });
}
