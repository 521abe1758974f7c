//! Recovery drives every execution it can: one bad log is reported and skipped, never blocks
//! the others.

use loom_kernel::Event;
use loom_kernel::ReadError;
use loom_kernel::conformance::{Hooked, OneBadLog, StoreHooks, asleep_on_timer};
use loom_kernel::*;
use loom_kernel::{EventEnvelope, EventStore, ExecutionId, ExecutionStatus, MemoryStore};
use serde_json::{Value, json};

use crate::support;
use crate::support::{Calls, id};

async fn one_step(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.execute("echo", &1).await?.to_value())
}

/// The start of flow `one` granted `echo`, so that its step runs once recovered.
fn started_with_echo() -> Event {
    let mut started = loom_kernel::conformance::started("one");
    if let Event::ExecutionStarted(e) = &mut started {
        e.capabilities.insert("echo".into());
    }
    started
}

#[tokio::test]
async fn recover_reports_and_skips_a_bad_log_and_drives_the_others() {
    let inner = MemoryStore::new();
    let bad = id("a-bad");
    let good = id("b-good");
    // Listed first (ids in order), so a recovery that stops at it never reaches the good one.
    inner
        .append(&bad, 0, &[loom_kernel::conformance::started("one")])
        .await
        .unwrap();
    let started = started_with_echo();
    inner.append(&good, 0, &[started]).await.unwrap();
    let store = Hooked::new(inner, OneBadLog { bad: bad.clone() });
    let rt = Runtime::builder(store)
        .flow(flow_fn("one", 1, one_step))
        .effect("echo", support::echo(Calls::default()))
        .build()
        .unwrap();
    let report = rt.recover_report().await.unwrap();
    assert_eq!(report.started, 1);
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].execution, bad);
    assert_eq!(
        rt.wait(&good).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    // The count-only form skips it the same way.
    assert_eq!(rt.recover().await.unwrap(), 0);
    let _ = json!(null);
}

/// Hooks that count the reads of each execution's log.
#[derive(Clone, Default)]
struct CountingReads {
    reads: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<ExecutionId, usize>>>,
}

impl CountingReads {
    fn reads_of(&self, execution: &ExecutionId) -> usize {
        self.reads
            .lock()
            .unwrap()
            .get(execution)
            .copied()
            .unwrap_or(0)
    }
}

impl<S: EventStore> StoreHooks<S> for CountingReads {
    async fn read(
        &self,
        inner: &S,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<EventEnvelope>, ReadError> {
        *self
            .reads
            .lock()
            .unwrap()
            .entry(execution.clone())
            .or_default() += 1;
        inner.read(execution, from, limit).await
    }
}

#[tokio::test]
async fn recover_reads_no_ended_execution() {
    use loom_kernel::conformance::{completed, started, suspended};
    let store = Hooked::<MemoryStore, CountingReads>::default();
    let ended: Vec<ExecutionId> = (0..50).map(|n| id(&format!("ended-{n:03}"))).collect();
    for execution in &ended {
        store
            .append(execution, 0, &[started("one"), completed()])
            .await
            .unwrap();
    }
    let parked = id("parked");
    store
        .append(&parked, 0, &[started("one"), suspended("g")])
        .await
        .unwrap();
    let running = id("running");
    store
        .append(&running, 0, &[started_with_echo()])
        .await
        .unwrap();

    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("one", 1, one_step))
        .effect("echo", support::echo(Calls::default()))
        .build()
        .unwrap();
    let report = rt.recover_report().await.unwrap();
    assert_eq!(
        report.started, 1,
        "only the running execution needs a driver"
    );
    assert!(report.skipped.is_empty());
    assert_eq!(
        rt.wait(&running).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    assert_eq!(
        store.hooks.reads_of(&parked),
        0,
        "a parked execution with nothing due is not read (LD-033)"
    );
    for execution in &ended {
        assert_eq!(
            store.hooks.reads_of(execution),
            0,
            "recovery read the ended execution {execution}"
        );
    }
    // A second recovery, with the running one now ended too, reads nothing more of it.
    let before = store.hooks.reads_of(&running);
    assert_eq!(rt.recover().await.unwrap(), 0);
    assert_eq!(store.hooks.reads_of(&running), before);
}

/// Hole 6 of issue 24: recovery folded every parked execution. It now reads the log of a
/// parked execution only once something is due for it: a deadline within its window (read
/// when it fires), never for a gate without one; a later deadline when its time comes.
async fn recover_reads_a_parked_log_only_when_its_deadline_comes_on<S>(inner: S)
where
    S: EventStore + Clone,
    CountingReads: StoreHooks<S>,
{
    use loom_kernel::conformance::{started, suspended};
    const T0: u64 = 1_800_000_000_000;
    let store = Hooked::new(inner, CountingReads::default());
    let waiting: Vec<ExecutionId> = (0..20).map(|n| id(&format!("waits-{n:02}"))).collect();
    for execution in &waiting {
        store
            .append(execution, 0, &[started("nap"), suspended("g")])
            .await
            .unwrap();
    }
    let later = id("sleeps-an-hour");
    store
        .append(&later, 0, &asleep_on_timer(T0 + 3_600_000))
        .await
        .unwrap();
    let due = id("sleeps-a-second");
    store
        .append(&due, 0, &asleep_on_timer(T0 + 1_000))
        .await
        .unwrap();
    let clock = ManualClock::new(T0);
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("nap", 1, nap))
        .clock(clock.clone())
        .build()
        .unwrap();
    let report = rt.recover_report().await.unwrap();
    assert_eq!(report.started, 0);
    assert_eq!(
        report.timers, 1,
        "only the deadline within the window is armed"
    );
    for execution in waiting.iter().chain([&later, &due]) {
        assert_eq!(
            store.hooks.reads_of(execution),
            0,
            "recovery read the parked execution {execution}"
        );
    }
    clock.advance(std::time::Duration::from_secs(1));
    until_completed(&rt, &due).await;
    assert_eq!(store.hooks.reads_of(&later), 0);
    clock.advance(std::time::Duration::from_secs(3_600));
    until_completed(&rt, &later).await;
    for execution in &waiting {
        assert_eq!(store.hooks.reads_of(execution), 0);
    }
    rt.shutdown().await;
}

async fn nap(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.sleep(std::time::Duration::from_secs(1)).await?;
    Ok(Value::Null)
}

async fn until_completed<S: EventStore>(rt: &Runtime<S>, execution: &ExecutionId) {
    for _ in 0..500 {
        if rt.state(execution).await.unwrap().status() == ExecutionStatus::Completed {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{execution} did not complete");
}

#[tokio::test]
async fn recover_reads_a_parked_log_only_when_its_deadline_comes_in_memory() {
    recover_reads_a_parked_log_only_when_its_deadline_comes_on(MemoryStore::new()).await;
}

#[tokio::test]
async fn recover_reads_a_parked_log_only_when_its_deadline_comes_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path().join("loom.redb")).unwrap();
    recover_reads_a_parked_log_only_when_its_deadline_comes_on(store).await;
}

/// An execution whose flow this runtime does not register is not driven (a driver would fail
/// at once) and not left unsaid: the report names it with its flow, the others are driven.
#[tokio::test]
async fn recover_names_an_execution_whose_flow_is_not_registered_and_drives_the_others() {
    let store = MemoryStore::new();
    let orphan = id("a-orphan");
    let good = id("b-good");
    store
        .append(&orphan, 0, &[loom_kernel::conformance::started("gone")])
        .await
        .unwrap();
    let started = started_with_echo();
    store.append(&good, 0, &[started]).await.unwrap();
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("one", 1, one_step))
        .effect("echo", support::echo(Calls::default()))
        .build()
        .unwrap();
    let report = rt.recover_report().await.unwrap();
    assert_eq!(report.started, 1);
    assert!(report.skipped.is_empty());
    assert_eq!(report.unregistered.len(), 1);
    assert_eq!(report.unregistered[0].execution, orphan);
    assert_eq!(report.unregistered[0].flow, "gone");
    assert_eq!(
        rt.wait(&good).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    assert_eq!(
        store.fold(&orphan).await.unwrap().status(),
        ExecutionStatus::Running,
        "left as it was, for a runtime that registers its flow"
    );
}

/// Issue 41, hole 8: the disk store's wake-up tables exist from its creation, so a store whose
/// executions never had a deadline or a child still answers `list_wakeups` from its index.
/// Before, a table was made only with its first row, and until then recovery read every open
/// log (6 to 18 s at 100,000 parked executions). The fallback reads inside the store, out of a
/// hook's sight: the test looks for the tables themselves.
#[tokio::test]
async fn a_disk_store_that_never_had_a_deadline_has_its_wake_up_tables() {
    use loom_kernel::conformance::{started, suspended};
    use redb::{ReadableDatabase, TableHandle};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = loom_kernel::DiskStore::open(&path).unwrap();
        for n in 0..20 {
            store
                .append(
                    &id(&format!("parked-{n:03}")),
                    0,
                    &[started("one"), suspended("g")],
                )
                .await
                .unwrap();
        }
    }
    let db = redb::Database::builder().open_read_only(&path).unwrap();
    let txn = db.begin_read().unwrap();
    let tables: Vec<String> = txn
        .list_tables()
        .unwrap()
        .map(|table| table.name().to_owned())
        .collect();
    for table in ["wakeups", "wake_rows"] {
        assert!(
            tables.iter().any(|name| name == table),
            "{table} missing: {tables:?}"
        );
    }
}
