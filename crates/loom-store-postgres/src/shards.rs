//! Past one database: [`ShardedStore`] spreads executions over several PostgreSQL databases
//! (each an ordinary [`PostgresStore`], with its own leases, status index and feed) by a hash of
//! the execution's id. The shard map is fixed by configuration: the list of shards, in order.
//! An execution lives on one shard for its whole life; a child is placed by its own id, like
//! any execution, so a parent and its children may live on different shards (the runtime finds
//! a child's parent from the child's id, not from where it is stored).
//!
//! Everything about one execution (append, read, wait, lease) goes to its shard. Listings
//! (`list_executions`, `list_by_status`) ask every shard and merge by id, so pages stay in id
//! order across shards. The feed has no order across shards: [`ShardedStore::read_feed_merged`]
//! reads each shard from its own position ([`ShardCursor`]) and keeps each shard's commit order;
//! the single-number feed of [`EventStore::read_feed`] is refused as unsupported (but on a shard
//! map of one, which is that shard's store).
//!
//! Resharding (a shard map that changes) is not supported: `docs/decisions/LD-030-*.md` says
//! how it would be done.

use std::future::Future;
use std::sync::Arc;

use futures::future::{join_all, select_all};
use loom_kernel::kit::{
    ExecutionPage, ExecutionQuery, ExecutionQueryPage, ExecutionSummary, LeaseHold, LeaseInfo,
    ListedExecution, RetentionError, StatusCounts, StoreStats,
};
use loom_kernel::{
    AppendError, Event, EventEnvelope, EventStore, ExecutionId, FeedEvent, ReadError, StatusFilter,
};

use crate::{ConnectError, PostgresStore, PostgresStoreConfig};

/// Several PostgreSQL databases as one event store, executions placed by a hash of their id.
#[derive(Debug, Clone)]
pub struct ShardedStore {
    shards: Arc<[PostgresStore]>,
}

/// Where a reader of the merged feed is, per shard: the position to read from next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardCursor(pub Vec<u64>);

/// One event of the merged feed: its shard and the event with its position in that shard.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardFeedEvent {
    /// The shard's index in the shard map.
    pub shard: usize,
    /// The event, its position being the shard's.
    pub event: FeedEvent,
}

/// The URLs of a shard map written as one comma-separated list (`loom --store URL1,URL2`),
/// where a URL may itself hold commas between the hosts of a replicated database
/// (`postgres://h1:5432,h2:5432/loom?target_session_attrs=read-write`): a comma starts a new
/// URL only where a `postgres://` or `postgresql://` follows.
pub fn shard_urls(list: &str) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for piece in list.split(',') {
        let starts_url = piece.trim_start().starts_with("postgres://")
            || piece.trim_start().starts_with("postgresql://");
        match urls.last_mut() {
            Some(url) if !starts_url => {
                url.push(',');
                url.push_str(piece);
            }
            _ => urls.push(piece.trim().to_owned()),
        }
    }
    urls
}

/// The shard of `execution` among `shards`: FNV-1a (64 bits) of the id's bytes, modulo the
/// number of shards. Fixed forever for a given shard map: every worker and every version of
/// this crate places an execution on the same shard.
pub fn shard_of(execution: &ExecutionId, shards: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in execution.as_str().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % shards.max(1) as u64) as usize
}

impl ShardedStore {
    /// Connects to every shard of the map, in order (each migrated as a [`PostgresStore`]).
    /// At least one shard; every shard should have the same worker id and lease.
    pub async fn connect(shards: Vec<PostgresStoreConfig>) -> Result<Self, ConnectError> {
        if shards.is_empty() {
            return Err(ConnectError::NoShards);
        }
        let mut connected = Vec::with_capacity(shards.len());
        for config in shards {
            connected.push(PostgresStore::connect(config).await?);
        }
        Ok(Self::from_shards(connected))
    }

    /// The store over shards already connected, in the shard map's order. Panics on none: use
    /// [`ShardedStore::connect`] for configuration that may be empty.
    pub fn from_shards(shards: Vec<PostgresStore>) -> Self {
        assert!(
            !shards.is_empty(),
            "a sharded store needs at least one shard"
        );
        Self {
            shards: shards.into(),
        }
    }

    /// The shards, in the shard map's order.
    pub fn shards(&self) -> &[PostgresStore] {
        &self.shards
    }

    /// The shard that holds `execution`.
    pub fn shard(&self, execution: &ExecutionId) -> &PostgresStore {
        &self.shards[shard_of(execution, self.shards.len())]
    }

    /// The fencing token of `execution`'s lease if this worker holds it (its shard's memory).
    pub fn lease_token(&self, execution: &ExecutionId) -> Option<i64> {
        self.shard(execution).lease_token(execution)
    }

    /// Gives back every lease this worker holds, on every shard; returns how many.
    pub async fn release_leases(&self) -> Result<usize, ReadError> {
        let mut released = 0;
        for shard in self.shards.iter() {
            released += shard.release_leases().await?;
        }
        Ok(released)
    }

    /// The merged feed from `cursor`: up to `limit` events from each shard, each shard's in its
    /// commit order, shards one after another; and the cursor to read from next.
    pub async fn read_feed_merged(
        &self,
        cursor: &ShardCursor,
        limit: usize,
    ) -> Result<(Vec<ShardFeedEvent>, ShardCursor), ReadError> {
        let mut next = self.cursor_or_start(cursor);
        let pages = join_all(
            self.shards
                .iter()
                .zip(&next.0)
                .map(|(shard, from)| shard.read_feed(*from, limit)),
        )
        .await;
        let mut events = Vec::new();
        for (shard, page) in pages.into_iter().enumerate() {
            for event in page? {
                next.0[shard] = event.position + 1;
                events.push(ShardFeedEvent { shard, event });
            }
        }
        Ok((events, next))
    }

    /// Waits until any shard's feed has an event at or past its position in `cursor`.
    pub async fn wait_for_feed_merged(&self, cursor: &ShardCursor) -> Result<(), ReadError> {
        let cursor = self.cursor_or_start(cursor);
        let waits: Vec<_> = self
            .shards
            .iter()
            .zip(cursor.0)
            .map(|(shard, position)| Box::pin(shard.wait_for_feed(position)))
            .collect();
        select_all(waits).await.0
    }

    /// `cursor`, or the start of every shard's feed if it has another number of shards.
    fn cursor_or_start(&self, cursor: &ShardCursor) -> ShardCursor {
        match cursor.0.len() == self.shards.len() {
            true => cursor.clone(),
            false => ShardCursor(vec![0; self.shards.len()]),
        }
    }

    /// Every shard's page after `after`, merged in id order into one page of `limit`.
    async fn merged_page<'a, F, Fut>(
        &'a self,
        limit: usize,
        page: F,
    ) -> Result<ExecutionPage, ReadError>
    where
        F: Fn(&'a PostgresStore) -> Fut,
        Fut: Future<Output = Result<ExecutionPage, ReadError>>,
    {
        let limit = limit.max(1);
        let pages = join_all(self.shards.iter().map(page)).await;
        let mut executions: Vec<ExecutionSummary> = Vec::new();
        let mut more = false;
        for shard_page in pages {
            let shard_page = shard_page?;
            more |= shard_page.next.is_some();
            executions.extend(shard_page.executions);
        }
        executions.sort_by(|a, b| a.id.cmp(&b.id));
        more |= executions.len() > limit;
        executions.truncate(limit);
        let next = more
            .then(|| executions.last().map(|summary| summary.id.clone()))
            .flatten();
        Ok(ExecutionPage { executions, next })
    }
}

impl EventStore for ShardedStore {
    fn append(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> impl Future<Output = Result<u64, AppendError>> + Send {
        self.shard(execution)
            .append(execution, expected_seq, events)
    }

    fn read(
        &self,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<EventEnvelope>, ReadError>> + Send {
        self.shard(execution).read(execution, from, limit)
    }

    fn head(&self, execution: &ExecutionId) -> impl Future<Output = Result<u64, ReadError>> + Send {
        self.shard(execution).head(execution)
    }

    async fn list_executions(
        &self,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        self.merged_page(limit, |shard| shard.list_executions(after, limit.max(1)))
            .await
    }

    async fn read_logs(
        &self,
        executions: &[ExecutionId],
    ) -> Result<Vec<Vec<EventEnvelope>>, ReadError> {
        // One batch per shard, answers put back in the order asked.
        let count = self.shards.len();
        let mut asked: Vec<Vec<(usize, ExecutionId)>> = vec![Vec::new(); count];
        for (index, execution) in executions.iter().enumerate() {
            asked[shard_of(execution, count)].push((index, execution.clone()));
        }
        let mut logs = vec![Vec::new(); executions.len()];
        for (shard, asked) in self.shards.iter().zip(asked) {
            if asked.is_empty() {
                continue;
            }
            let ids: Vec<ExecutionId> = asked.iter().map(|(_, id)| id.clone()).collect();
            for ((index, _), log) in asked.into_iter().zip(shard.read_logs(&ids).await?) {
                logs[index] = log;
            }
        }
        Ok(logs)
    }

    fn wait_for(
        &self,
        execution: &ExecutionId,
        seq: u64,
    ) -> impl Future<Output = Result<(), ReadError>> + Send {
        self.shard(execution).wait_for(execution, seq)
    }

    async fn list_by_status(
        &self,
        filter: StatusFilter,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        self.merged_page(limit, |shard| {
            shard.list_by_status(filter, after, limit.max(1))
        })
        .await
    }

    /// Every shard's page of `query`, merged newest first into one page.
    async fn query_executions(
        &self,
        query: &ExecutionQuery,
    ) -> Result<ExecutionQueryPage, ReadError> {
        let pages = join_all(
            self.shards
                .iter()
                .map(|shard| shard.query_executions(query)),
        )
        .await;
        let mut rows = Vec::new();
        let mut more = false;
        for page in pages {
            let page = page?;
            more |= page.next.is_some();
            rows.extend(page.executions);
        }
        // Each shard's rows already match and follow the cursor: merged newest first only.
        rows.sort_by_key(|row| std::cmp::Reverse(row.cursor()));
        let mut merged = query.page_of(rows);
        if more && merged.next.is_none() {
            merged.next = merged.executions.last().map(ListedExecution::cursor);
        }
        Ok(merged)
    }

    async fn count_by_status(&self) -> Result<StatusCounts, ReadError> {
        let mut total = StatusCounts::default();
        for counts in join_all(self.shards.iter().map(|shard| shard.count_by_status())).await {
            total.add(&counts?);
        }
        Ok(total)
    }

    /// Each shard's page, merged in key order (a row lives in its execution's shard).
    async fn list_wakeups(
        &self,
        before_ms: u64,
        after: Option<&loom_kernel::kit::Wakeup>,
        limit: usize,
    ) -> Result<Vec<loom_kernel::kit::Wakeup>, ReadError> {
        let limit = limit.max(1);
        let pages = futures::future::try_join_all(
            self.shards
                .iter()
                .map(|shard| shard.list_wakeups(before_ms, after, limit)),
        )
        .await?;
        let mut merged: Vec<loom_kernel::kit::Wakeup> = pages.into_iter().flatten().collect();
        merged.sort();
        merged.truncate(limit);
        Ok(merged)
    }

    fn indexes_wakeups(&self) -> bool {
        true
    }

    async fn delete_ended(
        &self,
        ended_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<ExecutionId>, RetentionError> {
        let mut deleted = Vec::new();
        for (index, shard) in self.shards.iter().enumerate() {
            let left = limit.saturating_sub(deleted.len());
            if left == 0 {
                break;
            }
            let parents = crate::retention::Parents::Shards {
                shards: &self.shards,
                index,
            };
            deleted.extend(
                shard
                    .delete_ended_keeping(ended_before_ms, left, parents)
                    .await?,
            );
        }
        Ok(deleted)
    }

    fn hold_lease(
        &self,
        execution: &ExecutionId,
        head: u64,
    ) -> impl Future<Output = Result<LeaseHold, ReadError>> + Send {
        self.shard(execution).hold_lease(execution, head)
    }

    fn lease_info(
        &self,
        execution: &ExecutionId,
    ) -> impl Future<Output = Result<Option<LeaseInfo>, ReadError>> + Send {
        self.shard(execution).lease_info(execution)
    }

    fn has_leases(&self) -> bool {
        true
    }

    /// Every shard's figures added up.
    fn stats(&self) -> Option<StoreStats> {
        let mut takeovers = 0u64;
        for shard in self.shards.iter() {
            let shard = shard.stats()?;
            takeovers = takeovers.saturating_add(shard.lease_takeovers?);
        }
        let mut stats = StoreStats::default();
        stats.lease_takeovers = Some(takeovers);
        Some(stats)
    }

    /// One shard: its feed. Several: refused, there is no one order across shards (see
    /// [`ShardedStore::read_feed_merged`]).
    async fn read_feed(&self, from: u64, limit: usize) -> Result<Vec<FeedEvent>, ReadError> {
        match &self.shards[..] {
            [only] => only.read_feed(from, limit).await,
            _ => Err(ReadError::Unsupported {
                operation: "read_feed across shards (use read_feed_merged)",
            }),
        }
    }

    async fn wait_for_feed(&self, position: u64) -> Result<(), ReadError> {
        match &self.shards[..] {
            [only] => only.wait_for_feed(position).await,
            _ => Err(ReadError::Unsupported {
                operation: "wait_for_feed across shards (use wait_for_feed_merged)",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_shard_list_keeps_each_replicated_database_s_hosts_together() {
        let pair = "postgres://u@h1:5432,h2:5433/loom?target_session_attrs=read-write";
        assert_eq!(shard_urls(pair), [pair]);
        assert_eq!(
            shard_urls(&format!("{pair},postgresql://u@h3/loom2")),
            [pair, "postgresql://u@h3/loom2"]
        );
        assert_eq!(
            shard_urls("postgres://a/x, postgres://b/y"),
            ["postgres://a/x", "postgres://b/y"]
        );
    }

    use super::*;

    #[test]
    fn an_execution_s_shard_is_fixed_by_its_id_and_the_map_s_size() {
        let id = |s: &str| ExecutionId::new(s).expect("id");
        // Pinned: changing the hash would move every stored execution to another shard.
        let pinned: Vec<usize> = ["order-42", "order-7", "a", "b"]
            .iter()
            .flat_map(|s| [shard_of(&id(s), 2), shard_of(&id(s), 3)])
            .collect();
        assert_eq!(pinned, [0, 2, 1, 0, 0, 1, 1, 1]);
        assert_eq!(shard_of(&id("order-42"), 1), 0);
        let spread: Vec<usize> = (0..1000)
            .map(|n| shard_of(&id(&format!("order-{n}")), 2))
            .collect();
        let on_first = spread.iter().filter(|shard| **shard == 0).count();
        assert!(
            (400..600).contains(&on_first),
            "{on_first} of 1000 on shard 0"
        );
        // A child is placed by its own id, not its parent's.
        let children: Vec<usize> = (0..64)
            .map(|n| shard_of(&id(&format!("order-42/notify#{n}")), 2))
            .collect();
        assert!(children.contains(&0) && children.contains(&1));
    }
}
