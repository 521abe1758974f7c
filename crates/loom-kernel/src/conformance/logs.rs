//! The checks of the log itself: appends and their fence, reads, listing, waiting, claims and
//! leases ([`run_log_checks`](super::run_log_checks)).

use serde_json::json;

use super::StoreHarness;
use super::events::{completed, id, started, tag_of, tagged};
use crate::event::Event;
use crate::store::{AppendError, EventStore, EventStoreExt, STREAM_PAGE};

/// [`EventStore::claim_new`]: a claimed id is the claimant's; another first append of it waits
/// until the claimant's has committed (then conflicts) or the claim is given back; an id with
/// events, or claimed already, is not granted. A store that claims nothing (`None` for a new
/// id) passes: its runtime holds every effect until the start is durable.
pub async fn a_claimed_id_takes_the_claimants_first_append_only<S: EventStore + Clone>(store: S) {
    use std::time::Duration;
    let e = id("claimed");
    let Some(claim) = store.claim_new(&e).await.expect("claim") else {
        return;
    };
    assert_eq!(claim.execution(), &e);
    assert!(
        store.claim_new(&e).await.expect("claim").is_none(),
        "one claim of an id at a time"
    );
    let other = {
        let store = store.clone();
        let e = e.clone();
        tokio::spawn(async move { store.append(&e, 0, &[started("other")]).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(
        !other.is_finished(),
        "another first append waits for the claim"
    );
    assert_eq!(
        store
            .append_claimed(&claim, &[started("mine")])
            .await
            .expect("the claimant's first append"),
        1
    );
    drop(claim);
    let refused = tokio::time::timeout(Duration::from_secs(10), other)
        .await
        .expect("the waiting append is answered")
        .expect("task");
    assert!(
        matches!(refused, Err(AppendError::Conflict { actual_seq: 1, .. })),
        "{refused:?}"
    );
    let stored: Vec<Event> = store
        .read_all(&e)
        .await
        .expect("read")
        .into_iter()
        .map(|envelope| envelope.event)
        .collect();
    assert_eq!(
        stored,
        vec![started("mine")],
        "the claimant's start, not the other's"
    );
    assert!(
        store.claim_new(&e).await.expect("claim").is_none(),
        "an execution with events is not granted"
    );

    // A claim given back without an append lets the waiting first append go ahead.
    let given_back = id("given-back");
    let claim = store
        .claim_new(&given_back)
        .await
        .expect("claim")
        .expect("a store that claims ids grants a new one");
    let other = {
        let store = store.clone();
        let e = given_back.clone();
        tokio::spawn(async move { store.append(&e, 0, &[started("other")]).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(
        !other.is_finished(),
        "another first append waits for the claim"
    );
    drop(claim);
    let head = tokio::time::timeout(Duration::from_secs(10), other)
        .await
        .expect("the waiting append is answered")
        .expect("task")
        .expect("the append goes ahead once the claim is given back");
    assert_eq!(head, 1);

    // Appends past the first are not held by anything, and a claim is granted again only
    // for an id with no events.
    store
        .append(&e, 1, &[completed()])
        .await
        .expect("a later append");
    assert!(
        store
            .claim_new(&id("fresh"))
            .await
            .expect("claim")
            .is_some()
    );
}

/// [`EventStore::hold_lease`]: a store holds the lease of an execution it just started (a
/// store with no leases holds every execution, [`crate::kit::LeaseHold::Exclusive`]; one with
/// leases answers with a token).
pub async fn a_store_holds_what_it_just_appended<S: EventStore>(store: S) {
    let e = id("held");
    let head = store.append(&e, 0, &[started("f")]).await.expect("append");
    let hold = store.hold_lease(&e, head).await.expect("hold_lease");
    assert!(
        hold.is_held(),
        "a store must hold what it just started: {hold:?}"
    );
    if store.has_leases() {
        assert!(
            matches!(hold, crate::kit::LeaseHold::Held { token } if token > 0),
            "a store with leases answers with a token: {hold:?}"
        );
    } else {
        assert_eq!(hold, crate::kit::LeaseHold::Exclusive);
    }
}

/// Empty store: appends return the new head, reads honour `from` and `limit`.
pub async fn append_then_read<S: EventStore>(store: S) {
    let e = id("read-me");
    assert_eq!(store.head(&e).await.expect("head"), 0);
    assert!(store.read(&e, 0, 10).await.expect("read").is_empty());
    let head = store
        .append(&e, 0, &[started("f"), tagged(json!(1))])
        .await
        .expect("first append");
    assert_eq!(head, 2);
    let head = store
        .append(&e, 2, &[tagged(json!(2))])
        .await
        .expect("second append");
    assert_eq!(head, 3);
    assert_eq!(store.head(&e).await.expect("head"), 3);
    let all = store.read(&e, 0, 100).await.expect("read");
    assert_eq!(all.iter().map(|x| x.seq).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(all.iter().all(|x| x.execution_id == e));
    assert_eq!(all[0].event, started("f"));
    assert_eq!(all[2].event, tagged(json!(2)));
    let middle = store.read(&e, 1, 1).await.expect("read");
    assert_eq!(middle.len(), 1);
    assert_eq!(middle[0].seq, 1);
    assert!(store.read(&e, 3, 10).await.expect("read").is_empty());
    assert!(store.read(&e, u64::MAX, 10).await.expect("read").is_empty());
}

/// A log at seq 1: appending at 0 or 5 is a conflict that reports 1 and stores nothing.
pub async fn conflicting_append_changes_nothing<S: EventStore>(store: S) {
    let e = id("fenced");
    store.append(&e, 0, &[started("f")]).await.expect("append");
    for wrong in [0, 5] {
        match store.append(&e, wrong, &[tagged(json!("intruder"))]).await {
            Err(AppendError::Conflict {
                expected_seq,
                actual_seq,
                ..
            }) => {
                assert_eq!((expected_seq, actual_seq), (wrong, 1));
            }
            other => panic!("expected a conflict at {wrong}, got {other:?}"),
        }
    }
    assert_eq!(store.head(&e).await.expect("head"), 1);
    assert_eq!(store.read(&e, 0, 10).await.expect("read").len(), 1);
}

/// An empty batch is refused and creates no execution.
pub async fn empty_batch_is_refused<S: EventStore>(store: S) {
    let e = id("empty");
    assert!(matches!(
        store.append(&e, 0, &[]).await,
        Err(AppendError::EmptyBatch { .. })
    ));
    let page = store.list_executions(None, 10).await.expect("list");
    assert!(page.executions.is_empty(), "{page:?}");
}

/// Many tasks append at the same seq at once: exactly one wins, and its event is stored.
pub async fn racing_appenders_one_winner_per_seq<S: EventStore + Clone>(store: S) {
    let e = id("race");
    store.append(&e, 0, &[started("f")]).await.expect("append");
    for round in 1..=20u64 {
        let tasks: Vec<_> = (0..8)
            .map(|writer| {
                let (store, e) = (store.clone(), e.clone());
                tokio::spawn(async move {
                    let event = tagged(json!({"round": round, "writer": writer}));
                    (writer, store.append(&e, round, &[event]).await)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            let (writer, outcome) = task.await.expect("task");
            match outcome {
                Ok(head) => {
                    assert_eq!(head, round + 1);
                    winners.push(writer);
                }
                Err(AppendError::Conflict { actual_seq, .. }) => {
                    assert_eq!(actual_seq, round + 1)
                }
                Err(other) => panic!("unexpected error {other}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let stored = store.read(&e, round, 1).await.expect("read");
        assert_eq!(
            tag_of(&stored[0].event),
            Some(json!({"round": round, "writer": winners[0]}))
        );
    }
}

/// Writers that re-read the head on conflict and retry: every success is in the log exactly
/// once at the seq it was granted, and the log is gapless.
pub async fn contending_writers_keep_the_log_gapless<S: EventStore + Clone>(store: S) {
    let e = id("contended");
    store.append(&e, 0, &[started("f")]).await.expect("append");
    let writers = 6;
    let per_writer = 15;
    let tasks: Vec<_> = (0..writers)
        .map(|writer| {
            let (store, e) = (store.clone(), e.clone());
            tokio::spawn(async move {
                let mut granted = Vec::new();
                let mut n = 0;
                while n < per_writer {
                    let head = store.head(&e).await.expect("head");
                    let event = tagged(json!([writer, n]));
                    match store.append(&e, head, &[event]).await {
                        Ok(_) => {
                            granted.push((head, n));
                            n += 1;
                        }
                        Err(AppendError::Conflict { .. }) => tokio::task::yield_now().await,
                        Err(other) => panic!("unexpected error {other}"),
                    }
                }
                (writer, granted)
            })
        })
        .collect();
    let mut expected = std::collections::BTreeMap::new();
    for task in tasks {
        let (writer, granted) = task.await.expect("task");
        for (seq, n) in granted {
            assert!(
                expected.insert(seq, json!([writer, n])).is_none(),
                "seq {seq} granted twice"
            );
        }
    }
    let log = store.read_all(&e).await.expect("read");
    assert_eq!(log.len(), 1 + writers * per_writer);
    for (i, envelope) in log.iter().enumerate() {
        assert_eq!(envelope.seq, i as u64, "gap in the log");
    }
    for (seq, tag) in expected {
        assert_eq!(tag_of(&log[seq as usize].event), Some(tag), "seq {seq}");
    }
}

/// What was appended before a reopen reads back the same after it, and appends continue.
pub async fn reads_after_reopen<H: StoreHarness>(harness: &mut H) {
    let store = harness.fresh();
    let ids: Vec<_> = (0..5).map(|i| id(&format!("durable-{i}"))).collect();
    for (i, e) in ids.iter().enumerate() {
        let events: Vec<_> = std::iter::once(started("f"))
            .chain((0..i).map(|n| tagged(json!(n))))
            .collect();
        store.append(e, 0, &events).await.expect("append");
    }
    let mut before = Vec::new();
    for e in &ids {
        before.push(store.read_all(e).await.expect("read"));
    }
    let store = harness.reopen(store);
    for (e, expected) in ids.iter().zip(&before) {
        assert_eq!(&store.read_all(e).await.expect("read"), expected);
        assert_eq!(store.head(e).await.expect("head"), expected.len() as u64);
    }
    let head = before[0].len() as u64;
    store
        .append(&ids[0], head, &[tagged(json!("after"))])
        .await
        .expect("append after reopen");
    let page = store.list_executions(None, 100).await.expect("list");
    assert_eq!(page.executions.len(), ids.len());
}

/// Events of 1 MiB, and a batch of 64 events of 64 KiB, round-trip intact.
pub async fn large_payloads<S: EventStore>(store: S) {
    let e = id("large");
    let big = tagged(json!("x".repeat(1 << 20)));
    store
        .append(&e, 0, &[started("f"), big.clone()])
        .await
        .expect("append 1 MiB");
    let batch: Vec<_> = (0..64)
        .map(|i| tagged(json!({"i": i, "blob": "y".repeat(64 << 10)})))
        .collect();
    store.append(&e, 2, &batch).await.expect("append batch");
    let log = store.read_all(&e).await.expect("read");
    assert_eq!(log.len(), 66);
    assert_eq!(log[1].event, big);
    for (i, envelope) in log[2..].iter().enumerate() {
        assert_eq!(envelope.event, batch[i]);
    }
}

/// 300 executions appended concurrently are all listed once, in id order, across pages.
pub async fn many_executions_and_paging<S: EventStore + Clone>(store: S) {
    let count = 300;
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let e = id(&format!("many-{i:04}"));
                store.append(&e, 0, &[started("f")]).await.expect("append");
                for n in 0..(i % 3) {
                    store
                        .append(&e, 1 + n as u64, &[tagged(json!(n))])
                        .await
                        .expect("append");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    for page_size in [1, 7, 100, 1000] {
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = store
                .list_executions(after.as_ref(), page_size)
                .await
                .expect("list");
            assert!(page.executions.len() <= page_size);
            let full = page.executions.len() == page_size;
            seen.extend(page.executions);
            if seen.len() == count {
                assert!(page.next.is_none(), "no page follows the last execution");
            } else {
                assert!(
                    full && page.next.is_some(),
                    "a page short of the end is full"
                );
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(seen.len(), count, "page size {page_size}");
        for (i, summary) in seen.iter().enumerate() {
            assert_eq!(summary.id, id(&format!("many-{i:04}")));
            assert_eq!(summary.head, 1 + (i % 3) as u64);
        }
    }
    let past_the_end = store
        .list_executions(Some(&id("zzz")), 10)
        .await
        .expect("list");
    assert!(past_the_end.executions.is_empty() && past_the_end.next.is_none());
}

/// Ids where one is a prefix of another never see each other's events.
pub async fn ids_sharing_a_prefix_stay_apart<S: EventStore>(store: S) {
    let names = ["a", "a-b", "ab", "a.", "b"];
    for name in names {
        store
            .append(&id(name), 0, &[started(name)])
            .await
            .expect("append");
    }
    for name in names {
        let log = store.read_all(&id(name)).await.expect("read");
        assert_eq!(log.len(), 1, "{name}");
        assert_eq!(log[0].event, started(name));
    }
}

/// A log longer than a page streams whole and in order.
pub async fn stream_crosses_pages<S: EventStore>(store: S) {
    use futures::TryStreamExt;
    let e = id("long");
    let total = STREAM_PAGE * 2 + 5;
    let events: Vec<_> = std::iter::once(started("f"))
        .chain((1..total).map(|i| tagged(json!(i))))
        .collect();
    store.append(&e, 0, &events).await.expect("append");
    let streamed: Vec<_> = store.stream(&e, 0).try_collect().await.expect("stream");
    assert_eq!(streamed.len(), total);
    assert!(streamed.iter().enumerate().all(|(i, x)| x.seq == i as u64));
    let tail: Vec<_> = store
        .stream(&e, total as u64 - 3)
        .try_collect()
        .await
        .expect("stream");
    assert_eq!(tail.len(), 3);
}

/// `wait_for` returns at once for an existing seq, sleeps through an append that does not
/// reach it, and wakes when one does.
pub async fn wait_for_wakes_on_append<S: EventStore + Clone>(store: S) {
    let e = id("waited");
    store.append(&e, 0, &[started("f")]).await.expect("append");
    store.wait_for(&e, 0).await.expect("existing seq");
    let waiter = {
        let (store, e) = (store.clone(), e.clone());
        tokio::spawn(async move { store.wait_for(&e, 2).await })
    };
    store
        .append(&e, 1, &[tagged(json!(1))])
        .await
        .expect("append");
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!waiter.is_finished(), "woke before seq 2 existed");
    store
        .append(&e, 2, &[tagged(json!(2))])
        .await
        .expect("append");
    tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
        .await
        .expect("waiter woke")
        .expect("task")
        .expect("wait_for");
}

/// `read_logs` gives each execution's whole log, in the order asked (an execution asked twice,
/// twice), empty for an unknown one.
pub async fn read_logs_reads_whole_logs<S: EventStore>(store: S) {
    let sizes = [1usize, STREAM_PAGE + 3, 7];
    let ids: Vec<_> = (0..sizes.len())
        .map(|i| id(&format!("batch-{i}")))
        .collect();
    for (e, size) in ids.iter().zip(sizes) {
        let events: Vec<_> = std::iter::once(started("f"))
            .chain((1..size).map(|i| tagged(json!(i))))
            .collect();
        store.append(e, 0, &events).await.expect("append");
    }
    let mut asked = ids.clone();
    asked.insert(1, id("batch-unknown"));
    asked.reverse();
    asked.push(ids[1].clone());
    let logs = store.read_logs(&asked).await.expect("read_logs");
    assert_eq!(logs.len(), asked.len());
    for (e, log) in asked.iter().zip(&logs) {
        assert_eq!(log, &store.read_all(e).await.expect("read_all"), "{e}");
    }
    let unknown = asked
        .iter()
        .position(|e| e.as_str() == "batch-unknown")
        .expect("asked");
    assert!(
        logs[unknown].is_empty(),
        "the unknown execution reads as empty"
    );
}
