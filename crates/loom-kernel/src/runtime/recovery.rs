//! What a recovery pass did: written by `Runtime::recover_report` and the wake-up loader
//! (`wakeups.rs`), which both sit below the façade.

use crate::id::ExecutionId;
use crate::store::FoldStoredError;

/// What [`Runtime::recover_report`](crate::Runtime::recover_report) did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Executions it started a driver for.
    pub started: usize,
    /// Deadlines (timers, gates with a timeout) of parked executions it armed at once: those
    /// due within the first window (a minute on a store with the wake-up index). Later ones
    /// are armed as their time comes.
    pub timers: usize,
    /// Executions it could not read or fold, in id order: each is left as it is.
    pub skipped: Vec<SkippedExecution>,
    /// Executions that need driving but whose lease another worker holds (a store with
    /// leases, [`EventStore::has_leases`](crate::EventStore::has_leases)): left to that worker, nothing replayed or run here.
    pub elsewhere: usize,
    /// Executions that need driving but whose flow (name and version) this runtime does not
    /// register, in id order: left as they are (running) for a runtime that registers it,
    /// each logged once as a warning.
    pub unregistered: Vec<UnregisteredFlow>,
}

/// An execution recovery left because this runtime does not register its flow.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnregisteredFlow {
    /// Its id.
    pub execution: ExecutionId,
    /// The flow it runs.
    pub flow: String,
    /// The flow's version.
    pub version: u32,
}

/// An execution recovery skipped.
#[derive(Debug)]
#[non_exhaustive]
pub struct SkippedExecution {
    /// Its id.
    pub execution: ExecutionId,
    /// Why its log could not be read or folded.
    pub error: FoldStoredError,
}
