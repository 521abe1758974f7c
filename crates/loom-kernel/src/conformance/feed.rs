//! The checks of the store-wide feed ([`EventStore::read_feed`], `follow`).

use serde_json::json;

use super::StoreHarness;
use super::events::{completed, id, started, tagged};
use crate::envelope::EventEnvelope;
use crate::store::{EventStore, EventStoreExt, FeedEvent};

pub(super) async fn whole_feed<S: EventStore>(store: &S, page: usize) -> Vec<FeedEvent> {
    let mut all = Vec::new();
    let mut from = 0;
    loop {
        let events = store.read_feed(from, page).await.expect("read_feed");
        assert!(events.len() <= page.max(1));
        let Some(last) = events.last() else { break };
        from = last.position + 1;
        all.extend(events);
    }
    all
}

/// The feed holds every stored event once, positions strictly increasing, each execution's
/// events in seq order and equal to its log; paging gives the same; positions survive a
/// reopen and later appends come after them.
pub async fn feed_gives_every_event_once_in_order<H: StoreHarness>(harness: &mut H) {
    let store = harness.fresh();
    assert!(store.read_feed(0, 10).await.expect("empty feed").is_empty());
    let ids: Vec<_> = (0..6).map(|i| id(&format!("feed-{i}"))).collect();
    // Interleaved appends across executions, some batched.
    for (i, e) in ids.iter().enumerate() {
        store.append(e, 0, &[started("f")]).await.expect("append");
        if i % 2 == 0 {
            store
                .append(e, 1, &[tagged(json!(i)), tagged(json!(i + 100))])
                .await
                .expect("append");
        }
    }
    store
        .append(&ids[1], 1, &[tagged(json!("late")), completed()])
        .await
        .expect("append");
    let check = |feed: &[FeedEvent]| {
        for pair in feed.windows(2) {
            assert!(pair[0].position < pair[1].position, "positions go back");
        }
        let mut per_execution: std::collections::BTreeMap<String, Vec<EventEnvelope>> =
            Default::default();
        for event in feed {
            per_execution
                .entry(event.envelope.execution_id.to_string())
                .or_default()
                .push(event.envelope.clone());
        }
        per_execution
    };
    let feed = whole_feed(&store, 1000).await;
    let per_execution = check(&feed);
    assert_eq!(per_execution.len(), ids.len());
    for e in &ids {
        let log = store.read_all(e).await.expect("read");
        assert_eq!(per_execution[e.as_str()], log, "{e}");
    }
    assert_eq!(whole_feed(&store, 1).await, feed, "pages of one");
    assert_eq!(whole_feed(&store, 4).await, feed, "pages of four");
    let middle = feed[feed.len() / 2].position;
    let tail = store.read_feed(middle, 1000).await.expect("tail");
    assert_eq!(tail, feed[feed.len() / 2..], "read from a position");

    let store = harness.reopen(store);
    assert_eq!(whole_feed(&store, 1000).await, feed, "after a reopen");
    store
        .append(&ids[0], 3, &[tagged(json!("after"))])
        .await
        .expect("append after reopen");
    let last = feed.last().expect("feed").position;
    let after = store.read_feed(last + 1, 10).await.expect("read");
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].envelope.event, tagged(json!("after")));
    assert_eq!(after[0].envelope.seq, 3);
    // Refused and conflicting appends leave no trace in the feed.
    let _ = store.append(&ids[1], 3, &[tagged(json!("x"))]).await;
    let _ = store.append(&ids[0], 0, &[tagged(json!("x"))]).await;
    let again = store.read_feed(last + 1, 10).await.expect("read");
    assert_eq!(again, after);
}

/// `follow` delivers what is stored, then wakes for each later append.
pub async fn follow_wakes_on_append<S: EventStore + Clone>(store: S) {
    use futures::StreamExt;
    let e = id("followed");
    store.append(&e, 0, &[started("f")]).await.expect("append");
    let (sender, mut received) = tokio::sync::mpsc::unbounded_channel();
    let follower = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut feed = std::pin::pin!(store.follow(0));
            while let Some(event) = feed.next().await {
                if sender.send(event.expect("follow")).is_err() {
                    break;
                }
            }
        })
    };
    let wait = std::time::Duration::from_secs(10);
    let first = tokio::time::timeout(wait, received.recv())
        .await
        .expect("stored event delivered")
        .expect("event");
    assert_eq!(first.envelope.seq, 0);
    for seq in 1..4u64 {
        store
            .append(&e, seq, &[tagged(json!(seq))])
            .await
            .expect("append");
        let next = tokio::time::timeout(wait, received.recv())
            .await
            .expect("woke for the append")
            .expect("event");
        assert_eq!(next.envelope.seq, seq);
        assert_eq!(next.envelope.event, tagged(json!(seq)));
    }
    follower.abort();
}
