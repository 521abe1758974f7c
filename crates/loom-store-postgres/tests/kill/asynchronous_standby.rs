//! Asynchronous replication as what it is: a failover may lose appends the store acknowledged,
//! and the store says so instead of carrying on. The store reports the primary's standbys as
//! not synchronous ([`loom_store_postgres::Replication`]); an append acknowledged while the
//! standby did not have it is gone after a failover, and the worker that had committed it
//! refuses to append past the hole, naming it. The same with a synchronous standby and
//! `synchronous_commit = off` for the store's sessions (set in the URL): commits do not wait for
//! the standby either.

use std::time::{Duration, Instant};

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::{AppendError, EventStore};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig};
use serde_json::json;

use crate::failover::SharedPair;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_an_asynchronous_standby_loses_acknowledged_appends_and_says_so() {
    let Some(pair) = crate::support::replicated_pair("asynchronous_standby", false) else {
        return;
    };
    let url = pair.url();
    lose_an_acknowledged_append(SharedPair::new(pair), &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronous_commit_off_loses_acknowledged_appends_in_a_failover_and_says_so() {
    let Some(pair) = crate::support::replicated_pair("synchronous_commit_off", true) else {
        return;
    };
    let url = format!("{}&options=-c%20synchronous_commit%3Doff", pair.url());
    lose_an_acknowledged_append(SharedPair::new(pair), &url).await;
}

/// The store on `url` reports that a failover may lose what it acknowledges; an append
/// acknowledged while the standby hears nothing is lost by a failover, and said to be.
async fn lose_an_acknowledged_append(pair: SharedPair, url: &str) {
    let _turn = crate::kill_rounds::ONE_AT_A_TIME.lock().await;
    let store = PostgresStore::connect(
        PostgresStoreConfig::new(url)
            .schema("asynchronous")
            .lease(Duration::from_secs(30)),
    )
    .await
    .expect("connect");
    let replication = store.replication().await.expect("replication");
    assert!(
        replication.may_lose_on_failover() && !replication.survives_failover(),
        "a standby commits do not wait for is reported as such: {replication:?}"
    );

    let e = id("lossy");
    assert_eq!(
        store.append(&e, 0, &[started("f")]).await.expect("start"),
        1
    );
    // The standby has the start; then it hears nothing more.
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        let caught_up = pair
            .run(|pair| {
                // Inserted, not flushed: with `synchronous_commit = off` the start's commit
                // record may not be flushed yet.
                let lsn = pair.psql(pair.primary_port(), "SELECT pg_current_wal_insert_lsn()")?;
                let port = pair.standby_port().ok_or("the pair has no standby")?;
                pair.psql(
                    port,
                    &format!(
                        "SELECT pg_last_wal_replay_lsn() >= '{}'::pg_lsn",
                        lsn.trim()
                    ),
                )
            })
            .await;
        if caught_up.trim() == "t" {
            break;
        }
        assert!(Instant::now() < give_up, "the standby never caught up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sender = pair
        .run(|pair| {
            pair.psql(
                pair.primary_port(),
                "SELECT pid FROM pg_stat_replication LIMIT 1",
            )
        })
        .await;
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", sender.trim()])
        .status()
        .expect("kill(1)");
    assert!(stopped.success());
    assert_eq!(
        store
            .append(&e, 1, &[tagged(json!("acknowledged"))])
            .await
            .expect("acknowledged by the primary alone"),
        2
    );

    pair.run(|pair| pair.kill_primary()).await;
    pair.run(|pair| pair.promote()).await;
    assert_eq!(store.head(&e).await.expect("head"), 1, "the append is gone");
    match store.append(&e, 2, &[tagged(json!("after"))]).await {
        Err(AppendError::Storage { source, .. }) => {
            let detail = source.to_string();
            assert!(
                detail.contains("lost commits it had acknowledged")
                    && detail.contains("had 2 events")
                    && detail.contains("now has 1"),
                "{detail}"
            );
        }
        other => panic!("the store carried on past lost commits: {other:?}"),
    }
    // Driven again from what is stored, the execution goes on.
    assert_eq!(
        store
            .append(&e, 1, &[tagged(json!("again"))])
            .await
            .expect("from the stored head"),
        2
    );
}
