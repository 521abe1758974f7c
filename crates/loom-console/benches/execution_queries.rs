//! The admin API's listings on a store holding many executions: the newest 50, and the
//! failed ones started in the last hour, each timed over HTTP as the console and `loom
//! executions --admin` ask for them (the listing, the counts per status, the JSON).
//!
//! The store is filled first through its public API, many appends at a time so that the
//! writer takes them in large group commits (`tests/support/fill.rs`; no flow runs), and the
//! fill is timed too. Then each query runs `LOOM_QUERY_RUNS` times (default 500) after a
//! warm-up; the p50, p99 and largest latency are printed.
//!
//! - `LOOM_QUERY_EXECUTIONS`: how many executions (default 1,000,000).
//! - `LOOM_QUERY_STORE`: `disk` (default) or `postgres` (then `LOOM_TEST_POSTGRES_URL` names
//!   the server, e.g. after `cargo xtask pg-up`: `$(cat target/loom-pg/url)`).
//! - `LOOM_QUERY_SCHEMA`: on PostgreSQL, a schema an earlier run filled (its name is printed):
//!   no fill then.
//!
//! Each listing is timed as the console asks for it (the page alone, `counts=false`) and as
//! `loom executions` does (with the counts per status, and so the total); the counts alone
//! too.
//!
//! `LOOM_QUERY_STORE=postgres LOOM_TEST_POSTGRES_URL=$(cat target/loom-pg/url) cargo bench -p loom-console --bench execution_queries`

#[path = "../tests/support/fill.rs"]
#[allow(dead_code)]
mod fill;

use std::time::{Duration, Instant};

use loom_console::{AdminClient, AdminConfig, ListFilter, admin_router, bind_loopback};
use loom_kernel::{DiskStore, DiskStoreConfig, EventStore, ExecutionStatus, Runtime};

const TOKEN: &str = "bench-token-0123456789abcdef0123456789";
const HOUR_MS: u64 = 3_600_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

async fn serve<S: EventStore>(store: S) -> AdminClient {
    let runtime = Runtime::builder(store).build().expect("a runtime");
    let router = admin_router(runtime, AdminConfig::new(TOKEN).expect("a token"));
    let listener = bind_loopback(0).await.expect("a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    tokio::spawn(async move { axum::serve(listener, router).await });
    AdminClient::new(&url, TOKEN).expect("a client")
}

async fn time_query(client: &AdminClient, name: &str, filter: &ListFilter, runs: usize) {
    for _ in 0..20 {
        client.executions(filter).await.expect("the listing");
    }
    let mut took = Vec::with_capacity(runs);
    let mut shown = 0;
    for _ in 0..runs {
        let began = Instant::now();
        let page = client.executions(filter).await.expect("the listing");
        took.push(began.elapsed());
        shown = page.executions.len();
    }
    took.sort();
    println!(
        "{name:<34} {shown:>3} shown  p50 {:>8.2?}  p99 {:>8.2?}  max {:>8.2?}  ({runs} runs)",
        percentile(&took, 0.50),
        percentile(&took, 0.99),
        took[took.len() - 1],
    );
}

async fn bench<S: EventStore + Clone>(
    store: S,
    label: &str,
    count: usize,
    runs: usize,
    fill: bool,
) {
    if fill {
        let filled = fill::fill(&store, count).await;
        println!(
            "{label}: filled {count} executions in {filled:.2?} ({:.0} executions/s)",
            count as f64 / filled.as_secs_f64()
        );
    }
    let client = serve(store).await;
    let now = loom_console::now_ms().expect("a clock");
    let page_alone = ListFilter {
        without_counts: true,
        ..ListFilter::default()
    };
    time_query(&client, "newest 50, page alone", &page_alone, runs).await;
    time_query(
        &client,
        "newest 50, with counts",
        &ListFilter::default(),
        runs,
    )
    .await;
    let failed = ListFilter {
        status: Some(ExecutionStatus::Failed),
        started_from_ms: Some(now.saturating_sub(HOUR_MS)),
        ..page_alone.clone()
    };
    time_query(&client, "failed, started in the last hour", &failed, runs).await;
    let failed_page_2 = {
        let first = client.executions(&failed).await.expect("the listing");
        ListFilter {
            before: first.next_before,
            ..failed.clone()
        }
    };
    time_query(
        &client,
        "failed, last hour, second page",
        &failed_page_2,
        runs,
    )
    .await;
    let flow = ListFilter {
        flow: Some("refund".into()),
        ..page_alone.clone()
    };
    time_query(&client, "newest 50 of one flow", &flow, runs).await;
    for _ in 0..5 {
        client.counts().await.expect("the counts");
    }
    let mut took = Vec::new();
    for _ in 0..runs.min(100) {
        let began = Instant::now();
        client.counts().await.expect("the counts");
        took.push(began.elapsed());
    }
    took.sort();
    println!(
        "{:<34} p50 {:>8.2?}  p99 {:>8.2?}  max {:>8.2?}  ({} runs)",
        "counts per status alone",
        percentile(&took, 0.50),
        percentile(&took, 0.99),
        took[took.len() - 1],
        took.len()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let count = env_usize("LOOM_QUERY_EXECUTIONS", 1_000_000);
    let runs = env_usize("LOOM_QUERY_RUNS", 500);
    match std::env::var("LOOM_QUERY_STORE").as_deref() {
        Ok("postgres") => {
            let url = std::env::var("LOOM_TEST_POSTGRES_URL")
                .expect("LOOM_TEST_POSTGRES_URL names the server");
            let reused = std::env::var("LOOM_QUERY_SCHEMA").ok();
            let schema = reused
                .clone()
                .unwrap_or_else(|| loom_store_postgres::fresh_schema("query_bench"));
            println!("postgres schema {schema}");
            let config = loom_store_postgres::PostgresStoreConfig::new(&url).schema(schema);
            let store = loom_store_postgres::PostgresStore::connect(config)
                .await
                .expect("the store connects");
            bench(store, "postgres", count, runs, reused.is_none()).await;
        }
        _ => {
            let dir = tempfile::tempdir().expect("a temp dir");
            let config = DiskStoreConfig {
                max_batch_events: 100_000,
                ..DiskStoreConfig::default()
            };
            let store =
                DiskStore::open_with(dir.path().join("loom.redb"), config).expect("the store");
            bench(store, "disk", count, runs, true).await;
        }
    }
}
