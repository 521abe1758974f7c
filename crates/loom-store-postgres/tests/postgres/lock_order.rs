//! Statements that lock several rows of `loom_executions` take them in one order (execution
//! id), so that none waits on another in a cycle, and the lease renewal waits for none. The
//! renewal used to lock its rows in the order its scan met them: against a writer's
//! transaction locking the same rows in id order, the two deadlocked, and the server broke it
//! only after `deadlock_timeout` (a second's stall of every commit queued behind,
//! REGRESSIONS 16); locking them in id order instead, it waited for each row a write held
//! while holding the others, and under overload the writer's next transaction waited past its
//! statement timeout.

use std::sync::atomic::Ordering;
use std::time::Duration;

use loom_kernel::conformance::{id, started};
use loom_kernel::{EventStore, ExecutionId};
use loom_store_postgres::{fresh_schema, raw_client, server_url};

use crate::many_workers::worker;

const BOUND: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renewal_neither_deadlocks_with_nor_waits_for_a_transaction_holding_rows() {
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
    let (writer, watcher) = (raw_client(&url).await, raw_client(&url).await);
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
    lock_row(&writer, &lock, &earlier).await;

    // The renewal runs while that row is held: it renews the other lease, skips the held row
    // without waiting for it, and still counts that lease as this worker's.
    let renewed = tokio::time::timeout(Duration::from_secs(10), w.renew_leases())
        .await
        .expect("the renewal waited for the row a write holds");
    assert_eq!(renewed.expect("renewed"), 2);
    assert!(w.lease_token(&earlier).is_some() && w.lease_token(&later).is_some());
    // The later id was started first, so its lease ran out first until the renewal moved it
    // past the held one's.
    let renewed_past_the_held: bool = watcher
        .query_one(
            &format!(
                "SELECT (SELECT lease_expires_at FROM {table} WHERE execution_id = $1) \
                      > (SELECT lease_expires_at FROM {table} WHERE execution_id = $2)"
            ),
            &[&later.as_str(), &earlier.as_str()],
        )
        .await
        .expect("expiries")
        .get(0);
    assert!(renewed_past_the_held, "the free row's lease was renewed");

    // The writer's transaction goes on to the later id: nothing holds it.
    lock_row(&writer, &lock, &later).await;
    writer.batch_execute("COMMIT").await.expect("commit");
}

async fn lock_row(client: &tokio_postgres::Client, lock: &str, e: &ExecutionId) {
    tokio::time::timeout(BOUND, client.query_one(lock, &[&e.as_str()]))
        .await
        .expect("the row lock was never granted")
        .expect("the row was locked without a deadlock");
}
