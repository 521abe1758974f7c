//! What the PostgreSQL server did in a soak's interval besides answering the store: its
//! checkpoints, the WAL it wrote, and the autovacuums of the store's tables. A tail that came
//! with the server's own periodic work shows beside it on the interval's line, as the disk
//! store's slow journal syncs do on its lines.
//!
//! The counters are the server's cumulative statistics (`pg_stat_bgwriter`, or
//! `pg_stat_checkpointer` from PostgreSQL 17; `pg_stat_wal`; `pg_stat_user_tables`), which
//! the server publishes about once a second. A checkpoint is counted when it begins and its
//! write and sync times when it ends, often intervals later (`checkpoint_completion_target`
//! spreads its writes): the interval that shows the sync time is the one whose commits may
//! have waited behind the data files' `fsync`s.

use std::sync::Mutex;

/// The server's counters as one interval ended; the next interval's figures are the difference.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    checkpoints: i64,
    checkpoint_write_ms: f64,
    checkpoint_sync_ms: f64,
    wal_bytes: f64,
    wal_full_page_images: i64,
    autovacuums: i64,
}

/// Reads the counters on its own connection and keeps the last reading.
pub struct ServerFigures {
    before: Mutex<Option<Counters>>,
}

const CHECKPOINTS_UP_TO_16: &str = "SELECT (checkpoints_timed + checkpoints_req)::bigint, \
     checkpoint_write_time, checkpoint_sync_time FROM pg_stat_bgwriter";
const CHECKPOINTS_FROM_17: &str = "SELECT (num_timed + num_requested)::bigint, write_time, \
     sync_time FROM pg_stat_checkpointer";
const WAL: &str = "SELECT wal_bytes::float8, wal_fpi FROM pg_stat_wal";
const AUTOVACUUMS: &str = "SELECT COALESCE(SUM(autovacuum_count + autoanalyze_count), 0)::bigint \
     FROM pg_stat_user_tables WHERE schemaname = $1";
const VACUUMING_NOW: &str = "SELECT count(*) FROM pg_stat_progress_vacuum";

impl ServerFigures {
    pub fn new() -> Self {
        ServerFigures {
            before: Mutex::new(None),
        }
    }

    /// Takes a reading without reporting it: the first interval's figures are then its own.
    pub async fn start(&self, client: &tokio_postgres::Client, schema: &str) {
        let now = read(client, schema).await;
        *self.before.lock().expect("server figures") = now;
    }

    /// ` server_checkpoints=… checkpoint_write_ms=… checkpoint_sync_ms=… wal_mib=… wal_fpi=…
    /// autovacuums=… vacuuming_now=…` for the interval since the last call (checkpoints begun,
    /// the write and sync times of those ended), or an empty string
    /// when the server's statistics could not be read (then the next interval starts afresh).
    pub async fn interval(&self, client: &tokio_postgres::Client, schema: &str) -> String {
        let now = read(client, schema).await;
        let vacuuming_now = match client.query_one(VACUUMING_NOW, &[]).await {
            Ok(row) => row
                .try_get::<_, i64>(0)
                .map_or_else(|_| "unknown".to_owned(), |count| count.to_string()),
            Err(_) => "unknown".to_owned(),
        };
        let before = std::mem::replace(&mut *self.before.lock().expect("server figures"), now);
        let (Some(now), Some(before)) = (now, before) else {
            return String::new();
        };
        format!(
            " server_checkpoints={} checkpoint_write_ms={:.0} checkpoint_sync_ms={:.0} \
             wal_mib={:.1} wal_fpi={} autovacuums={} vacuuming_now={vacuuming_now}",
            now.checkpoints - before.checkpoints,
            now.checkpoint_write_ms - before.checkpoint_write_ms,
            now.checkpoint_sync_ms - before.checkpoint_sync_ms,
            (now.wal_bytes - before.wal_bytes) / 1_048_576.0,
            now.wal_full_page_images - before.wal_full_page_images,
            now.autovacuums - before.autovacuums,
        )
    }
}

/// The counters now, or `None` if a query failed (a server without these views, or a
/// connection lost).
async fn read(client: &tokio_postgres::Client, schema: &str) -> Option<Counters> {
    let checkpoints = match client.query_one(CHECKPOINTS_UP_TO_16, &[]).await {
        Ok(row) => row,
        Err(_) => client.query_one(CHECKPOINTS_FROM_17, &[]).await.ok()?,
    };
    let wal = client.query_one(WAL, &[]).await.ok()?;
    let autovacuums = client.query_one(AUTOVACUUMS, &[&schema]).await.ok()?;
    // `try_get`: a server whose views differ in a column's type gives no figures, not a panic.
    Some(Counters {
        checkpoints: checkpoints.try_get(0).ok()?,
        checkpoint_write_ms: checkpoints.try_get(1).ok()?,
        checkpoint_sync_ms: checkpoints.try_get(2).ok()?,
        wal_bytes: wal.try_get(0).ok()?,
        wal_full_page_images: wal.try_get(1).ok()?,
        autovacuums: autovacuums.try_get(0).ok()?,
    })
}
