//! The plans the writer's connections make ([`super::WRITER_PLANS`]): planned once, on a
//! statement's first run, which on a fresh schema is over empty tables, and kept. Each write
//! statement must still reach the rows it writes by an index: a sequential scan in such a plan
//! reads the whole table on every commit until autovacuum's first `ANALYZE` replaces it.

use tokio_postgres::{NoTls, SimpleQueryMessage};

use super::WRITER_PLANS;
use super::full_path::{INSERT_EVENTS, LOCK_ROWS, NOTIFY, PLACEHOLDERS, UPDATE_ROWS};
use crate::fast;
use crate::testing::{drop_schema, fresh_schema, server_url};
use crate::wake::WAKE_STATEMENT;
use crate::{PostgresStore, PostgresStoreConfig};

/// The plan `statement` gets on a writer's connection, as `EXPLAIN` prints it: prepared with
/// the parameter types the server infers, run with every parameter NULL (a generic plan does
/// not look at them).
async fn writer_plan(client: &tokio_postgres::Client, name: &str, statement: &str) -> String {
    let prepared = client
        .prepare(statement)
        .await
        .expect("the statement prepares");
    let types: Vec<&str> = prepared.params().iter().map(|t| t.name()).collect();
    let nulls = vec!["NULL"; types.len()].join(", ");
    client
        .batch_execute(&format!(
            "PREPARE {name}({}) AS {statement}",
            types.join(", ")
        ))
        .await
        .expect("PREPARE");
    let explained = client
        .simple_query(&format!("EXPLAIN EXECUTE {name}({nulls})"))
        .await
        .expect("EXPLAIN");
    explained
        .iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn every_write_reaches_its_rows_by_an_index_when_planned_over_empty_tables() {
    let Some(url) = server_url("writer::plans::every_write_reaches_its_rows_by_an_index") else {
        return;
    };
    let schema = fresh_schema("plans");
    // The store's own migration makes the tables; they stay empty.
    PostgresStore::connect(PostgresStoreConfig::new(&url).schema(&schema))
        .await
        .expect("a store on a fresh schema");
    let mut config: tokio_postgres::Config = url.parse().expect("the test server's URL");
    config.options(format!("-c search_path={schema} {WRITER_PLANS}"));
    let (client, connection) = config.connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    let statements = [
        ("placeholders", PLACEHOLDERS),
        ("lock_rows", LOCK_ROWS),
        ("insert_events", INSERT_EVENTS),
        ("update_rows", UPDATE_ROWS),
        ("notify", NOTIFY),
        ("one_statement", fast::STATEMENT),
        ("wake", WAKE_STATEMENT),
    ];
    let mut scans = Vec::new();
    for (name, statement) in statements {
        let plan = writer_plan(&client, name, statement).await;
        for table in ["loom_executions", "loom_events", "loom_wakeups"] {
            if plan.contains(&format!("Seq Scan on {table}")) {
                scans.push(format!("{name} scans {table}:\n{plan}"));
            }
        }
    }
    drop_schema(&url, &schema).await;
    assert!(scans.is_empty(), "{}", scans.join("\n\n"));
}
