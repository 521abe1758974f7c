//! Statements that lock several rows of `loom_executions` take them in one order (execution
//! id), so that none waits on another in a cycle. A lease renewal used to lock its rows in the
//! order its scan met them: against a writer's transaction locking the same rows in id order,
//! the two deadlocked, and the server broke it only after `deadlock_timeout` (a second's stall
//! of every commit queued behind, REGRESSIONS 16).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use loom_kernel::conformance::{id, started};
use loom_kernel::{EventStore, ExecutionId};
use loom_store_postgres::{fresh_schema, server_url};

use crate::many_workers::worker;

const BOUND: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renewal_never_deadlocks_with_a_transaction_locking_rows_in_id_order() {
    let Some(url) = server_url("renewal_lock_order") else {
        return;
    };
    let schema = fresh_schema("renewal_order");
    let w = worker(&url, &schema, "worker-r", Duration::from_secs(30)).await;
    w.faults().pause_lease_renewal.store(true, Ordering::SeqCst);
    // Started in this order, the later id's row comes first in the table: a scan meets it
    // first, where the id order puts it last.
    let (later, earlier) = (id("z-later-id"), id("a-earlier-id"));
    for e in [&later, &earlier] {
        w.append(e, 0, &[started("f")])
            .await
            .expect("start, leased");
    }
    let table = format!("{schema}.loom_executions");
    let (writer, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let (watcher, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let physical: Vec<String> = watcher
        .query(
            &format!("SELECT execution_id FROM {table} WHERE lease_owner = $1 ORDER BY ctid"),
            &[&"worker-r"],
        )
        .await
        .expect("rows in table order")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        physical,
        [later.as_str(), earlier.as_str()],
        "the test needs the later id first in the table"
    );

    // A writer's transaction, as the full path's `LOCK_ROWS` takes them: the earlier id first.
    let lock = format!("SELECT 1 FROM {table} WHERE execution_id = $1 FOR UPDATE");
    writer.batch_execute("BEGIN").await.expect("begin");
    let writer_pid: i32 = writer
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    lock_row(&writer, &lock, &earlier).await;

    // The renewal starts while that row is held, and waits for it.
    let renewal = {
        let w = w.clone();
        tokio::spawn(async move { w.renew_leases().await })
    };
    let give_up = Instant::now() + BOUND;
    loop {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                &[&writer_pid],
            )
            .await
            .expect("who waits")
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(Instant::now() < give_up, "the renewal never waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The writer's transaction goes on to the later id. Had the renewal locked it first (in
    // table order), each would now wait for the other.
    lock_row(&writer, &lock, &later).await;
    writer.batch_execute("COMMIT").await.expect("commit");
    let renewed = tokio::time::timeout(BOUND, renewal)
        .await
        .expect("the renewal ended")
        .expect("task");
    assert_eq!(
        renewed.expect("the renewal was not cancelled as a deadlock's victim"),
        2
    );
}

async fn lock_row(client: &tokio_postgres::Client, lock: &str, e: &ExecutionId) {
    tokio::time::timeout(BOUND, client.query_one(lock, &[&e.as_str()]))
        .await
        .expect("the row lock was never granted")
        .expect("the row was locked without a deadlock");
}
