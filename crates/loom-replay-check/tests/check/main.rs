//! replay-check's tests, one test binary: the command and export-log, masking, regressions, and
//! versioning.

mod golden;
mod masking;
mod regressions;
mod versioning;
