//! Catch-up for projections: a projection fed from the store's feed sees every durable event
//! once, in order per execution, across a crash of the projection and a restart of the
//! runtime, and sees the events other runtimes on the same store append.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use loom_kernel::FeedEvent;
use loom_kernel::kit::{CatchUpError, catch_up};
use loom_kernel::*;
use loom_kernel::{DiskStore, EventEnvelope, EventStore, ExecutionId, MemoryStore, Payload};
use serde_json::{Value, json};

use crate::support::{Calls, echo, id};

/// Three steps, then a gate, then one more step.
async fn steps(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    for i in 0..3 {
        ctx.execute("echo", &json!(i)).await?;
    }
    let answer = ctx.suspend("Next", "go").await?;
    ctx.execute("echo", &answer).await?;
    Ok(answer.to_value())
}

fn runtime<S: EventStore>(store: S) -> Runtime<S> {
    Runtime::builder(store)
        .flow(flow_fn("steps", 1, steps))
        .effect("echo", echo(Calls::default()))
        .build()
        .unwrap()
}

fn granted(execution: &ExecutionId) -> StartOptions {
    StartOptions::new(execution.clone()).grant("echo")
}

/// What a ledger keeps: every (execution, seq) it was fed, in order, and the position after
/// the last one.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
struct Kept {
    next: u64,
    seen: Vec<(String, u64)>,
}

/// A projection that keeps its state and position together in a file (written whole, then
/// renamed: one atomic commit per event), and can be told to crash (panic before it commits)
/// on its n-th event.
struct Ledger {
    path: Option<PathBuf>,
    kept: Mutex<Kept>,
    crash_on: Option<usize>,
    applied: AtomicUsize,
}

impl Ledger {
    fn in_memory() -> Self {
        Self {
            path: None,
            kept: Mutex::default(),
            crash_on: None,
            applied: AtomicUsize::new(0),
        }
    }

    fn open(path: &Path, crash_on: Option<usize>) -> Self {
        let kept = std::fs::read(path)
            .map(|bytes| serde_json::from_slice(&bytes).unwrap())
            .unwrap_or_default();
        Self {
            path: Some(path.to_owned()),
            kept: Mutex::new(kept),
            crash_on,
            applied: AtomicUsize::new(0),
        }
    }
}

/// A handle on a ledger a runtime owns.
#[derive(Clone)]
struct Shared(Arc<Ledger>);

impl Shared {
    fn kept(&self) -> Kept {
        self.0.kept.lock().unwrap().clone()
    }
}

impl FeedProjection for Shared {
    fn start_position(&self) -> u64 {
        self.0.kept.lock().unwrap().next
    }

    fn apply(&self, event: &FeedEvent) {
        let n = self.0.applied.fetch_add(1, Ordering::SeqCst) + 1;
        if self.0.crash_on == Some(n) {
            panic!("the projection crashes on its event {n}");
        }
        let mut kept = self.0.kept.lock().unwrap();
        let mut next = kept.clone();
        next.seen.push((
            event.envelope.execution_id.as_str().to_owned(),
            event.envelope.seq,
        ));
        next.next = event.position + 1;
        if let Some(path) = &self.0.path {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, serde_json::to_vec(&next).unwrap()).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        }
        *kept = next;
    }
}

/// Checks that `kept` holds each event of `executions` exactly once, each execution's in seq
/// order, and nothing else.
async fn assert_exactly_once<S: EventStore>(store: &S, executions: &[ExecutionId], kept: &Kept) {
    let mut by_execution: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (execution, seq) in &kept.seen {
        by_execution.entry(execution).or_default().push(*seq);
    }
    let mut total = 0;
    for execution in executions {
        let head = store.head(execution).await.unwrap();
        assert!(head > 0);
        total += head as usize;
        let seqs = by_execution.remove(execution.as_str()).unwrap_or_default();
        assert_eq!(
            seqs,
            (0..head).collect::<Vec<_>>(),
            "execution {execution}: every event once, in seq order"
        );
    }
    assert!(by_execution.is_empty(), "nothing else: {by_execution:?}");
    assert_eq!(kept.seen.len(), total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projection_that_crashed_catches_up_on_a_new_runtime_with_nothing_missed_and_nothing_twice()
 {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("loom.redb");
    let ledger_file = dir.path().join("ledger.json");
    let ids: Vec<ExecutionId> = (0..4).map(|i| id(&format!("catch-{i}"))).collect();

    // The first process: its projection crashes on its 6th event; the runtime goes on.
    {
        let rt = runtime(DiskStore::open(&db).unwrap());
        let ledger = Shared(Arc::new(Ledger::open(&ledger_file, Some(6))));
        let follower = rt.follow_feed(ledger.clone());
        for e in &ids[..3] {
            rt.start("steps", &json!({}), granted(e)).await.unwrap();
            rt.wait(e).await.unwrap();
        }
        let crashed = follower.caught_up().await;
        assert!(
            matches!(crashed, Err(FollowError::Panicked { .. })),
            "{crashed:?}"
        );
        assert_eq!(ledger.kept().seen.len(), 5, "five events were committed");
        // Durable events the projection never sees in this process.
        rt.resume(&ids[0], "Next", "go", Payload::from(json!("on")))
            .await
            .unwrap();
        rt.start("steps", &json!({}), granted(&ids[3]))
            .await
            .unwrap();
        rt.wait(&ids[3]).await.unwrap();
        rt.wait(&ids[0]).await.unwrap();
        rt.shutdown().await;
    }

    // The next process: the projection starts from its own position and catches up.
    let store = DiskStore::open(&db).unwrap();
    let rt = runtime(store.clone());
    let ledger = Shared(Arc::new(Ledger::open(&ledger_file, None)));
    assert_eq!(ledger.kept().seen.len(), 5);
    let follower = rt.follow_feed(ledger.clone());
    follower.caught_up().await.unwrap();
    rt.recover().await.unwrap();
    assert_exactly_once(&store, &ids, &ledger.kept()).await;

    // Then it follows live appends.
    rt.resume(&ids[1], "Next", "go", Payload::from(json!("live")))
        .await
        .unwrap();
    rt.wait(&ids[1]).await.unwrap();
    follower.caught_up().await.unwrap();
    assert_exactly_once(&store, &ids, &ledger.kept()).await;
    assert_eq!(follower.position(), ledger.kept().next);

    // A shutdown stops the feeding and releases the store.
    rt.shutdown().await;
    assert_eq!(follower.stopped(), Some(FollowError::ShutDown));
    drop(store);
    let reopened = DiskStore::open(&db).unwrap();
    let ledger = Ledger::open(&ledger_file, None);
    let next = catch_up(&reopened, &ledger).await.unwrap();
    assert_eq!(
        next,
        ledger.kept.lock().unwrap().next,
        "nothing new to read"
    );
}

impl FeedProjection for Ledger {
    fn start_position(&self) -> u64 {
        self.kept.lock().unwrap().next
    }
    fn apply(&self, _event: &FeedEvent) {
        panic!("this ledger only checks that nothing is left to read");
    }
}

/// Records what a kernel projection (fed by this process's drivers) sees.
#[derive(Clone, Default)]
struct Live(Arc<Mutex<Vec<(String, u64)>>>);

impl Projection for Live {
    fn apply(&self, envelope: &EventEnvelope) {
        self.0
            .lock()
            .unwrap()
            .push((envelope.execution_id.as_str().to_owned(), envelope.seq));
    }
}

#[tokio::test]
async fn a_feed_projection_sees_what_another_runtime_on_the_store_appends() {
    let store = MemoryStore::new();
    let live = Live::default();
    let here = Runtime::builder(store.clone())
        .flow(flow_fn("steps", 1, steps))
        .effect("echo", echo(Calls::default()))
        .projection(live.clone())
        .build()
        .unwrap();
    let elsewhere = runtime(store.clone());
    let ledger = Shared(Arc::new(Ledger::in_memory()));
    let follower = here.follow_feed(ledger.clone());
    follower.caught_up().await.unwrap();

    let mine = id("mine");
    here.start("steps", &json!({}), granted(&mine))
        .await
        .unwrap();
    here.wait(&mine).await.unwrap();
    let theirs = id("theirs");
    elsewhere
        .start("steps", &json!({}), granted(&theirs))
        .await
        .unwrap();
    elsewhere.wait(&theirs).await.unwrap();
    elsewhere
        .resume(&theirs, "Next", "go", Payload::from(json!("done")))
        .await
        .unwrap();
    elsewhere.wait(&theirs).await.unwrap();

    follower.caught_up().await.unwrap();
    let both = [mine.clone(), theirs.clone()];
    assert_exactly_once(&store, &both, &ledger.kept()).await;
    // The kernel projection of `here` saw only what `here` appended.
    assert!(
        live.0
            .lock()
            .unwrap()
            .iter()
            .all(|(execution, _)| execution == mine.as_str())
    );

    // Caught up twice in a row reads nothing twice.
    follower.caught_up().await.unwrap();
    assert_exactly_once(&store, &both, &ledger.kept()).await;
    here.shutdown().await;
    elsewhere.shutdown().await;
}

#[tokio::test]
async fn catch_up_without_a_runtime_reads_from_the_projections_position_and_stops_on_a_panic() {
    let store = MemoryStore::new();
    let rt = runtime(store.clone());
    let ids = [id("offline-1"), id("offline-2")];
    for e in &ids {
        rt.start("steps", &json!({}), granted(e)).await.unwrap();
        rt.wait(e).await.unwrap();
    }
    let ledger = Shared(Arc::new(Ledger::in_memory()));
    let next = catch_up(&store, &ledger).await.unwrap();
    assert_eq!(next, ledger.kept().next);
    assert_exactly_once(&store, &ids, &ledger.kept()).await;
    // Again: nothing new, nothing twice.
    assert_eq!(catch_up(&store, &ledger).await.unwrap(), next);
    assert_exactly_once(&store, &ids, &ledger.kept()).await;

    // A projection that panics stops at the event it panicked on.
    let crashing = Shared(Arc::new(Ledger {
        crash_on: Some(3),
        ..Ledger::in_memory()
    }));
    let stopped = catch_up(&store, &crashing).await;
    assert!(matches!(
        stopped,
        Err(CatchUpError::Follow(FollowError::Panicked { .. }))
    ));
    assert_eq!(crashing.kept().seen.len(), 2);
    rt.shutdown().await;
}

#[tokio::test]
async fn a_runtime_shut_down_feeds_nothing() {
    let rt = runtime(MemoryStore::new());
    rt.clone().shutdown().await;
    let follower = rt.follow_feed(Shared(Arc::new(Ledger::in_memory())));
    assert_eq!(follower.caught_up().await, Err(FollowError::ShutDown));
}
