//! A lease means what it says: a worker paused in the middle of a transaction does not keep
//! the execution's row from a take-over (the server ends its session), and an append whose
//! lease ran out before its write does not commit.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::{AppendError, EventStore, EventStoreExt, ExecutionId};
use loom_store_postgres::{PostgresStore, fresh_schema, raw_client, server_url};
use serde_json::json;

use crate::many_workers::worker;

const BOUND: Duration = Duration::from_secs(30);

/// Appends `tag` at `seq` until the store may (bounded, each try too: a row lock that is never
/// released fails the test instead of hanging it).
async fn append_once_free(store: &PostgresStore, e: &ExecutionId, seq: u64, tag: &str) -> u64 {
    let give_up = Instant::now() + BOUND;
    loop {
        let tried = tokio::time::timeout(BOUND, store.append(e, seq, &[tagged(json!(tag))]))
            .await
            .expect("an append waited past the bound: a row lock was never released");
        match tried {
            Ok(head) => return head,
            // Refused while the other lease lives; or the wait for its row ran past this
            // worker's own statement timeout.
            Err(AppendError::Conflict { .. } | AppendError::Storage { .. }) => {
                assert!(Instant::now() < give_up, "the execution never came free");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(other) => panic!("unexpected {other}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_paused_in_a_transaction_does_not_block_a_take_over() {
    let Some(url) = server_url("paused_transaction") else {
        return;
    };
    let schema = fresh_schema("paused_txn");
    let lease = Duration::from_millis(600);
    let a = worker(&url, &schema, "worker-a", lease).await;
    let b = worker(&url, &schema, "worker-b", lease).await;
    let e = id("locked");
    a.append(&e, 0, &[started("f")]).await.expect("a starts");
    // A's process stops while its next append holds the execution's row locked.
    a.faults().pause_lease_renewal.store(true, Ordering::SeqCst);
    a.faults().stall_after_lock.store(1, Ordering::SeqCst);
    let stalled = {
        let (a, e) = (a.clone(), e.clone());
        tokio::spawn(async move { a.append(&e, 1, &[tagged(json!("a, late"))]).await })
    };
    tokio::time::timeout(BOUND, a.faults().stalled.notified())
        .await
        .expect("a's append locked the row");

    // B takes the execution over while A is still stopped in its transaction.
    assert_eq!(append_once_free(&b, &e, 1, "b").await, 2);
    assert!(b.lease_token(&e).is_some());

    // A wakes: its transaction is gone, nothing of it is stored.
    a.faults().resume_stalled.notify_one();
    let late = stalled.await.expect("task");
    assert!(
        late.is_err(),
        "a's append committed after a take-over: {late:?}"
    );
    let log = b.read_all(&e).await.expect("read");
    assert_eq!(log.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_whose_lease_ran_out_before_its_write_does_not_commit() {
    let Some(url) = server_url("ran_out_mid_commit") else {
        return;
    };
    let schema = fresh_schema("ran_out_mid");
    // Long enough that the pause below is far shorter than a transaction may sit idle.
    let a = worker(&url, &schema, "worker-a", Duration::from_secs(6)).await;
    let e = id("short");
    a.append(&e, 0, &[started("f")]).await.expect("a starts");
    a.faults().pause_lease_renewal.store(true, Ordering::SeqCst);
    let client = raw_client(&url).await;
    let table = format!("{schema}.loom_executions");
    // The lease has a moment left when A locks the row, and runs out while A is stopped.
    client
        .execute(
            &format!(
                "UPDATE {table} SET lease_expires_at = clock_timestamp() + interval '300 ms' \
                 WHERE execution_id = $1"
            ),
            &[&e.as_str()],
        )
        .await
        .expect("shorten the lease");
    a.faults().stall_after_lock.store(1, Ordering::SeqCst);
    let stalled = {
        let (a, e) = (a.clone(), e.clone());
        tokio::spawn(async move { a.append(&e, 1, &[tagged(json!("after its lease"))]).await })
    };
    tokio::time::timeout(BOUND, a.faults().stalled.notified())
        .await
        .expect("a's append locked the row");
    let give_up = Instant::now() + BOUND;
    loop {
        let ran_out: bool = client
            .query_one(
                &format!(
                    "SELECT lease_expires_at <= clock_timestamp() FROM {table} \
                     WHERE execution_id = $1"
                ),
                &[&e.as_str()],
            )
            .await
            .expect("read the lease")
            .get(0);
        if ran_out {
            break;
        }
        assert!(Instant::now() < give_up, "the lease never ran out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.faults().resume_stalled.notify_one();
    let late = stalled.await.expect("task");
    assert!(
        matches!(late, Err(AppendError::Conflict { .. })),
        "an append committed after its lease ran out: {late:?}"
    );
    assert_eq!(a.head(&e).await.expect("head"), 1);
    assert_eq!(
        a.lease_token(&e),
        None,
        "the lease that ran out is forgotten"
    );
}
