//! Retention on PostgreSQL ([`EventStore::delete_ended`]): ended executions deleted in one
//! transaction a batch at a time, rows a writer holds skipped, and an ended child kept while its
//! parent, on this database or on another shard, still waits for its end (issue 41, hole 2).

use loom_kernel::ExecutionId;
use loom_kernel::kit::{RetentionError, StorageError};

use crate::store::PostgresStore;

impl PostgresStore {
    /// [`EventStore::delete_ended`], keeping the ended children whose parent, found where
    /// `parents` says, still waits for their end (`wake::awaiting_parent`).
    pub(crate) async fn delete_ended_keeping(
        &self,
        ended_before_ms: u64,
        limit: usize,
        parents: Parents<'_>,
    ) -> Result<Vec<ExecutionId>, RetentionError> {
        let before = ended_before_ms.min(i64::MAX as u64) as i64;
        let limit = limit.clamp(1, i64::MAX as usize) as i64;
        let failed = |err: tokio_postgres::Error| RetentionError::Storage {
            source: StorageError::msg(crate::cause::describe(&err)),
        };
        let mut client = self
            .pool()
            .get()
            .await
            .map_err(|e| RetentionError::Storage {
                source: StorageError::msg(crate::cause::describe_pool(&e)),
            })?;
        let txn = client.transaction().await.map_err(failed)?;
        let mut ids: Vec<String> = Vec::new();
        let mut after: Option<(i64, String)> = None;
        while ids.len() < limit as usize {
            // Rows a writer holds are skipped, not waited for: live work is never blocked.
            let after_at = after.as_ref().map(|(at, _)| *at);
            let after_id = after.as_ref().map(|(_, id)| id.as_str());
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                [&before, &limit, &after_at, &after_id];
            let rows = txn
                .query(
                    "SELECT execution_id, ended_at_ms FROM loom_executions \
                     WHERE ended_at_ms IS NOT NULL AND ended_at_ms < $1 \
                       AND ($3::int8 IS NULL OR (ended_at_ms, execution_id) > ($3, $4)) \
                     ORDER BY ended_at_ms, execution_id LIMIT $2 FOR UPDATE SKIP LOCKED",
                    &params,
                )
                .await
                .map_err(failed)?;
            let page: Vec<(String, i64)> =
                rows.iter().map(|row| (row.get(0), row.get(1))).collect();
            let awaited = parents
                .awaited(&txn, page.iter().map(|(id, _)| id.as_str()))
                .await
                .map_err(failed)?;
            for (id, _) in &page {
                if ids.len() < limit as usize && !awaited.contains(id) {
                    ids.push(id.clone());
                }
            }
            match page.last() {
                Some((id, at)) if page.len() as i64 == limit => after = Some((*at, id.clone())),
                _ => break,
            }
        }
        if !ids.is_empty() {
            txn.execute(
                "DELETE FROM loom_events WHERE execution_id = ANY($1)",
                &[&ids],
            )
            .await
            .map_err(failed)?;
            txn.execute(
                "DELETE FROM loom_executions WHERE execution_id = ANY($1)",
                &[&ids],
            )
            .await
            .map_err(failed)?;
        }
        txn.commit().await.map_err(failed)?;
        Ok(ids
            .into_iter()
            .filter_map(|id| ExecutionId::from_stored(id).ok())
            .collect())
    }
}

/// Where retention looks for the parent of an ended child: this database, or the shard the
/// parent's id places it on (a child is placed by its own id, so its parent may live on
/// another shard).
#[derive(Clone, Copy)]
pub(crate) enum Parents<'s> {
    /// This database.
    Here,
    /// The shards of a [`crate::ShardedStore`], this one at `index`.
    Shards {
        shards: &'s [PostgresStore],
        index: usize,
    },
}

impl Parents<'_> {
    /// The children among `ids` whose parent still waits for their end: retention keeps them,
    /// or `recover` would start them again. A parent on this database is read in `txn`; one on
    /// another shard through that shard's pool (the row of a waiting parent only ever goes, so
    /// reading it outside `txn` keeps nothing it should not).
    async fn awaited<'a>(
        self,
        txn: &tokio_postgres::Transaction<'_>,
        ids: impl Iterator<Item = &'a str>,
    ) -> Result<std::collections::HashSet<String>, tokio_postgres::Error> {
        let mut by_shard: std::collections::BTreeMap<usize, Vec<[String; 3]>> =
            std::collections::BTreeMap::new();
        for id in ids {
            let Ok(child) = ExecutionId::from_stored(id) else {
                continue;
            };
            let Some((parent, tag)) = loom_kernel::kit::wake::awaiting_parent(&child) else {
                continue;
            };
            let shard = match self {
                Self::Here => 0,
                Self::Shards { shards, .. } => crate::shard_of(&parent, shards.len()),
            };
            by_shard.entry(shard).or_default().push([
                id.to_owned(),
                parent.as_str().to_owned(),
                tag,
            ]);
        }
        let mut awaited = std::collections::HashSet::new();
        for (shard, candidates) in by_shard {
            let found = match self {
                Self::Shards { shards, index } if shard != index => {
                    let Ok(client) = shards[shard].pool().get().await else {
                        // The parent's shard cannot be asked: keep every candidate.
                        awaited.extend(candidates.into_iter().map(|[child, ..]| child));
                        continue;
                    };
                    waiting_parents(&**client, &candidates).await?
                }
                _ => waiting_parents(txn, &candidates).await?,
            };
            awaited.extend(found);
        }
        Ok(awaited)
    }
}

/// The children of `candidates` (`[child, parent, tag]`) whose parent has the row `tag` in
/// the wake-up index of the database `client` reaches.
async fn waiting_parents(
    client: &impl tokio_postgres::GenericClient,
    candidates: &[[String; 3]],
) -> Result<Vec<String>, tokio_postgres::Error> {
    let column = |n: usize| -> Vec<&str> { candidates.iter().map(|c| c[n].as_str()).collect() };
    let rows = client
        .query(
            "SELECT c.child FROM unnest($1::text[], $2::text[], $3::text[]) AS c(child, parent, tag) \
             WHERE EXISTS (SELECT 1 FROM loom_wakeups AS w \
                           WHERE w.execution_id = c.parent AND w.tag = c.tag)",
            &[&column(0), &column(1), &column(2)],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}
