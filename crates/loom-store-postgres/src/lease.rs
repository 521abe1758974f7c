//! Execution ownership: leases with fencing tokens, kept in `loom_executions`.
//!
//! A worker appends to an execution only while it holds the execution's lease. The lease is
//! taken by the append itself, in the transaction that checks the expected seq:
//! - nobody holds it, or its holder's lease has run out, and this worker did not hold it:
//!   this worker takes it over with the next fencing token (`lease_token + 1`);
//! - this worker holds it, with the token it remembers, and it has not run out: renewed;
//! - another worker holds it and it has not run out: refused with a conflict (the caller
//!   yields: its driver stops, the execution is untouched);
//! - the row names this worker but it does not remember the lease: the worker restarted under
//!   the same id; it takes the lease over with the next token at once (a stable worker id lets
//!   a restarted worker pick its executions up without waiting for its old leases to run out);
//! - this worker held it and it ran out (whether or not somebody took it since): refused, and
//!   forgotten. The worker's driver stops; a later recover or resume on any worker (this one
//!   included) reads the log afresh and takes the lease with a new token.
//!
//! An append that leaves the execution needing no driving (ended, or parked on gates or
//! verdicts) releases the lease, so any worker can resume it at once. A background task
//! renews every lease this worker holds every third of the lease's duration, in one
//! statement; leases it could not renew in time are forgotten.
//!
//! Before the runtime invokes a non-idempotent effect it asks whether this worker still holds
//! the execution's lease ([`Leases::fresh`], then [`Leases::hold`]). The worker remembers, per
//! lease, when it sent the statement that last set the lease's expiry: the server set it to
//! its own clock at that statement plus the lease's duration, so while less than
//! `lease_confirm_after` (a tenth of the lease by default, never more than half) has passed
//! since on the worker's monotonic clock, the lease is held without asking. The bound is
//! short on purpose: a worker stalled between that confirmation and the call (paused,
//! starved under load) still calls, and the shorter the bound, the fewer such calls reach a
//! receiver after the lease ran out. Past it, one statement renews the
//! lease if it is still this worker's under the same token, or takes it with the next token
//! if this worker remembers none, it is free, and the log is still at the head the caller saw;
//! otherwise it is not held.
//!
//! The clock that decides is the database server's (`clock_timestamp()`), never a worker's:
//! the worker's own clock only ever tells it that it need not ask.
//!
//! Every statement that locks several rows of `loom_executions` locks them in execution id
//! order: the full path's `LOCK_ROWS`, the one statement (its rows sorted by [`crate::fast`]),
//! the renewal ([`RENEW`]) and the release. Two of them then never wait on each other in a
//! cycle; the renewal used to lock in the order its scan met the rows, and each deadlock with
//! a writer's transaction held both for the server's `deadlock_timeout` (1 s) before one was
//! cancelled and retried (REGRESSIONS 16). The renewal also never waits: it skips the rows a
//! write in flight holds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use loom_kernel::ExecutionId;

use crate::cause::{Failure, describe, describe_pool};

/// An execution's row as the writer locked it.
#[derive(Debug, Default, Clone)]
pub(crate) struct RowLease {
    pub(crate) head: u64,
    pub(crate) owner: Option<String>,
    pub(crate) token: i64,
    pub(crate) live: bool,
}

/// Whether an append may go ahead.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LeaseDecision {
    /// Yes, under this fencing token.
    Granted { token: i64 },
    /// No; `lost` when this worker's own lease ran out (it forgets it).
    Refused { lost: bool },
}

/// One lease this worker holds.
#[derive(Debug, Clone, Copy)]
struct Held {
    token: i64,
    /// When the statement that last set the lease's expiry was sent: the lease runs at least
    /// a lease's duration from then.
    since: Instant,
}

/// The leases this worker holds, by execution: the fencing token of each.
#[derive(Debug)]
pub(crate) struct Leases {
    worker_id: String,
    lease: Duration,
    /// How old a confirmation may be for [`Leases::fresh`] to trust it.
    confirm_after: Duration,
    held: Mutex<HashMap<ExecutionId, Held>>,
    /// Leases taken over ([`Leases::takeovers`]).
    takeovers: AtomicU64,
}

/// Renews the lease if it is still ours under the token remembered (`$3`): nobody took it
/// since, so nobody else wrote, even if it lapsed. Or takes it with the next token if it is
/// not remembered and free, lapsed or ours from an earlier run, only while the log is at the
/// head the caller saw (`$4`), so that nobody's work since is overlooked. Also returns whether
/// that was a take-over: a lease not remembered taken from a row that still named a holder
/// (the row as it was, locked, before the update).
const HOLD: &str = "\
WITH previous AS (
    SELECT lease_owner AS previous_owner FROM loom_executions WHERE execution_id = $1 FOR UPDATE
)
UPDATE loom_executions
SET lease_owner = $2,
    last_lease_owner = $2,
    lease_token = CASE WHEN lease_token = $3 THEN lease_token ELSE lease_token + 1 END,
    lease_expires_at = clock_timestamp() + $5 * interval '1 millisecond'
FROM previous
WHERE execution_id = $1
  AND (lease_token = $3 AND lease_owner = $2
       OR $3::int8 IS NULL AND head = $4
          AND (lease_owner IS NULL OR lease_owner = $2 OR lease_expires_at <= clock_timestamp()))
RETURNING lease_token, $3::int8 IS NULL AND previous_owner IS NOT NULL";

/// Renews every live lease of this worker (`$1`) for `$2` ms. Returns each live lease with
/// whether it was renewed: a row a write in flight holds is skipped, never waited for (the
/// write sets the lease's expiry itself when it keeps the lease), and reported as still this
/// worker's as it stood before that write. A renewal that waited would hold every row it
/// locked until the last one came free, and the writer's next transaction would wait for all
/// of them: under overload past the writes' statement timeout (see the module's note on lock
/// order).
pub(crate) const RENEW: &str = "\
WITH mine AS (
    SELECT execution_id FROM loom_executions
    WHERE lease_owner = $1 AND lease_expires_at > clock_timestamp()
    ORDER BY execution_id FOR UPDATE SKIP LOCKED
), renewed AS (
    UPDATE loom_executions AS x
    SET lease_expires_at = clock_timestamp() + $2 * interval '1 millisecond'
    FROM mine
    WHERE x.execution_id = mine.execution_id
      AND x.lease_owner = $1 AND x.lease_expires_at > clock_timestamp()
    RETURNING x.execution_id, x.lease_token
)
SELECT execution_id, lease_token, true FROM renewed
UNION ALL
SELECT execution_id, lease_token, false FROM loom_executions
WHERE lease_owner = $1 AND lease_expires_at > clock_timestamp()
  AND execution_id NOT IN (SELECT execution_id FROM mine)";

impl Leases {
    pub(crate) fn new(worker_id: String, lease: Duration, confirm_after: Duration) -> Self {
        Self {
            worker_id,
            lease,
            confirm_after: confirm_after.min(lease / 2),
            held: Mutex::default(),
            takeovers: AtomicU64::new(0),
        }
    }

    /// Leases this worker took over since it started: taken, not remembered, from a row that
    /// still named a holder who had not given the lease back (its lease ran out, or it was
    /// this worker's id in an earlier run). For an operator's metrics.
    pub(crate) fn takeovers(&self) -> u64 {
        self.takeovers.load(Ordering::Relaxed)
    }

    /// Counts `count` take-overs that are durable.
    pub(crate) fn took_over(&self, count: u64) {
        if count > 0 {
            self.takeovers.fetch_add(count, Ordering::Relaxed);
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<ExecutionId, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// The lease's duration in milliseconds, as SQL wants it.
    pub(crate) fn lease_ms(&self) -> f64 {
        self.lease.as_secs_f64() * 1000.0
    }

    /// The tokens held for `executions`.
    pub(crate) fn snapshot<'a>(
        &self,
        executions: impl IntoIterator<Item = &'a ExecutionId>,
    ) -> HashMap<String, i64> {
        let held = self.held();
        executions
            .into_iter()
            .filter_map(|id| held.get(id).map(|h| (id.as_str().to_owned(), h.token)))
            .collect()
    }

    /// The token held for `execution`, if any.
    pub(crate) fn token(&self, execution: &ExecutionId) -> Option<i64> {
        self.held().get(execution).map(|h| h.token)
    }

    /// The token of `execution`'s lease if this worker holds it and its expiry was set less
    /// than `confirm_after` ago: held for certain, without asking the server.
    pub(crate) fn fresh(&self, execution: &ExecutionId) -> Option<i64> {
        let held = self.held().get(execution).copied()?;
        (held.since.elapsed() < self.confirm_after).then_some(held.token)
    }

    /// Holds `execution`'s lease, its log being at `head`: renewed if it is still this
    /// worker's, taken if it is free (see [`HOLD`]). The token, or `None` if not held (then
    /// forgotten).
    pub(crate) async fn hold(
        &self,
        pool: &Pool,
        execution: &ExecutionId,
        head: i64,
    ) -> Result<Option<i64>, Failure> {
        let remembered = self.token(execution);
        let client = pool.get().await.map_err(|e| Failure::pool(&e))?;
        let statement = client
            .prepare_cached(HOLD)
            .await
            .map_err(|e| Failure::of(&e))?;
        let since = Instant::now();
        let row = client
            .query_opt(
                &statement,
                &[
                    &execution.as_str(),
                    &self.worker_id,
                    &remembered,
                    &head,
                    &self.lease_ms(),
                ],
            )
            .await
            .map_err(|e| Failure::of(&e))?;
        let mut held = self.held();
        let Some(row) = row else {
            if remembered.is_some() && held.get(execution).map(|h| h.token) == remembered {
                tracing::warn!(%execution, "lease lost: another worker holds it or the log moved on");
                held.remove(execution);
            }
            return Ok(None);
        };
        let token: i64 = row.get(0);
        // The statement commits on its own: the take-over is durable.
        if row.get::<_, Option<bool>>(1) == Some(true) {
            self.took_over(1);
        }
        // An append committed meanwhile may have taken the lease on further: keep the newest.
        match held.get_mut(execution) {
            Some(h) if h.token > token => {}
            Some(h) => *h = Held { token, since },
            None => {
                held.insert(execution.clone(), Held { token, since });
            }
        }
        Ok(Some(token))
    }

    /// Records leases taken (`Some(token)`) or given up (`None`) by a batch committed by
    /// statements sent at `since`.
    pub(crate) fn apply(&self, changes: Vec<(ExecutionId, Option<i64>)>, since: Instant) {
        let mut held = self.held();
        for (execution, token) in changes {
            match token {
                Some(token) => {
                    held.insert(execution, Held { token, since });
                }
                None => {
                    held.remove(&execution);
                }
            }
        }
    }

    /// The rule of the module documentation, for a row and the token this worker remembers.
    pub(crate) fn decide(&self, row: &RowLease, remembered: Option<i64>) -> LeaseDecision {
        let ours = row.owner.as_deref() == Some(self.worker_id.as_str());
        match remembered {
            Some(token) if ours && row.live && row.token == token => {
                LeaseDecision::Granted { token }
            }
            Some(_) => LeaseDecision::Refused { lost: true },
            // Ours by name but not remembered: this worker restarted under the same id. Taking
            // it over with the next token fences out whatever of the earlier run is left.
            None if row.live && row.owner.is_some() && !ours => {
                LeaseDecision::Refused { lost: false }
            }
            None => LeaseDecision::Granted {
                token: row.token + 1,
            },
        }
    }

    /// Renews every live lease this worker holds; forgets the ones that ran out ([`RENEW`]).
    pub(crate) async fn renew(&self, pool: &Pool) -> Result<usize, String> {
        // Only leases held before the statement began can be judged by it: one taken while
        // it runs committed too late for it to see.
        let before: Vec<(ExecutionId, i64)> = self
            .held()
            .iter()
            .map(|(id, h)| (id.clone(), h.token))
            .collect();
        if before.is_empty() {
            return Ok(0);
        }
        let client = pool.get().await.map_err(|e| describe_pool(&e))?;
        let since = Instant::now();
        let rows = client
            .query(RENEW, &[&self.worker_id, &self.lease_ms()])
            .await
            .map_err(|e| describe(&e))?;
        // Per live lease: its token, and whether this statement renewed it (or skipped it, a
        // write in flight holding its row).
        let live: HashMap<String, (i64, bool)> = rows
            .iter()
            .map(|row| (row.get(0), (row.get(1), row.get(2))))
            .collect();
        let mut held = self.held();
        for (id, token) in before {
            let Some(h) = held.get_mut(&id).filter(|h| h.token == token) else {
                continue;
            };
            match live.get(id.as_str()) {
                Some((live_token, true)) if *live_token == token => h.since = h.since.max(since),
                Some((live_token, false)) if *live_token == token => {}
                _ => {
                    tracing::warn!(execution = %id, token, "lease ran out before it was renewed");
                    held.remove(&id);
                }
            }
        }
        Ok(held.len())
    }

    /// Gives back every lease held (see `PostgresStore::release_leases`).
    pub(crate) async fn release(&self, pool: &Pool) -> Result<usize, String> {
        let held: Vec<(ExecutionId, i64)> = self
            .held()
            .iter()
            .map(|(id, h)| (id.clone(), h.token))
            .collect();
        if held.is_empty() {
            return Ok(0);
        }
        // In id order, as every statement that locks several rows takes them (`RENEW`).
        let mut ordered: Vec<&(ExecutionId, i64)> = held.iter().collect();
        ordered.sort_unstable_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        let ids: Vec<&str> = ordered.iter().map(|(id, _)| id.as_str()).collect();
        let tokens: Vec<i64> = ordered.iter().map(|(_, token)| *token).collect();
        let client = pool.get().await.map_err(|e| describe_pool(&e))?;
        let released = client
            .execute(
                "UPDATE loom_executions AS x \
                 SET lease_owner = NULL, lease_expires_at = NULL, \
                     last_lease_owner = x.lease_owner \
                 FROM unnest($2::text[], $3::int8[]) AS h(id, token) \
                 WHERE x.execution_id = h.id AND x.lease_token = h.token \
                   AND x.lease_owner = $1",
                &[&self.worker_id, &ids, &tokens],
            )
            .await
            .map_err(|e| describe(&e))?;
        let mut now = self.held();
        for (id, token) in held {
            if now.get(&id).map(|h| h.token) == Some(token) {
                now.remove(&id);
            }
        }
        Ok(released as usize)
    }

    /// Renews leases until `leases` is dropped.
    pub(crate) async fn renew_forever(
        leases: std::sync::Weak<Self>,
        pool: Pool,
        every: Duration,
        faults: std::sync::Arc<crate::faults::Faults>,
    ) {
        loop {
            tokio::time::sleep(every).await;
            if faults
                .pause_lease_renewal
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                continue;
            }
            let Some(leases) = leases.upgrade() else {
                return;
            };
            if let Err(detail) = leases.renew(&pool).await {
                tracing::warn!(%detail, "cannot renew leases");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leases() -> Leases {
        Leases::new(
            "me".into(),
            Duration::from_secs(1),
            Duration::from_millis(100),
        )
    }

    fn row(owner: Option<&str>, token: i64, live: bool) -> RowLease {
        RowLease {
            head: 3,
            owner: owner.map(str::to_owned),
            token,
            live,
        }
    }

    #[test]
    fn a_free_execution_is_taken_with_the_next_token() {
        assert_eq!(
            leases().decide(&row(None, 4, false), None),
            LeaseDecision::Granted { token: 5 }
        );
    }

    #[test]
    fn an_expired_lease_of_another_worker_is_taken_over() {
        assert_eq!(
            leases().decide(&row(Some("other"), 4, false), None),
            LeaseDecision::Granted { token: 5 }
        );
    }

    #[test]
    fn a_live_lease_of_another_worker_refuses_without_loss() {
        assert_eq!(
            leases().decide(&row(Some("other"), 4, true), None),
            LeaseDecision::Refused { lost: false }
        );
    }

    #[test]
    fn our_live_lease_is_renewed_under_its_token() {
        assert_eq!(
            leases().decide(&row(Some("me"), 4, true), Some(4)),
            LeaseDecision::Granted { token: 4 }
        );
    }

    #[test]
    fn a_restarted_worker_takes_its_own_lease_back_with_a_new_token() {
        assert_eq!(
            leases().decide(&row(Some("me"), 4, true), None),
            LeaseDecision::Granted { token: 5 }
        );
    }

    #[test]
    fn our_expired_lease_cannot_append() {
        assert_eq!(
            leases().decide(&row(Some("me"), 4, false), Some(4)),
            LeaseDecision::Refused { lost: true }
        );
    }

    #[test]
    fn a_lease_taken_over_by_another_worker_fences_us_out() {
        assert_eq!(
            leases().decide(&row(Some("other"), 5, true), Some(4)),
            LeaseDecision::Refused { lost: true }
        );
        // Even after the other worker released it: our token is stale.
        assert_eq!(
            leases().decide(&row(None, 5, false), Some(4)),
            LeaseDecision::Refused { lost: true }
        );
    }

    #[test]
    fn a_confirmation_is_trusted_at_most_half_a_lease_and_a_zero_bound_trusts_none() {
        let execution = ExecutionId::new("e").unwrap();
        let hold = |confirm_after: Duration, since: Instant| {
            let leases = Leases::new("me".into(), Duration::from_secs(10), confirm_after);
            leases.apply(vec![(execution.clone(), Some(3))], since);
            leases.fresh(&execution)
        };
        let six_seconds_ago = Instant::now() - Duration::from_secs(6);
        // A bound past half the lease is half the lease.
        assert_eq!(hold(Duration::MAX, six_seconds_ago), None);
        assert_eq!(hold(Duration::MAX, Instant::now()), Some(3));
        // Zero: every non-idempotent call asks the server.
        assert_eq!(hold(Duration::ZERO, Instant::now()), None);
    }
}
