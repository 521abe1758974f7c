//! The plans the writer's connections make ([`super::WRITER_PLANS`]): planned once, on a
//! statement's first run, which on a fresh schema is over empty tables, and kept. Each write
//! statement must still reach the rows it writes by an index, and no plan may be compiled: a
//! sequential scan in such a plan reads the whole table on every commit until autovacuum's first
//! `ANALYZE` replaces it, and JIT compiles on every run.

use tokio_postgres::{NoTls, SimpleQueryMessage};

use super::full_path::{INSERT_EVENTS, INSERT_ROWS, LOCK_ROWS, NOTIFY, PLACEHOLDERS, UPDATE_ROWS};
use crate::fast;
use crate::store::{Limits, writes_config};
use crate::testing::{drop_schema, fresh_schema, server_url};
use crate::wake::WAKE_STATEMENT;
use crate::{PostgresStore, PostgresStoreConfig};

/// The plan `statement` gets on a writer's connection, as `EXPLAIN (FORMAT JSON)` gives it:
/// prepared with the parameter types the server infers, run with every parameter NULL (a generic
/// plan does not look at them).
async fn writer_plan(
    client: &tokio_postgres::Client,
    name: &str,
    statement: &str,
) -> serde_json::Value {
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
        .simple_query(&format!("EXPLAIN (FORMAT JSON) EXECUTE {name}({nulls})"))
        .await
        .expect("EXPLAIN");
    let json = explained
        .iter()
        .find_map(|message| match message {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .expect("EXPLAIN's row");
    serde_json::from_str(&json).expect("EXPLAIN's JSON")
}

/// What in `plan` reads more of a table than the rows it names: a sequential scan, or an index
/// scanned without a condition on it (the whole index); and a plan JIT would compile.
fn whole_table_reads(plan: &serde_json::Value, found: &mut Vec<String>) {
    match plan {
        serde_json::Value::Array(items) => {
            for item in items {
                whole_table_reads(item, found);
            }
        }
        serde_json::Value::Object(node) => {
            let kind = node.get("Node Type").and_then(|kind| kind.as_str());
            let relation = node.get("Relation Name").and_then(|name| name.as_str());
            match kind {
                Some("Seq Scan") => found.push(format!("a sequential scan of {relation:?}")),
                Some("Index Scan" | "Index Only Scan" | "Bitmap Index Scan")
                    if !node.contains_key("Index Cond") =>
                {
                    found.push(format!("a whole index of {relation:?}"));
                }
                _ => {}
            }
            if node.contains_key("JIT") {
                found.push("JIT".to_owned());
            }
            for value in node.values() {
                whole_table_reads(value, found);
            }
        }
        _ => {}
    }
}

/// What in the write statements' plans reads a whole table or index, or compiles, on a
/// connection set up as `PostgresStore::connect` sets up the writer's, from `url` (with any
/// `options` it carries), over a fresh schema's empty tables.
async fn bad_plans(url: &str) -> Vec<String> {
    let schema = fresh_schema("plans");
    // The store's own migration makes the tables; they stay empty.
    PostgresStore::connect(PostgresStoreConfig::new(url).schema(&schema))
        .await
        .expect("a store on a fresh schema");
    let given: tokio_postgres::Config = url.parse().expect("the test server's URL");
    let limits = Limits::of(PostgresStoreConfig::new(url).lease);
    let (client, connection) = writes_config(&given, &schema, &limits)
        .connect(NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let statements = [
        ("placeholders", PLACEHOLDERS),
        ("insert_rows", INSERT_ROWS),
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
        let mut found = Vec::new();
        whole_table_reads(&plan, &mut found);
        if !found.is_empty() {
            scans.push(format!("{name}: {}\n{plan:#}", found.join(", ")));
        }
    }
    drop_schema(url, &schema).await;
    scans
}

#[tokio::test]
async fn every_write_reaches_its_rows_by_an_index_when_planned_over_empty_tables() {
    let Some(url) = server_url("writer::plans::every_write_reaches_its_rows_by_an_index") else {
        return;
    };
    let scans = bad_plans(&url).await;
    assert!(scans.is_empty(), "{}", scans.join("\n\n"));
}

#[tokio::test]
async fn a_url_that_turns_table_scans_and_jit_back_on_does_not_reach_the_writers_plans() {
    let Some(url) = server_url("writer::plans::a_url_that_turns_table_scans_and_jit_back_on")
    else {
        return;
    };
    let separator = if url.contains('?') { '&' } else { '?' };
    let careless = format!("{url}{separator}options=-c%20enable_seqscan%3Don%20-c%20jit%3Don");
    let scans = bad_plans(&careless).await;
    assert!(scans.is_empty(), "{}", scans.join("\n\n"));
}
