//! The kernel's store tests: the fold and its laws, the stores' conformance,
//! corruption repair, crash consistency under SIGKILL, reading logs of older versions, group
//! commit, events held in memory until the tables take them, masking, and errors that keep
//! their causes.

mod backward_compatibility;
mod batching;
mod corruption_repair;
mod crash_consistency;
mod earlier_store;
mod error_sources;
mod flip_sweep;
mod fold;
mod fold_laws;
mod held;
mod in_doubt_index;
mod journal;
mod masking;
mod rows;
mod salvage;
mod scrub;
mod stats;
mod store_conformance;
