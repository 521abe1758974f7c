//! The error codes the runtime records itself (in `STEP_FAILED`, `EFFECT_INDOUBT` and
//! `EXECUTION_FAILED`), so that tools and operators can match on them.

/// A step of an effect that no one registered.
pub const UNKNOWN_EFFECT: &str = "loom.unknown_effect";
/// K3: a new step's `max_cost` exceeds what the execution may still spend (its budget, less
/// what is spent and what running steps hold); checked by the kernel for every effect.
pub const BUDGET_EXCEEDED: &str = "loom.budget_exceeded";
/// K2: the effect's capability was not granted to the execution.
pub const CAPABILITY_DENIED: &str = "loom.capability_denied";
/// The flow panicked; recorded as the execution's failure.
pub const FLOW_PANICKED: &str = "loom.flow_panicked";
/// An effect's handler panicked: the step fails (idempotent) or is in doubt (not).
pub const EFFECT_PANICKED: &str = "loom.effect_panicked";
/// An effect's admission check panicked: the step is refused before it starts.
pub const ADMISSION_PANICKED: &str = "loom.admission_panicked";
/// The worker stopped while a non-idempotent attempt ran (K9).
pub const WORKER_STOPPED: &str = "loom.worker_stopped";
/// The execution was cancelled while a non-idempotent attempt ran (K9).
pub const CANCELLED_WHILE_RUNNING: &str = "loom.cancelled_while_running";
/// The flow returned without awaiting a step while its non-idempotent attempt ran (K9).
pub const FLOW_RETURNED_WHILE_RUNNING: &str = "loom.flow_returned_while_running";
/// A flow's output or input could not be encoded or decoded.
pub const STEP: &str = "loom.step";
/// A child execution was cancelled (directly, or with its parent): what its parent's
/// `ctx.child` fails with.
pub const CHILD_CANCELLED: &str = "loom.child_cancelled";
/// A child's id is taken by an execution of another flow or input: the child never started.
pub const CHILD_CONFLICT: &str = "loom.child_conflict";
/// A child's flow is not registered: the child never started.
pub const CHILD_UNKNOWN_FLOW: &str = "loom.child_unknown_flow";
/// A replay-only stand-in effect was invoked ([`crate::kit::Replayer`]): replay runs no effect.
pub const REPLAY_RUNS_NO_EFFECT: &str = "loom.replay_runs_no_effect";
