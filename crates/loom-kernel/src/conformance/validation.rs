//! The checks that a store refuses what would make a log unreadable, and stores nothing of
//! the batch.

use serde_json::json;

use super::events::{completed, id, nested, started, tag_of, tagged};
use crate::event::{Event, ExecutionCancelled, SurfacePatch};
use crate::fold::{ExecutionStatus, Violation};
use crate::store::{AppendError, EventStore, EventStoreExt};

fn expect_invalid<T: std::fmt::Debug>(
    outcome: Result<T, AppendError>,
    seq: u64,
    violation: impl Fn(&Violation) -> bool,
) {
    match outcome {
        Err(AppendError::Invalid {
            seq: refused_at,
            violation: found,
            ..
        }) => {
            assert_eq!(refused_at, seq, "refused at the wrong seq: {found}");
            assert!(violation(&found), "wrong violation: {found}");
        }
        other => panic!("expected AppendError::Invalid at seq {seq}, got {other:?}"),
    }
}

/// A first event that is not EXECUTION_STARTED, a second EXECUTION_STARTED and an event after
/// a terminal one are refused with `AppendError::Invalid`, and nothing of the batch is stored,
/// even when its first events were valid. A stale seq is still a conflict.
pub async fn invalid_appends_are_refused_whole<S: EventStore>(store: S) {
    let e = id("invalid");
    expect_invalid(store.append(&e, 0, &[tagged(json!(0))]).await, 0, |v| {
        matches!(v, Violation::NotStarted { .. })
    });
    assert_eq!(store.head(&e).await.expect("head"), 0);
    let listed = store.list_executions(None, 10).await.expect("list");
    assert!(listed.executions.is_empty(), "{listed:?}");

    expect_invalid(
        store
            .append(&e, 0, &[started("f"), tagged(json!(1)), started("f")])
            .await,
        2,
        |v| matches!(v, Violation::StartedTwice),
    );
    assert_eq!(
        store.head(&e).await.expect("head"),
        0,
        "half a batch stored"
    );

    store
        .append(&e, 0, &[started("f"), tagged(json!(1))])
        .await
        .expect("valid start");
    expect_invalid(store.append(&e, 2, &[started("again")]).await, 2, |v| {
        matches!(v, Violation::StartedTwice)
    });
    expect_invalid(
        store
            .append(&e, 2, &[completed(), tagged(json!("late"))])
            .await,
        3,
        |v| {
            matches!(
                v,
                Violation::AfterTerminal {
                    status: ExecutionStatus::Completed,
                    ..
                }
            )
        },
    );
    assert_eq!(
        store.head(&e).await.expect("head"),
        2,
        "half a batch stored"
    );
    assert!(matches!(
        store.append(&e, 0, &[started("f")]).await,
        Err(AppendError::Conflict { actual_seq: 2, .. })
    ));

    store.append(&e, 2, &[completed()]).await.expect("complete");
    for late in [
        tagged(json!("late")),
        completed(),
        Event::ExecutionCancelled(ExecutionCancelled { reason: None }),
        started("f"),
    ] {
        expect_invalid(store.append(&e, 3, &[late]).await, 3, |v| {
            matches!(v, Violation::AfterTerminal { .. })
        });
    }
    let log = store.read_all(&e).await.expect("read");
    assert_eq!(log.len(), 3);
    let state = store.fold(&e).await.expect("the stored log folds");
    assert_eq!(state.status(), ExecutionStatus::Completed);
}

/// A payload nested deeper than `MAX_PAYLOAD_DEPTH` (serde_json's recursion limit) is refused
/// with `AppendError::PayloadTooDeep`, nothing of the batch stored; one at the limit is stored
/// and reads back whole.
pub async fn payloads_too_deep_to_read_back_are_refused<S: EventStore>(store: S) {
    let e = id("deep");
    let too_deep = crate::payload::Payload::from_value(&nested(crate::payload::MAX_DEPTH + 1));
    let patch = Event::SurfacePatch(SurfacePatch {
        step_id: "deep".into(),
        surface_id: "s".into(),
        ops: too_deep,
    });
    match store.append(&e, 0, &[started("f"), patch]).await {
        Err(AppendError::PayloadTooDeep { seq: 1, .. }) => {}
        other => panic!("expected PayloadTooDeep at seq 1, got {other:?}"),
    }
    assert_eq!(store.head(&e).await.expect("head"), 0);
    let deepest = tagged(nested(crate::payload::MAX_DEPTH - 1));
    store
        .append(&e, 0, &[started("f"), deepest.clone()])
        .await
        .expect("a payload at the limit is stored");
    let log = store.read_all(&e).await.expect("read");
    assert_eq!(log[1].event, deepest);
    assert_eq!(tag_of(&log[1].event), tag_of(&deepest));
}
