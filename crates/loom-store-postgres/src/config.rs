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
    /// How long the store keeps trying when it loses the primary (a failover, a restart):
    /// reconnecting with backoff to whichever host of the URL is now the primary, reading
    /// back whether an interrupted commit took effect, and committing again what did not.
    /// An append waits at most about this long before it fails; past it the error says
    /// whether the append's outcome is known. Set it above the time your failover manager
    /// takes to promote a standby.
    pub failover_timeout: Duration,
    /// How old this worker's last confirmation of a lease (a renewal or an append that set
    /// its expiry on the server) may be before a non-idempotent effect's call asks the server
    /// again first. Much shorter than the lease, so that a worker stalled since then (paused,
    /// starved) finds out it lost the execution before it calls, not after; each confirmation
    /// costs one statement. Clamped to half the lease.
    pub lease_confirm_after: Duration,
}

impl PostgresStoreConfig {
    /// Defaults for `url`: schema `loom`, a fresh worker id, 10 s leases confirmed before a
    /// non-idempotent call when older than 1 s, 60 s to come through a failover.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: "loom".into(),
            worker_id: fresh_worker_id(),
            lease: Duration::from_secs(10),
            pool_size: 8,
            max_batch_events: 4096,
            migrate: true,
            failover_timeout: Duration::from_secs(60),
            lease_confirm_after: Duration::from_secs(1),
        }
    }

    /// The same settings with another failover bound (see
    /// [`PostgresStoreConfig::failover_timeout`]).
    pub fn failover_timeout(mut self, bound: Duration) -> Self {
        self.failover_timeout = bound;
        self
    }

    /// The same settings with another lease confirmation bound (see
    /// [`PostgresStoreConfig::lease_confirm_after`]).
    pub fn lease_confirm_after(mut self, bound: Duration) -> Self {
        self.lease_confirm_after = bound;
        self
    }

    /// The same settings on another schema.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The same settings with another lease duration; the lease confirmation bound becomes a
    /// tenth of it.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self.lease_confirm_after = lease / 10;
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
