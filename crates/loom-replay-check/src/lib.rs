//! `replay-check`: proves that recorded executions replay deterministically against today's
//! flow code, before a deploy and in CI.
//!
//! # What it owns
//! - The exported-log format ([`write_log`], [`read_log`], [`list_logs`]): one execution per JSON Lines file, one envelope per
//!   line.
//! - The check of one execution ([`Checker`]): the log decodes (its `EVENT_SCHEMA` is supported),
//!   its fold is valid and stable (twice, and through a serialization round-trip), and replaying its
//!   flow issues exactly the recorded commands, with no effect run and nothing written.
//! - Which stored executions the current code would break, by flow and version ([`breakages`]).
//! - The command line ([`main`]): sources (an embedded store, a directory of exported logs),
//!   filters, a progress bar, a summary, `--json`, and exit codes 0 (all deterministic),
//!   1 (divergence found), 2 (could not run).
//!
//! # Checking your own flows
//! A crate that defines flows exposes them as a [`loom_kernel::FlowSet`]
//! (`pub fn flows() -> FlowSet`). A three-line binary runs the check against them:
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     let flows = loom_kernel::FlowSet::new(); // your_crate::flows()
//!     loom_replay_check::main(flows, std::env::args_os())
//! }
//! ```
//!
//! # Public surface
//! One path per item: the modules are private and their public items are re-exported at the
//! crate root (`loom_replay_check::Checker`, `loom_replay_check::read_log`).
//!
//! # What it must not depend on
//! Only `loom-kernel` among Loom crates: it checks flows, whatever they use.
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod breaks;
mod check;
mod cli;
mod jsonl;

pub use breaks::{Breakage, FirstDifference, breakages, summary};
pub use check::{Checker, Finding, Outcome};
pub use cli::{
    BoxError, CheckArgs, ExportArgs, check_command, check_store_command, export_main, main,
};
pub use jsonl::{EXTENSION, JsonlError, list_logs, path_for, read_log, write_log};
/// The same as [`loom_kernel::error_sentence`], kept here for the binaries that call it.
pub use loom_kernel::error_sentence;
