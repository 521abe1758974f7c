//! The tables, and the versioned migrations that create them.
//!
//! Each migration runs once per schema, in order, in its own transaction, under an advisory
//! lock: workers connecting at the same time apply it once between them, and a migration that
//! fails leaves no trace (PostgreSQL's DDL is transactional). `loom_migrations` records what
//! is applied; a schema with a version this build does not know is refused.

use tokio_postgres::Client;

use crate::error::ConnectError;

/// The migrations, in order; `MIGRATIONS[i]` is version `i + 1`. Never edit one that shipped:
/// add the next.
const MIGRATIONS: &[&str] = &[
    // 1: logs with their feed positions, the execution index (head, tail, status, lease),
    // the feed counter.
    r#"
    CREATE TABLE loom_events (
        execution_id text COLLATE "C" NOT NULL,
        seq bigint NOT NULL,
        record bytea NOT NULL,
        commit_id bigint NOT NULL,
        position bigint NOT NULL,
        PRIMARY KEY (execution_id, seq)
    );
    CREATE UNIQUE INDEX loom_events_by_position ON loom_events (position);
    CREATE TABLE loom_executions (
        execution_id text COLLATE "C" PRIMARY KEY,
        head bigint NOT NULL DEFAULT 0,
        tail bytea,
        status smallint NOT NULL DEFAULT 0,
        needs_driving boolean NOT NULL DEFAULT false,
        ended_at_ms bigint,
        lease_owner text,
        lease_token bigint NOT NULL DEFAULT 0,
        lease_expires_at timestamptz
    );
    CREATE INDEX loom_executions_by_status ON loom_executions (status, execution_id)
        WHERE head > 0;
    CREATE INDEX loom_executions_needing_driving ON loom_executions (execution_id)
        WHERE head > 0 AND needs_driving;
    CREATE INDEX loom_executions_by_end ON loom_executions (ended_at_ms, execution_id)
        WHERE ended_at_ms IS NOT NULL;
    CREATE INDEX loom_executions_by_owner ON loom_executions (lease_owner)
        WHERE lease_owner IS NOT NULL;
    CREATE TABLE loom_feed (
        only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
        next_position bigint NOT NULL
    );
    INSERT INTO loom_feed (next_position) VALUES (0);
    "#,
    // 2: who held a lease last, once it is given back or taken over (`loom show`).
    r#"
    ALTER TABLE loom_executions ADD COLUMN last_lease_owner text;
    "#,
    // 3: executions newest start first, of every status and per status (`query_executions`):
    // each row's start time and flow, filled for rows already there by `listing::backfill`.
    r#"
    ALTER TABLE loom_executions ADD COLUMN started_at_ms bigint, ADD COLUMN flow text;
    CREATE INDEX loom_executions_by_start ON loom_executions (started_at_ms, execution_id)
        WHERE head > 0;
    CREATE INDEX loom_executions_by_status_start
        ON loom_executions (status, started_at_ms, execution_id) WHERE head > 0;
    "#,
    // 4: the wake-up index.
    WAKEUPS_MIGRATION,
    // 5: the executions with a step in doubt, ended ones included (`StatusFilter::StepsInDoubt`):
    // those in doubt are filed here; the cancelled ones that ended with one by
    // [`backfill_steps_in_doubt`], from their logs.
    IN_DOUBT_MIGRATION,
];

/// The index of executions with a step in doubt.
const IN_DOUBT_MIGRATION: &str = r#"
    ALTER TABLE loom_executions ADD COLUMN steps_in_doubt boolean NOT NULL DEFAULT false;
    CREATE INDEX loom_executions_with_steps_in_doubt ON loom_executions (execution_id)
        WHERE head > 0 AND steps_in_doubt;
    "#;

/// The wake-up index (LD-033): each parked execution's deadlines and child links, read by time
/// window by `recover`. Filled from the logs of the executions that have not ended as it is
/// applied ([`backfill_wakeups`]).
const WAKEUPS_MIGRATION: &str = r#"
    CREATE TABLE loom_wakeups (
        execution_id text COLLATE "C" NOT NULL,
        tag text COLLATE "C" NOT NULL,
        at_ms bigint NOT NULL,
        PRIMARY KEY (execution_id, tag)
    );
    CREATE INDEX loom_wakeups_by_time ON loom_wakeups (at_ms, execution_id, tag);
    "#;

/// The schema version this build writes.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// An arbitrary constant: the advisory lock that serialises migrations in one database.
const MIGRATION_LOCK: i64 = 0x6c6f_6f6d_6d69_6772;

/// Creates `schema` if missing and applies every migration it lacks.
pub(crate) async fn migrate(client: &mut Client, schema: &str) -> Result<(), ConnectError> {
    let quoted = quote_ident(schema);
    let migration = |version: i32| {
        move |source: tokio_postgres::Error| ConnectError::Migration { version, source }
    };
    let txn = client.transaction().await.map_err(migration(0))?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(migration(0))?;
    txn.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {quoted};
         SET LOCAL search_path TO {quoted};
         CREATE TABLE IF NOT EXISTS loom_migrations (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await
    .map_err(migration(0))?;
    let applied: i32 = txn
        .query_one("SELECT coalesce(max(version), 0) FROM loom_migrations", &[])
        .await
        .map_err(migration(0))?
        .get(0);
    if applied > SCHEMA_VERSION {
        return Err(ConnectError::NewerSchema {
            schema: schema.to_owned(),
            found: applied,
            supported: SCHEMA_VERSION,
        });
    }
    for (version, sql) in (1..).zip(MIGRATIONS).skip(applied as usize) {
        txn.batch_execute(sql).await.map_err(migration(version))?;
        if *sql == WAKEUPS_MIGRATION {
            backfill_wakeups(&txn).await.map_err(migration(version))?;
        }
        if *sql == IN_DOUBT_MIGRATION {
            backfill_steps_in_doubt(&txn)
                .await
                .map_err(migration(version))?;
        }
        txn.execute(
            "INSERT INTO loom_migrations (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(migration(version))?;
        tracing::info!(schema, version, "migration applied");
    }
    if applied < SCHEMA_VERSION {
        let filled = crate::listing::backfill(&txn)
            .await
            .map_err(migration(SCHEMA_VERSION))?;
        if filled > 0 {
            tracing::info!(schema, executions = filled, "start times and flows filled");
        }
    }
    txn.commit().await.map_err(migration(SCHEMA_VERSION))?;
    Ok(())
}

/// Files under `steps_in_doubt` the executions a build before it left in doubt (their status
/// says so) and the cancelled ones that ended with a step in doubt (before this index, a cancel
/// was the usual way to end with one, and the tail forgot the step at the end): their logs are
/// read, a page at a time, and their tails written anew.
async fn backfill_steps_in_doubt(
    txn: &tokio_postgres::Transaction<'_>,
) -> Result<(), tokio_postgres::Error> {
    use loom_kernel::ExecutionStatus;
    use loom_kernel::kit::{ExecutionTail, status_code};
    txn.execute(
        "UPDATE loom_executions SET steps_in_doubt = true WHERE head > 0 AND status = $1",
        &[&i16::from(status_code(ExecutionStatus::InDoubt))],
    )
    .await?;
    let cancelled = i16::from(status_code(ExecutionStatus::Cancelled));
    let mut after = String::new();
    loop {
        let page = page_with_status(txn, &[cancelled], &after, BACKFILL_PAGE).await?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = last.clone();
        // Each log's tail applied anew; a log that does not decode keeps its row.
        let mut tails: Vec<(String, Option<ExecutionTail>)> = Vec::new();
        for (id, log) in decoded_logs(txn, &page).await? {
            let tail = log.and_then(|log| {
                let mut tail = ExecutionTail::new();
                log.iter()
                    .all(|envelope| tail.apply(&envelope.event, envelope.recorded_at_ms).is_ok())
                    .then_some(tail)
            });
            tails.push((id.as_str().to_owned(), tail));
        }
        let (ids, encoded): (Vec<String>, Vec<Vec<u8>>) = tails
            .into_iter()
            .filter_map(|(id, tail)| {
                let tail = tail.filter(ExecutionTail::has_steps_in_doubt)?;
                Some((id, tail.encode()))
            })
            .unzip();
        txn.execute(
            "UPDATE loom_executions AS x SET steps_in_doubt = true, tail = u.tail \
             FROM unnest($1::text[], $2::bytea[]) AS u(id, tail) WHERE x.execution_id = u.id",
            &[&ids, &encoded],
        )
        .await?;
    }
}

/// Open executions whose logs one step of [`backfill_wakeups`] reads: what it holds in memory
/// is a page of logs, however many executions the database has.
const BACKFILL_PAGE: i64 = 1_000;

/// Fills `loom_wakeups` from the logs of the executions that have not ended (ended ones have
/// no rows), in the migration's transaction, a page of executions at a time (in id order). A
/// log that does not decode gets no rows: recovery reports it when it folds it.
async fn backfill_wakeups(
    txn: &tokio_postgres::Transaction<'_>,
) -> Result<(), tokio_postgres::Error> {
    backfill_wakeups_by(txn, BACKFILL_PAGE).await
}

/// [`backfill_wakeups`], `page_size` executions at a time.
async fn backfill_wakeups_by(
    txn: &tokio_postgres::Transaction<'_>,
    page_size: i64,
) -> Result<(), tokio_postgres::Error> {
    use loom_kernel::ExecutionStatus;
    use loom_kernel::kit::status_code;
    let open: Vec<i16> = [
        ExecutionStatus::Running,
        ExecutionStatus::Suspended,
        ExecutionStatus::InDoubt,
    ]
    .into_iter()
    .map(|status| i16::from(status_code(status)))
    .collect();
    let mut after = String::new();
    loop {
        let page = page_with_status(txn, &open, &after, page_size).await?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = last.clone();
        backfill_page(txn, &page).await?;
    }
}

/// The ids after `after` of up to `page_size` executions with one of `statuses`, in id order:
/// one page of a backfill, so that what it holds in memory is a page of logs.
async fn page_with_status(
    txn: &tokio_postgres::Transaction<'_>,
    statuses: &[i16],
    after: &str,
    page_size: i64,
) -> Result<Vec<String>, tokio_postgres::Error> {
    Ok(txn
        .query(
            "SELECT execution_id FROM loom_executions \
             WHERE head > 0 AND status = ANY($1) AND execution_id > $2 \
             ORDER BY execution_id LIMIT $3",
            &[&statuses, &after, &page_size],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

/// [`backfill_wakeups`] for the executions `page`.
async fn backfill_page(
    txn: &tokio_postgres::Transaction<'_>,
    page: &[String],
) -> Result<(), tokio_postgres::Error> {
    let mut ids: Vec<String> = Vec::new();
    let mut tags: Vec<String> = Vec::new();
    let mut ats: Vec<i64> = Vec::new();
    for (id, log) in decoded_logs(txn, page).await? {
        // A log that does not decode gets no rows: recovery reports it when it folds it.
        let Some(log) = log else {
            continue;
        };
        let events: Vec<_> = log.into_iter().map(|envelope| envelope.event).collect();
        for (tag, at) in loom_kernel::kit::wake::rows_of_log(&id, events.iter()) {
            ids.push(id.as_str().to_owned());
            tags.push(tag);
            ats.push(i64::try_from(at).unwrap_or(i64::MAX));
        }
    }
    if !ids.is_empty() {
        txn.execute(
            "INSERT INTO loom_wakeups (execution_id, tag, at_ms) \
             SELECT * FROM unnest($1::text[], $2::text[], $3::int8[])",
            &[&ids, &tags, &ats],
        )
        .await?;
    }
    Ok(())
}

/// The logs of the executions `page`, each decoded, in id order: `None` for a log with a record
/// that does not decode (a backfill leaves it to the fold, which reports it).
async fn decoded_logs(
    txn: &tokio_postgres::Transaction<'_>,
    page: &[String],
) -> Result<
    Vec<(
        loom_kernel::ExecutionId,
        Option<Vec<loom_kernel::EventEnvelope>>,
    )>,
    tokio_postgres::Error,
> {
    use loom_kernel::ExecutionId;
    let rows = txn
        .query(
            "SELECT execution_id, seq, record FROM loom_events \
             WHERE execution_id = ANY($1) ORDER BY execution_id, seq",
            &[&page],
        )
        .await?;
    let mut logs: Vec<(String, Option<Vec<loom_kernel::EventEnvelope>>)> = Vec::new();
    for row in &rows {
        let execution: &str = row.get(0);
        if logs.last().is_none_or(|(id, _)| id != execution) {
            logs.push((execution.to_owned(), Some(Vec::new())));
        }
        let Some((_, log)) = logs.last_mut() else {
            continue;
        };
        let seq: i64 = row.get(1);
        let record: &[u8] = row.get(2);
        let decoded = ExecutionId::from_stored(execution)
            .ok()
            .and_then(|id| loom_kernel::kit::decode_record(&id, seq as u64, record).ok());
        match (decoded, log.as_mut()) {
            (Some(envelope), Some(events)) => events.push(envelope),
            _ => *log = None,
        }
    }
    Ok(logs
        .into_iter()
        .filter_map(|(id, log)| Some((ExecutionId::from_stored(id).ok()?, log)))
        .collect())
}

/// Checks, changing nothing, that `schema` exists at this build's version.
pub(crate) async fn check(client: &Client, schema: &str) -> Result<(), ConnectError> {
    let quoted = quote_ident(schema);
    let table = format!("{quoted}.loom_migrations");
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .map_err(|source| ConnectError::Migration { version: 0, source })?
        .get(0);
    let found: i32 = if exists {
        client
            .query_one(
                &format!("SELECT coalesce(max(version), 0) FROM {table}"),
                &[],
            )
            .await
            .map_err(|source| ConnectError::Migration { version: 0, source })?
            .get(0)
    } else {
        0
    };
    match found.cmp(&SCHEMA_VERSION) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(ConnectError::NewerSchema {
            schema: schema.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        }),
        std::cmp::Ordering::Less => Err(ConnectError::NotMigrated {
            schema: schema.to_owned(),
            found,
            expected: SCHEMA_VERSION,
        }),
    }
}

/// `name` as a quoted SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use loom_kernel::EventStore;
    use loom_kernel::conformance::{completed, deadline, id, started, suspended};
    use loom_kernel::kit::{WakeReason, Wakeup};

    use super::*;
    use crate::{PostgresStore, PostgresStoreConfig, fresh_schema, server_url};

    /// A schema migrated before the wake-up index gets the rows of its open executions when
    /// its migration runs: the backfill, run again on emptied rows, finds them from the logs,
    /// a page of executions at a time.
    #[tokio::test]
    async fn the_wake_up_index_is_filled_from_the_open_logs() {
        let Some(url) = server_url("the_wake_up_index_is_filled_from_the_open_logs") else {
            return;
        };
        let schema = fresh_schema("wake_backfill");
        let store = PostgresStore::connect(PostgresStoreConfig::new(&url).schema(&schema))
            .await
            .expect("connect");
        store
            .append(
                &id("parked"),
                0,
                &[started("f"), deadline("g", 42), suspended("g")],
            )
            .await
            .expect("append");
        store
            .append(
                &id("ended"),
                0,
                &[started("f"), deadline("g", 7), suspended("g"), completed()],
            )
            .await
            .expect("append");
        // More open executions than a page of the test's backfill (2), one with no wake-up.
        for n in 0..4u64 {
            store
                .append(
                    &id(&format!("parked-{n}")),
                    0,
                    &[started("f"), deadline("g", 100 + n), suspended("g")],
                )
                .await
                .expect("append");
        }
        store
            .append(&id("running"), 0, &[started("f")])
            .await
            .expect("append");
        let (mut client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("a second connection");
        tokio::spawn(connection);
        let txn = client.transaction().await.expect("begin");
        txn.batch_execute(&format!(
            "SET LOCAL search_path TO {}; DELETE FROM loom_wakeups;",
            quote_ident(&schema)
        ))
        .await
        .expect("rows emptied");
        backfill_wakeups_by(&txn, 2).await.expect("backfill");
        txn.commit().await.expect("commit");
        let deadline_of = |execution: &str, at_ms: u64| Wakeup {
            at_ms,
            execution: id(execution),
            reason: WakeReason::Deadline {
                gate_id: "g".into(),
            },
        };
        assert_eq!(
            store
                .list_wakeups(u64::MAX, None, 10)
                .await
                .expect("the index lists"),
            vec![
                deadline_of("parked", 42),
                deadline_of("parked-0", 100),
                deadline_of("parked-1", 101),
                deadline_of("parked-2", 102),
                deadline_of("parked-3", 103),
            ]
        );
        assert!(
            MIGRATIONS.contains(&WAKEUPS_MIGRATION),
            "the index's migration is applied with the others"
        );
    }
}
