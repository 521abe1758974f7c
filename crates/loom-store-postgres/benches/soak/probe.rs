//! What a soak run reads of its store besides latencies, once per interval: its size; on the
//! disk store its checkpoints and the writer's slow commits and syncs; on PostgreSQL the
//! server's own periodic work (`server_figures`).

use std::path::Path;
use std::sync::Mutex;

use loom_kernel::DiskStore;
use loom_kernel::kit::{LATENCY_BOUNDS_US, LatencyHistogram};

use super::server_figures::ServerFigures;

/// A group commit or journal sync slower than this (µs) is counted on the disk store's
/// interval lines.
pub const SLOW_WRITE_US: u64 = 10_000;

/// What a run reads of its store besides latencies: its size, and on disk its checkpoints.
/// On PostgreSQL: a connection of its own, and the store's schema.
pub enum Probe {
    Disk {
        store: DiskStore,
        /// The writer's commit and `fdatasync` latencies as the last interval ended.
        writes_before: Mutex<[LatencyHistogram; 2]>,
        _scratch: tempfile::TempDir,
    },
    Postgres {
        client: tokio_postgres::Client,
        schema: String,
        server: ServerFigures,
    },
}

impl Probe {
    /// Takes the readings a run's first interval is measured from.
    pub async fn begin(&self) {
        match self {
            Probe::Disk {
                store,
                writes_before,
                ..
            } => {
                *writes_before.lock().expect("writes") = write_latencies(store);
            }
            Probe::Postgres {
                client,
                schema,
                server,
            } => server.start(client, schema).await,
        }
    }

    pub async fn store_bytes(&self) -> Option<u64> {
        match self {
            Probe::Disk { store, .. } => files_named_after(store.path()),
            Probe::Postgres { client, schema, .. } => {
                let sql = "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint \
                           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                           WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')";
                let row = client.query_one(sql, &[schema]).await.ok()?;
                u64::try_from(row.get::<_, i64>(0)).ok()
            }
        }
    }

    /// The figures an interval's line gives after its latencies, RSS and size: on disk the
    /// writer's checkpoints since the store opened and [`Probe::writer_figures`], on
    /// PostgreSQL [`ServerFigures::interval`].
    pub async fn interval_figures(&self) -> String {
        match self {
            Probe::Disk { store, .. } => {
                format!(
                    " checkpoints={}{}",
                    store.checkpoints(),
                    self.writer_figures()
                )
            }
            Probe::Postgres {
                client,
                schema,
                server,
            } => server.interval(client, schema).await,
        }
    }

    /// On disk, the interval's group commits and journal syncs slower than [`SLOW_WRITE_US`]
    /// and the bound of the slowest one's bucket (`StoreStats::commit_latency` and
    /// `fsync_latency`): whether a tail the interval shows waited for the writer, and there for
    /// the disk. Empty on PostgreSQL.
    fn writer_figures(&self) -> String {
        let Probe::Disk {
            store,
            writes_before,
            ..
        } = self
        else {
            return String::new();
        };
        let now = write_latencies(store);
        let before = std::mem::replace(&mut *writes_before.lock().expect("writes"), now.clone());
        let [commits, syncs] = [0, 1].map(|kind| slow_and_slowest(&now[kind], &before[kind]));
        format!(
            " commits_over_10ms={} slowest_commit_ms_at_most={} syncs_over_10ms={} \
             slowest_sync_ms_at_most={}",
            commits.0, commits.1, syncs.0, syncs.1
        )
    }

    /// The scratch directory goes with the probe; the schema is dropped so that a long series
    /// of runs does not fill the server's disk.
    pub async fn discard(self) {
        if let Probe::Postgres { client, schema, .. } = self
            && let Err(error) = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .await
        {
            eprintln!("soak: could not drop schema {schema}: {error}");
        }
    }
}

/// The writer's group-commit and journal-sync latencies so far (`StoreStats`).
fn write_latencies(store: &DiskStore) -> [LatencyHistogram; 2] {
    let stats = store.stats();
    [stats.commit_latency, stats.fsync_latency].map(Option::unwrap_or_default)
}

/// The bytes of the store file and of every file beside it whose name starts with its name.
fn files_named_after(store_file: &Path) -> Option<u64> {
    let name = store_file.file_name()?.to_string_lossy().into_owned();
    let entries = std::fs::read_dir(store_file.parent()?).ok()?.flatten();
    let ours = entries.filter(|entry| entry.file_name().to_string_lossy().starts_with(&name));
    let sizes = ours.map(|entry| entry.metadata().map_or(0, |meta| meta.len()));
    Some(sizes.sum())
}

/// How many observations between `before` and `now` took more than [`SLOW_WRITE_US`], and the
/// upper bound (ms) of the slowest one's bucket.
fn slow_and_slowest(now: &LatencyHistogram, before: &LatencyHistogram) -> (u64, String) {
    let in_interval: Vec<u64> = (now.buckets.iter().zip(&before.buckets))
        .map(|(now, before)| now.saturating_sub(*before))
        .collect();
    let slow = (in_interval.iter().enumerate())
        .filter(|(bucket, _)| *bucket > 0 && LATENCY_BOUNDS_US[bucket - 1] >= SLOW_WRITE_US)
        .map(|(_, count)| count)
        .sum();
    let slowest = match in_interval.iter().rposition(|count| *count > 0) {
        Some(bucket) if bucket < LATENCY_BOUNDS_US.len() => {
            format!("{}", LATENCY_BOUNDS_US[bucket] as f64 / 1000.0)
        }
        Some(_) => "over_bounds".to_owned(),
        None => "none".to_owned(),
    };
    (slow, slowest)
}
