//! The errors of the runtime's calls, and what a caller hears when a driver cannot answer.

use crate::id::ExecutionId;
use crate::runtime::history::NonDeterminism;
use crate::store::AppendError;
use crate::store::{FoldStoredError, ReadError};
#[cfg(doc)]
use crate::{FnFlow, Runtime};

/// Why a runtime could not be composed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompositionError {
    /// A plugin needs another kernel ABI.
    #[error("plugin '{plugin}' needs kernel ABI {requires}, but this kernel is {kernel}")]
    AbiMismatch {
        /// The plugin's name.
        plugin: String,
        /// The kernel ABI range the plugin needs.
        requires: String,
        /// This kernel's ABI.
        kernel: String,
    },
    /// Two effects have this name.
    #[error("effect '{0}' is registered twice")]
    DuplicateEffect(String),
    /// A flow name and version are registered twice.
    #[error("flow '{name}' version {version} is registered twice")]
    DuplicateFlow {
        /// The name concerned.
        name: String,
        /// The flow version concerned.
        version: u32,
    },
    /// Two inbound handlers have this name.
    #[error("inbound handler '{0}' is registered twice")]
    DuplicateInbound(String),
    /// A flow declares it uses an effect ([`FnFlow::uses`]) that nothing registered.
    #[error("flow '{flow}' version {version} uses effect '{effect}', which nothing registered")]
    UnregisteredEffect {
        /// The flow's name.
        flow: String,
        /// The flow's version.
        version: u32,
        /// The effect's name.
        effect: String,
    },
}

/// Why `start` did not start an execution.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// No flow has this name.
    #[error("no flow named '{0}' is registered")]
    UnknownFlow(String),
    /// The flow has no such version.
    #[error("flow '{name}' has no version {version}")]
    UnknownFlowVersion {
        /// The name concerned.
        name: String,
        /// The flow version concerned.
        version: u32,
    },
    /// No longer returned by `start` (a start of an existing execution returns it, or is
    /// refused with [`StartError::Conflict`]); kept for callers that match on it.
    #[error("execution {0} already exists")]
    AlreadyExists(ExecutionId),
    /// The execution exists, started by another flow or with another input; nothing ran.
    #[error("execution {execution} already exists {detail}; nothing was started")]
    Conflict {
        /// The execution that exists.
        execution: ExecutionId,
        /// How it differs from this start (without the inputs themselves, which may hold
        /// classified data).
        detail: String,
    },
    /// Whether the execution exists could not be read.
    #[error("cannot read whether execution {execution} exists: {source}")]
    Read {
        /// The execution asked for.
        execution: ExecutionId,
        /// The store's error.
        #[source]
        source: ReadError,
    },
    /// The input does not serialize to JSON.
    #[error("the input of execution {execution} does not serialize: {detail}")]
    Input {
        /// The execution asked for.
        execution: ExecutionId,
        /// What went wrong, in words.
        detail: String,
    },
    /// The runtime is shut down ([`Runtime::shutdown`]); nothing was started.
    #[error("the runtime is shut down; nothing was started")]
    ShutDown,
    /// The resume authenticator (K12.2) refused a start asked by an inbound message; nothing
    /// was started.
    #[error("start of execution {execution} refused by the authenticator: {reason}")]
    Unauthorized {
        /// The execution asked for.
        execution: ExecutionId,
        /// The authenticator's reason.
        reason: String,
    },
    /// The execution's driver failed before it answered.
    #[error("execution {execution} could not be started: {detail}")]
    Driver {
        /// The execution asked for.
        execution: ExecutionId,
        /// What went wrong, in words.
        detail: String,
    },
}

/// Why a resume was not recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// The resume authenticator (K12.2) refused the resume.
    #[error("resume of execution {execution} refused by the authenticator: {reason}")]
    Unauthorized {
        /// The execution concerned.
        execution: ExecutionId,
        /// The authenticator's reason.
        reason: String,
    },
    #[error(
        "execution {execution} has no pending gate for ({event_type}, key '{correlation_key}')"
    )]
    /// No pending gate waits for this event type and key (a resume is never buffered: LD-004).
    NoPendingGate {
        /// The execution concerned.
        execution: ExecutionId,
        /// The gate's event type.
        event_type: String,
        /// The gate's correlation key.
        correlation_key: String,
    },
    /// No execution has this id.
    #[error("execution {execution} does not exist")]
    UnknownExecution {
        /// The execution concerned.
        execution: ExecutionId,
    },
    /// The gate had a deadline (`suspend_with_timeout`), which passed first: the flow has
    /// taken its timeout branch, and this late resume is not recorded.
    #[error(
        "the gate of execution {execution} for ({event_type}, key '{correlation_key}') timed out before this resume; nothing was recorded"
    )]
    TimedOut {
        /// The execution concerned.
        execution: ExecutionId,
        /// The gate's event type.
        event_type: String,
        /// The gate's correlation key.
        correlation_key: String,
    },
    /// Gates whose event type starts with `loom.` (a timer's, `loom.timer`) belong to the
    /// runtime, which resumes them itself; a caller cannot.
    #[error(
        "gates of type '{event_type}' belong to the runtime; execution {execution} cannot be resumed on one"
    )]
    ReservedGate {
        /// The execution concerned.
        execution: ExecutionId,
        /// The reserved event type.
        event_type: String,
    },
    /// The payload is one of the runtime's markers (an object whose only key starts with
    /// `loom.`, such as `loom.timedOut` or `loom.closed`), which only the runtime records.
    #[error(
        "a resume payload of execution {execution} may not be a runtime marker (an object whose only key starts with 'loom.', such as 'loom.timedOut')"
    )]
    ReservedPayload {
        /// The execution concerned.
        execution: ExecutionId,
    },
    /// The runtime is shut down ([`Runtime::shutdown`]); nothing was recorded.
    #[error("the runtime is shut down; the resume was not recorded")]
    ShutDown,
    /// Another writer (a second runtime on the same store) appended to the execution's log
    /// first: nothing of this resume was recorded. Look at the execution again
    /// ([`Runtime::state`](crate::Runtime::state)) and send it again if it still applies.
    #[error(
        "another writer appended to the log of execution {execution} first; the resume was not recorded: look at the execution again and retry if it still applies"
    )]
    LogMoved {
        /// The execution concerned.
        execution: ExecutionId,
    },
    /// The execution's driver failed before it answered.
    #[error("execution {execution} could not record the resume: {detail}")]
    Driver {
        /// The execution concerned.
        execution: ExecutionId,
        /// What went wrong, in words.
        detail: String,
    },
}

/// Why an operator's verdict was not recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The step is not in doubt (it never was, or a verdict is recorded).
    #[error("step '{step_id}' of execution {execution} is not in doubt")]
    NotInDoubt {
        /// The execution concerned.
        execution: ExecutionId,
        /// The step's id (ADR 0061).
        step_id: String,
    },
    /// The step was left in doubt when the execution was cancelled: its log is closed, so no
    /// verdict can be recorded. The effect may have happened: settle it with the receiver,
    /// looking for its idempotency key (`executionId:stepId`).
    #[error(
        "step '{step_id}' of execution {execution} was in doubt when the execution was cancelled: its log is closed and no verdict can be recorded; the effect may have happened, so settle it with the receiver under idempotency key '{execution}:{step_id}'"
    )]
    InDoubtWhenEnded {
        /// The execution concerned.
        execution: ExecutionId,
        /// The step's id (ADR 0061).
        step_id: String,
    },
    /// No execution has this id.
    #[error("execution {execution} does not exist")]
    UnknownExecution {
        /// The execution concerned.
        execution: ExecutionId,
    },
    /// The runtime is shut down ([`Runtime::shutdown`]); nothing was recorded.
    #[error("the runtime is shut down; the verdict was not recorded")]
    ShutDown,
    /// Another writer (a second runtime on the same store) appended to the execution's log
    /// first: nothing of this verdict was recorded. Look at the execution again
    /// ([`Runtime::state`](crate::Runtime::state)) and send it again if it still applies.
    #[error(
        "another writer appended to the log of execution {execution} first; the verdict was not recorded: look at the execution again and retry if it still applies"
    )]
    LogMoved {
        /// The execution concerned.
        execution: ExecutionId,
    },
    /// The execution's driver failed before it answered.
    #[error("execution {execution} could not record the verdict: {detail}")]
    Driver {
        /// The execution concerned.
        execution: ExecutionId,
        /// What went wrong, in words.
        detail: String,
    },
}

/// Why a cancel was not recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CancelError {
    /// The execution has already ended.
    #[error("execution {execution} has already ended")]
    Ended {
        /// The execution concerned.
        execution: ExecutionId,
    },
    /// No execution has this id.
    #[error("execution {execution} does not exist")]
    UnknownExecution {
        /// The execution concerned.
        execution: ExecutionId,
    },
    /// The runtime is shut down ([`Runtime::shutdown`]); nothing was recorded.
    #[error("the runtime is shut down; the cancel was not recorded")]
    ShutDown,
    /// Another writer (a second runtime on the same store) appended to the execution's log
    /// first: nothing of this cancel was recorded. Look at the execution again
    /// ([`Runtime::state`](crate::Runtime::state)) and send it again if it still applies.
    #[error(
        "another writer appended to the log of execution {execution} first; the cancel was not recorded: look at the execution again and retry if it still applies"
    )]
    LogMoved {
        /// The execution concerned.
        execution: ExecutionId,
    },
    /// The execution's driver failed before it answered.
    #[error("execution {execution} could not record the cancel: {detail}")]
    Driver {
        /// The execution concerned.
        execution: ExecutionId,
        /// What went wrong, in words.
        detail: String,
    },
}

/// The errors a runtime call returns when the execution's driver could not answer.
pub(crate) trait DriverFailure {
    fn driver(execution: ExecutionId, detail: String) -> Self;
    /// Another writer appended to the log first; nothing of the request was recorded.
    fn log_moved(execution: ExecutionId) -> Self;
}

macro_rules! driver_failure {
    ($($error:ident),*) => {$(
        impl DriverFailure for $error {
            fn driver(execution: ExecutionId, detail: String) -> Self {
                $error::Driver { execution, detail }
            }
            fn log_moved(execution: ExecutionId) -> Self {
                $error::LogMoved { execution }
            }
        }
    )*};
}

driver_failure!(ResumeError, ResolveError, CancelError);

impl DriverFailure for StartError {
    fn driver(execution: ExecutionId, detail: String) -> Self {
        StartError::Driver { execution, detail }
    }
    // A start is answered by its first append, which a moved log refuses as a taken id.
    fn log_moved(execution: ExecutionId) -> Self {
        StartError::AlreadyExists(execution)
    }
}

/// What a caller hears when a driver went away without answering.
pub(crate) const DRIVER_STOPPED: &str = "the execution's driver stopped";

/// What a caller hears when its message reached a driver that stops for a shutdown.
pub(crate) const SHUT_DOWN: &str = "the runtime is shut down";

/// Why `wait` did not return a state.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError {
    /// The execution's driver stopped with an error.
    #[error(transparent)]
    Driver(DriveError),
    /// The execution's log could not be read or folded.
    #[error(transparent)]
    Fold(#[from] FoldStoredError),
}

/// Why an inbound message was not handled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboundError {
    /// No inbound handler has this name.
    #[error("no inbound handler named '{0}'")]
    UnknownHandler(String),
    /// The handler refused the message; its reason.
    #[error("the inbound handler refused the message: {0}")]
    Refused(String),
    /// The handler panicked; nothing was done.
    #[error("the inbound handler panicked: {0}")]
    HandlerPanicked(String),
    /// The resume the handler asked for was refused.
    #[error(transparent)]
    Resume(#[from] ResumeError),
    /// The start the handler asked for was refused.
    #[error(transparent)]
    Start(#[from] StartError),
}

impl From<ReadError> for WaitError {
    fn from(error: ReadError) -> Self {
        WaitError::Fold(FoldStoredError::Read(error))
    }
}

/// Why a driver stopped without finishing its work.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DriveError {
    /// The replayed flow asked for something else than its log recorded.
    #[error("non-determinism in execution {execution}: {source}")]
    NonDeterminism {
        /// The execution concerned.
        execution: ExecutionId,
        /// The first difference, recorded against attempted.
        #[source]
        source: NonDeterminism,
    },
    /// The log names a flow version this runtime does not have.
    #[error("execution {execution} runs flow '{flow}' version {version}, which is not registered")]
    UnknownFlow {
        /// The execution concerned.
        execution: ExecutionId,
        /// The flow's name.
        flow: String,
        /// The flow's version.
        version: u32,
    },
    /// The log could not be read or folded.
    #[error("cannot read or fold execution {execution}: {detail}")]
    Log {
        /// The execution concerned.
        execution: ExecutionId,
        /// What went wrong, in words.
        detail: String,
    },
    /// A non-idempotent step was about to run, but this worker does not hold the execution's
    /// lease (another worker took it over, or the lease could not be confirmed). Its effect
    /// was not invoked and nothing was recorded: the step is the lease holder's to recover.
    #[error("execution {execution}: step '{step_id}' was not run: {detail}")]
    LeaseNotHeld {
        /// The execution concerned.
        execution: ExecutionId,
        /// The step that was not run.
        step_id: String,
        /// Why, in words.
        detail: String,
    },
    /// An append failed.
    #[error("cannot append to execution {execution}: {source}")]
    Append {
        /// The execution concerned.
        execution: ExecutionId,
        /// The store's error.
        #[source]
        source: AppendError,
    },
    /// The driver itself panicked (a kernel bug: user code's panics are contained where they
    /// happen). What it had not recorded is left for `recover`.
    #[error("the driver of execution {execution} panicked: {detail}")]
    Panicked {
        /// The execution concerned.
        execution: ExecutionId,
        /// What went wrong, in words.
        detail: String,
    },
}
