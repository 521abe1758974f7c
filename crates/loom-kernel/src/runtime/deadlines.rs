//! Deadlines through the runtime: arming one in the timer index (starting the timer task on
//! the first), and firing a due one at its execution's driver, on a store with leases only by
//! the worker that holds or takes the parked execution's lease (issue 29's rule).

use std::sync::Arc;

use tracing::Instrument;

use crate::id::ExecutionId;
use crate::runtime::contain::contain_future;
use crate::runtime::mailbox::DriverMsg;
use crate::runtime::slots::Inner;
use crate::runtime::timers::{Due, serve};
use crate::store::EventStore;

/// On a store with leases: fires a due deadline if its gate still waits and this worker holds
/// or takes the parked execution's lease; forgets it otherwise. The gate is checked first, on
/// the log, and the lease taken at that log's head: a lease is never taken for a deadline
/// that will not be recorded (it would stay with this worker, which has nothing to append).
async fn claim_and_fire<S: EventStore>(inner: Arc<Inner<S>>, due: Due) {
    use crate::store::EventStoreExt;
    let waits = match inner.store.fold(&due.execution).await {
        Ok(state) => state
            .pending_gates()
            .contains_key(&due.gate_id)
            .then(|| state.next_seq()),
        Err(error) => {
            tracing::warn!(execution = %due.execution, %error, "a due deadline whose execution cannot be read is not fired here");
            None
        }
    };
    match waits {
        Some(head) if claim(&*inner.store, &due.execution, head).await => fire_one(&inner, due),
        _ => {
            tracing::debug!(execution = %due.execution, gate = %due.gate_id, "a due deadline is not this worker's to fire");
            inner
                .timers
                .disarm(&due.execution, &due.gate_id, due.deadline_ms);
        }
    }
}

/// Hands a due deadline to its execution's driver.
fn fire_one<S: EventStore>(inner: &Arc<Inner<S>>, due: Due) {
    inner.send(
        &due.execution,
        DriverMsg::Deadline {
            gate_id: due.gate_id,
            deadline_ms: due.deadline_ms,
        },
    );
}

/// Whether this worker holds (or now took) `execution`'s lease, its log being at `head`; a
/// store that cannot tell counts as not held (the deadline or the recovery is left to a worker
/// that can).
pub(crate) async fn claim<S: EventStore>(store: &S, execution: &ExecutionId, head: u64) -> bool {
    match store.hold_lease(execution, head).await {
        Ok(hold) => hold.is_held(),
        Err(error) => {
            tracing::warn!(%execution, %error, "cannot claim the execution's lease");
            false
        }
    }
}

/// Arms the deadline of `gate_id` in the runtime's index, starting the timer task on the
/// first one; a deadline that comes due is sent to its execution's driver.
pub(crate) fn arm_deadline<S: EventStore>(
    inner: &Arc<Inner<S>>,
    execution: &ExecutionId,
    gate_id: &str,
    deadline_ms: u64,
) {
    if inner.timers.arm(execution, gate_id, deadline_ms) {
        let runtime = Arc::downgrade(inner);
        let fire = move |due: Vec<Due>| {
            let Some(inner) = runtime.upgrade() else {
                return false;
            };
            for due in due {
                if inner.store.has_leases() {
                    // Every worker that recovered the execution armed this deadline: the one
                    // that takes the parked execution's lease fires it, the others forget it.
                    let claiming = Arc::clone(&inner);
                    inner.spawn(claim_and_fire(claiming, due));
                } else {
                    fire_one(&inner, due);
                }
            }
            true
        };
        let timers = Arc::clone(&inner.timers);
        inner.spawn(
            async move {
                let served = contain_future(serve(Arc::clone(&timers), fire));
                if let Err(panic) = served.await {
                    // The clock is user code; the next deadline armed starts a new task.
                    tracing::error!(%panic, "the timer task panicked (in the clock?); deadlines fire again once one is armed");
                    timers.stopped();
                }
            }
            // Root span: the task serves every execution's deadlines, not the one that armed it.
            .instrument(tracing::info_span!(parent: None, "timers")),
        );
    }
}
