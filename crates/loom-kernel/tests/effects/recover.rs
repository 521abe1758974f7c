//! Recovery drives every execution it can: one bad log is reported and skipped, never blocks
//! the others.

use loom_kernel::Event;
use loom_kernel::*;
use loom_kernel::{AppendError, ExecutionPage, ReadError};
use loom_kernel::{EventEnvelope, EventStore, ExecutionId, ExecutionStatus, MemoryStore};
use serde_json::{Value, json};

use crate::support;
use crate::support::{Calls, id};

/// A memory store that serves one execution's log with a second `EXECUTION_STARTED`, as a
/// store that acknowledged an invalid append would.
#[derive(Clone)]
struct OneBadLog {
    inner: MemoryStore,
    bad: ExecutionId,
}

impl OneBadLog {
    fn bad_log(&self) -> Vec<EventEnvelope> {
        (0..2)
            .map(|seq| {
                EventEnvelope::new(
                    self.bad.clone(),
                    seq,
                    loom_kernel::conformance::started("one"),
                )
            })
            .collect()
    }
}

impl EventStore for OneBadLog {
    async fn append(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        self.inner.append(execution, expected_seq, events).await
    }

    async fn read(
        &self,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<EventEnvelope>, ReadError> {
        if *execution == self.bad {
            let log = self.bad_log();
            return Ok(log.into_iter().skip(from as usize).take(limit).collect());
        }
        self.inner.read(execution, from, limit).await
    }

    async fn head(&self, execution: &ExecutionId) -> Result<u64, ReadError> {
        if *execution == self.bad {
            return Ok(2);
        }
        self.inner.head(execution).await
    }

    async fn list_executions(
        &self,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        self.inner.list_executions(after, limit).await
    }

    async fn wait_for(&self, execution: &ExecutionId, seq: u64) -> Result<(), ReadError> {
        self.inner.wait_for(execution, seq).await
    }
}

async fn one_step(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.execute("echo", &1).await?.to_value())
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
    let mut started = loom_kernel::conformance::started("one");
    if let Event::ExecutionStarted(e) = &mut started {
        e.capabilities.insert("echo".into());
    }
    inner.append(&good, 0, &[started]).await.unwrap();
    let store = OneBadLog {
        inner,
        bad: bad.clone(),
    };
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

/// A memory store that counts the reads of each execution's log.
#[derive(Clone, Default)]
struct CountingReads {
    inner: MemoryStore,
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

impl EventStore for CountingReads {
    async fn append(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        self.inner.append(execution, expected_seq, events).await
    }

    async fn read(
        &self,
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
        self.inner.read(execution, from, limit).await
    }

    async fn head(&self, execution: &ExecutionId) -> Result<u64, ReadError> {
        self.inner.head(execution).await
    }

    async fn list_executions(
        &self,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        self.inner.list_executions(after, limit).await
    }

    async fn wait_for(&self, execution: &ExecutionId, seq: u64) -> Result<(), ReadError> {
        self.inner.wait_for(execution, seq).await
    }

    async fn list_by_status(
        &self,
        filter: loom_kernel::StatusFilter,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        self.inner.list_by_status(filter, after, limit).await
    }
}

#[tokio::test]
async fn recover_reads_no_ended_execution() {
    use loom_kernel::conformance::{completed, started, suspended};
    let store = CountingReads::default();
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
    let mut start = started("one");
    if let Event::ExecutionStarted(e) = &mut start {
        e.capabilities.insert("echo".into());
    }
    store.append(&running, 0, &[start]).await.unwrap();

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
    assert!(
        store.reads_of(&parked) > 0,
        "a parked execution is read for its deadlines"
    );
    for execution in &ended {
        assert_eq!(
            store.reads_of(execution),
            0,
            "recovery read the ended execution {execution}"
        );
    }
    // A second recovery, with the running one now ended too, reads nothing more of it.
    let before = store.reads_of(&running);
    assert_eq!(rt.recover().await.unwrap(), 0);
    assert_eq!(store.reads_of(&running), before);
}
