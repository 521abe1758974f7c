//! `ctx.patched`: changing a flow's code under executions that are running or parked
//! (LD-017). New executions take the new branch and record that they did; recorded ones that
//! passed that point without it replay the old branch.

use super::{FlowCtx, StepError};

pub use crate::runtime::markers::PATCH_KIND;

impl FlowCtx {
    /// Whether this execution runs the code of change `change_id`: guard a change to a flow
    /// with it, keep the old code in the `else` branch.
    ///
    /// - An execution that reaches this call live (new, or past the end of its recorded
    ///   history) gets `true`, and the answer is recorded (a `DECISION_RECORDED` of kind
    ///   `loom.patch`, step id `patch:<change_id>`).
    /// - A replay that finds that record here gets `true` again.
    /// - A replay of an execution recorded without the change (the old code ran here: its log
    ///   has another command at this point, or it has ended) gets `false`, records nothing,
    ///   and takes the old branch, issuing what the old code issued.
    ///
    /// The answer holds for the rest of the run: a second call with the same id returns the
    /// first answer without recording anything. Once no execution that can take the old
    /// branch is left (`replay-check` says so), the old branch can go: replace the call by
    /// [`FlowCtx::deprecate_patch`], which still accepts logs that recorded the marker. See
    /// `docs/VERSIONING.md`.
    ///
    /// ```ignore
    /// if ctx.patched("send-receipt")? {
    ///     ctx.execute("email.receipt", &order).await?;
    /// }
    /// ```
    pub fn patched(&self, change_id: &str) -> Result<bool, StepError> {
        self.state().patched(change_id)
    }

    /// The second step of removing a change guarded by [`FlowCtx::patched`], once no execution
    /// that can take the old branch is left: call this where `patched(change_id)` was and keep
    /// only the new code. A replayed log that recorded the marker here has it consumed; a new
    /// execution records nothing. Once no stored log holds the marker, remove this call too.
    ///
    /// A log recorded *without* the change (the old code) is not served by this: its replay
    /// diverges at the new code's first command, as it should, since the old branch is gone.
    ///
    /// A later `patched(change_id)` in the same run is refused with
    /// [`StepError::DeprecatedPatch`]: it would answer `true` and record nothing.
    pub fn deprecate_patch(&self, change_id: &str) -> Result<(), StepError> {
        self.state().deprecate_patch(change_id)
    }
}

/// `docs/VERSIONING.md`, whose code blocks run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../../../docs/VERSIONING.md")]
struct VersioningGuide;
