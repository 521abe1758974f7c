//! replay-check's tests, one test binary: the command and export-log, masking, regressions, and
//! versioning.

#[path = "../support/mod.rs"]
mod support;

mod command;
mod masking;
mod regressions;
mod versioning;
