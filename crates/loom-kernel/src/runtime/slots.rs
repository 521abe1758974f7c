//! What the runtime shares with its drivers: the composed parts, one slot per execution (its
//! driver's channel, a start in progress, how its last driver ended) and the runtime's tasks.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use crate::classify::DataClassification;
use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::runtime::caller::AsyncResumeAuthenticator;
use crate::runtime::children;
use crate::runtime::driver::{DriveError, DriverMsg};
use crate::runtime::effect::Effect;
use crate::runtime::flow::Flow;
use crate::runtime::keep;
use crate::runtime::plugin::{InboundHandler, Projection};
use crate::runtime::timers;
use crate::store::EventStore;

pub(crate) struct Inner<S> {
    pub(crate) store: Arc<S>,
    pub(crate) flows: BTreeMap<(String, u32), Arc<dyn Flow>>,
    pub(crate) effects: Arc<BTreeMap<String, Arc<dyn Effect>>>,
    pub(crate) projections: Vec<Arc<dyn Projection>>,
    pub(crate) inbound: BTreeMap<String, Arc<dyn InboundHandler>>,
    pub(crate) authenticator: Option<Arc<dyn AsyncResumeAuthenticator>>,
    pub(crate) classification: Arc<DataClassification>,
    /// The pending deadlines of every execution, served by one task.
    pub(crate) timers: Arc<timers::Timers>,
    /// Children awaited by parents in this process (ADR 0015).
    pub(crate) children: children::Children,
    pub(crate) slots: Mutex<HashMap<ExecutionId, Slot>>,
    /// Set by [`Runtime::shutdown`]: no new work is accepted, and drivers exit once their
    /// append in flight is durable.
    pub(crate) stop: watch::Sender<bool>,
    /// The driver tasks and the timer task, joined by [`Runtime::shutdown`].
    pub(crate) tasks: Mutex<tokio::task::JoinSet<()>>,
    /// Held while a shutdown joins the tasks, so a second one waits for the first.
    pub(crate) shutting: tokio::sync::Mutex<()>,
    /// Parked flows kept in memory, resumed without replay (ADR 0020).
    pub(crate) kept: keep::KeptFlows,
}

impl<S> Drop for Inner<S> {
    fn drop(&mut self) {
        // The timer task ends with the runtime.
        self.timers.close();
    }
}

/// An execution's driver, if one runs, and how its runs end.
pub(crate) struct Slot {
    pub(crate) driver: Option<mpsc::UnboundedSender<DriverMsg>>,
    /// While a `start` creates the execution: closed once it knows whether it did, so a
    /// concurrent start of the same id waits and then reads what was recorded.
    pub(crate) starting: Option<watch::Receiver<()>>,
    /// Bumped each time a driver exits; `wait` watches it.
    pub(crate) settled: watch::Sender<Settled>,
}

/// How the last driver of an execution ended.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settled {
    pub(crate) runs: u64,
    pub(crate) error: Option<DriveError>,
    /// The state it left the execution in.
    pub(crate) state: Option<ExecutionState>,
}

impl<S: EventStore> Inner<S> {
    pub(crate) fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<ExecutionId, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn tasks(&self) -> std::sync::MutexGuard<'_, tokio::task::JoinSet<()>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether [`Runtime::shutdown`] was called.
    pub(crate) fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Spawns one of the runtime's tasks, which `shutdown` joins. Tasks that have finished
    /// are reaped first, so the set holds only live ones.
    pub(crate) fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut tasks = self.tasks();
        while tasks.try_join_next().is_some() {}
        tasks.spawn(task);
    }

    /// Called by a driver that has nothing left to do: it may exit only if no message is
    /// waiting, decided under the same lock `send` takes, so no message is ever stranded.
    pub(crate) fn try_release(
        &self,
        execution: &ExecutionId,
        messages: &mut mpsc::UnboundedReceiver<DriverMsg>,
    ) -> bool {
        let mut slots = self.slots();
        if !messages.is_empty() {
            return false;
        }
        if let Some(slot) = slots.get_mut(execution) {
            slot.driver = None;
        }
        true
    }
}

/// An empty slot.
pub(crate) fn new_slot() -> Slot {
    Slot {
        driver: None,
        starting: None,
        settled: watch::channel(Settled::default()).0,
    }
}
