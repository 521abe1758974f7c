//! `replay-check`: proves that recorded executions replay deterministically against today's
//! flow code, before a deploy and in CI.
//!
//! # What it owns
//! - The exported-log format ([`jsonl`]): one execution per JSON Lines file, one envelope per
//!   line.
//! - The check of one execution ([`check`]): the log decodes (its `EVENT_SCHEMA` is supported),
//!   its fold is valid and stable (twice, and through a serialization round-trip), and replaying its
//!   flow issues exactly the recorded commands, with no effect run and nothing written.
//! - Which stored executions the current code would break, by flow and version ([`breaks`]).
//! - The command line ([`cli`]): sources (an embedded store, a directory of exported logs),
//!   filters, a progress bar, a summary, `--json`, and exit codes 0 (all deterministic),
//!   1 (divergence found), 2 (could not run).
//!
//! # Checking your own flows
//! A crate that defines flows exposes them as a [`loom_kernel::runtime::FlowSet`]
//! (`pub fn flows() -> FlowSet`). A three-line binary runs the check against them:
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     let flows = loom_kernel::runtime::FlowSet::new(); // your_crate::flows()
//!     loom_replay_check::cli::main(flows, std::env::args_os())
//! }
//! ```
//!
//! # What it must not depend on
//! Only `loom-kernel` among Loom crates: it checks flows, whatever they use.
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod breaks;
pub mod check;
pub mod cli;
pub mod jsonl;

pub use breaks::{Breakage, FirstDifference, breakages};
pub use check::{Checker, Finding, Outcome};
