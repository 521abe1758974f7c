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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use deadpool_postgres::Pool;
use loom_kernel::ExecutionTail;
use loom_kernel::status_code;
use loom_kernel::{AppendError, EncodedAppend, ExecutionId, StorageError};
use tokio::sync::mpsc;
use tokio_postgres::error::Severity;
use tracing::Instrument;

use crate::cause::{Cause, Failure, Retry, describe};
use crate::fast::{self, Cached};
use crate::faults::Faults;
use crate::lease::{LeaseDecision, Leases, RowLease};
use crate::notify::{HeadWatch, payloads};
use crate::read_back::Probe;
use crate::wake::{WAKE_STATEMENT, WakeParams};
use loom_kernel::wake::WakeOps;

/// What the writer needs.
#[derive(Debug)]
pub(crate) struct Writer {
    /// For read-backs: another connection than the write's.
    pub(crate) pool: Pool,
    /// For the writes: connections that plan each statement once (`plan_cache_mode =
    /// force_generic_plan`): the write statements are the same every time, and planning
    /// them anew per commit would cost more than running them.
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

/// An execution's row after a batch.
struct Update<'a> {
    head: i64,
    tail: Vec<u8>,
    status: i16,
    needs_driving: bool,
    ended_at_ms: Option<i64>,
    owner: Option<&'a str>,
    token: i64,
    /// Granted on this worker's live lease as the row was locked: the lease must still be live
    /// when the row is written, or the append would commit after its lease ran out.
    renewed: bool,
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

    /// Commits `batch` in one statement if the fast path can take all of it (see
    /// [`crate::fast`]); returns the requests left for the full path, unanswered.
    async fn commit_fast(&mut self, batch: Vec<EncodedAppend>) -> Vec<EncodedAppend> {
        if self.faults.stall_after_lock.load(Ordering::SeqCst) > 0 {
            return batch;
        }
        let leases = Arc::clone(&self.leases);
        let Some(plan) = fast::plan(&batch, &self.cache, |id| leases.token(id)) else {
            return batch;
        };
        let Ok(client) = self.writes.get().await else {
            return batch;
        };
        let Ok(statement) = client.prepare_cached(fast::STATEMENT).await else {
            return batch;
        };
        let rows = fast::RowParams::of(&plan.rows, self.leases.worker_id());
        let commit_id = crate::config::random_u64() as i64;
        let lease_ms = self.leases.lease_ms();
        let since = std::time::Instant::now();
        let mut wake = WakeParams::default();
        for row in &plan.rows {
            wake.add(row.id.as_str(), &row.wake);
        }
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 22] = [
            &rows.ids,
            &rows.expected,
            &rows.tokens,
            &rows.heads,
            &rows.tails,
            &rows.statuses,
            &rows.driving,
            &rows.ended,
            &rows.keep,
            &lease_ms,
            &rows.owners,
            &plan.event_ids,
            &plan.event_seqs,
            &plan.event_records,
            &commit_id,
            &self.channel,
            &wake.cleared,
            &wake.deleted_ids,
            &wake.deleted_tags,
            &wake.upserted_ids,
            &wake.upserted_tags,
            &wake.upserted_at,
        ];
        let outcome = if Faults::take(&self.faults.lose_commit) {
            // Injected: the statement runs, is rolled back, and its reply is "lost".
            let _ = client.batch_execute("BEGIN").await;
            let _ = client.query(&statement, &params).await;
            let _ = client.batch_execute("ROLLBACK").await;
            Err("injected: commit lost".to_owned())
        } else {
            match client.query(&statement, &params).await {
                Ok(_) if Faults::take(&self.faults.lose_commit_reply) => {
                    Err("injected: reply to the statement lost".to_owned())
                }
                Ok(updated) => {
                    self.faults
                        .one_statement_commits
                        .fetch_add(1, Ordering::Relaxed);
                    Ok(fast::id_set(&updated))
                }
                // The server refused it (an ERROR, not a FATAL or PANIC that ends the session
                // and may come after the commit): the implicit transaction rolled back,
                // nothing is stored. The full path will tell why.
                Err(err)
                    if err
                        .as_db_error()
                        .is_some_and(|db| db.parsed_severity() == Some(Severity::Error)) =>
                {
                    tracing::debug!(error = %err, "one-statement commit refused; full path");
                    return batch;
                }
                Err(err) => Err(describe(&err)),
            }
        };
        if outcome.is_err() {
            // Its session may be on a server that is gone or going: never used again.
            let _ = deadpool_postgres::Object::take(client);
        } else {
            drop(client);
        }
        let committed = match outcome {
            Ok(updated) => updated,
            Err(detail) => {
                tracing::warn!(%detail, "commit outcome unknown; reading back");
                let ids: Vec<&str> = plan.rows.iter().map(|r| r.id.as_str()).collect();
                let seqs: Vec<i64> = rows.expected.clone();
                let deadline = crate::cause::deadline_after(self.failover_timeout);
                match self.read_back(&ids, &seqs, commit_id, deadline).await {
                    // What did not commit goes the full path, which commits it on the primary
                    // now there.
                    Some(found) => found,
                    None => {
                        let detail = format!(
                            "the commit failed ({detail}) and whether it took effect could not \
                             be read back within the failover bound of {:?}: read the head to \
                             learn the outcome",
                            self.failover_timeout
                        );
                        tracing::error!(%detail, "group commit failed");
                        for request in batch {
                            self.cache.remove(&request.execution);
                            let _ = request.reply.send(Err(AppendError::Storage {
                                execution: request.execution,
                                source: StorageError::msg(detail.clone()),
                            }));
                        }
                        return Vec::new();
                    }
                }
            }
        };
        // Leases first, then the cache, then the replies (as on the full path).
        let mut lease_changes = Vec::new();
        for row in &plan.rows {
            if committed.contains(row.id.as_str()) {
                let token = row.keep().then_some(row.token);
                lease_changes.push((row.id.clone(), token));
            }
        }
        self.leases.apply(lease_changes, since);
        let mut rest = Vec::new();
        let answers: Vec<(usize, u64)> = plan.requests.clone();
        let rows_after: Vec<(ExecutionId, bool, Option<Cached>)> = plan
            .rows
            .into_iter()
            .map(|row| {
                let done = committed.contains(row.id.as_str());
                let cached = (done && row.keep()).then_some(Cached {
                    head: row.head,
                    token: row.token,
                    tail: row.tail,
                });
                (row.id, done, cached)
            })
            .collect();
        // What did not commit here goes the full path, which reads the row and decides what to
        // remember; until then the knowledge of the last commit stays (it tells lost commits).
        for (id, done, cached) in &rows_after {
            match cached {
                Some(cached) => self.cache.insert(id.clone(), cached.clone()),
                None if *done => self.cache.remove(id),
                None => None,
            };
        }
        for (request, (at, head)) in batch.into_iter().zip(answers) {
            let done = rows_after[at].1;
            if done {
                self.watch.publish(&request.execution, head);
                let _ = request.reply.send(Ok(head));
            } else {
                // Fenced, or not committed: nothing of it is stored; the full path reads the
                // row and answers.
                rest.push(request);
            }
        }
        rest
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

    async fn try_commit_on(
        &self,
        client: &mut deadpool_postgres::Object,
        batch: &[EncodedAppend],
    ) -> Result<Committed, BatchError> {
        let not_committed =
            |err: &tokio_postgres::Error| BatchError::NotCommitted(Failure::of(err));
        let txn = client.transaction().await.map_err(|e| not_committed(&e))?;

        let mut ids: Vec<&str> = batch.iter().map(|r| r.execution.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        // With the start time and flow the listing indexes order by; a row not started yet
        // (left by a refused first append) takes this start's.
        let mut fresh: Vec<(&str, Option<i64>, Option<&str>)> = batch
            .iter()
            .filter(|r| r.expected_seq == 0)
            .map(|r| {
                let started = r
                    .recorded_at_ms
                    .map(|at| i64::try_from(at).unwrap_or(i64::MAX));
                let flow = r.changes.first().and_then(|c| c.started_flow());
                (r.execution.as_str(), started.or(Some(0)), flow)
            })
            .collect();
        if !fresh.is_empty() {
            fresh.sort_by_key(|(id, _, _)| *id);
            fresh.dedup_by_key(|(id, _, _)| *id);
            let insert = txn
                .prepare_cached(
                    "INSERT INTO loom_executions (execution_id, started_at_ms, flow) \
                     SELECT id, started, flow \
                     FROM unnest($1::text[], $2::int8[], $3::text[]) AS u(id, started, flow) \
                     ORDER BY id \
                     ON CONFLICT (execution_id) DO UPDATE \
                     SET started_at_ms = EXCLUDED.started_at_ms, flow = EXCLUDED.flow \
                     WHERE loom_executions.head = 0",
                )
                .await
                .map_err(|e| not_committed(&e))?;
            let ids: Vec<&str> = fresh.iter().map(|(id, _, _)| *id).collect();
            let starts: Vec<Option<i64>> = fresh.iter().map(|(_, at, _)| *at).collect();
            let flows: Vec<Option<&str>> = fresh.iter().map(|(_, _, flow)| *flow).collect();
            txn.execute(&insert, &[&ids, &starts, &flows])
                .await
                .map_err(|e| not_committed(&e))?;
        }
        let lock = txn
            .prepare_cached(
                "SELECT execution_id, head, lease_owner, lease_token, \
                        coalesce(lease_expires_at > clock_timestamp(), false), tail \
                 FROM loom_executions WHERE execution_id = ANY($1) \
                 ORDER BY execution_id FOR UPDATE",
            )
            .await
            .map_err(|e| not_committed(&e))?;
        let rows = txn
            .query(&lock, &[&ids])
            .await
            .map_err(|e| not_committed(&e))?;
        if Faults::take(&self.faults.stall_after_lock) {
            self.faults.stalled.notify_one();
            self.faults.resume_stalled.notified().await;
        }
        let mut current: HashMap<String, (RowLease, ExecutionTail)> = HashMap::new();
        // Per execution, whether this worker held a live lease on it as the row was locked.
        let mut locked_live: HashMap<String, i64> = HashMap::new();
        for row in &rows {
            let id: String = row.get(0);
            let lease = RowLease {
                head: row.get::<_, i64>(1) as u64,
                owner: row.get(2),
                token: row.get(3),
                live: row.get(4),
            };
            let tail = match row.get::<_, Option<&[u8]>>(5) {
                None => ExecutionTail::new(),
                Some(bytes) => ExecutionTail::decode(bytes).ok_or_else(|| {
                    BatchError::NotCommitted(Failure::other(
                        format!("the stored tail of execution {id} is not one this build wrote"),
                        Cause::Other,
                    ))
                })?,
            };
            if lease.live && lease.owner.as_deref() == Some(self.leases.worker_id()) {
                locked_live.insert(id.clone(), lease.token);
            }
            current.insert(id, (lease, tail));
        }

        let commit_id = crate::config::random_u64() as i64;
        let mut event_ids: Vec<&str> = Vec::new();
        let mut event_seqs: Vec<i64> = Vec::new();
        let mut event_records: Vec<&[u8]> = Vec::new();
        // Per execution, its final row.
        let mut updates: BTreeMap<&str, Update<'_>> = BTreeMap::new();
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut lease_changes = Vec::new();
        let mut cache_changes = Vec::new();
        let mut takeovers = 0;
        let mut held = self.leases.snapshot(batch.iter().map(|r| &r.execution));
        // Per execution, what the accepted appends do to its rows of the wake-up index.
        let mut wake: BTreeMap<&str, WakeOps> = BTreeMap::new();
        for request in batch {
            let id = request.execution.as_str();
            let (row, tail) = current.entry(id.to_owned()).or_default();
            if let Some(cached) = self.cache.get(&request.execution)
                && (1..=cached.token).contains(&row.token)
                && row.head < cached.head
            {
                // Nobody took the lease since this worker's last commit, and the log is
                // shorter than that commit left it: the database lost acknowledged events.
                cache_changes.push((request.execution.clone(), None));
                outcomes.push(Err(crate::replication::lost_commits(
                    &request.execution,
                    cached.head,
                    row.head,
                )));
                continue;
            }
            if row.head != request.expected_seq {
                cache_changes.push((request.execution.clone(), None));
                outcomes.push(Err(AppendError::Conflict {
                    execution: request.execution.clone(),
                    expected_seq: request.expected_seq,
                    actual_seq: row.head,
                }));
                continue;
            }
            let (token, taking_over) = match self.leases.decide(row, held.get(id).copied()) {
                LeaseDecision::Refused { lost } => {
                    cache_changes.push((request.execution.clone(), None));
                    if lost {
                        held.remove(id);
                        lease_changes.push((request.execution.clone(), None));
                    }
                    tracing::debug!(
                        execution = id,
                        owner = row.owner.as_deref().unwrap_or(""),
                        "append refused: the execution's lease is not ours"
                    );
                    outcomes.push(Err(AppendError::Conflict {
                        execution: request.execution.clone(),
                        expected_seq: request.expected_seq,
                        actual_seq: row.head,
                    }));
                    continue;
                }
                // Granted without being remembered while the row names a holder: a lease that
                // ran out, or this worker's from an earlier run, taken over.
                LeaseDecision::Granted { token } => {
                    (token, !held.contains_key(id) && row.owner.is_some())
                }
            };
            if let Err(refused) = tail.apply_changes(&request.changes, request.recorded_at_ms) {
                cache_changes.push((request.execution.clone(), None));
                outcomes.push(Err(
                    refused.into_append_error(&request.execution, request.expected_seq)
                ));
                continue;
            }
            takeovers += u64::from(taking_over);
            for (seq, record) in (request.expected_seq..).zip(request.records.iter()) {
                event_ids.push(id);
                event_seqs.push(seq as i64);
                event_records.push(record);
            }
            if loom_kernel::wake::touches_wakeups(&request.changes) {
                wake.entry(id)
                    .or_default()
                    .extend(&request.execution, &request.changes);
            }
            let head = request.expected_seq + request.records.len() as u64;
            let keep_lease = tail.needs_driving();
            row.head = head;
            row.token = token;
            if keep_lease {
                row.owner = Some(self.leases.worker_id().to_owned());
                row.live = true;
                held.insert(id.to_owned(), token);
                lease_changes.push((request.execution.clone(), Some(token)));
                cache_changes.push((
                    request.execution.clone(),
                    Some(Cached {
                        head,
                        token,
                        tail: tail.clone(),
                    }),
                ));
            } else {
                row.owner = None;
                row.live = false;
                held.remove(id);
                lease_changes.push((request.execution.clone(), None));
                cache_changes.push((request.execution.clone(), None));
            }
            updates.insert(
                id,
                Update {
                    head: head as i64,
                    tail: tail.encode(),
                    status: i16::from(status_code(tail.status())),
                    needs_driving: tail.needs_driving(),
                    ended_at_ms: tail.ended_at_ms().map(|ms| ms.min(i64::MAX as u64) as i64),
                    owner: keep_lease.then(|| self.leases.worker_id()),
                    token,
                    renewed: locked_live.get(id) == Some(&token),
                },
            );
            outcomes.push(Ok(head));
        }

        if event_ids.is_empty() {
            txn.rollback().await.map_err(|e| not_committed(&e))?;
            return Ok(Committed {
                outcomes,
                leases: lease_changes,
                takeovers: 0,
                cache: cache_changes,
            });
        }
        let probe = Probe {
            execution: ExecutionId::from_stored(event_ids[0]).map_err(|e| {
                BatchError::NotCommitted(Failure::other(e.to_string(), Cause::Other))
            })?,
            seq: event_seqs[0],
            commit_id,
        };
        let insert = txn
            .prepare_cached(
                "WITH base AS ( \
                     UPDATE loom_feed SET next_position = next_position + $5 \
                     RETURNING next_position - $5 AS first) \
                 INSERT INTO loom_events (execution_id, seq, record, commit_id, position) \
                 SELECT u.id, u.seq, u.record, $4, base.first + u.n - 1 \
                 FROM base, unnest($1::text[], $2::int8[], $3::bytea[]) \
                     WITH ORDINALITY AS u(id, seq, record, n)",
            )
            .await
            .map_err(|e| not_committed(&e))?;
        let update = txn
            .prepare_cached(
                "UPDATE loom_executions AS x SET head = u.head, tail = u.tail, \
                     status = u.status, needs_driving = u.driving, ended_at_ms = u.ended, \
                     lease_owner = u.owner, lease_token = u.token, \
                     last_lease_owner = $11, \
                     lease_expires_at = CASE WHEN u.owner IS NULL THEN NULL \
                         ELSE clock_timestamp() + $9 * interval '1 millisecond' END \
                 FROM unnest($1::text[], $2::int8[], $3::bytea[], $4::int2[], $5::bool[], \
                             $6::int8[], $7::text[], $8::int8[], $10::bool[]) \
                     AS u(id, head, tail, status, driving, ended, owner, token, renewed) \
                 WHERE x.execution_id = u.id \
                   AND (NOT u.renewed OR x.lease_expires_at > clock_timestamp())",
            )
            .await
            .map_err(|e| not_committed(&e))?;
        let notify = txn
            .prepare_cached("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS u(p)")
            .await
            .map_err(|e| not_committed(&e))?;
        let update_ids: Vec<&str> = updates.keys().copied().collect();
        let heads: Vec<i64> = updates.values().map(|u| u.head).collect();
        let tails: Vec<&[u8]> = updates.values().map(|u| u.tail.as_slice()).collect();
        let statuses: Vec<i16> = updates.values().map(|u| u.status).collect();
        let driving: Vec<bool> = updates.values().map(|u| u.needs_driving).collect();
        let ended: Vec<Option<i64>> = updates.values().map(|u| u.ended_at_ms).collect();
        let owners: Vec<Option<&str>> = updates.values().map(|u| u.owner).collect();
        let tokens: Vec<i64> = updates.values().map(|u| u.token).collect();
        let renewed: Vec<bool> = updates.values().map(|u| u.renewed).collect();
        let lease_ms = self.leases.lease_ms();
        let event_count = event_ids.len() as i64;
        let announced: Vec<(ExecutionId, u64)> = updates
            .iter()
            .filter_map(|(id, u)| {
                ExecutionId::from_stored(id)
                    .ok()
                    .map(|id| (id, u.head as u64))
            })
            .collect();
        let messages = payloads(announced.iter().map(|(id, head)| (id, *head)));
        // Issued together: the connection pipelines them.
        let insert_params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
            &event_ids,
            &event_seqs,
            &event_records,
            &commit_id,
            &event_count,
        ];
        // Every row updated here was written under this worker's lease, taken or held: it is
        // the lease's last holder, even when the batch gave the lease back at once.
        let worker_id = self.leases.worker_id();
        let update_params: [&(dyn tokio_postgres::types::ToSql + Sync); 11] = [
            &update_ids,
            &heads,
            &tails,
            &statuses,
            &driving,
            &ended,
            &owners,
            &tokens,
            &lease_ms,
            &renewed,
            &worker_id,
        ];
        let notify_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
            [&self.channel, &messages];
        let wake = WakeParams::of(&wake);
        let inserted = txn.execute(&insert, &insert_params);
        let updated = txn.execute(&update, &update_params);
        let notified = txn.execute(&notify, &notify_params);
        let woken = async {
            if wake.is_empty() {
                return Ok(0);
            }
            let statement = txn.prepare_cached(WAKE_STATEMENT).await?;
            txn.execute(&statement, &wake.params()).await
        };
        let (_, updated, _, _) = futures::try_join!(inserted, updated, notified, woken)
            .map_err(|e| not_committed(&e))?;
        if updated != update_ids.len() as u64 {
            // A lease ran out between the lock and the write (the worker was paused): the
            // transaction rolls back as it is dropped, and the batch is decided again.
            return Err(BatchError::NotCommitted(Failure::other(
                LEASE_RAN_OUT,
                Cause::Contention,
            )));
        }

        let decided = Committed {
            outcomes,
            leases: lease_changes,
            takeovers,
            cache: cache_changes,
        };
        if Faults::take(&self.faults.lose_commit) {
            txn.rollback().await.map_err(|e| not_committed(&e))?;
            return Err(BatchError::Ambiguous {
                detail: "injected: commit lost".into(),
                probe,
                decided,
            });
        }
        let lose_reply = Faults::take(&self.faults.lose_commit_reply);
        match txn.commit().await {
            Ok(()) if !lose_reply => Ok(decided),
            Ok(()) => Err(BatchError::Ambiguous {
                detail: "injected: reply to COMMIT lost".into(),
                probe,
                decided,
            }),
            Err(err) => Err(BatchError::Ambiguous {
                detail: describe(&err),
                probe,
                decided,
            }),
        }
    }
}

/// Why a batch was rolled back when a lease it was granted on ran out before its write.
const LEASE_RAN_OUT: &str = "a lease ran out while its append was being committed";
