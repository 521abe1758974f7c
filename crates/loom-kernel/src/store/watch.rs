//! Wakes `wait_for` callers when an execution's head moves, and `wait_for_feed` callers when
//! the feed grows.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use super::ReadError;
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
    pub(crate) async fn wait_for(
        &self,
        execution: &ExecutionId,
        seq: u64,
        current_head: impl std::future::Future<Output = Result<u64, ReadError>>,
    ) -> Result<(), ReadError> {
        let mut receiver = self.subscribe(execution);
        if current_head.await? > seq {
            return Ok(());
        }
        receiver
            .wait_for(|head| *head > seq)
            .await
            .map(|_| ())
            .map_err(|_| ReadError::Closed)
    }
}

/// The next feed position, published after each commit: wakes `wait_for_feed` callers.
#[derive(Debug)]
pub(crate) struct FeedWatch(watch::Sender<u64>);

impl Default for FeedWatch {
    fn default() -> Self {
        Self::new(0)
    }
}

impl FeedWatch {
    /// A watch whose next position is `next`.
    pub(crate) fn new(next: u64) -> Self {
        Self(watch::channel(next).0)
    }

    /// Publishes the next feed position after a commit.
    pub(crate) fn publish(&self, next: u64) {
        self.0.send_replace(next);
    }

    /// Resolves once the next feed position is past `position`.
    pub(crate) async fn wait_past(&self, position: u64) -> Result<(), ReadError> {
        let mut receiver = self.0.subscribe();
        receiver
            .wait_for(|next| *next > position)
            .await
            .map(|_| ())
            .map_err(|_| ReadError::Closed)
    }
}
