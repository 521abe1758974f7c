//! The one-statement write path: a batch of appends by the worker that holds every
//! execution's lease, committed in one round trip.
//!
//! While this worker holds an execution's lease, nobody else writes to it: the writer keeps
//! what it last committed for the execution (head, fencing token, [`ExecutionTail`]) and
//! validates the next append against that in memory. The batch then goes to the server as one
//! statement, run as an implicit transaction (its `Sync` commits it: no `BEGIN`, no separate
//! `COMMIT`, no `SELECT ... FOR UPDATE`). The statement carries the fence in its `WHERE`:
//!
//! - `UPDATE loom_executions ... WHERE head = expected AND lease_owner = me AND lease_token =
//!   token AND lease_expires_at > clock_timestamp()`: the row lock and the fence in one step,
//!   judged by the server's clock. An execution whose row moved on (another worker took the
//!   lease, the lease ran out, the head is not the one remembered) updates nothing;
//! - the events of the executions updated, and only those, are inserted, with feed positions
//!   from the `loom_feed` row, locked from there to the commit as on the full path: feed
//!   positions still follow commit order across every worker;
//! - `pg_notify` of the new heads, delivered only if the statement commits.
//!
//! The statement returns the executions it updated. The other requests of the batch (fenced)
//! wrote nothing and go through the full path ([`crate::writer`]), which reads the row,
//! decides the lease and answers. Anything the writer does not remember exactly (a first
//! append, a lease not held, an expected seq other than the remembered head, an append the
//! remembered tail refuses) goes the full path as well, so every answer that is not a plain
//! success is the full path's.
//!
//! A statement that fails with an error from the server did nothing (the implicit transaction
//! rolled back): the whole batch goes the full path. One whose reply is lost may or may not
//! have committed: the writer reads back, per execution, whether its first event is stored
//! under the statement's `commit_id`, exactly as for an ambiguous `COMMIT`.

use std::collections::{HashMap, HashSet};

use loom_kernel::ExecutionId;
use loom_kernel::kit::EncodedAppend;
use loom_kernel::kit::ExecutionTail;
use loom_kernel::kit::status_code;

/// What the writer remembers of an execution whose lease it holds, as of its last commit.
#[derive(Debug, Clone)]
pub(crate) struct Cached {
    pub(crate) head: u64,
    pub(crate) token: i64,
    pub(crate) tail: ExecutionTail,
}

/// The one statement. Arrays: `$1..$9`, `$11` and `$23` (whether a step is in doubt) one element per execution, `$12..$14` one
/// per event, `$17..$22` the rows of the wake-up index the batch changes (as in
/// [`crate::wake::WAKE_STATEMENT`]), written only for the executions updated. The owner is compared per row (`$11`, this worker's id in each element) and
/// with `IS NOT DISTINCT FROM`, which no index serves, so that
/// the plan reaches each row by its primary key, never through the index of leases by owner.
pub(crate) const STATEMENT: &str = "\
WITH req AS (
    SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::bytea[],
                         $6::int2[], $7::bool[], $8::int8[], $9::bool[], $11::text[],
                         $23::bool[])
        AS r(id, expected, token, head, tail, status, driving, ended, keep, owner, doubts)
), upd AS (
    UPDATE loom_executions AS x
    SET head = r.head, tail = r.tail, status = r.status, needs_driving = r.driving,
        ended_at_ms = r.ended, steps_in_doubt = r.doubts,
        lease_owner = CASE WHEN r.keep THEN x.lease_owner END,
        last_lease_owner = r.owner,
        lease_expires_at = CASE WHEN r.keep
            THEN clock_timestamp() + $10 * interval '1 millisecond' END
    FROM req AS r
    WHERE x.execution_id = r.id AND x.head = r.expected
      AND x.lease_owner IS NOT DISTINCT FROM r.owner
      AND x.lease_token = r.token AND x.lease_expires_at > clock_timestamp()
    RETURNING x.execution_id, x.head
), ev AS (
    SELECT e.id, e.seq, e.record, row_number() OVER (ORDER BY e.n) AS k
    FROM unnest($12::text[], $13::int8[], $14::bytea[]) WITH ORDINALITY AS e(id, seq, record, n)
    WHERE e.id IN (SELECT execution_id FROM upd)
), feed AS (
    UPDATE loom_feed SET next_position = next_position + (SELECT count(*) FROM ev)
    WHERE only_row AND EXISTS (SELECT 1 FROM ev)
    RETURNING next_position - (SELECT count(*) FROM ev) AS first
), ins AS (
    INSERT INTO loom_events (execution_id, seq, record, commit_id, position)
    SELECT ev.id, ev.seq, ev.record, $15, feed.first + ev.k - 1 FROM ev, feed
), notified AS (
    SELECT pg_notify($16, string_agg(c.line, E'\\n'))
    FROM (SELECT u.head || ':' || u.execution_id AS line,
                 (row_number() OVER () - 1) / 25 AS chunk
          FROM upd AS u) AS c
    GROUP BY c.chunk
), wake_cleared AS (
    DELETE FROM loom_wakeups WHERE execution_id = ANY($17::text[])
      AND execution_id IN (SELECT execution_id FROM upd)
), wake_deleted AS (
    DELETE FROM loom_wakeups AS w USING unnest($18::text[], $19::text[]) AS d(id, tag)
    WHERE w.execution_id = d.id AND w.tag = d.tag AND d.id IN (SELECT execution_id FROM upd)
), wake_upserted AS (
    INSERT INTO loom_wakeups (execution_id, tag, at_ms)
    SELECT a.id, a.tag, a.at FROM unnest($20::text[], $21::text[], $22::int8[]) AS a(id, tag, at)
    WHERE a.id IN (SELECT execution_id FROM upd)
    ON CONFLICT (execution_id, tag) DO UPDATE SET at_ms = excluded.at_ms
)
SELECT execution_id FROM upd WHERE (SELECT count(*) FROM notified) >= 0";

/// Reads back which executions of an ambiguous statement committed: the first event of each,
/// stored under the statement's commit id.
pub(crate) const READ_BACK: &str = "\
SELECT p.id FROM unnest($1::text[], $2::int8[]) AS p(id, seq)
JOIN loom_events AS e ON e.execution_id = p.id AND e.seq = p.seq AND e.commit_id = $3";

/// One execution's row after the batch.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) id: ExecutionId,
    pub(crate) expected: u64,
    pub(crate) token: i64,
    pub(crate) head: u64,
    pub(crate) tail: ExecutionTail,
    /// What the batch does to its rows of the wake-up index.
    pub(crate) wake: loom_kernel::kit::wake::WakeOps,
}

impl Row {
    /// Whether the execution still needs a driver (and so keeps its lease).
    pub(crate) fn keep(&self) -> bool {
        self.tail.needs_driving()
    }
}

/// A batch the fast path can take: every row, every event, and each request's head.
#[derive(Debug, Default)]
pub(crate) struct Plan<'a> {
    pub(crate) rows: Vec<Row>,
    /// Per request: the index of its row and its head once committed.
    pub(crate) requests: Vec<(usize, u64)>,
    pub(crate) event_ids: Vec<&'a str>,
    pub(crate) event_seqs: Vec<i64>,
    pub(crate) event_records: Vec<&'a [u8]>,
}

/// The plan for `batch`, or `None` when any request needs the full path.
pub(crate) fn plan<'a>(
    batch: &'a [EncodedAppend],
    cache: &HashMap<ExecutionId, Cached>,
    held: impl Fn(&ExecutionId) -> Option<i64>,
) -> Option<Plan<'a>> {
    let mut plan = Plan::default();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for request in batch {
        let id = request.execution.as_str();
        let at = match index.get(id) {
            Some(&at) => {
                // A later append of an execution the batch released would take the lease
                // anew: the full path decides that.
                if !plan.rows[at].keep() {
                    return None;
                }
                at
            }
            None => {
                let cached = cache.get(&request.execution)?;
                if held(&request.execution) != Some(cached.token) {
                    return None;
                }
                index.insert(id, plan.rows.len());
                plan.rows.push(Row {
                    id: request.execution.clone(),
                    expected: cached.head,
                    token: cached.token,
                    head: cached.head,
                    tail: cached.tail.clone(),
                    wake: loom_kernel::kit::wake::WakeOps::default(),
                });
                plan.rows.len() - 1
            }
        };
        let row = &mut plan.rows[at];
        if row.head != request.expected_seq {
            return None;
        }
        row.tail
            .apply_changes(&request.changes, request.recorded_at_ms)
            .ok()?;
        if loom_kernel::kit::wake::touches_wakeups(&request.changes) {
            row.wake.extend(&request.execution, &request.changes);
        }
        for (seq, record) in (request.expected_seq..).zip(request.records.iter()) {
            plan.event_ids.push(id);
            plan.event_seqs.push(i64::try_from(seq).ok()?);
            plan.event_records.push(record);
        }
        row.head = request.expected_seq + request.records.len() as u64;
        plan.requests.push((at, row.head));
    }
    plan.sort_rows_by_id();
    Some(plan)
}

impl Plan<'_> {
    /// Puts the rows in id order, the order the statement then locks them in, as every
    /// statement that locks several rows does (`crate::lease`, on lock order); the events keep
    /// the batch's order.
    fn sort_rows_by_id(&mut self) {
        let mut indexed: Vec<(usize, Row)> = std::mem::take(&mut self.rows)
            .into_iter()
            .enumerate()
            .collect();
        indexed.sort_unstable_by(|(_, a), (_, b)| a.id.as_str().cmp(b.id.as_str()));
        let mut moved_to = vec![0; indexed.len()];
        for (new, (old, _)) in indexed.iter().enumerate() {
            moved_to[*old] = new;
        }
        self.rows = indexed.into_iter().map(|(_, row)| row).collect();
        for (at, _) in &mut self.requests {
            *at = moved_to[*at];
        }
    }
}

/// The per-execution parameters of [`STATEMENT`].
pub(crate) struct RowParams {
    pub(crate) ids: Vec<String>,
    pub(crate) expected: Vec<i64>,
    pub(crate) tokens: Vec<i64>,
    pub(crate) heads: Vec<i64>,
    pub(crate) tails: Vec<Vec<u8>>,
    pub(crate) statuses: Vec<i16>,
    pub(crate) driving: Vec<bool>,
    pub(crate) ended: Vec<Option<i64>>,
    pub(crate) keep: Vec<bool>,
    pub(crate) owners: Vec<String>,
    pub(crate) doubts: Vec<bool>,
}

impl RowParams {
    pub(crate) fn of(rows: &[Row], worker: &str) -> Self {
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        Self {
            ids: rows.iter().map(|r| r.id.as_str().to_owned()).collect(),
            expected: rows.iter().map(|r| clamp(r.expected)).collect(),
            tokens: rows.iter().map(|r| r.token).collect(),
            heads: rows.iter().map(|r| clamp(r.head)).collect(),
            tails: rows.iter().map(|r| r.tail.encode()).collect(),
            statuses: rows
                .iter()
                .map(|r| i16::from(status_code(r.tail.status())))
                .collect(),
            driving: rows.iter().map(|r| r.tail.needs_driving()).collect(),
            ended: rows
                .iter()
                .map(|r| r.tail.ended_at_ms().map(clamp))
                .collect(),
            keep: rows.iter().map(Row::keep).collect(),
            owners: rows.iter().map(|_| worker.to_owned()).collect(),
            doubts: rows.iter().map(|r| r.tail.has_steps_in_doubt()).collect(),
        }
    }
}

/// The ids in `rows` as a set (for the executions a statement updated).
pub(crate) fn id_set(rows: &[tokio_postgres::Row]) -> HashSet<String> {
    rows.iter().map(|row| row.get::<_, String>(0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, head: u64) -> Row {
        Row {
            id: ExecutionId::new(id).expect("id"),
            expected: head,
            token: 1,
            head,
            tail: ExecutionTail::new(),
            wake: loom_kernel::kit::wake::WakeOps::default(),
        }
    }

    #[test]
    fn rows_go_in_id_order_and_each_request_still_names_its_own() {
        let mut plan = Plan {
            rows: vec![row("c", 30), row("a", 10), row("b", 20)],
            // Two appends of "c", one of "a", one of "b", in the batch's order.
            requests: vec![(0, 31), (1, 11), (2, 21), (0, 32)],
            ..Plan::default()
        };
        plan.sort_rows_by_id();
        let ids: Vec<&str> = plan.rows.iter().map(|row| row.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        let named: Vec<(&str, u64)> = (plan.requests.iter())
            .map(|(at, head)| (plan.rows[*at].id.as_str(), *head))
            .collect();
        assert_eq!(named, [("c", 31), ("a", 11), ("b", 21), ("c", 32)]);
    }
}
