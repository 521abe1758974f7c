//! What the PostgreSQL store's tests share: the command that runs one test of this binary as a
//! child process (the worker processes).
#![allow(dead_code)]

#[path = "../../../loom-kernel/tests/support/child.rs"]
pub mod child;
pub mod cluster;

use std::future::Future;
use std::time::{Duration, Instant};

use loom_kernel::{EventStoreExt, ExecutionId, ExecutionStatus, Runtime, RuntimeBuilder};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig};

/// A worker on `schema` named `name`, with a short lease (500 ms) so that another worker takes
/// over soon after it dies: a runtime composed by `compose` on its store.
pub async fn worker(
    url: &str,
    schema: &str,
    name: &str,
    compose: impl FnOnce(RuntimeBuilder<PostgresStore>) -> RuntimeBuilder<PostgresStore>,
) -> Runtime<PostgresStore> {
    let store = PostgresStore::connect(
        PostgresStoreConfig::new(url)
            .schema(schema)
            .worker_id(name)
            .lease(Duration::from_millis(500)),
    )
    .await
    .expect("connect");
    compose(Runtime::builder(store)).build().expect("runtime")
}

/// Runs `work` on a worker of its own (a one-thread tokio runtime), then makes that worker die:
/// its runtime goes away with every task it had, its timer task included, with no shutdown.
pub fn on_a_worker_that_dies<F: Future<Output = ()>>(work: impl FnOnce() -> F) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    tokio.block_on(work());
    tokio.shutdown_background();
}

/// Until `execution` has `status` in the store (bounded, so that a lost end fails the test).
pub async fn until_status(
    runtime: &Runtime<PostgresStore>,
    execution: &ExecutionId,
    status: ExecutionStatus,
) {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let state = runtime.store().fold(execution).await.expect("fold");
        if state.status() == status {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "{execution} never reached {status:?}: it is {:?}",
            state.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The URL of the server's second database, `loom_shard_1`, created once.
pub async fn second_database(url: &str) -> String {
    static CREATED: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    CREATED
        .get_or_init(|| async {
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
                .expect("look for the database")
                .get(0);
            if !exists {
                // Another test binary may create it at the same moment: either one wins.
                if let Err(error) = client.batch_execute("CREATE DATABASE loom_shard_1").await {
                    let raced =
                        error.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE);
                    assert!(raced, "cannot create the second database: {error}");
                }
            }
            drop(client);
            let _ = connection.await;
            let (base, _) = url.rsplit_once('/').expect("a URL with a database");
            format!("{base}/loom_shard_1")
        })
        .await
        .clone()
}

/// A fresh replicated pair (a primary and a standby, synchronous or not) for `test`, or `None`
/// after a loud notice that `test` is skipped when PostgreSQL's server programs are not
/// installed (a panic instead when `LOOM_REQUIRE_POSTGRES` is set, as in CI).
pub fn replicated_pair(test: &str, synchronous: bool) -> Option<cluster::Pair> {
    if !cluster::installed() {
        if std::env::var_os(loom_store_postgres::REQUIRE_VAR).is_some() {
            panic!(
                "{test}: LOOM_REQUIRE_POSTGRES is set but PostgreSQL's server programs are missing"
            );
        }
        eprintln!(
            "\n*** SKIPPED {test}: PostgreSQL's server programs (initdb, pg_ctl) are not installed.\n"
        );
        loom_store_postgres::record_skipped_test("postgresql", test);
        return None;
    }
    match cluster::Pair::start(synchronous) {
        Ok(pair) => Some(pair),
        Err(error) => panic!("{test}: cannot start a replicated pair: {error}"),
    }
}
