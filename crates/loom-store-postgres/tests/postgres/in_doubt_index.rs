//! The index of executions with a step in doubt (`StatusFilter::StepsInDoubt`) on a schema
//! migrated from before it: the migration files those in doubt and the cancelled ones that
//! ended with a step in doubt, from their logs.

use loom_kernel::conformance::{completed, id, in_doubt, started, step_started};
use loom_kernel::{Event, EventStore, ExecutionCancelled, StatusFilter};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig, fresh_schema, server_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_the_in_doubt_index_gets_it_filled() {
    let Some(url) = server_url("a_schema_from_before_the_in_doubt_index_gets_it_filled") else {
        return;
    };
    let schema = fresh_schema("in_doubt_backfill");
    let config = PostgresStoreConfig::new(&url).schema(schema.clone());
    let store = PostgresStore::connect(config.clone())
        .await
        .expect("connect");
    let cancelled = || Event::ExecutionCancelled(ExecutionCancelled { reason: None });
    let logs = [
        ("completed", vec![started("f"), completed()]),
        (
            "in-doubt",
            vec![started("f"), step_started("s"), in_doubt("s")],
        ),
        (
            "cancelled-in-doubt",
            vec![started("f"), step_started("s"), in_doubt("s"), cancelled()],
        ),
        ("cancelled", vec![started("f"), cancelled()]),
    ];
    for (name, events) in &logs {
        store.append(&id(name), 0, events).await.expect("append");
    }
    let names = |page: loom_kernel::kit::ExecutionPage| -> Vec<String> {
        page.executions.iter().map(|e| e.id.to_string()).collect()
    };
    let expected = ["cancelled-in-doubt", "in-doubt"];
    let listed = store
        .list_by_status(StatusFilter::StepsInDoubt, None, 10)
        .await
        .expect("list");
    assert_eq!(names(listed), expected);
    drop(store);

    // The schema as the build before the index left it (version 4).
    loom_store_postgres::run_in_schema(
        &url,
        &schema,
        "ALTER TABLE loom_executions DROP COLUMN steps_in_doubt;
         DELETE FROM loom_migrations WHERE version > 4;",
    )
    .await;

    let store = PostgresStore::connect(config).await.expect("migrate");
    let listed = store
        .list_by_status(StatusFilter::StepsInDoubt, None, 10)
        .await
        .expect("list");
    assert_eq!(names(listed), expected, "filled by the migration");
}
