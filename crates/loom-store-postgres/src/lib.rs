//! Loom's PostgreSQL event store: many workers, on many machines, over one database.
//!
//! # What it owns
//! - [`PostgresStore`], an [`loom_kernel::EventStore`] on PostgreSQL (`tokio-postgres` with a
//!   `deadpool-postgres` pool): logs in `loom_events` under the primary key
//!   `(execution_id, seq)`, the concurrency fence; events in the kernel's record encoding
//!   ([`loom_kernel::kit::encode_record`]).
//! - Versioned, idempotent schema migrations applied on connect ([`SCHEMA_VERSION`]).
//! - Group commit: one commit for every append queued at the moment, across executions; one
//!   statement (one round trip) for appends under leases this worker holds.
//! - Validated appends and the status index: each execution's
//!   [`loom_kernel::kit::ExecutionTail`] is kept beside its log, updated in the append's
//!   transaction, and indexed by status.
//! - The feed: a store-wide position per event, in commit order across workers.
//! - Retention: `delete_ended` in bounded batches that never wait for live work.
//! - LISTEN/NOTIFY: waiting readers wake when any worker commits, without polling.
//! - Execution ownership by leases with fencing tokens, enforced in the append's transaction;
//!   ambiguous commits resolved by reading back (see `docs/STORAGE.md`).
//! - Failover: a URL may name several hosts (the writable one is used); a lost primary is
//!   reconnected to with backoff, an interrupted commit read back on the new primary and
//!   committed again if it did not take effect, within
//!   [`PostgresStoreConfig::failover_timeout`]; errors name their cause (a statement or
//!   idle-in-transaction timeout, a lost connection, a server going away, a standby);
//!   [`Replication`] says whether acknowledged appends survive a failover
//!   (`docs/POSTGRES.md`).
//! - [`ShardedStore`]: several databases as one store, executions placed by a hash of their id
//!   over a fixed shard map; listings merged by id, the feed merged with a position per shard.
//! - Support for tests against a server, with the `test-support` feature (off by default; the
//!   tests of this crate and of the crates that run against PostgreSQL enable it): where the
//!   test server is (`server_url`, `URL_VAR`), a fresh schema per test (`fresh_store`), and
//!   failure injection (`Faults`, `PostgresStore::faults`).
//!
//! # What it must not depend on
//! Only `loom-kernel` among Loom crates: the runtime, effects and plugins know this store only
//! as an `EventStore`. No wall clock decides anything here but the database server's.
//!
//! # Example
//! ```no_run
//! use loom_kernel::{EventStore, ExecutionId};
//! use loom_store_postgres::{PostgresStore, PostgresStoreConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PostgresStore::connect(PostgresStoreConfig::new("postgres://loom@127.0.0.1/loom"))
//!     .await?;
//! let id = ExecutionId::new("order-42")?;
//! assert_eq!(store.head(&id).await?, 0);
//! # Ok(()) }
//! ```
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]

mod cause;
mod config;
mod error;
mod fast;
mod faults;
mod lease;
mod listing;
mod notify;
mod read_back;
mod replication;
mod retention;
mod schema;
mod shards;
mod store;
#[cfg(feature = "test-support")]
mod testing;
mod wake;
mod writer;

pub use config::PostgresStoreConfig;
pub use error::ConnectError;
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub use faults::Faults;
pub use replication::Replication;
pub use schema::SCHEMA_VERSION;
pub use shards::{ShardCursor, ShardFeedEvent, ShardedStore, shard_of, shard_urls};
pub use store::PostgresStore;
#[cfg(feature = "test-support")]
pub use testing::{
    REQUIRE_VAR, SKIPPED_TESTS_VAR, URL_VAR, drop_schema, fresh_schema, fresh_store, raw_client,
    record_skipped_test, run_in_schema, server_url, url_file,
};
