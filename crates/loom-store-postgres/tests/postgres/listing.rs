//! The listing of executions newest first on a schema migrated from before it kept start
//! times: the migration fills them from each log's first event.

use loom_kernel::conformance::{completed, id, started};
use loom_kernel::kit::{ExecutionQuery, StatusCounts, every_listed_execution};
use loom_kernel::{EventStore, ExecutionStatus};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig, fresh_schema, server_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_the_listing_gets_start_times_and_flows_filled() {
    let Some(url) =
        server_url("a_schema_from_before_the_listing_gets_start_times_and_flows_filled")
    else {
        return;
    };
    let schema = fresh_schema("listing_backfill");
    let config = PostgresStoreConfig::new(&url).schema(schema.clone());
    let store = PostgresStore::connect(config.clone())
        .await
        .expect("connect");
    for n in 0..12 {
        let e = id(&format!("e{n:02}"));
        let flow = if n % 2 == 0 { "even" } else { "odd" };
        store.append(&e, 0, &[started(flow)]).await.expect("start");
        if n % 3 == 0 {
            store.append(&e, 1, &[completed()]).await.expect("end");
        }
    }
    drop(store);

    // The schema as the build before the listing left it (version 2): no start time, no flow,
    // and none of the migrations after it.
    loom_store_postgres::run_in_schema(
        &url,
        &schema,
        "DROP TABLE loom_wakeups;
         ALTER TABLE loom_executions DROP COLUMN started_at_ms, DROP COLUMN flow,
             DROP COLUMN steps_in_doubt;
         DELETE FROM loom_migrations WHERE version > 2;",
    )
    .await;

    let store = PostgresStore::connect(config).await.expect("migrate");
    let reference = every_listed_execution(&store).await.expect("reference");
    assert_eq!(reference.len(), 12);
    for status in [None, Some(ExecutionStatus::Completed)] {
        for flow in [None, Some("odd".to_owned())] {
            let query = ExecutionQuery {
                status,
                flow: flow.clone(),
                limit: 3,
                ..ExecutionQuery::default()
            };
            assert_eq!(
                store.query_executions(&query).await.expect("query"),
                query.select(reference.clone()),
                "{query:?}"
            );
        }
    }
    assert_eq!(
        store.count_by_status().await.expect("counts"),
        StatusCounts::of(&reference)
    );
}
