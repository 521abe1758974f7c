//! What a [`crate::PostgresStore`] is opened with.

use std::time::Duration;

/// Settings of a [`crate::PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresStoreConfig {
    /// A libpq-style connection string or URL (`postgres://user@host:port/db`).
    pub url: String,
    /// The PostgreSQL schema holding Loom's tables; created if missing. Stores on different
    /// schemas of one database never see each other's logs.
    pub schema: String,
    /// This worker's name in leases. Unique per store instance: two instances with one name
    /// would take each other for themselves. [`PostgresStoreConfig::new`] draws a fresh one.
    pub worker_id: String,
    /// How long a lease on an execution lasts without renewal. The store renews its leases
    /// every third of this; a worker that cannot renew in time (paused, cut off) loses them,
    /// and another worker may take its executions over once they have run out.
    pub lease: Duration,
    /// Connections in the pool (readers and the group-commit writer share it; the listener
    /// has its own).
    pub pool_size: usize,
    /// The most events one group commit takes.
    pub max_batch_events: usize,
    /// Apply missing migrations on connect (the default). When false, connect only checks
    /// that the schema is at this build's version and changes nothing: for tools that read.
    pub migrate: bool,
}

impl PostgresStoreConfig {
    /// Defaults for `url`: schema `loom`, a fresh worker id, 10 s leases.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: "loom".into(),
            worker_id: fresh_worker_id(),
            lease: Duration::from_secs(10),
            pool_size: 8,
            max_batch_events: 4096,
            migrate: true,
        }
    }

    /// The same settings on another schema.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The same settings with another lease duration.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The same settings, connecting without migrating (see [`PostgresStoreConfig::migrate`]).
    pub fn check_only(mut self) -> Self {
        self.migrate = false;
        self
    }

    /// The same settings with another worker id.
    pub fn worker_id(mut self, worker_id: impl Into<String>) -> Self {
        self.worker_id = worker_id.into();
        self
    }
}

/// `host-pid-random`: unique across processes and store instances.
pub(crate) fn fresh_worker_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".into());
    format!("{host}-{}-{:016x}", std::process::id(), random_u64())
}

/// 64 random bits from the standard library's per-process hash keys and a counter; used for
/// worker ids and commit ids only, never in anything recorded or replayed.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(now.as_nanos());
    }
    hasher.finish()
}
