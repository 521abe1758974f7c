//! Executions newest start first ([`EventStore::query_executions`]) and counted per status
//! ([`EventStore::count_by_status`]) from `loom_executions`: each row carries its start time
//! and flow, written by the first append (with the row it inserts, or into a placeholder row),
//! and two indexes order the rows by
//! `(start time, id)`, of every status and per status.
//!
//! [`EventStore::query_executions`]: loom_kernel::EventStore::query_executions
//! [`EventStore::count_by_status`]: loom_kernel::EventStore::count_by_status

use loom_kernel::kit::{
    ExecutionQuery, ExecutionQueryPage, ListedExecution, StatusCounts, prefix_upper_bound,
    status_code, status_from_code,
};
use loom_kernel::{ExecutionId, ExecutionStatus, ReadError};
use tokio_postgres::types::ToSql;

/// Rows read per round while filling the start time and flow of rows written before they
/// were kept.
const BACKFILL_BATCH: i64 = 5000;

/// Fills `started_at_ms` and `flow` of every started execution that lacks them (a schema
/// migrated from before they were kept), from its first event, in the migration's
/// transaction.
pub(crate) async fn backfill(
    txn: &tokio_postgres::Transaction<'_>,
) -> Result<u64, tokio_postgres::Error> {
    let mut filled = 0u64;
    loop {
        let rows = txn
            .query(
                "SELECT x.execution_id, e.record FROM loom_executions AS x \
                 JOIN loom_events AS e ON e.execution_id = x.execution_id AND e.seq = 0 \
                 WHERE x.head > 0 AND x.started_at_ms IS NULL LIMIT $1",
                &[&BACKFILL_BATCH],
            )
            .await?;
        if rows.is_empty() {
            return Ok(filled);
        }
        let mut ids: Vec<&str> = Vec::with_capacity(rows.len());
        let mut starts: Vec<i64> = Vec::with_capacity(rows.len());
        let mut flows: Vec<String> = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: &str = row.get(0);
            // A first event that does not decode is listed as started at 0 with no flow.
            let (start, flow) = ExecutionId::from_stored(id)
                .ok()
                .map_or((0, String::new()), |execution| {
                    loom_kernel::kit::start_of_first_record(&execution, row.get(1))
                });
            ids.push(id);
            starts.push(i64::try_from(start).unwrap_or(i64::MAX));
            flows.push(flow);
        }
        txn.execute(
            "UPDATE loom_executions AS x SET started_at_ms = u.started, flow = u.flow \
             FROM unnest($1::text[], $2::int8[], $3::text[]) AS u(id, started, flow) \
             WHERE x.execution_id = u.id",
            &[&ids, &starts, &flows],
        )
        .await?;
        filled += rows.len() as u64;
    }
}

/// One page of `query`.
pub(crate) async fn query(
    client: &deadpool_postgres::Object,
    query: &ExecutionQuery,
) -> Result<ExecutionQueryPage, ReadError> {
    let limit = query.page_size();
    let mut sql = String::from(
        "SELECT execution_id, status, flow, started_at_ms, ended_at_ms, head \
         FROM loom_executions WHERE head > 0",
    );
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    let mut bind = |sql: &mut String, clause: &str, value: Box<dyn ToSql + Sync + Send>| {
        params.push(value);
        sql.push_str(&clause.replace('$', &format!("${}", params.len())));
    };
    if let Some(status) = query.status {
        bind(
            &mut sql,
            " AND status = $",
            Box::new(i16::from(status_code(status))),
        );
    }
    if let Some(flow) = &query.flow {
        bind(&mut sql, " AND flow = $", Box::new(flow.clone()));
    }
    if let Some(prefix) = &query.id_prefix {
        bind(
            &mut sql,
            " AND starts_with(execution_id, $)",
            Box::new(prefix.clone()),
        );
        // The same as a range of the primary key, which the planner can read instead of
        // walking the start-time index (a parent's few children among a million).
        bind(&mut sql, " AND execution_id >= $", Box::new(prefix.clone()));
        if let Some(upper) = prefix_upper_bound(prefix) {
            bind(&mut sql, " AND execution_id < $", Box::new(upper));
        }
    }
    let ms = |at: u64| i64::try_from(at).unwrap_or(i64::MAX);
    if let Some(from) = query.started_from_ms {
        bind(&mut sql, " AND started_at_ms >= $", Box::new(ms(from)));
    }
    if let Some(before) = query.started_before_ms {
        bind(&mut sql, " AND started_at_ms < $", Box::new(ms(before)));
    }
    if let Some(from) = query.ended_from_ms {
        bind(&mut sql, " AND ended_at_ms >= $", Box::new(ms(from)));
    }
    if let Some(before) = query.ended_before_ms {
        bind(&mut sql, " AND ended_at_ms < $", Box::new(ms(before)));
    }
    if let Some(cursor) = &query.before {
        bind(
            &mut sql,
            " AND (started_at_ms, execution_id) < ($",
            Box::new(ms(cursor.started_at_ms)),
        );
        bind(&mut sql, ", $)", Box::new(cursor.id.as_str().to_owned()));
    }
    // Ordered as the indexes are, so that the newest page is read from their end.
    if query.status.is_some() {
        sql.push_str(" ORDER BY status DESC, started_at_ms DESC, execution_id DESC");
    } else {
        sql.push_str(" ORDER BY started_at_ms DESC, execution_id DESC");
    }
    bind(&mut sql, " LIMIT $", Box::new(limit as i64 + 1));
    let refs: Vec<&(dyn ToSql + Sync)> = params
        .iter()
        .map(|param| &**param as &(dyn ToSql + Sync))
        .collect();
    // The filters make a few hundred statement shapes at most: each is prepared once per
    // connection.
    let statement = client
        .prepare_cached(&sql)
        .await
        .map_err(crate::store::pg)?;
    let rows = client
        .query(&statement, &refs)
        .await
        .map_err(crate::store::pg)?;
    let mut listed = Vec::with_capacity(rows.len());
    for row in &rows {
        let id: &str = row.get(0);
        let code: i16 = row.get(1);
        let status = u8::try_from(code)
            .ok()
            .and_then(status_from_code)
            .unwrap_or(ExecutionStatus::Running);
        let started: Option<i64> = row.get(3);
        let ended: Option<i64> = row.get(4);
        listed.push(ListedExecution {
            id: ExecutionId::from_stored(id).map_err(ReadError::storage)?,
            status,
            flow: row.get::<_, Option<String>>(2).unwrap_or_default(),
            started_at_ms: started
                .and_then(|at| u64::try_from(at).ok())
                .filter(|at| *at != 0),
            ended_at_ms: ended.and_then(|at| u64::try_from(at).ok()),
            head: u64::try_from(row.get::<_, i64>(5)).unwrap_or(0),
        });
    }
    Ok(query.page_of(listed))
}

/// How many executions each status holds.
pub(crate) async fn counts(client: &tokio_postgres::Client) -> Result<StatusCounts, ReadError> {
    let rows = client
        .query(
            "SELECT status, count(*) FROM loom_executions WHERE head > 0 GROUP BY status",
            &[],
        )
        .await
        .map_err(crate::store::pg)?;
    let mut counts = StatusCounts::default();
    for row in &rows {
        let code: i16 = row.get(0);
        let count: i64 = row.get(1);
        if let Some(status) = u8::try_from(code).ok().and_then(status_from_code)
            && status != ExecutionStatus::New
        {
            counts.set(status, u64::try_from(count).unwrap_or(0));
        }
    }
    Ok(counts)
}
