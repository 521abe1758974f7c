//! The writer's full path: one transaction that locks every execution of a batch that has a
//! row, decides each request against its row (head, lease, tail; an empty row for a new
//! execution without one), and writes the events, rows (inserted for new executions, in one
//! version) and wake-ups.

use std::collections::{BTreeMap, HashMap, HashSet};

use loom_kernel::kit::EncodedAppend;
use loom_kernel::kit::ExecutionTail;
use loom_kernel::kit::status_code;
use loom_kernel::kit::wake::WakeOps;
use loom_kernel::{AppendError, ExecutionId};

use super::{BatchError, Committed, Writer};
use crate::cause::{Cause, Failure, describe};
use crate::fast::Cached;
use crate::faults::Faults;
use crate::lease::{LeaseDecision, RowLease};
use crate::notify::payloads;
use crate::read_back::Probe;
use crate::wake::{WAKE_STATEMENT, WakeParams};

/// The start time and flow the listing indexes order by, for the batch's new executions that have
/// a row already (locked by [`LOCK_ROWS`]): a row not started yet (left by a refused first
/// append of an earlier build, or of another worker) takes this start's.
pub(crate) const PLACEHOLDERS: &str = "\
INSERT INTO loom_executions (execution_id, started_at_ms, flow)
SELECT id, started, flow
FROM unnest($1::text[], $2::int8[], $3::text[]) AS u(id, started, flow)
ORDER BY id
ON CONFLICT (execution_id) DO UPDATE
SET started_at_ms = EXCLUDED.started_at_ms, flow = EXCLUDED.flow
WHERE loom_executions.head = 0";

/// Every execution of the batch that has a row, locked in id order (no deadlock between
/// workers); a new execution it does not return has no row, and gets one from [`INSERT_ROWS`].
pub(crate) const LOCK_ROWS: &str = "\
SELECT execution_id, head, lease_owner, lease_token,
       coalesce(lease_expires_at > clock_timestamp(), false), tail
FROM loom_executions WHERE execution_id = ANY($1)
ORDER BY execution_id FOR UPDATE";

/// The accepted events, with feed positions from `loom_feed`.
pub(crate) const INSERT_EVENTS: &str = "\
WITH base AS (
    UPDATE loom_feed SET next_position = next_position + $5 WHERE only_row
    RETURNING next_position - $5 AS first)
INSERT INTO loom_events (execution_id, seq, record, commit_id, position)
SELECT u.id, u.seq, u.record, $4, base.first + u.n - 1
FROM base, unnest($1::text[], $2::int8[], $3::bytea[]) WITH ORDINALITY AS u(id, seq, record, n)";

/// Heads, tails, statuses and leases.
pub(crate) const UPDATE_ROWS: &str = "\
UPDATE loom_executions AS x SET head = u.head, tail = u.tail,
    status = u.status, needs_driving = u.driving, ended_at_ms = u.ended,
    steps_in_doubt = u.doubts,
    lease_owner = u.owner, lease_token = u.token,
    last_lease_owner = $11,
    lease_expires_at = CASE WHEN u.owner IS NULL THEN NULL
        ELSE clock_timestamp() + $9 * interval '1 millisecond' END
FROM unnest($1::text[], $2::int8[], $3::bytea[], $4::int2[], $5::bool[],
            $6::int8[], $7::text[], $8::int8[], $10::bool[], $12::bool[])
    AS u(id, head, tail, status, driving, ended, owner, token, renewed, doubts)
WHERE x.execution_id = u.id
  AND (NOT u.renewed OR x.lease_expires_at > clock_timestamp())";

/// The rows of new executions that had none, as the batch leaves them: one version of the row
/// where a placeholder and its update made two, each entering every index of the table. In id
/// order (as every statement that locks rows, `crate::lease`); a row another worker inserted
/// since [`LOCK_ROWS`] looked is skipped, and the batch is then decided again.
pub(crate) const INSERT_ROWS: &str = "\
INSERT INTO loom_executions (execution_id, head, tail, status, needs_driving, ended_at_ms,
    steps_in_doubt, lease_owner, lease_token, last_lease_owner, lease_expires_at,
    started_at_ms, flow)
SELECT u.id, u.head, u.tail, u.status, u.driving, u.ended, u.doubts, u.owner, u.token, $12,
    CASE WHEN u.owner IS NULL THEN NULL
        ELSE clock_timestamp() + $13 * interval '1 millisecond' END,
    u.started, u.flow
FROM unnest($1::text[], $2::int8[], $3::bytea[], $4::int2[], $5::bool[], $6::int8[],
            $7::bool[], $8::text[], $9::int8[], $10::int8[], $11::text[])
    AS u(id, head, tail, status, driving, ended, doubts, owner, token, started, flow)
ORDER BY u.id
ON CONFLICT (execution_id) DO NOTHING";

/// The new heads, to the other workers' listeners.
pub(crate) const NOTIFY: &str = "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS u(p)";

/// An execution's row after a batch.
struct Update<'a> {
    head: i64,
    tail: Vec<u8>,
    status: i16,
    needs_driving: bool,
    steps_in_doubt: bool,
    ended_at_ms: Option<i64>,
    owner: Option<&'a str>,
    token: i64,
    /// Granted on this worker's live lease as the row was locked: the lease must still be live
    /// when the row is written, or the append would commit after its lease ran out.
    renewed: bool,
}

impl Writer {
    pub(super) async fn try_commit_on(
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
        let lock = txn
            .prepare_cached(LOCK_ROWS)
            .await
            .map_err(|e| not_committed(&e))?;
        let rows = txn
            .query(&lock, &[&ids])
            .await
            .map_err(|e| not_committed(&e))?;
        let with_rows: HashSet<&str> = rows.iter().map(|row| row.get(0)).collect();
        // New executions, with the start time and flow the listing indexes order by. Those
        // without a row are decided against an empty row and inserted as the batch leaves them
        // (`INSERT_ROWS`); those with one (locked above) get these in `PLACEHOLDERS`.
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
        fresh.sort_by_key(|(id, _, _)| *id);
        fresh.dedup_by_key(|(id, _, _)| *id);
        let (placeholders, without): (Vec<_>, Vec<_>) = fresh
            .into_iter()
            .partition(|(id, _, _)| with_rows.contains(id));
        let rowless: BTreeMap<&str, (Option<i64>, Option<&str>)> = without
            .into_iter()
            .map(|(id, started, flow)| (id, (started, flow)))
            .collect();
        if !placeholders.is_empty() {
            let insert = txn
                .prepare_cached(PLACEHOLDERS)
                .await
                .map_err(|e| not_committed(&e))?;
            let ids: Vec<&str> = placeholders.iter().map(|(id, _, _)| *id).collect();
            let starts: Vec<Option<i64>> = placeholders.iter().map(|(_, at, _)| *at).collect();
            let flows: Vec<Option<&str>> = placeholders.iter().map(|(_, _, flow)| *flow).collect();
            txn.execute(&insert, &[&ids, &starts, &flows])
                .await
                .map_err(|e| not_committed(&e))?;
        }
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
            if loom_kernel::kit::wake::touches_wakeups(&request.changes) {
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
                    steps_in_doubt: tail.has_steps_in_doubt(),
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
            .prepare_cached(INSERT_EVENTS)
            .await
            .map_err(|e| not_committed(&e))?;
        let notify = txn
            .prepare_cached(NOTIFY)
            .await
            .map_err(|e| not_committed(&e))?;
        let announced: Vec<(ExecutionId, u64)> = updates
            .iter()
            .filter_map(|(id, u)| {
                ExecutionId::from_stored(id)
                    .ok()
                    .map(|id| (id, u.head as u64))
            })
            .collect();
        let messages = payloads(announced.iter().map(|(id, head)| (id, *head)));
        let (new_rows, updates): (BTreeMap<&str, Update<'_>>, BTreeMap<&str, Update<'_>>) = updates
            .into_iter()
            .partition(|(id, _)| rowless.contains_key(id));
        let lease_ms = self.leases.lease_ms();
        let event_count = event_ids.len() as i64;
        // Issued together: the connection pipelines them.
        let insert_params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
            &event_ids,
            &event_seqs,
            &event_records,
            &commit_id,
            &event_count,
        ];
        // Every row written here was written under this worker's lease, taken or held: it is
        // the lease's last holder, even when the batch gave the lease back at once.
        let worker_id = self.leases.worker_id();
        let rows = RowColumns::of(&updates);
        let update_params: [&(dyn tokio_postgres::types::ToSql + Sync); 12] = [
            &rows.ids,
            &rows.heads,
            &rows.tails,
            &rows.statuses,
            &rows.driving,
            &rows.ended,
            &rows.owners,
            &rows.tokens,
            &lease_ms,
            &rows.renewed,
            &worker_id,
            &rows.doubts,
        ];
        let fresh_rows = RowColumns::of(&new_rows);
        let (starts, flows): (Vec<Option<i64>>, Vec<Option<&str>>) = (new_rows.keys())
            .map(|id| rowless.get(id).copied().unwrap_or_default())
            .unzip();
        let new_row_params: [&(dyn tokio_postgres::types::ToSql + Sync); 13] = [
            &fresh_rows.ids,
            &fresh_rows.heads,
            &fresh_rows.tails,
            &fresh_rows.statuses,
            &fresh_rows.driving,
            &fresh_rows.ended,
            &fresh_rows.doubts,
            &fresh_rows.owners,
            &fresh_rows.tokens,
            &starts,
            &flows,
            &worker_id,
            &lease_ms,
        ];
        let notify_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
            [&self.channel, &messages];
        let wake = WakeParams::of(&wake);
        // Prepared first, so that each statement below is sent as it is first polled, in the
        // order of the join: the rows of new executions before their events.
        let insert_rows = prepared_unless(&txn, new_rows.is_empty(), INSERT_ROWS).await;
        let update = prepared_unless(&txn, updates.is_empty(), UPDATE_ROWS).await;
        let wake_up = prepared_unless(&txn, wake.is_empty(), WAKE_STATEMENT).await;
        let insert_rows = insert_rows.map_err(|e| not_committed(&e))?;
        let update = update.map_err(|e| not_committed(&e))?;
        let wake_up = wake_up.map_err(|e| not_committed(&e))?;
        let wake_params = wake.params();
        let (rows_inserted, events_inserted, updated, notified, woken) = futures::join!(
            execute_prepared(&txn, &insert_rows, &new_row_params),
            txn.execute(&insert, &insert_params),
            execute_prepared(&txn, &update, &update_params),
            txn.execute(&notify, &notify_params),
            execute_prepared(&txn, &wake_up, &wake_params),
        );
        // The first failure in the order the statements ran says why; those after it only
        // found the transaction aborted.
        let rows_inserted = rows_inserted.map_err(|e| not_committed(&e))?;
        if rows_inserted != new_rows.len() as u64 {
            // Another worker started a new execution of the batch since this one looked: its
            // events then collide with ours too. Rolled back as the transaction is dropped, and
            // decided again against that row.
            return Err(BatchError::NotCommitted(Failure::other(
                ROW_APPEARED,
                Cause::Contention,
            )));
        }
        events_inserted.map_err(|e| not_committed(&e))?;
        let updated = updated.map_err(|e| not_committed(&e))?;
        notified.map_err(|e| not_committed(&e))?;
        woken.map_err(|e| not_committed(&e))?;
        if updated != updates.len() as u64 {
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

/// `statement` prepared on `txn`, unless it has nothing to write.
async fn prepared_unless(
    txn: &deadpool_postgres::Transaction<'_>,
    nothing_to_write: bool,
    statement: &str,
) -> Result<Option<tokio_postgres::Statement>, tokio_postgres::Error> {
    match nothing_to_write {
        true => Ok(None),
        false => txn.prepare_cached(statement).await.map(Some),
    }
}

/// `statement` executed on `txn` with `params` if [`prepared_unless`] prepared it; no row
/// otherwise.
async fn execute_prepared(
    txn: &deadpool_postgres::Transaction<'_>,
    statement: &Option<tokio_postgres::Statement>,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, tokio_postgres::Error> {
    match statement {
        Some(statement) => txn.execute(statement, params).await,
        None => Ok(0),
    }
}

/// Why a batch was rolled back when a new execution's row appeared after it looked.
const ROW_APPEARED: &str = "another worker started a new execution of the batch meanwhile";

/// The columns of [`UPDATE_ROWS`] and [`INSERT_ROWS`], one element per row, in id order.
struct RowColumns<'a> {
    ids: Vec<&'a str>,
    heads: Vec<i64>,
    tails: Vec<&'a [u8]>,
    statuses: Vec<i16>,
    driving: Vec<bool>,
    doubts: Vec<bool>,
    ended: Vec<Option<i64>>,
    owners: Vec<Option<&'a str>>,
    tokens: Vec<i64>,
    renewed: Vec<bool>,
}

impl<'a> RowColumns<'a> {
    fn of(rows: &'a BTreeMap<&'a str, Update<'a>>) -> Self {
        Self {
            ids: rows.keys().copied().collect(),
            heads: rows.values().map(|u| u.head).collect(),
            tails: rows.values().map(|u| u.tail.as_slice()).collect(),
            statuses: rows.values().map(|u| u.status).collect(),
            driving: rows.values().map(|u| u.needs_driving).collect(),
            doubts: rows.values().map(|u| u.steps_in_doubt).collect(),
            ended: rows.values().map(|u| u.ended_at_ms).collect(),
            owners: rows.values().map(|u| u.owner).collect(),
            tokens: rows.values().map(|u| u.token).collect(),
            renewed: rows.values().map(|u| u.renewed).collect(),
        }
    }
}
