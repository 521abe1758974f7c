//! Errors of opening a store. (Appends and reads use the kernel's `AppendError` and
//! `ReadError`.)

/// Why [`crate::PostgresStore::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The connection string does not parse.
    #[error("invalid PostgreSQL connection string: {0}")]
    Config(#[source] tokio_postgres::Error),
    /// The schema name is not 1 to 48 ASCII letters, digits or underscores.
    #[error("invalid schema name {0:?}: use 1 to 48 ASCII letters, digits or underscores")]
    Schema(String),
    /// The connection pool could not be built.
    #[error("cannot build the connection pool: {0}")]
    Pool(#[source] deadpool_postgres::BuildError),
    /// The server could not be reached or refused the connection.
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(#[source] deadpool_postgres::PoolError),
    /// A migration failed; the schema is as it was before it.
    #[error("schema migration {version} failed: {source}")]
    Migration {
        /// The migration's version (0: the bookkeeping before any migration).
        version: i32,
        /// What the server said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The schema was migrated by a newer build.
    #[error("schema {schema} is at version {found}; this build knows up to {supported}")]
    NewerSchema {
        /// The PostgreSQL schema.
        schema: String,
        /// The version found.
        found: i32,
        /// The newest version this build knows.
        supported: i32,
    },
    /// Connecting without migrating, the schema was missing or older than this build.
    #[error(
        "schema {schema} is at version {found}; this build needs {expected} (connect once with migrations on)"
    )]
    NotMigrated {
        /// The PostgreSQL schema.
        schema: String,
        /// The version found (0: no Loom tables).
        found: i32,
        /// This build's version.
        expected: i32,
    },
    /// A sharded store was configured with no shard.
    #[error("a sharded store needs at least one shard: the shard map is empty")]
    NoShards,
    /// The background task that listens for notifications could not start.
    #[error("cannot start listening for new events: {0}")]
    Listen(String),
}
