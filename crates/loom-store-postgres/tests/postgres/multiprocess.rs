//! Three worker processes on one database drive 300 executions, each an idempotent step, a
//! durable timer, a non-idempotent step and another idempotent step. One worker is SIGKILLed
//! midway; another has its database connections cut (`pg_terminate_backend`). Every execution
//! must end completed (its timer fired once), or parked in doubt where K9 says (its
//! non-idempotent step was started by a worker that then lost it); no non-idempotent effect may
//! run twice (every run inserts a row into `side_effects`); and every log replays.
//!
//! The workers are this test binary run again with `LOOM_PG_WORKER` set: it then runs
//! `worker_process_entry`, which does nothing in an ordinary test run.

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use loom_kernel::EventStore;
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FnEffect, Runtime, StartError, StartOptions,
    flow_fn,
};
use loom_kernel::{Event, EventStoreExt, ExecutionId, ExecutionStatus};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig};
use loom_store_postgres::{fresh_schema, raw_client, server_url};
use serde_json::{Value, json};

use crate::support::child::{child_runtime, child_test};

const WORKER_ENV: &str = "LOOM_PG_WORKER";
const EXECUTIONS: usize = 300;
const WORKERS: usize = 3;

fn execution(n: usize) -> ExecutionId {
    ExecutionId::new(format!("job-{n:03}")).expect("id")
}

async fn job(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let fetched = ctx.execute("fetch", &input).await?;
    // A durable timer between the steps: a worker that dies or is cut off while it waits leaves
    // the deadline in the log, and whichever worker recovers the execution fires it.
    ctx.sleep(Duration::from_millis(30)).await?;
    let charged = ctx.execute("charge", &input).await?;
    let notified = ctx.execute("notify", &input).await?;
    Ok(json!([
        fetched.to_value(),
        charged.to_value(),
        notified.to_value()
    ]))
}

/// An effect that records that it ran (`effect`, idempotency key, worker) and then waits a
/// little, so that kills and cuts land while steps are in flight.
fn recording_effect(
    idempotent: bool,
    effect: &'static str,
    worker: String,
    client: Arc<tokio_postgres::Client>,
) -> FnEffect<impl Fn(EffectCall) -> futures::future::BoxFuture<'static, EffectOutcome> + Send + Sync>
{
    FnEffect::new(idempotent, move |call: EffectCall| {
        let (client, worker) = (Arc::clone(&client), worker.clone());
        Box::pin(async move {
            let key = call.idempotency_key();
            tokio::time::sleep(Duration::from_millis(40)).await;
            match client
                .execute(
                    "INSERT INTO side_effects (effect, key, worker) VALUES ($1, $2, $3)",
                    &[&effect, &key, &worker],
                )
                .await
            {
                Ok(_) => EffectOutcome::ok(json!({ "effect": effect, "key": key }).into()),
                Err(err) => EffectOutcome::in_doubt(loom_kernel::ErrorInfo::new(
                    "test.side_effect",
                    err.to_string(),
                )),
            }
        }) as futures::future::BoxFuture<'static, EffectOutcome>
    })
}

#[test]
fn worker_process_entry() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, '|');
    let (Some(worker), Some(schema), Some(url)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("bad worker spec {spec}");
    };
    let (worker, schema, url) = (worker.to_owned(), schema.to_owned(), url.to_owned());
    let runtime = child_runtime();
    runtime.block_on(async move {
        let index: usize = worker
            .trim_start_matches('w')
            .parse()
            .expect("worker index");
        // The store's connections are named for the worker, so the parent can cut them.
        let store_url = format!("{url}?application_name=loom-{worker}");
        let store = PostgresStore::connect(
            PostgresStoreConfig::new(store_url)
                .schema(&schema)
                .worker_id(&worker)
                .lease(Duration::from_millis(900)),
        )
        .await
        .expect("connect");
        let effects_url =
            format!("{url}?application_name=effects-{worker}&options=-c%20search_path%3D{schema}");
        let client = Arc::new(raw_client(&effects_url).await);
        let rt = Runtime::builder(store)
            .flow(flow_fn("job", 1, job))
            .effect(
                "fetch",
                recording_effect(true, "fetch", worker.clone(), Arc::clone(&client)),
            )
            .effect(
                "charge",
                recording_effect(false, "charge", worker.clone(), Arc::clone(&client)),
            )
            .effect(
                "notify",
                recording_effect(true, "notify", worker.clone(), Arc::clone(&client)),
            )
            .build()
            .expect("runtime");
        let rt = Arc::new(rt);
        // Pick up executions whose worker is gone (or whose driver stopped) now and then.
        let recovering = {
            let rt = Arc::clone(&rt);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let _ = rt.recover().await;
                }
            })
        };
        // Every worker tries to start every execution, from its own offset: whichever comes
        // first starts it, the others are told it exists.
        for i in 0..EXECUTIONS {
            let n = (i + index * EXECUTIONS / WORKERS) % EXECUTIONS;
            match rt
                .start(
                    "job",
                    &json!({ "n": n }),
                    StartOptions::new(execution(n))
                        .grant("fetch")
                        .grant("charge")
                        .grant("notify"),
                )
                .await
            {
                Ok(_) | Err(StartError::AlreadyExists(_)) => {}
                Err(_) => {} // a cut connection: another worker, or recovery, starts it
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        // Runs until the parent kills it.
        let _ = recovering.await;
    });
}

/// Kills the worker processes however the test ends.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn_worker(index: usize, schema: &str, url: &str) -> Child {
    child_test(concat!(module_path!(), "::worker_process_entry"))
        .env(WORKER_ENV, format!("w{index}|{schema}|{url}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn worker")
}

async fn statuses(client: &tokio_postgres::Client) -> BTreeMap<i16, i64> {
    client
        .query(
            "SELECT status, count(*) FROM loom_executions WHERE head > 0 GROUP BY status",
            &[],
        )
        .await
        .expect("statuses")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// Completed (4) plus in doubt (3): executions that need nothing more from a worker.
fn settled(statuses: &BTreeMap<i16, i64>) -> i64 {
    statuses.get(&4).copied().unwrap_or(0) + statuses.get(&3).copied().unwrap_or(0)
}

/// Waits until `target` executions are settled; fails past `deadline`.
async fn wait_until(admin: &tokio_postgres::Client, target: i64, deadline: Instant) {
    loop {
        let now = statuses(admin).await;
        if settled(&now) >= target {
            return;
        }
        assert!(Instant::now() < deadline, "stuck: statuses {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_survive_a_kill_and_a_cut_connection_without_running_an_effect_twice() {
    let Some(url) = server_url("multiprocess") else {
        return;
    };
    let schema = fresh_schema("multiprocess");
    let store = PostgresStore::connect(PostgresStoreConfig::new(&url).schema(&schema))
        .await
        .expect("connect");
    let admin_url = format!("{url}?options=-c%20search_path%3D{schema}");
    let admin = raw_client(&admin_url).await;
    admin
        .batch_execute("CREATE TABLE side_effects (effect text, key text, worker text)")
        .await
        .expect("side effects table");

    let mut workers = Workers(
        (0..WORKERS)
            .map(|i| spawn_worker(i, &schema, &url))
            .collect(),
    );
    let deadline = Instant::now() + Duration::from_secs(45);
    // SIGKILL worker 1 midway.
    wait_until(&admin, 40, deadline).await;
    let killed = workers.0[1].kill();
    killed.expect("kill worker 1");
    let _ = workers.0[1].wait();
    // Cut every connection worker 2's store has.
    wait_until(&admin, 100, deadline).await;
    let cut: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'loom-w2') AS t",
            &[],
        )
        .await
        .expect("cut")
        .get(0);
    assert!(cut > 0, "worker 2 had connections to cut");
    wait_until(&admin, EXECUTIONS as i64, deadline).await;
    drop(workers);

    // Every execution ended completed or parked in doubt on its non-idempotent step.
    let charges: BTreeMap<String, i64> = admin
        .query(
            "SELECT key, count(*) FROM side_effects WHERE effect = 'charge' GROUP BY key",
            &[],
        )
        .await
        .expect("charges")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let (mut completed, mut in_doubt) = (0, 0);
    for n in 0..EXECUTIONS {
        let e = execution(n);
        let state = store.fold(&e).await.expect("fold");
        let key = format!("{e}:charge#1");
        let ran = charges.get(&key).copied().unwrap_or(0);
        assert!(ran <= 1, "{key} ran {ran} times");
        match state.status() {
            ExecutionStatus::Completed => {
                completed += 1;
                assert_eq!(ran, 1, "{e} completed, so its charge ran once");
                let log = store.read_all(&e).await.expect("read");
                let fired = log
                    .iter()
                    .filter(|x| matches!(x.event, Event::ExecutionResumed(_)))
                    .count();
                assert_eq!(fired, 1, "{e}: its timer fired once");
            }
            ExecutionStatus::InDoubt => {
                in_doubt += 1;
                let log = store.read_all(&e).await.expect("read");
                let doubted: Vec<_> = log
                    .iter()
                    .filter_map(|x| match &x.event {
                        Event::EffectInDoubt(d) => Some(d.effect.as_str()),
                        _ => None,
                    })
                    .collect();
                assert_eq!(
                    doubted,
                    ["charge"],
                    "{e}: only the non-idempotent step parks"
                );
            }
            other => panic!("{e} ended {other}"),
        }
    }
    let by_worker: BTreeMap<String, i64> = admin
        .query(
            "SELECT worker, count(*) FROM side_effects GROUP BY worker ORDER BY worker",
            &[],
        )
        .await
        .expect("by worker")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let taken_over: i64 = admin
        .query_one(
            "SELECT count(*) FROM loom_executions WHERE lease_token > 1",
            &[],
        )
        .await
        .expect("take-overs")
        .get(0);
    eprintln!(
        "multiprocess: {completed} completed, {in_doubt} in doubt, {taken_over} leases taken \
         over at least once, effects run per worker {by_worker:?}"
    );
    assert_eq!(completed + in_doubt, EXECUTIONS);
    assert!(completed > 0);
    // replay-check over the store: every log replays against the flow code.
    let flows = loom_kernel::FlowSet::new().with(flow_fn("job", 1, job));
    let checker = loom_replay_check::Checker::new(&flows).expect("checker");
    let ids: Vec<_> = (0..EXECUTIONS).map(execution).collect();
    for (e, log) in ids
        .iter()
        .zip(store.read_logs(&ids).await.expect("read logs"))
    {
        let outcome = checker.check(log);
        assert!(
            matches!(outcome.finding, loom_replay_check::Finding::Deterministic),
            "{e}: {:?}",
            outcome.finding
        );
    }
}
