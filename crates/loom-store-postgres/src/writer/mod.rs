//! Group commit: one task takes every append queued at that moment, across executions, and
//! commits them in one transaction.
//!
//! A batch on executions whose leases this worker holds, at the heads it last committed, is
//! committed in one statement ([`crate::fast`]); what that path cannot take or answer goes the
//! full path, per batch in one transaction:
//! 1. a placeholder row in `loom_executions` for every execution appended at seq 0 (`ON
//!    CONFLICT DO NOTHING`), so that two workers creating one execution serialise on its row;
//! 2. `SELECT ... FOR UPDATE` of every execution of the batch, in id order (no deadlock
//!    between workers);
//! 3. per request: the expected seq against the head (else a conflict), the lease (see
//!    [`crate::lease`]; else a conflict), then the batch applied to the execution's stored
//!    [`ExecutionTail`] (else [`AppendError::Invalid`]). A refused request takes no part in
//!    the batch;
//! 4. one `INSERT` of every accepted event, which also takes the batch's feed positions from
//!    the one-row `loom_feed` counter; one `UPDATE` of every head, tail, status and lease (a
//!    lease granted because this worker held it live must still be live then: else the
//!    transaction rolls back and the batch is decided again, so no append commits after its
//!    lease ran out); and
//!    `pg_notify` of the new heads (delivered only if the transaction commits);
//! 5. `COMMIT`. Replies go out only after it returned.
//!
//! The feed counter's row lock is held from the `INSERT` to the `COMMIT`, so batches take
//! positions in the order they commit, across every worker: a reader that has seen position
//! `p` never later finds an event below `p`.
//!
//! If `COMMIT` fails the outcome is unknown (the server may have committed before the
//! connection dropped, and with a synchronous standby the commit may be there after a
//! failover although the old primary never answered). The writer does not guess: it reads
//! back, on another connection to a primary (`pg_is_in_recovery()` false: never a standby's
//! stale view), whether the batch's `commit_id` is stored. If it is, the batch committed
//! exactly as decided, and every request gets the answer decided for it; if it is not,
//! nothing of the batch is stored, and the batch is decided again on the primary now there
//! (its leases checked anew by the database's clock). A batch that failed before its commit
//! for a cause a new connection may cure (a lost connection, a server going away, a standby
//! reached: [`crate::cause`]) is decided again too. The writer keeps at it, with backoff, for
//! [`crate::PostgresStoreConfig::failover_timeout`]; past it, it answers
//! [`AppendError::Storage`], saying whether the outcome is unknown.
//!
//! A commit this worker had acknowledged and the database no longer has (a failover to a
//! standby that had not received it: asynchronous replication, `synchronous_commit` off or
//! local) shows as a head below the one this worker last committed; the writer refuses to
//! append past it and says so ([`crate::replication::lost_commits`]) rather than carry on as
//! if nothing happened.
//!
//! [`ExecutionTail`]: loom_kernel::kit::ExecutionTail

mod fast_commit;
mod full_path;
#[cfg(all(test, feature = "test-support"))]
mod plans;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use loom_kernel::kit::{EncodedAppend, StorageError};
use loom_kernel::{AppendError, ExecutionId};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::cause::{Cause, Failure, Retry};
use crate::fast::Cached;
use crate::faults::Faults;
use crate::lease::Leases;
use crate::notify::HeadWatch;
use crate::read_back::Probe;

/// How the writer's connections plan. Each statement once, on its first run, and that plan kept
/// (PostgreSQL's generic plans): the write statements are the same every time, and planning them
/// anew per commit would cost more than running them. On a fresh schema that first run is over
/// empty tables, never analyzed, and a plan made then that scans a table (cheaper than its index,
/// for a table that small) was kept until autovacuum's first `ANALYZE`: every commit read the
/// whole of `loom_executions`, and a fresh store's latency grew to seconds in its first minute
/// under load (`docs/PERFORMANCE.md`, "PostgreSQL's first minute"). Every write reaches its rows
/// by a key, so the writer's plans never scan a table (`enable_seqscan=off`; each statement names
/// its rows in a condition an index serves, `plans.rs` checks it), and never compile themselves
/// (`jit=off`: a plan's cost, once a scan it could not avoid is counted as disabled, is past JIT's
/// threshold, and JIT compiles on every run of a generic plan).
pub(crate) const WRITER_PLANS: &str =
    "-c plan_cache_mode=force_generic_plan -c enable_seqscan=off -c jit=off";

/// What the writer needs.
#[derive(Debug)]
pub(crate) struct Writer {
    /// For read-backs: another connection than the write's.
    pub(crate) pool: Pool,
    /// For the writes: connections that plan each statement once ([`WRITER_PLANS`]).
    pub(crate) writes: Pool,
    pub(crate) channel: String,
    pub(crate) watch: Arc<HeadWatch>,
    pub(crate) leases: Arc<Leases>,
    pub(crate) max_batch_events: usize,
    pub(crate) faults: Arc<Faults>,
    /// How long a batch keeps trying through a lost primary (see the module documentation).
    pub(crate) failover_timeout: Duration,
    /// What the last commit left of each execution whose lease this worker holds: the fast
    /// path's knowledge (see [`crate::fast`]).
    pub(crate) cache: HashMap<ExecutionId, Cached>,
}

/// How a batch ended, when it did not end in a clear answer per request.
enum BatchError {
    /// Nothing of the batch is stored.
    NotCommitted(Failure),
    /// The commit may or may not have happened; if it did, `decided` is what it did.
    Ambiguous {
        detail: String,
        probe: Probe,
        decided: Committed,
    },
}

/// The answer for each request, and the leases the batch took or gave up.
struct Committed {
    outcomes: Vec<Result<u64, AppendError>>,
    leases: Vec<(ExecutionId, Option<i64>)>,
    /// Leases taken over by the batch (`Leases::takeovers`).
    takeovers: u64,
    /// What the fast path may remember of each execution afterwards (`None`: forget it).
    cache: Vec<(ExecutionId, Option<Cached>)>,
}

impl Writer {
    /// Runs until every sender is gone and the queue is answered.
    pub(crate) async fn run(mut self, mut requests: mpsc::UnboundedReceiver<EncodedAppend>) {
        while let Some(first) = requests.recv().await {
            let mut events = first.records.len();
            let mut batch = vec![first];
            while events < self.max_batch_events {
                match requests.try_recv() {
                    Ok(request) => {
                        events += request.records.len();
                        batch.push(request);
                    }
                    Err(_) => break,
                }
            }
            self.commit(batch, events).await;
        }
    }

    async fn commit(&mut self, batch: Vec<EncodedAppend>, events: usize) {
        // Instrumented, not entered: a guard held across an await would lend the span to
        // whatever else runs on this thread meanwhile.
        let span = tracing::debug_span!("group_commit", requests = batch.len(), events);
        self.commit_batch(batch).instrument(span).await;
    }

    async fn commit_batch(&mut self, batch: Vec<EncodedAppend>) {
        let batch = self.commit_fast(batch).await;
        if batch.is_empty() {
            // The batch's one line at debug (README, "Logs"): the span alone prints nothing.
            tracing::debug!(path = "fast", "group committed");
            return;
        }
        self.prune_cache();
        // Before anything of the batch is sent: a lease it sets runs at least a lease from here.
        let since = std::time::Instant::now();
        let mut retry = Retry::within(self.failover_timeout);
        let mut contended = 0;
        let mut lost_primary = false;
        let outcome = loop {
            match self.try_commit(&batch).await {
                Ok(committed) => break Ok(committed),
                Err(BatchError::NotCommitted(failure))
                    if failure.cause == Cause::Contention && contended < 3 =>
                {
                    contended += 1;
                    tracing::debug!(detail = %failure.detail, attempt = contended, "group commit retried");
                }
                Err(BatchError::NotCommitted(failure)) if failure.cause.reconnect_may_cure() => {
                    if !lost_primary {
                        tracing::warn!(detail = %failure.detail, "lost the primary; reconnecting");
                    }
                    lost_primary = true;
                    if !retry.wait().await {
                        break Err(failure.detail);
                    }
                }
                Err(BatchError::NotCommitted(failure)) => break Err(failure.detail),
                Err(BatchError::Ambiguous {
                    detail,
                    probe,
                    decided,
                }) => {
                    tracing::warn!(%detail, "commit outcome unknown; reading back");
                    lost_primary = true;
                    match self.resolve(&probe, retry.deadline()).await {
                        Some(true) => break Ok(decided),
                        Some(false) if retry.time_left() => {
                            tracing::info!(
                                "the interrupted commit did not take effect; committing again"
                            );
                        }
                        Some(false) => {
                            break Err(format!("not committed (the commit failed: {detail})"));
                        }
                        None => {
                            break Err(format!(
                                "the commit failed ({detail}) and whether it took effect could not be \
                                 read back within the failover bound of {:?}: read the head to \
                                 learn the outcome",
                                self.failover_timeout
                            ));
                        }
                    }
                }
            }
        };
        if lost_primary && outcome.is_ok() {
            tracing::info!(after = ?since.elapsed(), "committed on the primary after losing it");
        }
        match outcome {
            Ok(Committed {
                outcomes,
                leases,
                takeovers,
                cache,
            }) => {
                tracing::debug!(path = "full", "group committed");
                self.leases.apply(leases, since);
                self.leases.took_over(takeovers);
                for (execution, cached) in cache {
                    match cached {
                        Some(cached) => self.cache.insert(execution, cached),
                        None => self.cache.remove(&execution),
                    };
                }
                for (request, outcome) in batch.into_iter().zip(outcomes) {
                    if let Ok(head) = outcome {
                        self.watch.publish(&request.execution, head);
                    }
                    let _ = request.reply.send(outcome);
                }
            }
            Err(detail) => {
                tracing::error!(%detail, "group commit failed");
                for request in &batch {
                    self.cache.remove(&request.execution);
                }
                for request in batch {
                    let _ = request.reply.send(Err(AppendError::Storage {
                        execution: request.execution,
                        source: StorageError::msg(detail.clone()),
                    }));
                }
            }
        }
    }

    /// Forgets what the fast path remembered of executions whose lease this worker no longer
    /// holds (lost in renewal), once that could amount to something.
    fn prune_cache(&mut self) {
        if self.cache.len() < 1024 {
            return;
        }
        let held = self.leases.snapshot(self.cache.keys());
        self.cache
            .retain(|id, cached| held.get(id.as_str()) == Some(&cached.token));
    }

    /// One attempt at the full path on a connection of the writer's pool; a connection whose
    /// attempt failed for a cause of the connection or the server is never used again.
    async fn try_commit(&self, batch: &[EncodedAppend]) -> Result<Committed, BatchError> {
        let mut client = self
            .writes
            .get()
            .await
            .map_err(|e| BatchError::NotCommitted(Failure::pool(&e)))?;
        let outcome = self.try_commit_on(&mut client, batch).await;
        let suspect = match &outcome {
            Err(BatchError::NotCommitted(failure)) => failure.cause.reconnect_may_cure(),
            Err(BatchError::Ambiguous { .. }) => true,
            Ok(_) => false,
        };
        if suspect {
            let _ = deadpool_postgres::Object::take(client);
        }
        outcome
    }
}
