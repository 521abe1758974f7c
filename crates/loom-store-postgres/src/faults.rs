//! Failures injected by tests (`PostgresStore::faults`, hidden from the documentation, with the
//! `test-support` feature), and what they count. The store always keeps them (never set, they
//! inject nothing); without the feature nothing outside the crate reaches them.

use std::sync::atomic::{AtomicU32, Ordering};

/// Failures injected by tests to reach paths a healthy server never takes.
#[derive(Debug, Default)]
#[doc(hidden)]
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub struct Faults {
    /// Commit this many batches, then act as if the reply to `COMMIT` was lost.
    pub lose_commit_reply: AtomicU32,
    /// Roll this many batches back instead of committing, then act as if the reply to
    /// `COMMIT` was lost.
    pub lose_commit: AtomicU32,
    /// Stop renewing leases in the background, as a worker that hangs would.
    pub pause_lease_renewal: std::sync::atomic::AtomicBool,
    /// Send this many batches the full path and stop each once its rows are locked, until
    /// `resume_stalled` is notified: a worker paused in the middle of a transaction.
    pub stall_after_lock: AtomicU32,
    /// Notified when a batch stops for `stall_after_lock`.
    pub stalled: tokio::sync::Notify,
    /// What a batch stopped for `stall_after_lock` waits for.
    pub resume_stalled: tokio::sync::Notify,
    /// Ask the server whether a lease is held before every non-idempotent effect, as if every
    /// lease might have lapsed (a worker whose last confirmation is older than
    /// `lease_confirm_after` does so by itself).
    pub distrust_leases: std::sync::atomic::AtomicBool,
    /// Counted, not injected: the batches committed in one statement (see [`crate::fast`]).
    pub one_statement_commits: std::sync::atomic::AtomicU64,
}

impl Faults {
    pub(crate) fn take(counter: &AtomicU32) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}
