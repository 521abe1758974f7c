//! Subscriptions: a client's view of one surface, the hub's end of it, and the catch-up from
//! the store that comes before it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use loom_kernel::{EventStore, ExecutionId};
use tokio::sync::mpsc;

use super::state::{Shared, evict_if_done, request_message, surface_entry};
use super::{HubError, SurfaceHub};
use crate::wire::AgentMessage;

/// Events read per page when the hub catches up from the store.
const CATCH_UP_PAGE: usize = 512;

/// A client's view of one surface: `createSurface` and any pending function calls first, then
/// every update as it becomes durable.
#[derive(Debug)]
pub struct SurfaceSubscription {
    /// `createSurface` with the current masked model, then pending `callRendererFunction`s.
    pub initial: Vec<AgentMessage>,
    // Boxed: a channel allocates a block of 32 slots when it is made, and a slot holds one
    // message; a pointer keeps an idle subscription's block small.
    receiver: mpsc::Receiver<Box<AgentMessage>>,
    lagged: Arc<AtomicBool>,
    /// Where the hub keeps this subscription's sender, released when it is dropped so that a
    /// closed session costs nothing until the surface's next update.
    registration: Option<Registration>,
}

#[derive(Debug)]
struct Registration {
    hub: Weak<Shared>,
    execution: ExecutionId,
    surface_id: String,
    id: u64,
}

impl Drop for SurfaceSubscription {
    fn drop(&mut self) {
        let Some(registration) = self.registration.take() else {
            return;
        };
        let Some(shared) = registration.hub.upgrade() else {
            return;
        };
        let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(surface) = state
            .executions
            .get_mut(&registration.execution)
            .and_then(|exec| exec.surfaces.get_mut(&registration.surface_id))
        {
            surface.subscribers.retain(|s| s.id != registration.id);
        }
        evict_if_done(&mut state, &registration.execution);
    }
}

impl SurfaceSubscription {
    /// The next live message; `None` once the subscription has ended: the surface was
    /// deleted, the hub is gone, or the client fell too far behind ([`Self::lagged`]).
    pub async fn next(&mut self) -> Option<AgentMessage> {
        self.receiver.recv().await.map(|message| *message)
    }

    /// The next live message if one is waiting.
    pub fn try_next(&mut self) -> Option<AgentMessage> {
        self.receiver.try_recv().ok().map(|message| *message)
    }

    /// Whether the hub dropped this subscription because its client fell more than the
    /// subscriber buffer behind. Its buffered messages are still delivered, then it ends;
    /// subscribe again to resynchronise from `createSurface`.
    pub fn lagged(&self) -> bool {
        self.lagged.load(Ordering::Acquire)
    }
}

/// The hub's end of a subscription.
pub(super) struct Subscriber {
    pub(super) id: u64,
    pub(super) sender: mpsc::Sender<Box<AgentMessage>>,
    pub(super) lagged: Arc<AtomicBool>,
}

impl Subscriber {
    /// Hands `message` over; `false` once the subscription has ended: dropped by its client,
    /// or full, when it is marked lagged and dropped here.
    pub(super) fn send(&self, message: &AgentMessage) -> bool {
        match self.sender.try_send(Box::new(message.clone())) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.lagged.store(true, Ordering::Release);
                tracing::warn!(
                    buffer = self.sender.max_capacity(),
                    "an A2UI subscriber fell behind and is dropped: it subscribes again to resynchronise"
                );
                false
            }
        }
    }
}

impl SurfaceHub {
    /// Reads `execution`'s log from the store from the first event this hub has not applied, and
    /// applies what it has not seen (after
    /// a restart, or for an execution written by another process). Safe to call at any time
    /// and more than once: events are applied once each, in order.
    pub async fn catch_up<S: EventStore>(
        &self,
        store: &S,
        execution: &ExecutionId,
    ) -> Result<(), HubError> {
        // Only what the hub has not applied: a subscribe costs the events since, not the log.
        let mut from = self
            .state()
            .executions
            .get(execution)
            .map_or(0, |exec| exec.next_seq);
        loop {
            let page = store
                .read(execution, from, CATCH_UP_PAGE)
                .await
                .map_err(|source| HubError::Read {
                    execution: execution.clone(),
                    source,
                })?;
            let Some(last) = page.last() else {
                return Ok(());
            };
            from = last.seq + 1;
            let full = page.len() >= CATCH_UP_PAGE;
            let mut state = self.state();
            for envelope in page {
                self.offer(&mut state, envelope);
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// Catches up `execution` and subscribes to `surface_id`: the subscription starts with
    /// `createSurface` (current masked model and components) and any pending function calls,
    /// then carries every later update once. For a surface the flow deleted, it is empty and
    /// ended at once.
    pub async fn subscribe<S: EventStore>(
        &self,
        store: &S,
        execution: &ExecutionId,
        surface_id: &str,
    ) -> Result<SurfaceSubscription, HubError> {
        self.catch_up(store, execution).await?;
        let mut guard = self.state();
        let state = &mut *guard;
        let exec = state.executions.entry(execution.clone()).or_default();
        let surface = surface_entry(&self.shared, execution, exec, surface_id);
        let (sender, receiver) =
            mpsc::channel(self.shared.subscriber_buffer.load(Ordering::Relaxed));
        let lagged = Arc::new(AtomicBool::new(false));
        if surface.deleted {
            // The sender is dropped here: the subscription has ended.
            return Ok(SurfaceSubscription {
                initial: Vec::new(),
                receiver,
                lagged,
                registration: None,
            });
        }
        let mut initial = vec![surface.bridge.snapshot()];
        for (call_id, request) in &exec.requests {
            if request.surface_id == surface_id
                && exec.open_calls.contains_key(call_id)
                && let Ok(message) = request_message(&exec.surfaces, request)
            {
                initial.push(message);
            }
        }
        let id = state.next_subscriber;
        state.next_subscriber += 1;
        let mut registration = None;
        if let Some(surface) = state
            .executions
            .get_mut(execution)
            .and_then(|exec| exec.surfaces.get_mut(surface_id))
        {
            surface.subscribers.push(Subscriber {
                id,
                sender,
                lagged: Arc::clone(&lagged),
            });
            registration = Some(Registration {
                hub: Arc::downgrade(&self.shared),
                execution: execution.clone(),
                surface_id: surface_id.to_owned(),
                id,
            });
        }
        Ok(SurfaceSubscription {
            initial,
            receiver,
            lagged,
            registration,
        })
    }
}
