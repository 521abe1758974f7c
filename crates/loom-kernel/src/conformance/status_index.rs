//! The checks of the status index ([`EventStore::list_by_status`]) through every transition.

use serde_json::Value;

use super::StoreHarness;
use super::events::{
    completed, id, in_doubt, resolved, resumed, started, step_completed, step_started, suspended,
};
use crate::event::{Event, ExecutionCancelled, Verdict};
use crate::fold::ExecutionStatus;
use crate::store::{EventStore, EventStoreExt, ExecutionSummary, StatusFilter};

pub(super) async fn listed<S: EventStore>(
    store: &S,
    filter: StatusFilter,
) -> Vec<ExecutionSummary> {
    use futures::TryStreamExt;
    store
        .executions_by_status(filter)
        .try_collect()
        .await
        .expect("list by status")
}

pub(super) fn names(summaries: &[ExecutionSummary]) -> Vec<&str> {
    summaries
        .iter()
        .map(|summary| summary.id.as_str())
        .collect()
}

/// `list_by_status` lists each execution under the status the fold gives it, and under
/// `NeedsDriving` exactly when the fold says it needs driving, after every kind of transition,
/// across pages, with each one's head, and the same after a reopen.
pub async fn status_index_follows_every_transition<H: StoreHarness>(harness: &mut H) {
    let store = harness.fresh();
    let logs: Vec<(&str, Vec<Event>)> = vec![
        ("completed", vec![started("f"), completed()]),
        (
            "cancelled",
            vec![
                started("f"),
                suspended("g"),
                Event::ExecutionCancelled(ExecutionCancelled { reason: None }),
            ],
        ),
        ("running", vec![started("f")]),
        (
            "running-again",
            vec![started("f"), suspended("g"), resumed("g")],
        ),
        ("step-in-flight", vec![started("f"), step_started("s")]),
        (
            "step-done",
            vec![started("f"), step_started("s"), step_completed("s")],
        ),
        ("suspended", vec![started("f"), suspended("g")]),
        (
            "suspended-in-flight",
            vec![started("f"), step_started("s"), suspended("g")],
        ),
        (
            "in-doubt",
            vec![started("f"), step_started("s"), in_doubt("s")],
        ),
        (
            "in-doubt-retried",
            vec![
                started("f"),
                step_started("s"),
                in_doubt("s"),
                resolved("s", Verdict::Retry),
            ],
        ),
        (
            "in-doubt-resolved-suspended",
            vec![
                started("f"),
                suspended("g"),
                step_started("s"),
                in_doubt("s"),
                resolved(
                    "s",
                    Verdict::Completed {
                        output: Value::Null.into(),
                    },
                ),
            ],
        ),
        // Ended with a step in doubt (a cancel, or a flow that returned while the effect ran):
        // listed under `StepsInDoubt` with its terminal status.
        (
            "cancelled-in-doubt",
            vec![
                started("f"),
                step_started("s"),
                in_doubt("s"),
                Event::ExecutionCancelled(ExecutionCancelled { reason: None }),
            ],
        ),
        (
            "completed-in-doubt",
            vec![
                started("f"),
                step_started("s"),
                suspended("g"),
                resumed("g"),
                in_doubt("s"),
                completed(),
            ],
        ),
    ];
    // Appended one event at a time, so every transition goes through the index.
    for (name, events) in &logs {
        for (seq, event) in events.iter().enumerate() {
            store
                .append(&id(name), seq as u64, std::slice::from_ref(event))
                .await
                .expect("append");
        }
    }
    check_status_listings(&store, &logs).await;
    let running = listed(&store, StatusFilter::Status(ExecutionStatus::Running)).await;
    assert_eq!(
        names(&running),
        [
            "in-doubt-retried",
            "running",
            "running-again",
            "step-done",
            "step-in-flight"
        ]
    );
    let driving = listed(&store, StatusFilter::NeedsDriving).await;
    assert_eq!(
        names(&driving),
        [
            "in-doubt-retried",
            "running",
            "running-again",
            "step-done",
            "step-in-flight",
            "suspended-in-flight"
        ]
    );
    let doubts = listed(&store, StatusFilter::StepsInDoubt).await;
    assert_eq!(
        names(&doubts),
        ["cancelled-in-doubt", "completed-in-doubt", "in-doubt"]
    );
    let store = harness.reopen(store);
    check_status_listings(&store, &logs).await;
    // Transitions after the reopen move executions between listings.
    store
        .append(&id("suspended"), 2, &[resumed("g")])
        .await
        .expect("resume");
    store
        .append(&id("running"), 1, &[completed()])
        .await
        .expect("complete");
    let running = listed(&store, StatusFilter::Status(ExecutionStatus::Running)).await;
    assert_eq!(
        names(&running),
        [
            "in-doubt-retried",
            "running-again",
            "step-done",
            "step-in-flight",
            "suspended"
        ]
    );
    let done = listed(&store, StatusFilter::Status(ExecutionStatus::Completed)).await;
    assert_eq!(names(&done), ["completed", "completed-in-doubt", "running"]);
    store
        .append(
            &id("in-doubt"),
            3,
            &[resolved(
                "s",
                Verdict::Failed {
                    error: crate::ErrorInfo::new("x", "did not run"),
                },
            )],
        )
        .await
        .expect("verdict");
    let doubts = listed(&store, StatusFilter::StepsInDoubt).await;
    assert_eq!(names(&doubts), ["cancelled-in-doubt", "completed-in-doubt"]);
}

/// Checks every status listing of `store` against the fold of each of `logs`.
async fn check_status_listings<S: EventStore>(store: &S, logs: &[(&str, Vec<Event>)]) {
    let filters = [
        StatusFilter::NeedsDriving,
        StatusFilter::Status(ExecutionStatus::New),
        StatusFilter::Status(ExecutionStatus::Running),
        StatusFilter::Status(ExecutionStatus::Suspended),
        StatusFilter::Status(ExecutionStatus::InDoubt),
        StatusFilter::Status(ExecutionStatus::Completed),
        StatusFilter::Status(ExecutionStatus::Failed),
        StatusFilter::Status(ExecutionStatus::Cancelled),
        StatusFilter::StepsInDoubt,
    ];
    for filter in filters {
        let mut expected = Vec::new();
        for (name, events) in logs {
            let state = store.fold(&id(name)).await.expect("fold");
            if filter.matches_state(&state) {
                expected.push(ExecutionSummary {
                    id: id(name),
                    head: events.len() as u64,
                });
            }
        }
        expected.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        let found = listed(store, filter).await;
        assert_eq!(names(&found), names(&expected), "{filter:?}");
        assert_eq!(found, expected, "{filter:?}: heads");
        // Pages of one see the same executions.
        let mut paged = Vec::new();
        let mut after = None;
        loop {
            let page = store
                .list_by_status(filter, after.as_ref(), 1)
                .await
                .expect("page");
            assert!(page.executions.len() <= 1);
            paged.extend(page.executions);
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(paged, expected, "{filter:?}: one per page");
    }
}
