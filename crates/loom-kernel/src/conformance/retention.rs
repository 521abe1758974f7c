//! The checks of retention ([`EventStore::delete_ended`]): what it deletes, and the feed of an
//! id started again after.

use serde_json::json;

use super::StoreHarness;
use super::events::{completed, id, started, suspended, tagged};
use super::feed::whole_feed;
use super::status_index::listed;
use crate::envelope::EventEnvelope;
use crate::fold::ExecutionStatus;
use crate::store::{EventStore, EventStoreExt, FeedEvent, StatusFilter};

/// `delete_ended` deletes ended executions only, a bounded batch at a time, whole: their logs
/// read empty, listings and the feed forget them, running ones are untouched, and an end time
/// not yet reached deletes nothing.
pub async fn delete_ended_removes_only_old_ended_executions<S: EventStore>(store: S) {
    let ended: Vec<_> = (0..5).map(|i| id(&format!("old-{i}"))).collect();
    for e in &ended {
        store
            .append(e, 0, &[started("f"), tagged(json!(1)), completed()])
            .await
            .expect("append");
    }
    let live = [id("live-running"), id("live-suspended")];
    store
        .append(&live[0], 0, &[started("f")])
        .await
        .expect("append");
    store
        .append(&live[1], 0, &[started("f"), suspended("g")])
        .await
        .expect("append");

    assert!(
        store.delete_ended(0, 10).await.expect("delete").is_empty(),
        "nothing ended before the epoch"
    );
    let mut deleted = Vec::new();
    loop {
        let batch = store.delete_ended(u64::MAX, 2).await.expect("delete");
        assert!(batch.len() <= 2, "batch larger than asked: {batch:?}");
        let short = batch.len() < 2;
        deleted.extend(batch);
        if short {
            break;
        }
    }
    deleted.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    assert_eq!(deleted, ended);
    for e in &ended {
        assert_eq!(store.head(e).await.expect("head"), 0);
        assert!(store.read_all(e).await.expect("read").is_empty());
    }
    for e in &live {
        assert!(store.head(e).await.expect("head") > 0, "{e} deleted");
    }
    let all = store.list_executions(None, 100).await.expect("list");
    assert_eq!(
        all.executions
            .iter()
            .map(|s| s.id.clone())
            .collect::<Vec<_>>(),
        live
    );
    assert!(
        listed(&store, StatusFilter::Status(ExecutionStatus::Completed))
            .await
            .is_empty()
    );
    let feed = whole_feed(&store, 100).await;
    assert!(
        feed.iter()
            .all(|event| live.contains(&event.envelope.execution_id)),
        "the feed still serves deleted events"
    );
    assert_eq!(feed.len(), 3);
    // The id may be used again, by a new execution.
    store
        .append(&ended[0], 0, &[started("again")])
        .await
        .expect("reuse");
    assert_eq!(store.head(&ended[0]).await.expect("head"), 1);
}

/// An execution deleted by retention and started again under its id: a reader of the feed
/// from position 0 gets each event of the new log once, after the feed's other events, and
/// positions and each log's seqs never go backwards; the same after a reopen.
pub async fn a_deleted_id_started_again_feeds_each_event_once_in_order<H: StoreHarness>(
    harness: &mut H,
) {
    let store = harness.fresh();
    let reused = id("reused");
    let other = id("other");
    store
        .append(
            &reused,
            0,
            &[
                started("f"),
                tagged(json!(1)),
                tagged(json!(2)),
                completed(),
            ],
        )
        .await
        .expect("append");
    store
        .append(&other, 0, &[started("f")])
        .await
        .expect("append");
    assert_eq!(
        store.delete_ended(u64::MAX, 10).await.expect("delete"),
        std::slice::from_ref(&reused)
    );
    store
        .append(
            &reused,
            0,
            &[
                started("again"),
                tagged(json!(3)),
                tagged(json!(4)),
                completed(),
            ],
        )
        .await
        .expect("start again");
    let check = |feed: &[FeedEvent]| {
        for pair in feed.windows(2) {
            assert!(pair[0].position < pair[1].position, "positions go back");
        }
        let seqs: Vec<u64> = feed
            .iter()
            .filter(|event| event.envelope.execution_id == reused)
            .map(|event| event.envelope.seq)
            .collect();
        assert_eq!(
            seqs,
            [0, 1, 2, 3],
            "each event of the new log once, in order"
        );
    };
    let feed = whole_feed(&store, 100).await;
    check(&feed);
    let log = store.read_all(&reused).await.expect("read");
    let fed: Vec<EventEnvelope> = feed
        .iter()
        .filter(|event| event.envelope.execution_id == reused)
        .map(|event| event.envelope.clone())
        .collect();
    assert_eq!(fed, log);
    assert_eq!(whole_feed(&store, 1).await, feed, "pages of one");
    let store = harness.reopen(store);
    assert_eq!(whole_feed(&store, 100).await, feed, "after a reopen");
}

/// `delete_ended` keeps an ended child whose parent still waits for its end (the parent's child
/// gate is pending: a crash came between the child's end and the parent hearing of it), and
/// deletes it once the parent has heard; an ended child whose parent is gone is deleted. Without
/// the child's log, `recover` would take the gate for a child never started and run it again
/// (issue 41, hole 2).
pub async fn delete_ended_keeps_a_child_its_parent_still_waits_for<S: EventStore>(store: S) {
    use crate::event::{Event, ExecutionResumed, ExecutionSuspended};
    let gate = |n: u32| format!("child:kid#{n}");
    let waits = |n: u32| {
        Event::ExecutionSuspended(ExecutionSuspended {
            gate_id: gate(n),
            event_type: crate::runtime::CHILD_EVENT_TYPE.into(),
            correlation_key: format!("p/kid#{n}"),
        })
    };
    store
        .append(&id("p"), 0, &[started("f"), waits(0), waits(1)])
        .await
        .expect("append");
    for n in 0..3 {
        // kid#2's parent never waited for it (a user's id of the child form).
        store
            .append(
                &id(&format!("p/kid#{n}")),
                0,
                &[started("kid"), completed()],
            )
            .await
            .expect("append");
    }
    // Old ended executions after the children, so a batch must look past those it keeps.
    for n in 0..3 {
        store
            .append(&id(&format!("z-{n}")), 0, &[started("f"), completed()])
            .await
            .expect("append");
    }
    let deleted = store.delete_ended(u64::MAX, 2).await.expect("delete");
    let deleted: Vec<&str> = deleted.iter().map(|e| e.as_str()).collect();
    assert_eq!(
        deleted.len(),
        2,
        "a full batch past the kept children: {deleted:?}"
    );
    assert!(
        !deleted.contains(&"p/kid#0") && !deleted.contains(&"p/kid#1"),
        "{deleted:?}"
    );
    let mut rest = store.delete_ended(u64::MAX, 10).await.expect("delete");
    rest.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let mut all: Vec<String> = deleted.iter().map(|e| e.to_string()).collect();
    all.extend(rest.iter().map(|e| e.to_string()));
    all.sort();
    assert_eq!(all, ["p/kid#2", "z-0", "z-1", "z-2"]);
    assert_eq!(store.head(&id("p/kid#0")).await.expect("head"), 2);
    // The parent hears of kid#0's end: kid#0 may go; kid#1 stays.
    let heard = Event::ExecutionResumed(ExecutionResumed {
        gate_id: gate(0),
        event_type: crate::runtime::CHILD_EVENT_TYPE.into(),
        correlation_key: "p/kid#0".into(),
        payload: json!({}).into(),
    });
    store.append(&id("p"), 3, &[heard]).await.expect("append");
    let deleted = store.delete_ended(u64::MAX, 10).await.expect("delete");
    assert_eq!(deleted, [id("p/kid#0")]);
    // The parent ends (its gates with it): kid#1 may go.
    store
        .append(&id("p"), 4, &[completed()])
        .await
        .expect("append");
    let mut deleted = store.delete_ended(u64::MAX, 10).await.expect("delete");
    deleted.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    assert_eq!(deleted, [id("p"), id("p/kid#1")]);
}
