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
