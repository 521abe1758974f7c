//! What the runtime shares with its drivers: the composed parts, one slot per execution (its
//! driver's channel, a start in progress, how its last driver ended) and the runtime's tasks;
//! and how a message reaches an execution's driver (`Inner::send`), starting one if none runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use crate::classify::DataClassification;
use crate::fold::ExecutionState;
use crate::hash::Sharded;
use crate::id::ExecutionId;
use crate::runtime::caller::AsyncResumeAuthenticator;
use crate::runtime::children::Children;
use crate::runtime::contain;
use crate::runtime::effect::Effect;
use crate::runtime::errors::{CancelError, DRIVER_STOPPED, DriveError, DriverFailure, SHUT_DOWN};
use crate::runtime::flow::Flow;
use crate::runtime::keep::KeptFlows;
use crate::runtime::mailbox::{self, DriverMsg, DriverReceiver, DriverSender, Exit, NewExecution};
use crate::runtime::plugin::{InboundHandler, Projection};
use crate::runtime::recent::RecentStates;
use crate::runtime::stats::StepCounters;
use crate::runtime::timers::Timers;
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
    pub(crate) timers: Arc<Timers>,
    /// Children awaited by parents in this process (LD-015).
    pub(crate) children: Children,
    pub(crate) slots: Slots,
    /// The states drivers left executions in, kept a while after their slots went (taken
    /// under a shard of the slots' lock, after it).
    pub(crate) recent: Mutex<RecentStates>,
    /// Set by [`Runtime::shutdown`]: no new work is accepted, and drivers exit once their
    /// append in flight is durable.
    pub(crate) stop: watch::Sender<bool>,
    /// The driver tasks and the timer task, joined by [`Runtime::shutdown`].
    pub(crate) tasks: Mutex<tokio::task::JoinSet<()>>,
    /// Held while a shutdown joins the tasks, so a second one waits for the first.
    pub(crate) shutting: tokio::sync::Mutex<()>,
    /// Parked flows kept in memory, resumed without replay (LD-020).
    pub(crate) kept: KeptFlows,
    /// What runs an execution's driver, and what follows its end (the driver's module,
    /// given at composition: this module only schedules drivers).
    pub(crate) launcher: Launcher<S>,
    /// Steps started and ended by this runtime's drivers (`Runtime::stats`).
    pub(crate) steps: StepCounters,
}

impl<S> Drop for Inner<S> {
    fn drop(&mut self) {
        // The timer task ends with the runtime.
        self.timers.close();
    }
}

/// One slot per execution, in shards by id (`hash::Sharded`): every start, message and driver
/// exit takes the lock of its execution's shard (with one lock, a thousand executions started
/// at once queued on it).
pub(crate) type Slots = Sharded<HashMap<ExecutionId, Slot>>;

/// An execution's driver, if one runs, and how its runs end.
pub(crate) struct Slot {
    pub(crate) driver: Option<DriverSender>,
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
    /// The state it left the execution in. Boxed: every slot's watch channel holds a
    /// `Settled`, and a state inline made that allocation 760 bytes per execution started
    /// (424 with it boxed).
    pub(crate) state: Option<Box<ExecutionState>>,
}

/// Drives one execution until it ends, parks or fails, answering every message it receives.
pub(crate) type DriveFn<S> = for<'a> fn(
    Arc<Inner<S>>,
    ExecutionId,
    &'a mut DriverReceiver,
    Option<NewExecution>,
) -> BoxFuture<'a, Result<Exit, DriveError>>;

/// How a driver runs and what follows its end, given by the driver's module when the runtime
/// is composed (`builder.rs`): the slots schedule drivers without depending on what one does.
pub(crate) struct Launcher<S> {
    /// The driver.
    pub(crate) drive: DriveFn<S>,
    /// Called once an execution's driver saw it end: a child's end goes to its parent.
    pub(crate) ended:
        for<'a> fn(&'a Arc<Inner<S>>, &'a ExecutionId, &'a ExecutionState) -> BoxFuture<'a, ()>,
}

impl<S> Inner<S> {
    /// The shard of the slots that holds `execution`'s. Nothing holds two shards at once.
    pub(crate) fn slots(
        &self,
        execution: &ExecutionId,
    ) -> std::sync::MutexGuard<'_, HashMap<ExecutionId, Slot>> {
        self.slots.lock(execution.as_str())
    }
}

impl<S: EventStore> Inner<S> {
    pub(crate) fn recent(&self) -> std::sync::MutexGuard<'_, RecentStates> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Drops `execution`'s slot once nothing needs it: no driver runs or starts, nobody waits
    /// on it, and its last run did not fail (a later `wait` reports why). Its state goes to the
    /// recent states, as when a driver ends with nobody waiting. Called by the waits once they
    /// let go of the slot: a driver that ends while a caller waits leaves its slot to them,
    /// and a slot nobody dropped stayed for good (1.7 KiB an execution, `docs/PERFORMANCE.md`,
    /// "Sustained load").
    pub(crate) fn release_idle_slot(&self, execution: &ExecutionId) {
        let mut slots = self.slots(execution);
        let idle = slots.get(execution).is_some_and(|slot| {
            slot.driver.is_none()
                && slot.starting.is_none()
                && slot.settled.receiver_count() == 0
                && slot.settled.borrow().error.is_none()
        });
        if idle {
            self.retire_slot(&mut slots, execution);
        }
    }

    /// Removes `execution`'s slot, which nobody waits on any more, keeping the state it holds
    /// among the recent states for a `wait` that comes after it is gone.
    fn retire_slot(&self, slots: &mut HashMap<ExecutionId, Slot>, execution: &ExecutionId) {
        if let Some(slot) = slots.remove(execution) {
            // No receiver is left: the state is moved out, not copied.
            let left = slot.settled.send_replace(Settled::default()).state;
            let mut recent = self.recent();
            match left {
                Some(state) => recent.keep(execution, *state),
                None => recent.forget(execution),
            }
        }
    }

    /// Called by a driver that has nothing left to do: it may exit only if no message is
    /// waiting, decided under the same lock `send` takes, so no message is ever stranded.
    pub(crate) fn try_release(
        &self,
        execution: &ExecutionId,
        messages: &mut DriverReceiver,
    ) -> bool {
        let mut slots = self.slots(execution);
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

impl<S: EventStore> Inner<S> {
    /// Sends a message to the execution's driver, starting one if none runs. The message is
    /// sent under the lock a driver takes to decide it may exit, so it is never stranded.
    pub(crate) fn send(self: &Arc<Self>, execution: &ExecutionId, message: DriverMsg) {
        if self.stopping() {
            // No driver starts after a shutdown (the timer task may still fire once).
            self.timers.forget(execution, &message);
            mailbox::refuse_failed(execution, message, SHUT_DOWN);
            return;
        }
        let mut slots = self.slots(execution);
        let slot = slots.entry(execution.clone()).or_insert_with(new_slot);
        let sender = self.live_driver(slot, execution);
        if let Err(mpsc::error::SendError(message)) = sender.send(Box::new(message)) {
            let message = *message;
            drop(slots);
            self.timers.forget(execution, &message);
            mailbox::refuse_failed(execution, message, DRIVER_STOPPED);
        }
    }

    /// [`Runtime::cancel`](super::Runtime::cancel): records `EXECUTION_CANCELLED` through the
    /// execution's driver and answers once it is durable (or why it is not).
    pub(crate) async fn cancel(
        self: &Arc<Self>,
        execution: &ExecutionId,
        reason: Option<String>,
    ) -> Result<(), CancelError> {
        if self.stopping() {
            return Err(CancelError::ShutDown);
        }
        let (reply, answer) = oneshot::channel();
        self.send(execution, DriverMsg::Cancel { reason, reply });
        answer.await.unwrap_or_else(|_| {
            Err(DriverFailure::driver(
                execution.clone(),
                DRIVER_STOPPED.into(),
            ))
        })
    }

    /// The execution's driver, started if none runs.
    pub(crate) fn ensure_driver(self: &Arc<Self>, execution: &ExecutionId) {
        if self.stopping() {
            return;
        }
        let mut slots = self.slots(execution);
        let slot = slots.entry(execution.clone()).or_insert_with(new_slot);
        self.live_driver(slot, execution);
    }

    /// The driver of `slot` (whose lock the caller holds), started if none runs or the last
    /// one has stopped.
    fn live_driver(self: &Arc<Self>, slot: &mut Slot, execution: &ExecutionId) -> DriverSender {
        match &slot.driver {
            Some(sender) if !sender.is_closed() => sender.clone(),
            _ => self.spawn_driver(slot, execution, None),
        }
    }

    /// Starts a driver for the execution of `slot`, whose lock the caller holds.
    fn spawn_driver(
        self: &Arc<Self>,
        slot: &mut Slot,
        execution: &ExecutionId,
        new: Option<NewExecution>,
    ) -> DriverSender {
        let (sender, run) = self.driver_task(slot, execution, new);
        self.spawn(run);
        sender
    }

    /// The task that drives the execution of `slot` (whose lock the caller holds), not yet
    /// started: the caller spawns it, or polls it first itself.
    pub(crate) fn driver_task(
        self: &Arc<Self>,
        slot: &mut Slot,
        execution: &ExecutionId,
        new: Option<NewExecution>,
    ) -> (
        DriverSender,
        std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    ) {
        let (sender, mut messages) = mpsc::unbounded_channel();
        slot.driver = Some(sender.clone());
        // What an earlier driver left is stale from now on (this one may append).
        self.recent().forget(execution);
        let inner = Arc::clone(self);
        let id = execution.clone();
        // A root span: a driver started from another execution's task (a child, a timer's
        // deadline) is not about that execution.
        let span = tracing::info_span!(parent: None, "execution", execution = %id);
        let run = Box::pin(
            async move {
                let outcome = contain::contain_future((inner.launcher.drive)(
                    Arc::clone(&inner),
                    id.clone(),
                    &mut messages,
                    new,
                ))
                .await
                .unwrap_or_else(|detail| {
                    Err(DriveError::Panicked {
                        execution: id.clone(),
                        detail,
                    })
                });
                // A child's end goes to the parent that waits for it (LD-015).
                if let Ok(Exit::Ended(state)) = &outcome {
                    (inner.launcher.ended)(&inner, &id, state).await;
                }
                let unknown = matches!(outcome, Ok(Exit::Unknown));
                let stopped = matches!(outcome, Ok(Exit::Stopped(_)));
                let moved = matches!(outcome, Ok(Exit::Moved));
                let (error, state) = match outcome {
                    Ok(Exit::Ended(state) | Exit::Parked(state) | Exit::Stopped(state)) => {
                        (None, Some(state))
                    }
                    Ok(Exit::Unknown) => (None, None),
                    // A moved log: `wait` reads the state from the store.
                    Ok(Exit::Kept | Exit::Moved) => (None, None),
                    Err(error) => {
                        tracing::error!(%error, "driver stopped");
                        (Some(error), None)
                    }
                };
                // Whatever is still queued is answered before the driver goes; new messages
                // start a new driver.
                let mut slots = inner.slots(&id);
                messages.close();
                let mut again = Vec::new();
                while let Ok(message) = messages.try_recv() {
                    let message = *message;
                    if moved {
                        again.push(message);
                        continue;
                    }
                    inner.timers.forget(&id, &message);
                    match &error {
                        Some(error) => mailbox::refuse_failed(&id, message, &error.to_string()),
                        None if unknown => mailbox::refuse_unknown(&id, message),
                        None if stopped => mailbox::refuse_failed(&id, message, SHUT_DOWN),
                        None => mailbox::refuse_ended(
                            &id,
                            message,
                            &Default::default(),
                            state
                                .as_ref()
                                .map_or(&Default::default(), |state| state.steps_in_doubt()),
                        ),
                    }
                }
                if let Some(slot) = slots.get_mut(&id) {
                    if slot
                        .driver
                        .as_ref()
                        .is_some_and(|sender| sender.is_closed())
                    {
                        slot.driver = None;
                    }
                    slot.settled.send_modify(|settled| {
                        settled.runs += 1;
                        settled.error = error;
                        settled.state = state;
                    });
                    // A failed run keeps its slot, so `wait` can report why.
                    let failed = slot.settled.borrow().error.is_some();
                    if slot.driver.is_none() && slot.settled.receiver_count() == 0 && !failed {
                        inner.retire_slot(&mut slots, &id);
                    }
                }
                drop(slots);
                // Sent again (outside the lock `send` takes) to a new driver of the log as
                // it now is.
                for message in again {
                    inner.send(&id, message);
                }
            }
            .instrument(span),
        );
        (sender, run)
    }
}
