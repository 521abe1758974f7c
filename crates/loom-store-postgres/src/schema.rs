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
    // Executions newest start first, of every status and per status (`query_executions`):
    // each row's start time and flow, filled for rows already there by `listing::backfill`.
    r#"
    ALTER TABLE loom_executions ADD COLUMN started_at_ms bigint, ADD COLUMN flow text;
    CREATE INDEX loom_executions_by_start ON loom_executions (started_at_ms, execution_id)
        WHERE head > 0;
    CREATE INDEX loom_executions_by_status_start
        ON loom_executions (status, started_at_ms, execution_id) WHERE head > 0;
    "#,
];

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
