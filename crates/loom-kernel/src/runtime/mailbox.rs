//! What the runtime asks of an execution's driver, and how a driver answers: the messages
//! (`DriverMsg`), the replies it owes, how a driver's run ends (`Exit`), and the refusals a
//! message gets when no driver will act on it.
//!
//! Below every module that sends or serves these (slots, the driver, timers, children), so
//! that none of them needs another to name what it passes on.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Wake;

use tokio::sync::{Notify, mpsc, oneshot};

use crate::event::{ExecutionStarted, Verdict};
use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::errors::{CancelError, DriverFailure, ResolveError, ResumeError, StartError};

/// The gates (event type, correlation key) that their deadline closed.
pub(crate) type TimedOutGates = BTreeSet<(String, String)>;

/// The sending side of a driver's channel. A channel allocates room for 32 messages when it
/// is created, whether any comes or not (most executions of a burst never get one), so each
/// message travels boxed: the room is 32 pointers (256 bytes), not 32 messages (1,280).
pub(crate) type DriverSender = mpsc::UnboundedSender<Box<DriverMsg>>;
/// The receiving side of a driver's channel ([`DriverSender`]).
pub(crate) type DriverReceiver = mpsc::UnboundedReceiver<Box<DriverMsg>>;

/// What the runtime asks of an execution's driver; it travels boxed ([`DriverSender`]).
pub(crate) enum DriverMsg {
    Resume(ResumeMsg),
    Resolve(ResolveMsg),
    Cancel {
        reason: Option<String>,
        reply: oneshot::Sender<Result<(), CancelError>>,
    },
    /// The timer task: the deadline of `gate_id` has passed. Unanswered: a deadline whose gate
    /// no longer waits for it is ignored.
    Deadline {
        gate_id: String,
        deadline_ms: u64,
    },
    /// A child this execution waits for has ended; `payload` is its marker (LD-015).
    /// Unanswered: an end whose gate no longer waits is ignored.
    ChildEnded {
        child: ExecutionId,
        payload: Payload,
    },
}

/// A resume for the execution's gate (`Runtime::resume`).
pub(crate) struct ResumeMsg {
    pub(crate) event_type: String,
    pub(crate) correlation_key: String,
    pub(crate) payload: Payload,
    /// The gate the resume authenticator approved this resume for, when one was asked: the
    /// resume lands on that gate or on none.
    pub(crate) gate_id: Option<String>,
    pub(crate) reply: oneshot::Sender<Result<(), ResumeError>>,
}

/// An operator's verdict on a step in doubt (`Runtime::resolve`).
pub(crate) struct ResolveMsg {
    pub(crate) step_id: String,
    pub(crate) verdict: Verdict,
    pub(crate) operator: Option<String>,
    pub(crate) reply: oneshot::Sender<Result<(), ResolveError>>,
}

/// How a driver ended, with the execution's state as it left it.
pub(crate) enum Exit {
    /// The execution has ended (now or before).
    Ended(Box<ExecutionState>),
    /// The flow waits for resumes or verdicts only.
    Parked(Box<ExecutionState>),
    /// The log does not exist.
    Unknown,
    /// The runtime is shutting down: the driver stopped once nothing was being appended.
    Stopped(Box<ExecutionState>),
    /// The flow parked and was kept in memory with its state (`keep.rs`); no caller was
    /// waiting for the state.
    Kept,
    /// Another writer (a second runtime on the store) appended to the log first: this run's
    /// view is stale. What waits is handed to a new driver, which reads the log as it is.
    Moved,
}

/// Wakes the driver when something the flow awaits (other than a command) is ready, and
/// remembers that it did, so the driver never parks a flow that asked to be polled again.
pub(crate) struct FlowWaker {
    pub(crate) notify: Notify,
    woken: AtomicBool,
}

impl FlowWaker {
    pub(crate) fn new() -> Self {
        Self {
            notify: Notify::new(),
            woken: AtomicBool::new(false),
        }
    }

    /// Whether the flow was woken since the last call, which clears it (call before a poll).
    pub(crate) fn take_woken(&self) -> bool {
        self.woken.swap(false, Ordering::AcqRel)
    }
}

impl Wake for FlowWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.notify.notify_one();
    }
}

/// A new execution handed to its first driver: `EXECUTION_STARTED` goes out in the same
/// append as the flow's first commands, and `start` returns once that append is durable.
pub(crate) struct NewExecution {
    pub(crate) started: ExecutionStarted,
    pub(crate) reply: oneshot::Sender<Result<(), StartError>>,
}

pub(crate) enum Reply {
    Start(oneshot::Sender<Result<(), StartError>>),
    Resume(oneshot::Sender<Result<(), ResumeError>>),
    Resolve(oneshot::Sender<Result<(), ResolveError>>),
    Cancel(oneshot::Sender<Result<(), CancelError>>),
}

impl Reply {
    pub(crate) fn ok(self) {
        match self {
            Reply::Start(reply) => drop(reply.send(Ok(()))),
            Reply::Resume(reply) => drop(reply.send(Ok(()))),
            Reply::Resolve(reply) => drop(reply.send(Ok(()))),
            Reply::Cancel(reply) => drop(reply.send(Ok(()))),
        }
    }

    /// Another writer appended first: nothing of the request was recorded.
    pub(crate) fn log_moved(self, execution: &ExecutionId) {
        fn send<E: DriverFailure>(reply: oneshot::Sender<Result<(), E>>, execution: &ExecutionId) {
            drop(reply.send(Err(E::log_moved(execution.clone()))));
        }
        match self {
            Reply::Start(reply) => send(reply, execution),
            Reply::Resume(reply) => send(reply, execution),
            Reply::Resolve(reply) => send(reply, execution),
            Reply::Cancel(reply) => send(reply, execution),
        }
    }

    pub(crate) fn fail(self, execution: &ExecutionId, detail: &str) {
        fn send<E: DriverFailure>(
            reply: oneshot::Sender<Result<(), E>>,
            execution: &ExecutionId,
            detail: &str,
        ) {
            drop(reply.send(Err(E::driver(execution.clone(), detail.to_owned()))));
        }
        match self {
            Reply::Start(reply) => send(reply, execution, detail),
            Reply::Resume(reply) => send(reply, execution, detail),
            Reply::Resolve(reply) => send(reply, execution, detail),
            Reply::Cancel(reply) => send(reply, execution, detail),
        }
    }
}

/// Answers a message for an execution that has ended. A resume of a gate in `timed_out` is
/// told that its gate timed out; a verdict on a step of `in_doubt` (left in doubt when the
/// execution was cancelled) is told that no verdict can be recorded any more.
pub(crate) fn refuse_ended(
    execution: &ExecutionId,
    message: DriverMsg,
    timed_out: &TimedOutGates,
    in_doubt: &BTreeSet<String>,
) {
    if let Some(answer) = ended_answer(execution, message, timed_out, in_doubt) {
        answer.send(execution);
    }
}

/// The answer [`refuse_ended`] sends (`None` for a deadline or a child's end, which no one
/// waits on).
pub(crate) fn ended_answer(
    execution: &ExecutionId,
    message: DriverMsg,
    timed_out: &TimedOutGates,
    in_doubt: &BTreeSet<String>,
) -> Option<Answer> {
    let execution = execution.clone();
    Some(match message {
        DriverMsg::Resume(resume) => {
            let ResumeMsg {
                event_type,
                correlation_key,
                reply,
                ..
            } = resume;
            let key = (event_type, correlation_key);
            let error = if timed_out.contains(&key) {
                ResumeError::TimedOut {
                    execution,
                    event_type: key.0,
                    correlation_key: key.1,
                }
            } else {
                ResumeError::NoPendingGate {
                    execution,
                    event_type: key.0,
                    correlation_key: key.1,
                }
            };
            Answer::Resume(reply, error)
        }
        DriverMsg::Resolve(resolve) => {
            let ResolveMsg { step_id, reply, .. } = resolve;
            let error = if in_doubt.contains(&step_id) {
                ResolveError::InDoubtWhenEnded { execution, step_id }
            } else {
                ResolveError::NotInDoubt { execution, step_id }
            };
            Answer::Resolve(reply, error)
        }
        DriverMsg::Cancel { reply, .. } => Answer::Cancel(reply, CancelError::Ended { execution }),
        DriverMsg::Deadline { .. } | DriverMsg::ChildEnded { .. } => return None,
    })
}

/// Answers a message for an execution whose log does not exist.
pub(crate) fn refuse_unknown(execution: &ExecutionId, message: DriverMsg) {
    let execution = execution.clone();
    match message {
        DriverMsg::Resume(resume) => drop(
            resume
                .reply
                .send(Err(ResumeError::UnknownExecution { execution })),
        ),
        DriverMsg::Resolve(resolve) => drop(
            resolve
                .reply
                .send(Err(ResolveError::UnknownExecution { execution })),
        ),
        DriverMsg::Cancel { reply, .. } => {
            drop(reply.send(Err(CancelError::UnknownExecution { execution })))
        }
        DriverMsg::Deadline { .. } | DriverMsg::ChildEnded { .. } => {}
    }
}

/// Answers a message after the driver failed.
pub(crate) fn refuse_failed(execution: &ExecutionId, message: DriverMsg, detail: &str) {
    if let Some(answer) = failed_answer(execution, message, detail) {
        answer.send(execution);
    }
}

/// The answer [`refuse_failed`] sends (`None` for a deadline or a child's end: logged).
pub(crate) fn failed_answer(
    execution: &ExecutionId,
    message: DriverMsg,
    detail: &str,
) -> Option<Answer> {
    let reply = match message {
        DriverMsg::Resume(resume) => Reply::Resume(resume.reply),
        DriverMsg::Resolve(resolve) => Reply::Resolve(resolve.reply),
        DriverMsg::Cancel { reply, .. } => Reply::Cancel(reply),
        DriverMsg::Deadline { gate_id, .. } => {
            tracing::warn!(%execution, gate = %gate_id, "a deadline passed for an execution whose driver failed");
            return None;
        }
        DriverMsg::ChildEnded { child, .. } => {
            tracing::warn!(%execution, %child, "a child ended for an execution whose driver failed; recover delivers it");
            return None;
        }
    };
    Some(Answer::Failed(reply, detail.to_owned()))
}

/// What a driver tells a caller, decided by the execution's machine (`runtime/execution/`)
/// and sent by the driver.
pub(crate) enum Answer {
    /// The events behind the reply are durable.
    Ok(Reply),
    /// The driver failed with this detail.
    Failed(Reply, String),
    /// Another writer appended first.
    LogMoved(Reply),
    /// A new execution whose id is taken: a start is told so, anything else fails.
    Exists(Reply),
    /// A resume refused.
    Resume(oneshot::Sender<Result<(), ResumeError>>, ResumeError),
    /// A verdict refused.
    Resolve(oneshot::Sender<Result<(), ResolveError>>, ResolveError),
    /// A cancel refused.
    Cancel(oneshot::Sender<Result<(), CancelError>>, CancelError),
}

impl Answer {
    /// Sends the answer; a caller that stopped waiting is not told.
    pub(crate) fn send(self, execution: &ExecutionId) {
        match self {
            Answer::Ok(reply) => reply.ok(),
            Answer::Failed(reply, detail) => reply.fail(execution, &detail),
            Answer::LogMoved(reply) => reply.log_moved(execution),
            Answer::Exists(Reply::Start(reply)) => {
                drop(reply.send(Err(StartError::AlreadyExists(execution.clone()))))
            }
            Answer::Exists(other) => other.fail(execution, "the execution already exists"),
            Answer::Resume(reply, error) => drop(reply.send(Err(error))),
            Answer::Resolve(reply, error) => drop(reply.send(Err(error))),
            Answer::Cancel(reply, error) => drop(reply.send(Err(error))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DriverMsg, DriverSender};

    /// Every driver's channel allocates a block of 32 of what it carries when it is created,
    /// whether a message comes or not: that is a pointer each, whatever a message holds.
    #[test]
    fn a_driver_channel_carries_a_pointer_per_message() {
        fn carried<T>(_: &tokio::sync::mpsc::UnboundedSender<T>) -> usize {
            std::mem::size_of::<T>()
        }
        let (sender, _receiver): (DriverSender, _) = tokio::sync::mpsc::unbounded_channel();
        assert_eq!(carried(&sender), std::mem::size_of::<Box<DriverMsg>>());
        assert_eq!(carried(&sender), std::mem::size_of::<usize>());
    }
}
