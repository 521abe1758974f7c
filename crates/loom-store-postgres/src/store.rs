//! [`PostgresStore`]: the `EventStore` over PostgreSQL.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use loom_kernel::kit::{
    EncodedAppend, ExecutionPage, ExecutionQuery, ExecutionQueryPage, ExecutionSummary, LeaseHold,
    LeaseInfo, RetentionError, StatusCounts, StorageError, StoreStats, decode_stored, filter_code,
};
use loom_kernel::{
    AppendError, Event, EventEnvelope, EventStore, ExecutionId, ExecutionStatus, FeedEvent,
    ReadError, StatusFilter,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::cause::{Failure, Retry};
use crate::config::PostgresStoreConfig;
use crate::error::ConnectError;
use crate::faults::Faults;
use crate::lease::Leases;
use crate::notify::{self, HeadWatch};
use crate::replication::Replication;
use crate::writer::Writer;

/// Event logs in a PostgreSQL database. Cheap to clone; clones share the pool, the writer,
/// the listener and the leases. Each store instance is one worker for the lease protocol
/// (see the `lease` module); open one per process.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    pool: Pool,
    config: PostgresStoreConfig,
    requests: mpsc::UnboundedSender<EncodedAppend>,
    watch: Arc<HeadWatch>,
    leases: Arc<Leases>,
    faults: Arc<Faults>,
    background: Vec<JoinHandle<()>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The writer ends by itself once it has answered what is queued (its channel closes);
        // the listener and the lease renewal would otherwise wait for their next tick.
        for task in &self.background {
            task.abort();
        }
    }
}

impl PostgresStore {
    /// Connects, applies the migrations the schema lacks, and starts the writer, the listener
    /// and the lease renewal. Call from within a Tokio runtime.
    pub async fn connect(config: PostgresStoreConfig) -> Result<Self, ConnectError> {
        if config.schema.is_empty()
            || config.schema.len() > 48
            || !config
                .schema
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(ConnectError::Schema(config.schema.clone()));
        }
        let mut pg: tokio_postgres::Config = config.url.parse().map_err(ConnectError::Config)?;
        crate::replication::prepare_for_failover(&mut pg);
        if pg.get_application_name().is_none() {
            pg.application_name("loom");
        }
        let listener_config = pg.clone();
        let limits = Limits::of(config.lease);
        let writes_config = writes_config(&pg, &config.schema, &limits);
        pg.options(session_options(
            &pg,
            &format!(
                "-c search_path={} -c statement_timeout={} \
                 -c idle_in_transaction_session_timeout={}",
                config.schema, limits.read_statement_ms, limits.idle_ms
            ),
        ));
        let pool_of = |pg: tokio_postgres::Config, size: usize| {
            let manager = Manager::from_config(
                pg,
                tokio_postgres::NoTls,
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            );
            Pool::builder(manager)
                .max_size(size)
                .build()
                .map_err(ConnectError::Pool)
        };
        let pool = pool_of(pg, config.pool_size.max(2))?;
        // One batch is in flight at a time; the second connection stands by for a reconnect.
        let writes = pool_of(writes_config, 2)?;
        {
            let mut client = pool.get().await.map_err(ConnectError::Connect)?;
            if config.migrate {
                // A migration waits for another worker's and may rewrite a table: it is not
                // bound by the lease. The connection goes back to the pool with its limits.
                let unbound =
                    "SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0";
                client
                    .batch_execute(unbound)
                    .await
                    .map_err(|e| ConnectError::Migration {
                        version: 0,
                        source: e,
                    })?;
                let migrated = crate::schema::migrate(&mut client, &config.schema).await;
                client
                    .batch_execute(
                        "RESET statement_timeout; RESET idle_in_transaction_session_timeout",
                    )
                    .await
                    .map_err(|e| ConnectError::Migration {
                        version: 0,
                        source: e,
                    })?;
                migrated?;
            } else {
                crate::schema::check(&client, &config.schema).await?;
            }
            match Replication::read(&client).await {
                Ok(replication) if replication.may_lose_on_failover() => tracing::warn!(
                    synchronous_commit = %replication.synchronous_commit,
                    synchronous_standby_names = %replication.synchronous_standby_names,
                    standbys = replication.standbys,
                    "this primary's standbys are not synchronous: a failover may lose appends \
                     the store acknowledged (docs/POSTGRES.md)"
                ),
                Ok(_) => {}
                Err(err) => {
                    tracing::debug!(error = %crate::cause::describe(&err), "cannot read the replication settings")
                }
            }
        }

        let watch = Arc::new(HeadWatch::default());
        let channel = notify::channel_of(&config.schema);
        let (ready, listening) = oneshot::channel();
        let listener = tokio::spawn(notify::listen(
            listener_config,
            channel.clone(),
            Arc::downgrade(&watch),
            ready,
        ));
        listening
            .await
            .map_err(|_| ConnectError::Listen("the listener stopped".into()))?
            .map_err(ConnectError::Listen)?;

        let leases = Arc::new(Leases::new(
            config.worker_id.clone(),
            config.lease,
            config.lease_confirm_after,
        ));
        let faults = Arc::new(Faults::default());
        let renewal = tokio::spawn(Leases::renew_forever(
            Arc::downgrade(&leases),
            pool.clone(),
            (config.lease / 3).max(Duration::from_millis(10)),
            Arc::clone(&faults),
        ));
        let (requests, queue) = mpsc::unbounded_channel();
        let writer = Writer {
            pool: pool.clone(),
            writes,
            channel,
            watch: Arc::clone(&watch),
            leases: Arc::clone(&leases),
            max_batch_events: config.max_batch_events.max(1),
            faults: Arc::clone(&faults),
            failover_timeout: config.failover_timeout,
            cache: Default::default(),
        };
        tokio::spawn(writer.run(queue));
        tracing::debug!(schema = %config.schema, worker = %config.worker_id, "postgres store connected");
        Ok(Self {
            shared: Arc::new(Shared {
                pool,
                config,
                requests,
                watch,
                leases,
                faults,
                background: vec![listener, renewal],
            }),
        })
    }

    /// The settings this store was opened with.
    pub fn config(&self) -> &PostgresStoreConfig {
        &self.shared.config
    }

    /// This store's name in leases.
    pub fn worker_id(&self) -> &str {
        &self.shared.config.worker_id
    }

    /// What the primary's replication promises an acknowledged append now: whether it
    /// survives a failover (see [`Replication::survives_failover`]).
    pub async fn replication(&self) -> Result<Replication, ReadError> {
        let client = self.client().await?;
        Replication::read(&client).await.map_err(pg)
    }

    /// The fencing token of this worker's lease on `execution`, if it holds one.
    pub fn lease_token(&self, execution: &ExecutionId) -> Option<i64> {
        self.shared.leases.token(execution)
    }

    /// Renews this worker's leases now (the store does so by itself every third of the lease);
    /// returns how many it holds.
    pub async fn renew_leases(&self) -> Result<usize, ReadError> {
        self.shared
            .leases
            .renew(&self.shared.pool)
            .await
            .map_err(|detail| ReadError::Storage {
                source: StorageError::msg(detail),
            })
    }

    /// Gives back every lease this worker holds, so that any other worker may drive those
    /// executions at once instead of waiting for the leases to run out: for a process that
    /// ends cleanly (an operator's command, a worker shutting down) once its appends are
    /// answered. Returns how many it gave back. A lease that moved on meanwhile is left alone.
    pub async fn release_leases(&self) -> Result<usize, ReadError> {
        self.shared
            .leases
            .release(&self.shared.pool)
            .await
            .map_err(|detail| ReadError::Storage {
                source: StorageError::msg(detail),
            })
    }

    /// Failure injection for tests.
    #[cfg(feature = "test-support")]
    #[doc(hidden)]
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// A connection for a read. While no server of the URL takes one (the primary is lost and
    /// no standby promoted yet), it waits for one, with backoff, within `failover_timeout`: a
    /// failover delays reads rather than failing them. A read already under way when its
    /// connection breaks still fails.
    /// The connection pool, for retention's own transaction.
    pub(crate) fn pool(&self) -> &Pool {
        &self.shared.pool
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, ReadError> {
        // From the first failure: a read that gets its connection at once pays nothing.
        let mut retry = None;
        loop {
            match self.shared.pool.get().await {
                Ok(client) => return Ok(client),
                Err(err) => {
                    let failure = Failure::pool(&err);
                    let retry = retry
                        .get_or_insert_with(|| Retry::within(self.shared.config.failover_timeout));
                    if !failure.cause.reconnect_may_cure() || !retry.wait().await {
                        return Err(ReadError::Storage {
                            source: StorageError::msg(failure.detail),
                        });
                    }
                    tracing::debug!(detail = %failure.detail, "no server took a connection; trying again");
                }
            }
        }
    }
}

/// The URL's own `options` (`-c synchronous_commit=...`, say) with the store's after them:
/// where both set a parameter, the store's win.
fn session_options(url: &tokio_postgres::Config, store: &str) -> String {
    match url.get_options() {
        Some(given) => format!("{given} {store}"),
        None => store.to_owned(),
    }
}

/// The writer's connections: `url`'s, with its search path, its plans
/// ([`crate::writer::WRITER_PLANS`]) and the write's limits.
pub(crate) fn writes_config(
    url: &tokio_postgres::Config,
    schema: &str,
    limits: &Limits,
) -> tokio_postgres::Config {
    let mut writes = url.clone();
    writes.options(session_options(
        url,
        &format!(
            "-c search_path={schema} {} -c statement_timeout={} \
             -c idle_in_transaction_session_timeout={}",
            crate::writer::WRITER_PLANS,
            limits.write_statement_ms,
            limits.idle_ms
        ),
    ));
    writes
}

/// How long the server lets a store's connection run a statement or sit in a transaction,
/// from the lease's duration, so that no transaction outlives a lease:
/// - a write (on the writer's connections, which lock executions' rows) runs at most a third of
///   a lease, and a transaction sits idle at most a third: from the statement that fences an
///   append and sets its lease (a lease from then) to its commit there is at most one
///   statement and one idle spell, two thirds of a lease. A worker paused in a transaction
///   loses it (the server ends the session, the transaction rolls back) and with it its row
///   locks, before its lease could run out;
/// - a read locks no execution: it may run up to a whole lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) write_statement_ms: u64,
    pub(crate) read_statement_ms: u64,
    pub(crate) idle_ms: u64,
}

impl Limits {
    pub(crate) fn of(lease: Duration) -> Self {
        // 0 would mean "no limit" to the server.
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
        Self {
            write_statement_ms: ms(lease / 3),
            read_statement_ms: ms(lease),
            idle_ms: ms(lease / 3),
        }
    }
}

/// A held lease as the kernel sees it: tokens start at 1 and only grow.
fn held(token: i64) -> LeaseHold {
    LeaseHold::Held {
        token: u64::try_from(token).unwrap_or(0),
    }
}

fn storage(err: impl std::error::Error + Send + Sync + 'static) -> ReadError {
    ReadError::storage(err)
}

/// A failed read, its cause named (see [`crate::cause`]).
pub(crate) fn pg(err: tokio_postgres::Error) -> ReadError {
    ReadError::Storage {
        source: StorageError::msg(crate::cause::describe(&err)),
    }
}

fn page_of(rows: &[tokio_postgres::Row], limit: usize) -> ExecutionPage {
    let executions: Vec<ExecutionSummary> = rows
        .iter()
        .filter_map(|row| {
            let id = ExecutionId::from_stored(row.get::<_, &str>(0)).ok()?;
            Some(ExecutionSummary {
                id,
                head: row.get::<_, i64>(1) as u64,
            })
        })
        .collect();
    ExecutionPage::from_one_extra(executions, limit)
}

impl EventStore for PostgresStore {
    async fn append(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        let (request, answer) = EncodedAppend::new(execution, expected_seq, events)?;
        if expected_seq > i64::MAX as u64 - events.len() as u64 {
            return Err(AppendError::Conflict {
                execution: execution.clone(),
                expected_seq,
                actual_seq: self.head(execution).await.unwrap_or(0),
            });
        }
        self.shared
            .requests
            .send(request)
            .map_err(|_| AppendError::Closed)?;
        answer.await.map_err(|_| AppendError::Closed)?
    }

    async fn read(
        &self,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<EventEnvelope>, ReadError> {
        let (Ok(from), Ok(limit)) = (i64::try_from(from), i64::try_from(limit)) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT seq, record FROM loom_events \
                 WHERE execution_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
            )
            .await
            .map_err(pg)?;
        let rows = client
            .query(&statement, &[&execution.as_str(), &from, &limit])
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|row| decode_stored(execution, row.get::<_, i64>(0) as u64, row.get(1)))
            .collect()
    }

    async fn head(&self, execution: &ExecutionId) -> Result<u64, ReadError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT head FROM loom_executions WHERE execution_id = $1")
            .await
            .map_err(pg)?;
        let row = client
            .query_opt(&statement, &[&execution.as_str()])
            .await
            .map_err(pg)?;
        Ok(row.map_or(0, |row| row.get::<_, i64>(0) as u64))
    }

    async fn list_executions(
        &self,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        let limit = limit.clamp(1, i64::MAX as usize - 1);
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT execution_id, head FROM loom_executions \
                 WHERE head > 0 AND ($1::text IS NULL OR execution_id > $1) \
                 ORDER BY execution_id LIMIT $2",
                &[&after.map(ExecutionId::as_str), &(limit as i64 + 1)],
            )
            .await
            .map_err(pg)?;
        Ok(page_of(&rows, limit))
    }

    async fn read_logs(
        &self,
        executions: &[ExecutionId],
    ) -> Result<Vec<Vec<EventEnvelope>>, ReadError> {
        let ids: Vec<&str> = executions.iter().map(ExecutionId::as_str).collect();
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT execution_id, seq, record FROM loom_events \
                 WHERE execution_id = ANY($1) ORDER BY execution_id, seq",
                &[&ids],
            )
            .await
            .map_err(pg)?;
        // Each row's execution found by its id in a map, not by a search of the batch (which
        // made a batch of n logs cost n² comparisons).
        let asked: std::collections::HashMap<&str, &ExecutionId> =
            executions.iter().map(|e| (e.as_str(), e)).collect();
        let mut by_id: std::collections::HashMap<&str, Vec<EventEnvelope>> =
            std::collections::HashMap::with_capacity(asked.len());
        for row in &rows {
            let id: &str = row.get(0);
            let Some(execution) = asked.get(id) else {
                continue;
            };
            let envelope = decode_stored(execution, row.get::<_, i64>(1) as u64, row.get(2))?;
            by_id.entry(execution.as_str()).or_default().push(envelope);
        }
        // In the order asked; a log asked twice is read once and copied.
        let mut logs: Vec<Vec<EventEnvelope>> = Vec::with_capacity(executions.len());
        let mut first_at: std::collections::HashMap<&str, usize> =
            std::collections::HashMap::with_capacity(executions.len());
        for (index, execution) in executions.iter().enumerate() {
            let log = match first_at.get(execution.as_str()) {
                Some(&first) => logs[first].clone(),
                None => {
                    first_at.insert(execution.as_str(), index);
                    by_id.remove(execution.as_str()).unwrap_or_default()
                }
            };
            logs.push(log);
        }
        Ok(logs)
    }

    async fn wait_for(&self, execution: &ExecutionId, seq: u64) -> Result<(), ReadError> {
        let _waiting = self.shared.watch.waiting();
        let mut heads = self.shared.watch.subscribe(execution);
        let mut resyncs = self.shared.watch.resyncs();
        loop {
            // Subscribed before reading: a commit after this read is published to `heads`.
            resyncs.borrow_and_update();
            if self.head(execution).await? > seq {
                return Ok(());
            }
            tokio::select! {
                woke = heads.wait_for(|head| *head > seq) => {
                    return woke.map(|_| ()).map_err(|_| ReadError::Closed);
                }
                changed = resyncs.changed() => {
                    changed.map_err(|_| ReadError::Closed)?;
                }
            }
        }
    }

    async fn list_by_status(
        &self,
        filter: StatusFilter,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        let limit = limit.clamp(1, i64::MAX as usize - 1);
        let after = after.map(ExecutionId::as_str);
        let client = self.client().await?;
        let rows = match filter {
            StatusFilter::Status(ExecutionStatus::New) => Vec::new(),
            // A flag column, each with its partial index.
            flag @ (StatusFilter::NeedsDriving | StatusFilter::StepsInDoubt) => {
                let column = match flag {
                    StatusFilter::NeedsDriving => "needs_driving",
                    _ => "steps_in_doubt",
                };
                client
                    .query(
                        &format!(
                            "SELECT execution_id, head FROM loom_executions \
                             WHERE head > 0 AND {column} \
                             AND ($1::text IS NULL OR execution_id > $1) \
                             ORDER BY execution_id LIMIT $2"
                        ),
                        &[&after, &(limit as i64 + 1)],
                    )
                    .await
                    .map_err(pg)?
            }
            filter => client
                .query(
                    "SELECT execution_id, head FROM loom_executions \
                     WHERE head > 0 AND status = $1 \
                     AND ($2::text IS NULL OR execution_id > $2) \
                     ORDER BY status, execution_id LIMIT $3",
                    &[&i16::from(filter_code(filter)), &after, &(limit as i64 + 1)],
                )
                .await
                .map_err(pg)?,
        };
        Ok(page_of(&rows, limit))
    }

    async fn query_executions(
        &self,
        query: &ExecutionQuery,
    ) -> Result<ExecutionQueryPage, ReadError> {
        let client = self.client().await?;
        crate::listing::query(&client, query).await
    }

    async fn count_by_status(&self) -> Result<StatusCounts, ReadError> {
        let client = self.client().await?;
        crate::listing::counts(&client).await
    }

    async fn list_wakeups(
        &self,
        before_ms: u64,
        after: Option<&loom_kernel::kit::Wakeup>,
        limit: usize,
    ) -> Result<Vec<loom_kernel::kit::Wakeup>, ReadError> {
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let limit = limit.clamp(1, i64::MAX as usize) as i64;
        let (after_at, after_id, after_tag) = match after {
            Some(row) => (
                Some(clamp(row.at_ms)),
                Some(row.execution.as_str().to_owned()),
                Some(row.reason.tag()),
            ),
            None => (None, None, None),
        };
        // The last time listed: times are kept clamped to `i64::MAX`, and `u64::MAX` lists
        // every row (`wake::listed_before`).
        let last_listed = match before_ms {
            u64::MAX => i64::MAX,
            before_ms => clamp(before_ms).saturating_sub(1),
        };
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT at_ms, execution_id, tag FROM loom_wakeups \
                 WHERE at_ms <= $1 \
                   AND ($2::int8 IS NULL OR (at_ms, execution_id, tag) > ($2, $3, $4)) \
                 ORDER BY at_ms, execution_id, tag LIMIT $5",
            )
            .await
            .map_err(pg)?;
        let rows = client
            .query(
                &statement,
                &[&last_listed, &after_at, &after_id, &after_tag, &limit],
            )
            .await
            .map_err(pg)?;
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            let at: i64 = row.get(0);
            let id: &str = row.get(1);
            let tag: &str = row.get(2);
            let execution = ExecutionId::from_stored(id).map_err(storage)?;
            if let Some(wakeup) =
                loom_kernel::kit::Wakeup::from_stored(at.max(0) as u64, execution, tag)
            {
                found.push(wakeup);
            }
        }
        Ok(found)
    }

    fn indexes_wakeups(&self) -> bool {
        true
    }

    async fn read_feed(&self, from: u64, limit: usize) -> Result<Vec<FeedEvent>, ReadError> {
        let Ok(from) = i64::try_from(from) else {
            return Ok(Vec::new());
        };
        let limit = limit.clamp(1, i64::MAX as usize) as i64;
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT execution_id, seq, record, position FROM loom_events \
                 WHERE position >= $1 ORDER BY position LIMIT $2",
            )
            .await
            .map_err(pg)?;
        let rows = client
            .query(&statement, &[&from, &limit])
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|row| {
                let execution = ExecutionId::from_stored(row.get::<_, &str>(0)).map_err(storage)?;
                let envelope = decode_stored(&execution, row.get::<_, i64>(1) as u64, row.get(2))?;
                Ok(FeedEvent {
                    position: row.get::<_, i64>(3) as u64,
                    envelope,
                })
            })
            .collect()
    }

    async fn wait_for_feed(&self, position: u64) -> Result<(), ReadError> {
        let Ok(position) = i64::try_from(position) else {
            return std::future::pending().await;
        };
        // Subscribed before reading: a commit after this read wakes `commits`, and so does
        // `LISTEN` taking effect.
        let _waiting = self.shared.watch.waiting();
        let mut commits = self.shared.watch.commits();
        loop {
            commits.borrow_and_update();
            let client = self.client().await?;
            let found: bool = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM loom_events WHERE position >= $1)",
                    &[&position],
                )
                .await
                .map_err(pg)?
                .get(0);
            drop(client);
            if found {
                return Ok(());
            }
            commits.changed().await.map_err(|_| ReadError::Closed)?;
        }
    }

    async fn delete_ended(
        &self,
        ended_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<ExecutionId>, RetentionError> {
        self.delete_ended_keeping(ended_before_ms, limit, crate::retention::Parents::Here)
            .await
    }

    fn has_leases(&self) -> bool {
        true
    }

    /// The lease take-overs this worker made; the commits and their latency are not counted
    /// on PostgreSQL yet.
    fn stats(&self) -> Option<StoreStats> {
        let mut stats = StoreStats::default();
        stats.lease_takeovers = Some(self.shared.leases.takeovers());
        Some(stats)
    }

    async fn lease_info(&self, execution: &ExecutionId) -> Result<Option<LeaseInfo>, ReadError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT last_lease_owner, lease_token, \
                     lease_owner = last_lease_owner AND lease_expires_at > clock_timestamp(), \
                     (extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::int8 \
                 FROM loom_executions WHERE execution_id = $1",
                &[&execution.as_str()],
            )
            .await
            .map_err(pg)?;
        Ok(row.and_then(|row| {
            let holder: Option<String> = row.get(0);
            let live = row.get::<_, Option<bool>>(2).unwrap_or(false);
            let expires_in: Option<i64> = row.get(3);
            Some(LeaseInfo {
                holder: holder?,
                token: row.get::<_, i64>(1).max(0) as u64,
                live,
                expires_in_ms: expires_in.filter(|_| live).map(|ms| ms.max(0) as u64),
            })
        }))
    }

    async fn hold_lease(&self, execution: &ExecutionId, head: u64) -> Result<LeaseHold, ReadError> {
        let leases = &self.shared.leases;
        let distrust = self.shared.faults.distrust_leases.load(Ordering::SeqCst);
        if !distrust && let Some(token) = leases.fresh(execution) {
            return Ok(held(token));
        }
        let Ok(head) = i64::try_from(head) else {
            return Ok(LeaseHold::NotHeld);
        };
        let mut retry = Retry::within(self.shared.config.failover_timeout);
        loop {
            match leases.hold(&self.shared.pool, execution, head).await {
                Ok(Some(token)) => return Ok(held(token)),
                Ok(None) => return Ok(LeaseHold::NotHeld),
                // The primary is lost or being replaced: the lease's row is on the standby that
                // takes over, and asking again there costs latency, where giving up now would
                // leave the step's start without its call, in doubt for an operator.
                Err(failure) if failure.cause.reconnect_may_cure() && retry.wait().await => {
                    tracing::debug!(detail = %failure.detail, "could not confirm a lease; asked again");
                }
                Err(failure) => {
                    return Err(ReadError::Storage {
                        source: StorageError::msg(failure.detail),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_and_an_idle_spell_fit_in_a_lease_with_room_to_spare() {
        let limits = Limits::of(Duration::from_secs(10));
        assert_eq!(limits.write_statement_ms, 3333);
        assert_eq!(limits.idle_ms, 3333);
        assert_eq!(limits.read_statement_ms, 10_000);
        assert!(limits.write_statement_ms + limits.idle_ms < 10_000);
    }

    #[test]
    fn a_tiny_lease_still_sets_limits_rather_than_lifting_them() {
        let limits = Limits::of(Duration::from_millis(1));
        assert_eq!((limits.write_statement_ms, limits.idle_ms), (1, 1));
    }
}
