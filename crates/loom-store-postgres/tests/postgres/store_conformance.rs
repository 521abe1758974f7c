//! The kernel's store conformance suite against a real PostgreSQL server.

use loom_kernel::conformance::{self, StoreHarness};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig};
use loom_store_postgres::{fresh_schema, server_url};

struct Postgres {
    url: String,
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(future))
}

impl StoreHarness for Postgres {
    type Store = PostgresStore;

    fn fresh(&mut self) -> PostgresStore {
        let config = PostgresStoreConfig::new(&self.url).schema(fresh_schema("conformance"));
        block_on(PostgresStore::connect(config)).expect("connect")
    }

    fn reopen(&mut self, store: PostgresStore) -> PostgresStore {
        let config = store.config().clone();
        drop(store);
        block_on(PostgresStore::connect(config)).expect("reconnect")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_store_passes_the_conformance_suite() {
    let Some(url) = server_url("postgres_store_passes_the_conformance_suite") else {
        return;
    };
    conformance::run_all(&mut Postgres { url }).await;
}
