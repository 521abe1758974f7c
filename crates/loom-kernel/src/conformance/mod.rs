//! The store conformance suite: one set of checks every [`EventStore`] must pass.
//!
//! A store's tests implement [`StoreHarness`] and call [`run_all`] (or single checks). Each
//! check documents its preconditions and panics with a message on a breach of the contract in
//! [`crate::EventStore`]: it is test support, not library code for production paths.
//!
//! ```
//! use loom_kernel::conformance::{self, StoreHarness};
//! use loom_kernel::MemoryStore;
//!
//! struct Memory;
//! impl StoreHarness for Memory {
//!     type Store = MemoryStore;
//!     fn fresh(&mut self) -> MemoryStore { MemoryStore::new() }
//!     fn reopen(&mut self, store: MemoryStore) -> MemoryStore { store }
//! }
//! # tokio::runtime::Runtime::new().unwrap().block_on(conformance::run_all(&mut Memory));
//! ```

mod hooked;
mod queries;

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::envelope::EventEnvelope;
use crate::event::{
    EffectInDoubt, EffectResolved, Event, ExecutionCancelled, ExecutionCompleted, ExecutionResumed,
    ExecutionStarted, ExecutionSuspended, StepCompleted, StepStarted, SurfacePatch, Verdict,
};
use crate::fold::{ExecutionStatus, Violation};
use crate::id::ExecutionId;
use crate::store::{
    AppendError, EventStore, EventStoreExt, ExecutionSummary, FeedEvent, STREAM_PAGE, StatusFilter,
};

pub use hooked::{Hooked, OneBadLog, StoreHooks};
pub use queries::queries_agree_with_the_reference;

/// How the suite gets stores to check.
pub trait StoreHarness {
    /// The store under test.
    type Store: EventStore + Clone;
    /// A new, empty store.
    fn fresh(&mut self) -> Self::Store;
    /// Closes `store` and opens the same logs again (for a durable store: from its files).
    fn reopen(&mut self, store: Self::Store) -> Self::Store;
}

/// Runs every check, each on a fresh store.
pub async fn run_all<H: StoreHarness>(harness: &mut H) {
    run_log_checks(harness).await;
    run_index_checks(harness).await;
}

/// The checks of validation, the status index, the feed and retention
/// ([`EventStore::list_by_status`], [`EventStore::read_feed`], [`EventStore::delete_ended`]).
pub async fn run_index_checks<H: StoreHarness>(harness: &mut H) {
    invalid_appends_are_refused_whole(harness.fresh()).await;
    payloads_too_deep_to_read_back_are_refused(harness.fresh()).await;
    status_index_follows_every_transition(harness).await;
    feed_gives_every_event_once_in_order(harness).await;
    follow_wakes_on_append(harness.fresh()).await;
    delete_ended_removes_only_old_ended_executions(harness.fresh()).await;
    a_deleted_id_started_again_feeds_each_event_once_in_order(harness).await;
    queries_agree_with_the_reference(harness).await;
    wake_index_follows_deadlines_and_child_links(harness).await;
}

/// The checks of the log itself: appends, fencing, reads, listing, waiting.
pub async fn run_log_checks<H: StoreHarness>(harness: &mut H) {
    append_then_read(harness.fresh()).await;
    conflicting_append_changes_nothing(harness.fresh()).await;
    empty_batch_is_refused(harness.fresh()).await;
    racing_appenders_one_winner_per_seq(harness.fresh()).await;
    contending_writers_keep_the_log_gapless(harness.fresh()).await;
    reads_after_reopen(harness).await;
    large_payloads(harness.fresh()).await;
    many_executions_and_paging(harness.fresh()).await;
    ids_sharing_a_prefix_stay_apart(harness.fresh()).await;
    stream_crosses_pages(harness.fresh()).await;
    wait_for_wakes_on_append(harness.fresh()).await;
    read_logs_reads_whole_logs(harness.fresh()).await;
    a_store_holds_what_it_just_appended(harness.fresh()).await;
    a_claimed_id_takes_the_claimants_first_append_only(harness.fresh()).await;
}

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
/// store with no leases holds every execution, [`crate::LeaseHold::Exclusive`]; one with
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
            matches!(hold, crate::LeaseHold::Held { token } if token > 0),
            "a store with leases answers with a token: {hold:?}"
        );
    } else {
        assert_eq!(hold, crate::LeaseHold::Exclusive);
    }
}

/// A JSON value `depth` arrays deep around the number 1: what tests of the payload depth limit
/// (`MAX_PAYLOAD_DEPTH`) record.
pub fn nested(depth: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

/// An id for tests; panics on an invalid literal.
pub fn id(name: &str) -> ExecutionId {
    ExecutionId::new(name).expect("test execution id")
}

/// An idempotent effect that answers with its input: the no-op step of benchmarks and tests.
pub fn echo_effect() -> impl crate::Effect {
    crate::FnEffect::new(true, |call: crate::EffectCall| async move {
        crate::EffectOutcome::ok(call.input)
    })
}

/// `events` as the log of `execution`, from seq 0.
pub fn log_of(
    execution: &ExecutionId,
    events: impl IntoIterator<Item = Event>,
) -> Vec<EventEnvelope> {
    (0..)
        .zip(events)
        .map(|(seq, event)| EventEnvelope::new(execution.clone(), seq, event))
        .collect()
}

/// An EXECUTION_STARTED event for tests.
pub fn started(flow: &str) -> Event {
    Event::ExecutionStarted(ExecutionStarted {
        flow: flow.into(),
        flow_version: 1,
        input: Value::Null.into(),
        capabilities: BTreeSet::new(),
        budget: None,
    })
}

/// A SURFACE_PATCH carrying `tag`, so a test can tell events apart.
pub fn tagged(tag: Value) -> Event {
    Event::SurfacePatch(SurfacePatch {
        step_id: "tag".into(),
        surface_id: "test".into(),
        ops: Value::Array(vec![tag]).into(),
    })
}

fn tag_of(event: &Event) -> Option<Value> {
    match event {
        Event::SurfacePatch(patch) => patch.ops.to_value().get(0).cloned(),
        _ => None,
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

/// `read_logs` gives each execution's whole log, in the order asked, empty for an unknown one.
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
    let logs = store.read_logs(&asked).await.expect("read_logs");
    assert_eq!(logs.len(), asked.len());
    for (e, log) in asked.iter().zip(&logs) {
        assert_eq!(log, &store.read_all(e).await.expect("read_all"), "{e}");
    }
    assert!(
        logs[asked.len() - 2].is_empty(),
        "the unknown execution reads as empty"
    );
}

/// EXECUTION_COMPLETED with a null output.
pub fn completed() -> Event {
    Event::ExecutionCompleted(ExecutionCompleted {
        output: Value::Null.into(),
    })
}

/// STEP_STARTED of `step_id` (effect `pay`, attempt 1).
pub fn step_started(step_id: &str) -> Event {
    Event::StepStarted(StepStarted {
        step_id: step_id.into(),
        effect: "pay".into(),
        input_digest: "0".into(),
        attempt: 1,
        max_cost: 0,
    })
}

/// STEP_COMPLETED of `step_id` (effect `pay`).
pub fn step_completed(step_id: &str) -> Event {
    Event::StepCompleted(StepCompleted {
        step_id: step_id.into(),
        effect: "pay".into(),
        input_digest: "0".into(),
        output: Value::Null.into(),
        cost: 0,
    })
}

/// EFFECT_INDOUBT of `step_id` (effect `pay`, attempt 1).
pub fn in_doubt(step_id: &str) -> Event {
    Event::EffectInDoubt(EffectInDoubt {
        step_id: step_id.into(),
        effect: "pay".into(),
        attempt: 1,
        reason: None,
    })
}

/// EFFECT_RESOLVED of `step_id` with `verdict`.
pub fn resolved(step_id: &str, verdict: Verdict) -> Event {
    Event::EffectResolved(EffectResolved {
        step_id: step_id.into(),
        verdict,
        operator: None,
    })
}

/// EXECUTION_SUSPENDED at `gate_id` (event type `approval`, key `k`).
pub fn suspended(gate_id: &str) -> Event {
    Event::ExecutionSuspended(ExecutionSuspended {
        gate_id: gate_id.into(),
        event_type: "approval".into(),
        correlation_key: "k".into(),
    })
}

/// EXECUTION_RESUMED of `gate_id`, matching [`suspended`].
pub fn resumed(gate_id: &str) -> Event {
    Event::ExecutionResumed(ExecutionResumed {
        gate_id: gate_id.into(),
        event_type: "approval".into(),
        correlation_key: "k".into(),
        payload: Value::Null.into(),
    })
}

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

async fn listed<S: EventStore>(store: &S, filter: StatusFilter) -> Vec<ExecutionSummary> {
    use futures::TryStreamExt;
    store
        .executions_by_status(filter)
        .try_collect()
        .await
        .expect("list by status")
}

fn names(summaries: &[ExecutionSummary]) -> Vec<&str> {
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

async fn whole_feed<S: EventStore>(store: &S, page: usize) -> Vec<FeedEvent> {
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

/// `DECISION_RECORDED` of a gate's deadline (`loom.deadline`).
pub fn deadline(gate_id: &str, deadline_ms: u64) -> Event {
    Event::DecisionRecorded(crate::event::DecisionRecorded {
        step_id: gate_id.into(),
        kind: crate::runtime::DEADLINE_KIND.into(),
        value: serde_json::json!({ "deadlineMs": deadline_ms }).into(),
    })
}

/// A parked execution's whole log: started (flow `nap`), then asleep on the timer `timer#1`
/// due at `deadline_ms`, as `ctx.sleep` records it.
pub fn asleep_on_timer(deadline_ms: u64) -> Vec<Event> {
    vec![
        started("nap"),
        deadline("timer#1", deadline_ms),
        Event::ExecutionSuspended(crate::event::ExecutionSuspended {
            gate_id: "timer#1".into(),
            event_type: crate::runtime::TIMER_EVENT_TYPE.into(),
            correlation_key: "timer#1".into(),
        }),
    ]
}

/// A runtime on `store` with one flow, `stuck`, whose one idempotent step (effect `stuck`)
/// never answers: an execution of it stays running for good (recovery benches, to have
/// executions a worker must drive).
pub fn stuck_runtime<S: EventStore>(store: S) -> crate::Runtime<S> {
    async fn stuck_flow(ctx: crate::FlowCtx, _: Value) -> Result<Value, crate::FlowError> {
        Ok(ctx.execute("stuck", &1).await?.to_value())
    }
    let stuck = crate::FnEffect::new(true, |_call: crate::EffectCall| async {
        std::future::pending::<()>().await;
        crate::EffectOutcome::ok(Value::Null.into())
    });
    crate::Runtime::builder(store)
        .flow(crate::flow_fn("stuck", 1, stuck_flow))
        .effect("stuck", stuck)
        .build()
        .expect("the stuck flow and its effect compose")
}

/// Fills `store` for the recovery benches: `count` executions `{prefix}-00000000`... whose
/// logs are `events`, appended 20,000 at a time (the store's writer groups them), then
/// [`RUNNING_LEFT`] executions of [`stuck_runtime`]'s flow (`running-000`...) left running.
pub async fn fill_for_recovery<S: EventStore + Clone + 'static>(
    store: &S,
    prefix: &str,
    count: usize,
    events: &[Event],
) {
    let ids: Vec<ExecutionId> = (0..count)
        .map(|n| ExecutionId::new(format!("{prefix}-{n:08}")).expect("a valid id"))
        .collect();
    for chunk in ids.chunks(20_000) {
        let appends = chunk.iter().map(|id| store.append(id, 0, events));
        for appended in futures::future::join_all(appends).await {
            appended.expect("the append is stored");
        }
    }
    let rt = stuck_runtime(store.clone());
    for n in 0..RUNNING_LEFT {
        rt.start(
            "stuck",
            &json!(n),
            crate::StartOptions::new(
                ExecutionId::new(format!("running-{n:03}")).expect("a valid id"),
            )
            .grant("stuck"),
        )
        .await
        .expect("the execution starts");
    }
    rt.shutdown().await;
}

/// How many running executions [`fill_for_recovery`] leaves.
pub const RUNNING_LEFT: usize = 100;

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
