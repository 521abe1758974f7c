//! What the status and id listings take and give: the filter of a status listing, and a page
//! of executions with where the next one begins.

use super::ExecutionTail;
use crate::fold::{ExecutionState, ExecutionStatus};
use crate::id::ExecutionId;
#[cfg(doc)]
use crate::store::EventStore;

/// Which executions [`EventStore::list_by_status`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatusFilter {
    /// The executions whose status ([`ExecutionState::status`]) is this one. `New` lists
    /// nothing: an execution with no events is not stored.
    Status(ExecutionStatus),
    /// The executions a worker must drive on ([`ExecutionState::needs_driving`]): running, or
    /// parked with a step in flight. What `Runtime::recover` starts.
    NeedsDriving,
    /// The executions with a step in doubt ([`ExecutionState::steps_in_doubt`]), whatever
    /// their status: those waiting for a verdict, and those that ended with one (a cancel, or
    /// a flow that returned, while the effect ran), whose effect may have happened. What the
    /// in-doubt listings read, in proportion to what they return.
    StepsInDoubt,
}

impl StatusFilter {
    /// Whether an execution with this tail is listed.
    pub fn matches_tail(self, tail: &ExecutionTail) -> bool {
        match self {
            Self::Status(status) => status != ExecutionStatus::New && tail.status() == status,
            Self::NeedsDriving => tail.needs_driving(),
            Self::StepsInDoubt => tail.has_steps_in_doubt(),
        }
    }

    /// Whether an execution with this folded state is listed.
    pub fn matches_state(self, state: &ExecutionState) -> bool {
        match self {
            Self::Status(status) => status != ExecutionStatus::New && state.status() == status,
            Self::NeedsDriving => state.needs_driving(),
            Self::StepsInDoubt => !state.steps_in_doubt().is_empty(),
        }
    }
}

/// One execution as listed by [`EventStore::list_executions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionSummary {
    /// The execution's id.
    pub id: ExecutionId,
    /// The next seq: how many events the log holds.
    pub head: u64,
}

/// A page of executions, in id order (byte order of the ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionPage {
    /// The executions of the page, in id order.
    pub executions: Vec<ExecutionSummary>,
    /// Pass as `after` to get the next page; `None` when no execution follows this page.
    pub next: Option<ExecutionId>,
}

impl ExecutionPage {
    /// A page from up to `limit + 1` summaries: the extra one only says that more follow. A
    /// store lists `limit + 1` executions and hands them here.
    pub fn from_one_extra(mut executions: Vec<ExecutionSummary>, limit: usize) -> Self {
        let more = executions.len() > limit;
        executions.truncate(limit);
        let next = more
            .then(|| executions.last().map(|summary| summary.id.clone()))
            .flatten();
        Self { executions, next }
    }
}
