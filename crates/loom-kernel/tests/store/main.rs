//! The kernel's store tests, one test binary: the fold and its laws, the stores' conformance,
//! corruption repair, crash consistency under SIGKILL, reading logs of older versions, group
//! commit, and masking.

#[path = "../support/mod.rs"]
mod support;

mod backward_compatibility;
mod batching;
mod corruption_repair;
mod crash_consistency;
mod fold;
mod fold_laws;
mod masking;
mod store_conformance;
