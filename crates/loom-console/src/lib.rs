//! The operator's console: the `loom` command line and the admin API it talks to.
//!
//! # What it owns
//! - The views an operator reads ([`view`]): executions, folded state, event logs and steps in
//!   doubt, with every payload masked by the K10-R6 classification before it leaves.
//! - The reads over any store ([`query`]): listings through the status index, one execution,
//!   a log from a seq on (for `tail`), the steps in doubt with how long they have waited.
//! - The admin API ([`admin`]): [`admin_router`], an axum router that a server embedding a
//!   `Runtime` mounts on loopback, bearer-token guarded, with read and verdict endpoints that
//!   go through the runtime; and the web console it serves at `/admin/` (`web/`: a static
//!   page, script and style sheet built into the crate, calling the same API).
//! - Writes on a store no process runs flows on ([`offline`]): the one event the kernel's
//!   driver would record, when the fold says it would accept it.
//! - Retention ([`retention`]): `loom purge` deletes ended executions older than a cutoff in
//!   bounded batches, on a store file or through the admin API.
//! - A small client of the admin API ([`client`]) and the `loom` binary (`src/main.rs`).
//!   `docs/CONSOLE.md` describes the commands, exit codes and endpoints.
//!
//! # What it must not depend on
//! Flow code: the console works on any store without knowing the flows (what needs them, a
//! `retry` verdict, goes through the admin API of the process that has them). It builds on
//! `loom-kernel` (and reads stores through `loom-store-postgres` and writes exports in
//! `loom-replay-check`'s format); no library crate depends on it.
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]

pub mod admin;
pub mod client;
pub mod error;
pub mod offline;
pub mod query;
pub mod retention;
pub mod view;

pub use admin::{
    ADMIN_CALLER, AdminConfig, AdminConfigError, admin_router, bind_loopback, random_token,
};
pub use client::AdminClient;
pub use error::{ConsoleError, ErrorKind};
