//! The example's store: the embedded store file, or PostgreSQL when `--store` is a
//! `postgres://` / `postgresql://` URL (then `--schema` names the schema holding Loom's
//! tables). [`AnyStore`] is the one opened; the server and the operator's commands match on it
//! once and run on the store inside, generic over [`loom_kernel::EventStore`].

use std::path::Path;

use anyhow::{Context, Result};
use loom_kernel::DiskStore;
use loom_store_postgres::{PostgresStore, PostgresStoreConfig};

/// The schema the example uses on PostgreSQL unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "a2ui_callfunction";

/// Whether `store` names a PostgreSQL server rather than a file.
pub fn is_postgres(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

/// `store` as text, for [`is_postgres`] (a path that is not UTF-8 is a file).
pub fn as_url(store: &Path) -> Option<&str> {
    store.to_str().filter(|s| is_postgres(s))
}

/// The embedded store or PostgreSQL.
#[derive(Debug, Clone)]
pub enum AnyStore {
    /// The embedded store file.
    Disk(DiskStore),
    /// A PostgreSQL schema.
    Postgres(PostgresStore),
}

impl AnyStore {
    /// Connects to PostgreSQL (migrating the schema if needed). `worker_id`, when given, is
    /// this process's name in leases: a server restarted under the same name takes its
    /// executions back at once instead of waiting for the dead process's leases to run out.
    pub async fn postgres(url: &str, schema: &str, worker_id: Option<&str>) -> Result<Self> {
        let mut config = PostgresStoreConfig::new(url).schema(schema);
        if let Some(worker_id) = worker_id {
            config = config.worker_id(worker_id);
        }
        let store = PostgresStore::connect(config)
            .await
            .with_context(|| format!("connecting to PostgreSQL (schema {schema})"))?;
        Ok(Self::Postgres(store))
    }

    /// Opens `store`: a file (created with its directory if missing) or a PostgreSQL URL.
    pub async fn open(store: &Path, schema: &str, worker_id: Option<&str>) -> Result<Self> {
        if let Some(url) = as_url(store) {
            return Self::postgres(url, schema, worker_id).await;
        }
        if let Some(dir) = store.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let disk = DiskStore::open(store)
            .with_context(|| format!("opening the store at {}", store.display()))?;
        Ok(Self::Disk(disk))
    }

    /// Opens `store` for the operator's commands: a file that must exist and that no server
    /// holds, or a PostgreSQL schema (which servers may use at the same time).
    pub async fn open_existing(store: &Path, schema: &str) -> Result<Self> {
        if let Some(url) = as_url(store) {
            return Self::postgres(url, schema, None).await;
        }
        let disk = DiskStore::open_existing(store, Default::default()).with_context(|| {
            format!(
                "opening the store at {} (is a server holding it?)",
                store.display()
            )
        })?;
        Ok(Self::Disk(disk))
    }
}
