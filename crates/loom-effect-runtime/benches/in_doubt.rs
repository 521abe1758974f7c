//! What the operator's listing of steps in doubt (`steps_in_doubt`) costs beside many ended
//! executions: it reads the store's index of executions with a step in doubt
//! (`StatusFilter::StepsInDoubt`) and folds only those, so the other ended executions should
//! cost nothing.
//!
//! It fills a store with `LOOM_IN_DOUBT_ENDED` ended executions (default 1,000,000), of which
//! `LOOM_IN_DOUBT_DOUBTED` (default 1,000) were cancelled with a step in doubt (started, step
//! started, `EFFECT_INDOUBT`, `EXECUTION_CANCELLED`) and the others completed (started, step
//! started and completed, `EXECUTION_COMPLETED`), appended 20,000 at a time so that the writer
//! groups them (as the recover benches do). Then it calls `steps_in_doubt` once to warm up and
//! `LOOM_IN_DOUBT_CALLS` times (default 200), timing each call, and checks that every call
//! lists one step per doubted execution. For where the time goes it also times, as many times,
//! the listing of the index alone, and one `read_logs` of the listed executions.
//!
//! `LOOM_IN_DOUBT_STORE` picks the store: `disk` (the default; a file in a scratch directory)
//! or `postgres` (a fresh schema of the server `LOOM_TEST_POSTGRES_URL` names, or the one
//! `cargo xtask pg-up` started; dropped after). With `LOOM_IN_DOUBT_KEEP=DIR` the disk store is
//! kept in `DIR` (and the PostgreSQL schema kept, under a name made of the counts), and a later
//! run with the same counts measures it again without filling it.
//!
//! `cargo bench -p loom-effect-runtime --bench in_doubt`
//! `LOOM_IN_DOUBT_STORE=postgres cargo bench -p loom-effect-runtime --bench in_doubt`

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use loom_effect_runtime::steps_in_doubt;
use loom_kernel::conformance::{
    completed, fill_logs, id, in_doubt, started, step_completed, step_started,
};
use loom_kernel::{
    DiskStore, DiskStoreConfig, Event, EventStore, EventStoreExt, ExecutionCancelled, ExecutionId,
    StatusFilter,
};
use loom_store_postgres::{
    PostgresStore, PostgresStoreConfig, drop_schema, fresh_schema, server_url,
};

#[path = "../../loom-kernel/benches/support/mod.rs"]
mod support;

use support::{percentile_us, scratch_dir, tokio_runtime};

/// The step each execution ran.
const STEP: &str = "pay-1";

fn count(variable: &str, default: usize) -> usize {
    std::env::var(variable)
        .ok()
        .and_then(|count| count.trim().replace(['_', ','], "").parse().ok())
        .unwrap_or(default)
}

/// The executions the store is filled with.
#[derive(Debug, Clone, Copy)]
struct Fill {
    /// Every ended execution, the doubted ones included.
    ended: usize,
    /// The ones cancelled with a step in doubt.
    doubted: usize,
}

impl Fill {
    fn completed(self) -> usize {
        self.ended - self.doubted
    }

    fn label(self) -> String {
        format!("{}_ended_{}_doubted", self.ended, self.doubted)
    }

    /// Fills `store`; returns how long it took.
    async fn fill<S: EventStore>(self, store: &S) -> Duration {
        let began = Instant::now();
        let done = [
            started("done"),
            step_started(STEP),
            step_completed(STEP),
            completed(),
        ];
        fill_logs(store, "done", self.completed(), &done).await;
        let doubted = [
            started("doubted"),
            step_started(STEP),
            in_doubt(STEP),
            Event::ExecutionCancelled(ExecutionCancelled { reason: None }),
        ];
        fill_logs(store, "doubted", self.doubted, &doubted).await;
        began.elapsed()
    }

    /// Whether `store` already holds this fill (a kept store): the last execution of each kind.
    async fn is_in<S: EventStore>(self, store: &S) -> bool {
        let last = |prefix: &str, count: usize| match count {
            0 => None,
            n => Some(id(&format!("{prefix}-{:08}", n - 1))),
        };
        for execution in [
            last("done", self.completed()),
            last("doubted", self.doubted),
        ]
        .into_iter()
        .flatten()
        {
            if store.head(&execution).await.expect("the store reads") == 0 {
                return false;
            }
        }
        true
    }
}

/// Sorted durations: count, p50, p99 and max, in milliseconds.
fn summary(sorted: &[Duration]) -> String {
    format!(
        "{} calls, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        sorted.len(),
        percentile_us(sorted, 0.50) / 1e3,
        percentile_us(sorted, 0.99) / 1e3,
        sorted.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
    )
}

/// Times `calls` runs of `work` (after one to warm up), sorted.
async fn timed<F, Fut>(calls: usize, mut work: F) -> Vec<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    work().await;
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let began = Instant::now();
        work().await;
        times.push(began.elapsed());
    }
    times.sort();
    times
}

/// Measures the listing on `store` and prints one line per measure.
async fn measure<S: EventStore>(store: &S, fill: Fill, calls: usize, name: &str, about: &str) {
    let label = fill.label();
    let listed = timed(calls, || async {
        let steps = steps_in_doubt(store)
            .await
            .expect("the steps in doubt list");
        assert_eq!(
            steps.len(),
            fill.doubted,
            "one step in doubt per doubted execution"
        );
        assert!(
            steps
                .iter()
                .all(|step| step.cancelled && step.step_id == STEP)
        );
    })
    .await;
    println!(
        "in_doubt/{name}/{label}/steps_in_doubt: {} ({about})",
        summary(&listed)
    );
    // Where the time goes: the index alone, then one read of the listed logs.
    let index = || async {
        let listed: Vec<ExecutionId> = store
            .executions_by_status(StatusFilter::StepsInDoubt)
            .map_ok(|summary| summary.id)
            .try_collect()
            .await
            .expect("the index lists");
        assert_eq!(
            listed.len(),
            fill.doubted,
            "the index lists every doubted execution"
        );
        listed
    };
    let indexed = timed(calls, || async {
        index().await;
    })
    .await;
    println!("in_doubt/{name}/{label}/index_only: {}", summary(&indexed));
    let ids = index().await;
    let read = timed(calls, || async {
        let logs = store.read_logs(&ids).await.expect("the logs read");
        assert!(logs.iter().all(|log| log.len() == 4));
    })
    .await;
    println!(
        "in_doubt/{name}/{label}/read_logs_of_the_listed: {}",
        summary(&read)
    );
}

async fn on_disk(fill: Fill, calls: usize) {
    let dir = scratch_dir();
    let kept = std::env::var_os("LOOM_IN_DOUBT_KEEP").map(std::path::PathBuf::from);
    let path = match &kept {
        Some(keep) => {
            std::fs::create_dir_all(keep).expect("the directory to keep stores in");
            keep.join(format!("in-doubt-{}.redb", fill.label()))
        }
        None => dir.path().join("in-doubt.redb"),
    };
    let config = DiskStoreConfig {
        max_batch_events: 100_000,
        ..DiskStoreConfig::default()
    };
    let store = DiskStore::open_with(&path, config.clone()).expect("the store opens");
    let built = match fill.is_in(&store).await {
        true => None,
        false => Some(fill.fill(&store).await),
    };
    drop(store);
    let size_mb = std::fs::metadata(&path).map_or(0, |m| m.len()) / 1_000_000;
    // Reopened, its scrub off so that it does not share the cores with what is timed.
    let store = DiskStore::open_with(
        &path,
        DiskStoreConfig {
            scrub_after_open: false,
            ..config
        },
    )
    .expect("the store opens again");
    let about = match built {
        Some(built) => format!("filled in {:.1} s, {size_mb} MB", built.as_secs_f64()),
        None => format!("kept store, {size_mb} MB"),
    };
    measure(&store, fill, calls, "disk", &about).await;
}

async fn on_postgres(fill: Fill, calls: usize) {
    let Some(url) = server_url("in_doubt") else {
        eprintln!("in_doubt: no PostgreSQL server (cargo xtask pg-up); nothing measured");
        return;
    };
    let keep = std::env::var_os("LOOM_IN_DOUBT_KEEP").is_some();
    let schema = match keep {
        true => format!("in_doubt_{}", fill.label()),
        false => fresh_schema("in_doubt"),
    };
    let store = PostgresStore::connect(PostgresStoreConfig::new(&url).schema(&schema))
        .await
        .expect("the store connects");
    let about = match fill.is_in(&store).await {
        true => format!("kept schema {schema}"),
        false => format!("filled in {:.1} s", fill.fill(&store).await.as_secs_f64()),
    };
    measure(&store, fill, calls, "postgres", &about).await;
    drop(store);
    if !keep {
        drop_schema(&url, &schema).await;
    }
}

fn main() {
    // `cargo bench` passes `--bench`; this benchmark takes no filter.
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let fill = Fill {
        ended: count("LOOM_IN_DOUBT_ENDED", 1_000_000),
        doubted: count("LOOM_IN_DOUBT_DOUBTED", 1_000),
    };
    assert!(
        fill.doubted <= fill.ended,
        "LOOM_IN_DOUBT_DOUBTED is part of LOOM_IN_DOUBT_ENDED"
    );
    let calls = count("LOOM_IN_DOUBT_CALLS", 200).max(1);
    let store = std::env::var("LOOM_IN_DOUBT_STORE").unwrap_or_else(|_| "disk".into());
    tokio_runtime().block_on(async {
        match store.trim() {
            "disk" | "" => on_disk(fill, calls).await,
            "postgres" => on_postgres(fill, calls).await,
            other => panic!("LOOM_IN_DOUBT_STORE is `disk` or `postgres`, not `{other}`"),
        }
    });
}
