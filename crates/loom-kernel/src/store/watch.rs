//! Wakes `wait_for` callers when an execution's head moves.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::id::ExecutionId;

/// One watch channel per execution somebody waits on; none for the others.
#[derive(Debug, Default)]
pub(crate) struct HeadWatch {
    senders: Mutex<HashMap<ExecutionId, watch::Sender<u64>>>,
}

impl HeadWatch {
    /// A receiver that sees every head published after this call.
    pub(crate) fn subscribe(&self, execution: &ExecutionId) -> watch::Receiver<u64> {
        let mut senders = self.senders.lock().unwrap_or_else(|p| p.into_inner());
        senders
            .entry(execution.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Publishes a new head; forgets channels nobody listens to any more.
    pub(crate) fn publish(&self, execution: &ExecutionId, head: u64) {
        let mut senders = self.senders.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = senders.get(execution) {
            if sender.receiver_count() == 0 {
                senders.remove(execution);
            } else {
                sender.send_modify(|current| *current = (*current).max(head));
            }
        }
    }

    /// Waits until `head` reports more than `seq` events; `current_head` is read after
    /// subscribing, so no publication can slip between the check and the wait.
    pub(crate) async fn wait_for<E>(
        &self,
        execution: &ExecutionId,
        seq: u64,
        current_head: impl std::future::Future<Output = Result<u64, E>>,
    ) -> Result<(), WaitError<E>> {
        let mut receiver = self.subscribe(execution);
        if current_head.await.map_err(WaitError::Read)? > seq {
            return Ok(());
        }
        receiver
            .wait_for(|head| *head > seq)
            .await
            .map(|_| ())
            .map_err(|_| WaitError::Closed)
    }
}

pub(crate) enum WaitError<E> {
    Read(E),
    Closed,
}
