//! The driver's side of keeping parked flows in memory (LD-020, `keep.rs`): taking a kept
//! flow back when its log has not moved, and handing one over when the driver exits.

use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::runtime::execution::Execution;
use crate::runtime::keep::{Kept, drop_flows};
use crate::runtime::mailbox::DriverReceiver;
use crate::runtime::slots::Inner;
use crate::store::EventStore;

/// The kept flow of `execution`, if it is still current: the log's head is the one it parked
/// at. A stale one (the log moved under it, or its head cannot be read) is dropped, and the
/// caller replays the log.
pub(crate) async fn take<S: EventStore>(inner: &Inner<S>, execution: &ExecutionId) -> Option<Kept> {
    let kept = inner.kept.take(execution)?;
    let parked_at = kept.parked_at;
    match inner.store.head(execution).await {
        Ok(head) if head == parked_at => Some(kept),
        Ok(head) => {
            tracing::debug!(
                %execution,
                head,
                parked_at,
                "the log moved under a kept flow; it replays"
            );
            drop_flows([kept]);
            None
        }
        Err(error) => {
            tracing::debug!(%execution, %error, "cannot read the head for a kept flow; it replays");
            drop_flows([kept]);
            None
        }
    }
}

/// A copy of the fold, made before the lock `release` takes, if a caller of `Runtime::wait`
/// waits for this driver now (so the copy is not made under the lock that every message is
/// sent under). A hint: `release` decides under the lock.
pub(crate) fn copy_for_waiter<S: EventStore>(
    inner: &Inner<S>,
    execution: &ExecutionId,
    exec: &Execution,
) -> Option<ExecutionState> {
    let waited = inner
        .slots(execution)
        .get(execution)
        .is_some_and(|slot| slot.settled.receiver_count() > 0);
    waited.then(|| exec.fold())
}

/// Called by a driver whose flow parks: like [`Inner::try_release`], and when it may exit,
/// keeps what `keep` makes (under the lock `send` takes, so the next driver finds it).
///
/// `keep` is told whether a caller of `Runtime::wait` is waiting for this driver: only such a
/// caller reads the state the driver exits with (one that comes later finds no driver and
/// folds the log), so the driver copies its fold for it only then, and otherwise leaves the
/// fold in the kept flow's state: parking costs no copy of a state that grows with the
/// history.
pub(crate) fn release<S: EventStore>(
    inner: &Inner<S>,
    execution: &ExecutionId,
    messages: &mut DriverReceiver,
    keep: impl FnOnce(bool) -> Option<Kept>,
) -> bool {
    let evicted = {
        let mut slots = inner.slots(execution);
        if !messages.is_empty() {
            return false;
        }
        let waited = slots
            .get(execution)
            .is_some_and(|slot| slot.settled.receiver_count() > 0);
        // After a shutdown nothing is kept: the shutdown has dropped (or is dropping) them all.
        let evicted = match keep(waited) {
            Some(kept) => inner
                .kept
                .insert(execution.clone(), kept, || inner.stopping()),
            None => Vec::new(),
        };
        if let Some(slot) = slots.get_mut(execution) {
            slot.driver = None;
        }
        evicted
    };
    drop_flows(evicted);
    true
}
