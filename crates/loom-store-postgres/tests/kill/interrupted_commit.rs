//! An append whose commit is interrupted by a failover, the primary killed between the
//! commit's send and its answer: the caller is told it committed, exactly once, whether the
//! commit had reached the synchronous standby (found there by reading back) or not (committed
//! again on the new primary). Both cases are made to happen, not left to chance: the commit is
//! held in PostgreSQL's wait for the synchronous standby (`wait_event = 'SyncRep'`) while
//! - the standby has received and flushed it, its acknowledgement lost with the primary (the
//!   backend that would answer is stopped; the standby resumed, then the primary killed); or
//! - the standby never received it (the primary's WAL sender is stopped).
//!
//! One on the one-statement path (an execution this worker holds), one on the full path (a
//! new execution). Then a lease confirmed (before a non-idempotent call) and a read while
//! there is no primary: answered once the standby is promoted, the lease still this worker's. The pair is this test's own (`support::cluster`), not `cargo xtask pg-up`'s.

use std::time::{Duration, Instant};

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::kit::LeaseHold;
use loom_kernel::{EventStore, ExecutionId};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig};
use serde_json::json;

use crate::failover::SharedPair;

/// Long, so that the commit's wait for the standby is never cut by the store's statement
/// timeout (a third of the lease) while the test holds it there.
const LEASE: Duration = Duration::from_secs(30);

/// Questions to the pair's servers.
impl SharedPair {
    /// One value from the primary.
    async fn ask_primary(&self, sql: &'static str) -> String {
        self.run(move |pair| pair.psql(pair.primary_port(), sql))
            .await
            .trim()
            .to_owned()
    }

    async fn ask_standby(&self, sql: &'static str) -> String {
        self.run(move |pair| {
            let port = pair.standby_port().ok_or("the pair has no standby")?;
            pair.psql(port, sql)
        })
        .await
        .trim()
        .to_owned()
    }
}

fn signal(signal: &str, pid: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, pid])
        .status()
        .expect("kill(1)");
    assert!(status.success(), "kill {signal} {pid} failed");
}

/// Until the primary has a backend waiting for the synchronous standby: its pid.
async fn commit_waiting_for_the_standby(pair: &SharedPair) -> String {
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        let pid = pair
            .ask_primary(
                "SELECT coalesce(min(pid)::text, '') FROM pg_stat_activity \
                 WHERE wait_event = 'SyncRep'",
            )
            .await;
        if !pid.is_empty() {
            return pid;
        }
        assert!(
            Instant::now() < give_up,
            "the append never waited for the standby"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How the interrupted commit is left when the primary dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Left {
    /// On the standby, flushed: promoted, it has the commit.
    OnTheStandby,
    /// Only on the dead primary.
    NowhereElse,
}

/// Appends `events` to `execution` at `at`, kills the primary while the commit waits for the
/// standby, leaving it as `left` says, promotes the standby, makes a new one; returns what the
/// append answered.
async fn interrupted_append(
    pair: &SharedPair,
    store: &PostgresStore,
    execution: &ExecutionId,
    at: u64,
    events: Vec<loom_kernel::Event>,
    left: Left,
) -> Result<u64, loom_kernel::AppendError> {
    let sender = match left {
        Left::NowhereElse => {
            // The WAL sender stopped: the standby never hears of the commit.
            let pid = pair
                .ask_primary("SELECT pid FROM pg_stat_replication LIMIT 1")
                .await;
            signal("-STOP", &pid);
            Some(pid)
        }
        Left::OnTheStandby => {
            pair.run(|pair| pair.pause_standby()).await;
            None
        }
    };
    let appending = {
        let (store, execution) = (store.clone(), execution.clone());
        tokio::spawn(async move { store.append(&execution, at, &events).await })
    };
    let backend = commit_waiting_for_the_standby(pair).await;
    if left == Left::OnTheStandby {
        // The backend that would answer stopped, the standby let go: it receives and flushes
        // the commit and acknowledges it to a primary that can no longer answer.
        signal("-STOP", &backend);
        let lsn = pair
            .ask_primary("SELECT pg_current_wal_flush_lsn()::text")
            .await;
        pair.run(|pair| pair.resume_standby()).await;
        let give_up = Instant::now() + Duration::from_secs(20);
        loop {
            let lsn = lsn.clone();
            let flushed = pair
                .run(move |pair| {
                    let port = pair.standby_port().ok_or("the pair has no standby")?;
                    pair.psql(
                        port,
                        &format!("SELECT pg_last_wal_receive_lsn() >= '{lsn}'::pg_lsn"),
                    )
                })
                .await;
            if flushed.trim() == "t" {
                break;
            }
            assert!(
                Instant::now() < give_up,
                "the standby never flushed the commit"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(
        !appending.is_finished(),
        "the append was answered before the primary died"
    );
    // The stopped WAL sender and backend die with the rest of the primary's processes.
    let _ = sender;
    pair.run(|pair| pair.kill_primary()).await;
    pair.run(|pair| pair.promote()).await;
    // A commit on the new primary waits for a synchronous standby again.
    pair.run(|pair| pair.rebuild_standby()).await;
    tokio::time::timeout(Duration::from_secs(90), appending)
        .await
        .expect("the append was answered after the failover")
        .expect("append task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_interrupted_by_a_failover_is_answered_as_it_ended_exactly_once() {
    let Some(pair) = crate::support::replicated_pair("interrupted_commit", true) else {
        return;
    };
    let _turn = crate::kill_rounds::ONE_AT_A_TIME.lock().await;
    // `RUST_LOG=loom_store_postgres=info` shows the store finding out how each commit ended.
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let url = pair.url();
    let pair = SharedPair::new(pair);
    let store = PostgresStore::connect(
        PostgresStoreConfig::new(&url)
            .schema("interrupted")
            .lease(LEASE)
            .failover_timeout(Duration::from_secs(60)),
    )
    .await
    .expect("connect");
    assert!(
        store
            .replication()
            .await
            .expect("replication")
            .survives_failover(),
        "the pair's standby is synchronous"
    );

    // The one-statement path: an execution this worker holds, at the head it committed.
    let held = id("held");
    let head = store
        .append(&held, 0, &[started("f"), tagged(json!(0))])
        .await
        .expect("first append");
    let answered = interrupted_append(
        &pair,
        &store,
        &held,
        head,
        vec![tagged(json!("interrupted")), tagged(json!("twice?"))],
        Left::OnTheStandby,
    )
    .await;
    assert_eq!(
        answered.expect("an append that committed is not reported as an error"),
        head + 2
    );
    assert_log(
        &store,
        &held,
        &[json!(0), json!("interrupted"), json!("twice?")],
    )
    .await;
    assert_eq!(
        pair.ask_primary(
            "SELECT count(*) FROM interrupted.loom_events WHERE execution_id = 'held'"
        )
        .await,
        "4",
        "each event stored once"
    );

    // The full path: a new execution, its first append never reaching the standby.
    let fresh = id("fresh");
    let answered = interrupted_append(
        &pair,
        &store,
        &fresh,
        0,
        vec![started("f"), tagged(json!("new"))],
        Left::NowhereElse,
    )
    .await;
    assert_eq!(
        answered.expect("an append that did not commit is committed on the new primary"),
        2
    );
    assert_log(&store, &fresh, &[json!("new")]).await;
    // The store goes on as before on the new primary.
    let head = store
        .append(&held, head + 2, &[tagged(json!("after"))])
        .await
        .expect("an append after two failovers");
    assert_eq!(head, 5);
    let standby = pair
        .ask_standby("SELECT count(*) FROM interrupted.loom_events")
        .await;
    assert_eq!(standby, "7", "the new standby has every event");

    // A lease confirmed before a non-idempotent call while the primary is replaced: asked again
    // on the new primary, still this worker's under the same token (not a step left in doubt).
    let token = store.lease_token(&held).expect("the lease on `held`");
    store
        .faults()
        .distrust_leases
        .store(true, std::sync::atomic::Ordering::SeqCst);
    pair.run(|pair| pair.kill_primary()).await;
    let holding = {
        let (store, held) = (store.clone(), held.clone());
        tokio::spawn(async move { store.hold_lease(&held, 5).await })
    };
    // A read waits for a server too, rather than failing.
    let reading = {
        let (store, held) = (store.clone(), held.clone());
        tokio::spawn(async move { store.head(&held).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!holding.is_finished(), "a lease answered with no primary");
    assert!(!reading.is_finished(), "a read answered with no primary");
    pair.run(|pair| pair.promote()).await;
    // The confirmation writes the lease's expiry: a commit, which waits for a standby.
    pair.run(|pair| pair.rebuild_standby()).await;
    let hold = tokio::time::timeout(Duration::from_secs(60), holding)
        .await
        .expect("the lease confirmed after the promotion")
        .expect("hold task")
        .expect("a lease confirmed, not an error");
    assert_eq!(
        hold,
        LeaseHold::Held {
            token: token as u64
        }
    );
    assert_eq!(
        reading
            .await
            .expect("read task")
            .expect("a read after the promotion"),
        5
    );
}

/// The log's tags, in order, are `tags`: nothing lost, nothing twice.
async fn assert_log(store: &PostgresStore, execution: &ExecutionId, tags: &[serde_json::Value]) {
    let log = store.read(execution, 0, 100).await.expect("read");
    let found: Vec<serde_json::Value> = log
        .iter()
        .filter_map(|envelope| match &envelope.event {
            loom_kernel::Event::SurfacePatch(patch) => patch.ops.to_value().get(0).cloned(),
            _ => None,
        })
        .collect();
    assert_eq!(found, tags, "{execution}'s log");
    assert_eq!(log.len(), tags.len() + 1, "{execution}'s log: {log:?}");
}
