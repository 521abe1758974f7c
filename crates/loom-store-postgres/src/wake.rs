//! The wake-up index's part of a commit (LD-033): what a batch does to `loom_wakeups`, as one
//! statement, and its parameters.

use loom_kernel::kit::wake::WakeOps;

/// What a batch does to the wake-up index (LD-033), as one statement: every row of the
/// executions that ended deleted, some rows deleted, some inserted or moved. Each
/// `(execution, tag)` is in at most one of them ([`WakeOps`]), so the parts of the statement
/// never touch the same row.
pub(crate) const WAKE_STATEMENT: &str = "\
WITH cleared AS (
    DELETE FROM loom_wakeups WHERE execution_id = ANY($1::text[])
), deleted AS (
    DELETE FROM loom_wakeups AS w USING unnest($2::text[], $3::text[]) AS d(id, tag)
    WHERE w.execution_id = d.id AND w.tag = d.tag
)
INSERT INTO loom_wakeups (execution_id, tag, at_ms)
SELECT a.id, a.tag, a.at FROM unnest($4::text[], $5::text[], $6::int8[]) AS a(id, tag, at)
ON CONFLICT (execution_id, tag) DO UPDATE SET at_ms = excluded.at_ms";

/// The parameters of [`WAKE_STATEMENT`] (and of the same parts of [`crate::fast::STATEMENT`]).
#[derive(Debug, Default)]
pub(crate) struct WakeParams {
    pub(crate) cleared: Vec<String>,
    pub(crate) deleted_ids: Vec<String>,
    pub(crate) deleted_tags: Vec<String>,
    pub(crate) upserted_ids: Vec<String>,
    pub(crate) upserted_tags: Vec<String>,
    pub(crate) upserted_at: Vec<i64>,
}

impl WakeParams {
    pub(crate) fn of<'a>(ops: impl IntoIterator<Item = (&'a &'a str, &'a WakeOps)>) -> Self {
        let mut params = Self::default();
        for (id, ops) in ops {
            params.add(id, ops);
        }
        params
    }

    pub(crate) fn add(&mut self, id: &str, ops: &WakeOps) {
        if ops.clear {
            self.cleared.push(id.to_owned());
        }
        for tag in &ops.deletes {
            self.deleted_ids.push(id.to_owned());
            self.deleted_tags.push(tag.clone());
        }
        for (tag, at) in &ops.upserts {
            self.upserted_ids.push(id.to_owned());
            self.upserted_tags.push(tag.clone());
            self.upserted_at
                .push(i64::try_from(*at).unwrap_or(i64::MAX));
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.cleared.is_empty() && self.deleted_ids.is_empty() && self.upserted_ids.is_empty()
    }

    pub(crate) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 6] {
        [
            &self.cleared,
            &self.deleted_ids,
            &self.deleted_tags,
            &self.upserted_ids,
            &self.upserted_tags,
            &self.upserted_at,
        ]
    }
}
