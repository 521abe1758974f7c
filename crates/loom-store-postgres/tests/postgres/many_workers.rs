//! Many workers on one database: leases and fencing tokens, take-over after a worker dies,
//! ambiguous commits, wake-ups across workers, migrations, the status index. Each test opens
//! two store instances (two workers) on one fresh schema.

use std::sync::atomic::Ordering;
use std::time::Duration;

use loom_kernel::StatusFilter;
use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::{AppendError, Event, EventStore, EventStoreExt, ExecutionStatus};
use loom_kernel::{ExecutionCompleted, ExecutionResumed, ExecutionSuspended};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig};
use loom_store_postgres::{fresh_schema, server_url};
use serde_json::json;

/// A store on `schema` for the worker `name`, holding leases of `lease`.
pub(crate) async fn worker(url: &str, schema: &str, name: &str, lease: Duration) -> PostgresStore {
    PostgresStore::connect(
        PostgresStoreConfig::new(url)
            .schema(schema)
            .worker_id(name)
            .lease(lease),
    )
    .await
    .expect("connect")
}

/// Two workers on one fresh schema, with `lease`.
async fn two_workers(test: &str, lease: Duration) -> Option<(PostgresStore, PostgresStore)> {
    let url = server_url(test)?;
    let schema = fresh_schema(test);
    let a = worker(&url, &schema, "worker-a", lease).await;
    let b = worker(&url, &schema, "worker-b", lease).await;
    Some((a, b))
}

/// The lease take-overs `store` counted for the metrics.
fn takeovers(store: &PostgresStore) -> u64 {
    EventStore::stats(store)
        .and_then(|stats| stats.lease_takeovers)
        .expect("the PostgreSQL store counts take-overs")
}

fn is_conflict(result: &Result<u64, AppendError>) -> bool {
    matches!(result, Err(AppendError::Conflict { .. }))
}

fn suspended(gate: &str) -> Event {
    Event::ExecutionSuspended(ExecutionSuspended {
        gate_id: gate.into(),
        event_type: "Approval".into(),
        correlation_key: gate.into(),
    })
}

fn resumed(gate: &str) -> Event {
    Event::ExecutionResumed(ExecutionResumed {
        gate_id: gate.into(),
        event_type: "Approval".into(),
        correlation_key: gate.into(),
        payload: json!("yes").into(),
    })
}

/// Appends `event` at the head until the lease lets `store` (bounded: a lease that never
/// frees fails the test).
async fn append_when_free(
    store: &PostgresStore,
    e: &loom_kernel::ExecutionId,
    event: Event,
) -> u64 {
    for _ in 0..200 {
        let head = store.head(e).await.expect("head");
        match store.append(e, head, std::slice::from_ref(&event)).await {
            Ok(head) => return head,
            Err(AppendError::Conflict { .. }) => {
                tokio::time::sleep(Duration::from_millis(25)).await
            }
            Err(other) => panic!("unexpected {other}"),
        }
    }
    panic!("the lease never came free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_the_race_for_a_running_execution_gets_a_conflict() {
    let Some((a, b)) = two_workers("lost_race", Duration::from_secs(30)).await else {
        return;
    };
    let e = id("owned");
    a.append(&e, 0, &[started("f")]).await.expect("a starts");
    let token = a.lease_token(&e).expect("a holds the lease");
    // B is at the right seq, but A owns the running execution: B yields.
    match b.append(&e, 1, &[tagged(json!("b"))]).await {
        Err(AppendError::Conflict {
            expected_seq,
            actual_seq,
            ..
        }) => assert_eq!((expected_seq, actual_seq), (1, 1)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(b.lease_token(&e), None);
    // A goes on under the same token; B's attempt changed nothing.
    assert_eq!(a.append(&e, 1, &[tagged(json!("a"))]).await.expect("a"), 2);
    assert_eq!(a.lease_token(&e), Some(token));
    assert_eq!(b.read_all(&e).await.expect("read").len(), 2);
}

/// A new execution's row is inserted as its first append leaves it, when none exists as the
/// writer looks: a second worker that starts the same id in between wins, and the first is
/// decided again against that row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_the_race_to_start_an_execution_gets_a_conflict() {
    let Some((a, b)) = two_workers("start_race", Duration::from_secs(30)).await else {
        return;
    };
    let e = id("started-twice");
    // A looks (no row yet) and stops there, its transaction open.
    a.faults().stall_after_lock.store(1, Ordering::SeqCst);
    let stalled = {
        let (a, e) = (a.clone(), e.clone());
        tokio::spawn(async move { a.append(&e, 0, &[started("from-a")]).await })
    };
    tokio::time::timeout(Duration::from_secs(30), a.faults().stalled.notified())
        .await
        .expect("a's first append looked for the row");
    // B is not held up by A's open transaction: A has written nothing yet.
    let b_started = tokio::time::timeout(
        Duration::from_secs(30),
        b.append(&e, 0, &[started("from-b")]),
    )
    .await
    .expect("b's start waited for a's open transaction");
    assert_eq!(b_started.expect("b"), 1);
    a.faults().resume_stalled.notify_one();
    match stalled.await.expect("task") {
        Err(AppendError::Conflict {
            expected_seq,
            actual_seq,
            ..
        }) => assert_eq!((expected_seq, actual_seq), (0, 1)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(a.lease_token(&e), None);
    assert!(
        b.lease_token(&e).is_some(),
        "b holds the lease it started with"
    );
    let log = a.read_all(&e).await.expect("read");
    assert_eq!(log.len(), 1);
    assert!(
        matches!(&log[0].event, Event::ExecutionStarted(s) if s.flow == "from-b"),
        "{log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_worker_takes_over_after_the_owner_dies_and_fences_it_out() {
    let Some((a, b)) = two_workers("take_over", Duration::from_millis(400)).await else {
        return;
    };
    let e = id("orphan");
    a.append(&e, 0, &[started("f")]).await.expect("a starts");
    let first = a.lease_token(&e).expect("a holds the lease");
    // A hangs: it stops renewing (as a dead or paused worker does).
    a.faults().pause_lease_renewal.store(true, Ordering::SeqCst);
    assert!(is_conflict(
        &b.append(&e, 1, &[tagged(json!("early"))]).await
    ));
    let head = append_when_free(&b, &e, tagged(json!("b took over"))).await;
    assert_eq!(head, 2);
    let second = b.lease_token(&e).expect("b holds the lease");
    assert!(second > first, "a take-over draws a new fencing token");
    assert_eq!(takeovers(&b), 1, "the metrics count B's take-over");
    assert_eq!(takeovers(&a), 0);
    // A wakes up at what it thinks is the head: fenced out, and it forgets its lease.
    assert!(is_conflict(
        &a.append(&e, 1, &[tagged(json!("stale"))]).await
    ));
    assert!(is_conflict(
        &a.append(&e, 2, &[tagged(json!("stale"))]).await
    ));
    assert_eq!(a.lease_token(&e), None);
    let log = b.read_all(&e).await.expect("read");
    assert_eq!(log.len(), 2);
    // B keeps renewing while A's lease would long have run out.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        b.append(&e, 2, &[tagged(json!("still b"))])
            .await
            .expect("b"),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_lease_ran_out_cannot_append_even_if_nobody_took_it() {
    let Some((a, _b)) = two_workers("ran_out", Duration::from_millis(300)).await else {
        return;
    };
    let e = id("lapsed");
    a.append(&e, 0, &[started("f")]).await.expect("a starts");
    a.faults().pause_lease_renewal.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        is_conflict(&a.append(&e, 1, &[tagged(json!("late"))]).await),
        "the holder of a lease that ran out is refused"
    );
    assert_eq!(a.lease_token(&e), None);
    // Having forgotten it, A may take it again like anyone, under a new token.
    a.faults()
        .pause_lease_renewal
        .store(false, Ordering::SeqCst);
    assert_eq!(
        a.append(&e, 1, &[tagged(json!("again"))]).await.expect("a"),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_or_ended_execution_is_released_for_any_worker() {
    let Some((a, b)) = two_workers("released", Duration::from_secs(30)).await else {
        return;
    };
    let e = id("parked");
    a.append(&e, 0, &[started("f"), suspended("g")])
        .await
        .expect("a");
    assert_eq!(a.lease_token(&e), None, "a parked execution holds no lease");
    // Any worker resumes it at once; resuming makes it run, so B now holds it.
    b.append(&e, 2, &[resumed("g")]).await.expect("b resumes");
    assert!(b.lease_token(&e).is_some());
    assert_eq!(
        takeovers(&b),
        0,
        "a lease given back is taken, not taken over"
    );
    assert!(is_conflict(&a.append(&e, 3, &[tagged(json!("a"))]).await));
    let done = Event::ExecutionCompleted(ExecutionCompleted {
        output: json!(1).into(),
    });
    b.append(&e, 3, &[done]).await.expect("b ends it");
    assert_eq!(b.lease_token(&e), None, "an ended execution holds no lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_reply_was_lost_is_found_committed_by_reading_back() {
    let Some((a, b)) = two_workers("lost_reply", Duration::from_secs(30)).await else {
        return;
    };
    let e = id("ambiguous");
    a.faults().lose_commit_reply.store(1, Ordering::SeqCst);
    assert_eq!(a.append(&e, 0, &[started("f")]).await.expect("resolved"), 1);
    assert_eq!(b.read_all(&e).await.expect("read").len(), 1);
    assert!(a.lease_token(&e).is_some(), "the lease taken is remembered");
    assert_eq!(a.append(&e, 1, &[tagged(json!(1))]).await.expect("next"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_was_lost_is_committed_again_once() {
    let Some((a, b)) = two_workers("lost_commit", Duration::from_secs(30)).await else {
        return;
    };
    // Once on the full path (the first append of an execution), once on the one-statement
    // path (the next, under the lease it took).
    let e = id("ambiguous");
    a.faults().lose_commit.store(1, Ordering::SeqCst);
    assert_eq!(a.append(&e, 0, &[started("f")]).await.expect("start"), 1);
    a.faults().lose_commit.store(1, Ordering::SeqCst);
    assert_eq!(
        a.append(&e, 1, &[tagged(json!("lost"))])
            .await
            .expect("read back as absent, then committed"),
        2
    );
    let log = b.read_all(&e).await.expect("read");
    assert_eq!(log.len(), 2, "each event stored once: {log:?}");
    assert_eq!(log[1].event, tagged(json!("lost")));
    assert_eq!(
        a.append(&e, 2, &[tagged(json!("next"))])
            .await
            .expect("next"),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_lost_past_the_failover_bound_is_reported_failed_and_stores_nothing() {
    let Some(url) = server_url("lost_commit_unbounded") else {
        return;
    };
    let schema = fresh_schema("lost_commit_unbounded");
    let a = PostgresStore::connect(
        PostgresStoreConfig::new(&url)
            .schema(&schema)
            .lease(Duration::from_secs(30))
            .failover_timeout(Duration::ZERO),
    )
    .await
    .expect("connect");
    // The first append of an execution goes the full path, which retries only within the
    // bound.
    let e = id("ambiguous");
    a.faults().lose_commit.store(1, Ordering::SeqCst);
    match a.append(&e, 0, &[started("f")]).await {
        Err(AppendError::Storage { source, .. }) => {
            let detail = source.to_string();
            assert!(detail.contains("not committed"), "{detail}")
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
    assert_eq!(a.head(&e).await.expect("head"), 0);
    assert_eq!(a.append(&e, 0, &[started("f")]).await.expect("retry"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_on_one_worker_wakes_on_an_append_by_another() {
    let Some((a, b)) = two_workers("wake", Duration::from_secs(30)).await else {
        return;
    };
    let e = id("watched");
    let waiter = {
        let (b, e) = (b.clone(), e.clone());
        tokio::spawn(async move { b.wait_for(&e, 1).await })
    };
    a.append(&e, 0, &[started("f")]).await.expect("append");
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "seq 1 is not there yet");
    a.append(&e, 1, &[tagged(json!(1))]).await.expect("append");
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the notification")
        .expect("task")
        .expect("wait_for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_connecting_at_once_migrate_the_schema_once() {
    let Some(url) = server_url("migrate_once") else {
        return;
    };
    let schema = fresh_schema("migrate_once");
    let connects: Vec<_> = (0..4)
        .map(|i| {
            let (url, schema) = (url.clone(), schema.clone());
            tokio::spawn(async move {
                worker(&url, &schema, &format!("w{i}"), Duration::from_secs(5)).await
            })
        })
        .collect();
    let mut stores = Vec::new();
    for connect in connects {
        stores.push(connect.await.expect("task"));
    }
    let e = id("after-migration");
    stores[0]
        .append(&e, 0, &[started("f")])
        .await
        .expect("append");
    assert_eq!(stores[3].head(&e).await.expect("head"), 1);
    // And again, on a schema already at the current version.
    let again = worker(&url, &schema, "late", Duration::from_secs(5)).await;
    assert_eq!(again.head(&e).await.expect("head"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_index_lists_executions_by_status() {
    let Some((a, _b)) = two_workers("status", Duration::from_secs(30)).await else {
        return;
    };
    for i in 0..5 {
        let e = id(&format!("s-{i}"));
        a.append(&e, 0, &[started("f")]).await.expect("start");
        if i % 2 == 0 {
            a.append(&e, 1, &[suspended("g")]).await.expect("park");
        }
    }
    let running = a
        .list_by_status(StatusFilter::Status(ExecutionStatus::Running), None, 10)
        .await
        .expect("list");
    let ids: Vec<_> = running
        .executions
        .iter()
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(ids, ["s-1", "s-3"]);
    let parked = a
        .list_by_status(StatusFilter::Status(ExecutionStatus::Suspended), None, 2)
        .await
        .expect("list");
    assert_eq!(parked.executions.len(), 2);
    let rest = a
        .list_by_status(
            StatusFilter::Status(ExecutionStatus::Suspended),
            parked.next.as_ref(),
            2,
        )
        .await
        .expect("list");
    let ids: Vec<_> = rest.executions.iter().map(|s| s.id.to_string()).collect();
    assert_eq!(ids, ["s-4"]);
    assert!(rest.next.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_sees_every_event_of_concurrent_workers_once_in_commit_order() {
    use futures::StreamExt;
    let Some(url) = server_url("feed_across_workers") else {
        return;
    };
    let schema = fresh_schema("feed_across_workers");
    let lease = Duration::from_secs(30);
    let writers = [
        worker(&url, &schema, "writer-a", lease).await,
        worker(&url, &schema, "writer-b", lease).await,
    ];
    let reader = worker(&url, &schema, "reader", lease).await;
    let per_writer = 40;
    let per_execution = 5;
    let expected = 2 * per_writer * per_execution;
    let follower = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut feed = std::pin::pin!(reader.follow(0));
        while seen.len() < expected {
            let event = feed.next().await.expect("feed open").expect("follow");
            seen.push(event);
        }
        seen
    });
    let tasks: Vec<_> = writers
        .iter()
        .enumerate()
        .flat_map(|(w, store)| {
            (0..per_writer).map(move |n| {
                let store = store.clone();
                tokio::spawn(async move {
                    let e = id(&format!("w{w}-{n:02}"));
                    store.append(&e, 0, &[started("f")]).await.expect("start");
                    for seq in 1..per_execution as u64 {
                        store
                            .append(&e, seq, &[tagged(json!(seq))])
                            .await
                            .expect("append");
                    }
                })
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer");
    }
    let seen = tokio::time::timeout(Duration::from_secs(30), follower)
        .await
        .expect("the follower saw every event")
        .expect("task");
    for pair in seen.windows(2) {
        assert!(pair[0].position < pair[1].position, "positions go back");
    }
    let mut per_id: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for event in &seen {
        per_id
            .entry(event.envelope.execution_id.to_string())
            .or_default()
            .push(event.envelope.seq);
    }
    assert_eq!(per_id.len(), 2 * per_writer);
    for (e, seqs) in per_id {
        assert_eq!(seqs, (0..per_execution as u64).collect::<Vec<_>>(), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_under_a_held_lease_take_one_statement_and_stay_fenced() {
    let Some((a, b)) = two_workers("one_statement", Duration::from_millis(400)).await else {
        return;
    };
    let (e, f) = (id("fast-e"), id("fast-f"));
    a.append(&e, 0, &[started("f")]).await.expect("a starts e");
    a.append(&f, 0, &[started("f")]).await.expect("a starts f");
    let before = a.faults().one_statement_commits.load(Ordering::SeqCst);
    for seq in 1..4 {
        let event = [tagged(json!(seq))];
        let (e_head, f_head) = tokio::join!(a.append(&e, seq, &event), a.append(&f, seq, &event));
        assert_eq!(e_head.expect("e"), seq + 1);
        assert_eq!(f_head.expect("f"), seq + 1);
    }
    assert!(
        a.faults().one_statement_commits.load(Ordering::SeqCst) > before,
        "appends under a held lease went the one-statement way"
    );
    // The same seq twice: the first wins, the second is a conflict, nothing is doubled.
    assert_eq!(a.append(&e, 4, &[tagged(json!("x"))]).await.expect("e"), 5);
    assert!(is_conflict(&a.append(&e, 4, &[tagged(json!("y"))]).await));
    // An event the remembered tail refuses (a second start) is refused as on the full path.
    assert!(matches!(
        a.append(&e, 5, &[started("f")]).await,
        Err(AppendError::Invalid { .. })
    ));
    // A one-statement commit whose reply is lost is found committed by reading back.
    a.faults().lose_commit_reply.store(1, Ordering::SeqCst);
    assert_eq!(
        a.append(&f, 4, &[tagged(json!("reply lost"))])
            .await
            .expect("read back"),
        5
    );
    assert_eq!(
        a.append(&f, 5, &[tagged(json!("next"))]).await.expect("f"),
        6
    );
    // A hangs past its lease; B takes e over. A's next append, sent the one-statement way
    // under its old token, is fenced out and stores nothing.
    a.faults().pause_lease_renewal.store(true, Ordering::SeqCst);
    let head = append_when_free(&b, &e, tagged(json!("b took over"))).await;
    assert_eq!(head, 6);
    assert!(is_conflict(
        &a.append(&e, 5, &[tagged(json!("stale"))]).await
    ));
    assert!(is_conflict(
        &a.append(&e, 6, &[tagged(json!("stale"))]).await
    ));
    assert_eq!(a.lease_token(&e), None);
    let log = b.read_all(&e).await.expect("read");
    assert_eq!(log.len(), 6);
    // The feed holds every event once, positions strictly rising.
    let feed = b.read_feed(0, 1000).await.expect("feed");
    assert_eq!(feed.len(), 6 + 6);
    assert!(feed.windows(2).all(|w| w[0].position < w[1].position));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_gives_its_leases_back_lets_another_go_on_at_once() {
    let Some((a, b)) = two_workers("release", Duration::from_secs(30)).await else {
        return;
    };
    let e = id("handed-over");
    a.append(&e, 0, &[started("f")]).await.expect("a starts");
    a.append(&e, 1, &[tagged(json!(1))]).await.expect("a");
    assert!(is_conflict(&b.append(&e, 2, &[tagged(json!("b"))]).await));
    assert_eq!(a.release_leases().await.expect("release"), 1);
    assert_eq!(a.lease_token(&e), None);
    assert_eq!(a.release_leases().await.expect("nothing left"), 0);
    assert_eq!(b.append(&e, 2, &[tagged(json!("b"))]).await.expect("b"), 3);
    assert!(is_conflict(&a.append(&e, 3, &[tagged(json!("a"))]).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_wakes_on_another_worker_after_its_listener_went_idle() {
    let Some((a, b)) = two_workers("idle_listen", Duration::from_secs(30)).await else {
        return;
    };
    let e = id("watched-later");
    for seq in 0..3u64 {
        let waiter = {
            let (b, e) = (b.clone(), e.clone());
            tokio::spawn(async move { b.wait_for(&e, seq).await })
        };
        // Time for the waiter to read the head and for B's listener to LISTEN.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let event = if seq == 0 {
            started("f")
        } else {
            tagged(json!(seq))
        };
        a.append(&e, seq, &[event]).await.expect("append");
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("woken by the notification")
            .expect("task")
            .expect("wait_for");
        // Nobody waits on B now: its listener stops listening, and must start again for the
        // next waiter.
        tokio::time::sleep(Duration::from_millis(2_800)).await;
    }
}

/// Connecting where no server listens fails with the pool's error kept as the source, not
/// only its words. Needs no server.
#[tokio::test]
async fn a_refused_connection_keeps_the_pool_s_error_as_its_source() {
    use std::error::Error;
    let config = PostgresStoreConfig::new("postgres://loom@127.0.0.1:9/loom");
    let error = PostgresStore::connect(config)
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(error, loom_store_postgres::ConnectError::Connect(_)),
        "{error:?}"
    );
    assert!(error.source().is_some(), "{error:?}");
    assert!(
        error
            .to_string()
            .starts_with("cannot connect to PostgreSQL: "),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_before_an_effect_counts_a_take_over_only_from_a_holder() {
    let Some((a, b)) = two_workers("hold_takeover", Duration::from_millis(300)).await else {
        return;
    };
    // A parked execution's lease is free: holding it takes nothing over.
    let parked = id("parked_hold");
    a.append(&parked, 0, &[started("f"), suspended("g")])
        .await
        .expect("a");
    assert!(matches!(
        b.hold_lease(&parked, 2).await.expect("hold"),
        loom_kernel::kit::LeaseHold::Held { .. }
    ));
    assert_eq!(takeovers(&b), 0);
    // A running execution whose holder stopped renewing: once its lease ran out, holding it
    // takes it over.
    let orphan = id("orphan_hold");
    a.append(&orphan, 0, &[started("f")]).await.expect("a");
    a.faults().pause_lease_renewal.store(true, Ordering::SeqCst);
    let mut held = false;
    for _ in 0..200 {
        if matches!(
            b.hold_lease(&orphan, 1).await.expect("hold"),
            loom_kernel::kit::LeaseHold::Held { .. }
        ) {
            held = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(held, "B takes the lease once A's ran out");
    assert_eq!(takeovers(&b), 1);
    assert_eq!(takeovers(&a), 0);
}
