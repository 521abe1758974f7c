//! The check of the wake-up index ([`EventStore::list_wakeups`]).

use super::StoreHarness;
use super::events::{completed, deadline, id, resumed, started, suspended};
use crate::event::{Event, ExecutionSuspended};
use crate::store::EventStore;

/// The wake-up index ([`EventStore::list_wakeups`]): a deadline's row from its decision until
/// its gate is resumed or the execution ends; a child gate's and a child's rows at time 0;
/// listed in key order, a window and a page at a time, across a reopen.
pub async fn wake_index_follows_deadlines_and_child_links<H: StoreHarness>(harness: &mut H) {
    use crate::store::{WakeReason, Wakeup};
    let store = harness.fresh();
    let row = |at_ms: u64, execution: &str, reason: WakeReason| Wakeup {
        at_ms,
        execution: id(execution),
        reason,
    };
    let deadline_of = |gate: &str| WakeReason::Deadline {
        gate_id: gate.into(),
    };
    store
        .append(
            &id("b"),
            0,
            &[started("f"), deadline("g", 20), suspended("g")],
        )
        .await
        .expect("the append is stored");
    store
        .append(
            &id("a"),
            0,
            &[
                started("f"),
                deadline("g1", 20),
                suspended("g1"),
                deadline("g2", 10),
                suspended("g2"),
            ],
        )
        .await
        .expect("the append is stored");
    let waits = Event::ExecutionSuspended(ExecutionSuspended {
        gate_id: "child:kid#0".into(),
        event_type: crate::runtime::CHILD_EVENT_TYPE.into(),
        correlation_key: "p/kid#0".into(),
    });
    store
        .append(&id("p"), 0, &[started("f"), waits])
        .await
        .expect("the append is stored");
    store
        .append(&id("p/kid#0"), 0, &[started("kid")])
        .await
        .expect("the append is stored");
    let all = vec![
        row(
            0,
            "p",
            WakeReason::AwaitsChild {
                gate_id: "child:kid#0".into(),
            },
        ),
        row(0, "p/kid#0", WakeReason::IsChild),
        row(10, "a", deadline_of("g2")),
        row(20, "a", deadline_of("g1")),
        row(20, "b", deadline_of("g")),
    ];
    assert_eq!(
        store
            .list_wakeups(u64::MAX, None, 100)
            .await
            .expect("the index lists"),
        all
    );
    assert_eq!(
        store
            .list_wakeups(20, None, 100)
            .await
            .expect("the index lists"),
        all[..3]
    );
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_wakeups(u64::MAX, after.as_ref(), 2)
            .await
            .expect("the index lists");
        assert!(page.len() <= 2);
        let Some(last) = page.last().cloned() else {
            break;
        };
        paged.extend(page);
        after = Some(last);
    }
    assert_eq!(paged, all, "paging gives every row once, in order");
    // A resume removes its gate's row, an end every row of the execution.
    store
        .append(&id("a"), 5, &[resumed("g2")])
        .await
        .expect("the append is stored");
    store
        .append(&id("b"), 3, &[completed()])
        .await
        .expect("the append is stored");
    store
        .append(&id("p/kid#0"), 1, &[completed()])
        .await
        .expect("the append is stored");
    let store = harness.reopen(store);
    assert_eq!(
        store
            .list_wakeups(u64::MAX, None, 100)
            .await
            .expect("the index lists"),
        vec![all[0].clone(), row(20, "a", deadline_of("g1")),]
    );
}
