//! Durable timers: the clock seam, and the one ordered index of pending deadlines that one task
//! serves (see `docs/decisions/LD-009-durable-timers.md`).
//!
//! A deadline is recorded in the log (a `DECISION_RECORDED` of kind [`DEADLINE_KIND`] just
//! before its gate's `EXECUTION_SUSPENDED`), so nothing here is durable state: after a restart
//! `recover` reads the pending deadlines back from the logs and arms them again. Arming puts
//! `(deadline, execution, gate)` in one `BTreeSet`; one task sleeps until the earliest
//! deadline, hands every due entry to its execution's driver, and sleeps again. A pending
//! timer costs one entry in the index and no task, no wake-up and no poll while it waits.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::id::ExecutionId;
use crate::runtime::mailbox::DriverMsg;

pub(crate) use crate::runtime::markers::is_timed_out_payload;
pub use crate::runtime::markers::{CLOSED_KEY, DEADLINE_KIND, TIMED_OUT_KEY, TIMER_EVENT_TYPE};

/// Where the runtime reads the time: when a flow asks for `now` or sets a timer (both recorded,
/// so replay never asks the clock), and when the timer task waits for the next deadline.
///
/// Called on the runtime's tasks (a driver, the timer task), never on replay of recorded
/// commands. It must not panic: a panic in `now_ms` while a flow asks fails that flow (as a
/// panic of the flow), and a panic in the timer task stops it until the next deadline is armed
/// (logged as an error).
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
    /// Completes once `now_ms() >= deadline_ms` (or a little before: the caller checks again
    /// and waits once more).
    fn sleep_until(&self, deadline_ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// The system's wall clock, through tokio's timer (the tokio runtime needs its time driver:
/// `enable_time`, or `enable_all` as `#[tokio::main]` does). The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

/// The longest single sleep of the timer task on the system clock: a wall clock that jumps
/// forward is noticed within this bound.
const MAX_SLEEP: Duration = Duration::from_secs(60);

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    fn sleep_until(&self, deadline_ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let wait = Duration::from_millis(deadline_ms.saturating_sub(self.now_ms())).min(MAX_SLEEP);
        Box::pin(tokio::time::sleep(wait))
    }
}

/// A clock that moves only when told to: for tests, so that timers fire without waiting.
/// Clones share the time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<watch::Sender<u64>>,
}

impl ManualClock {
    /// A clock that reads `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self {
            now: Arc::new(watch::channel(now_ms).0),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.now.send_modify(|now| *now = now.saturating_add(by));
    }

    /// Sets the clock (backwards too).
    pub fn set(&self, now_ms: u64) {
        self.now.send_replace(now_ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline_ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut now = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as any clone of the clock; if it is gone, never wake.
            if now.wait_for(|now| *now >= deadline_ms).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// A clock for whole-log replay: it is never asked for a recorded value, and what a flow does
/// past the end of its log is dropped, so it reads no real clock at all.
#[derive(Debug)]
pub(crate) struct ReplayClock;

impl Clock for ReplayClock {
    fn now_ms(&self) -> u64 {
        0
    }
    fn sleep_until(&self, _deadline_ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(std::future::pending())
    }
}

/// A due deadline, handed to its execution's driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) execution: ExecutionId,
    pub(crate) gate_id: String,
    pub(crate) deadline_ms: u64,
}

type Entry = (u64, ExecutionId, String);

/// Deadlines waiting, in deadline order, and deadlines handed to a driver that has not yet
/// said it is done with them (so that arming one again, as a replay does, sends it only once).
#[derive(Debug, Default)]
struct Index {
    waiting: BTreeSet<Entry>,
    sent: BTreeSet<Entry>,
}

/// The pending deadlines of a runtime, in one ordered index, and the state of the task that
/// serves them.
#[derive(Debug)]
pub(crate) struct Timers {
    pub(crate) clock: Arc<dyn Clock>,
    index: Mutex<Index>,
    /// Wakes the task when an earlier deadline is armed, or the runtime is dropped.
    wake: Notify,
    started: AtomicBool,
    closed: AtomicBool,
    /// Whether a task arms the next windows of the store's deadlines (`wakeups.rs`): one per
    /// runtime, however many times `recover` is called.
    pub(crate) loading: AtomicBool,
}

impl Timers {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            index: Mutex::new(Index::default()),
            wake: Notify::new(),
            started: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            loading: AtomicBool::new(false),
        }
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many deadlines are pending.
    pub(crate) fn pending(&self) -> usize {
        let index = self.index();
        index.waiting.len() + index.sent.len()
    }

    /// Arms a deadline (again: arming twice is one entry). Returns whether the timer task must
    /// be started (the first arm of this runtime).
    pub(crate) fn arm(&self, execution: &ExecutionId, gate_id: &str, deadline_ms: u64) -> bool {
        let earliest = {
            let mut index = self.index();
            let entry = (deadline_ms, execution.clone(), gate_id.to_owned());
            if index.sent.contains(&entry) {
                false
            } else {
                let before = index.waiting.first().map(|(at, _, _)| *at);
                index.waiting.insert(entry);
                before.is_none_or(|before| deadline_ms < before)
            }
        };
        if earliest {
            self.wake.notify_one();
        }
        !self.started.swap(true, Ordering::AcqRel)
    }

    /// Forgets a deadline: its gate was resumed or expired, or the execution ended.
    pub(crate) fn disarm(&self, execution: &ExecutionId, gate_id: &str, deadline_ms: u64) {
        let entry = (deadline_ms, execution.clone(), gate_id.to_owned());
        let mut index = self.index();
        if !index.sent.remove(&entry) {
            index.waiting.remove(&entry);
        }
    }

    /// A deadline message that no driver will act on: the index forgets it.
    pub(crate) fn forget(&self, execution: &ExecutionId, message: &DriverMsg) {
        if let DriverMsg::Deadline {
            gate_id,
            deadline_ms,
        } = message
        {
            self.disarm(execution, gate_id, *deadline_ms);
        }
    }

    /// The task ended without being closed (it panicked): the next arm starts another.
    pub(crate) fn stopped(&self) {
        self.started.store(false, Ordering::Release);
    }

    /// Stops the task (the runtime is gone).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Every entry due at `now`, taken out of the index, and the next deadline after them.
    fn take_due(&self, now: u64) -> (Vec<Due>, Option<u64>) {
        let mut index = self.index();
        let mut due = Vec::new();
        while let Some((at, _, _)) = index.waiting.first() {
            if *at > now {
                break;
            }
            if let Some(entry) = index.waiting.pop_first() {
                due.push(Due {
                    execution: entry.1.clone(),
                    gate_id: entry.2.clone(),
                    deadline_ms: entry.0,
                });
                index.sent.insert(entry);
            }
        }
        (due, index.waiting.first().map(|(at, _, _)| *at))
    }
}

/// The timer task: sleeps until the earliest deadline (one sleep, whatever the number of
/// timers), hands what is due to `fire`, and repeats. Ends when the runtime closes the index
/// (it is dropped) or `fire` returns false (the runtime is gone).
pub(crate) async fn serve(timers: Arc<Timers>, fire: impl Fn(Vec<Due>) -> bool) {
    loop {
        if timers.closed.load(Ordering::Acquire) {
            return;
        }
        let (due, next) = timers.take_due(timers.clock.now_ms());
        if !due.is_empty() {
            tracing::debug!(due = due.len(), "deadlines passed");
            if !fire(due) {
                return;
            }
            continue;
        }
        // A notify between `take_due` and here left a permit: this completes at once.
        let woken = timers.wake.notified();
        match next {
            Some(at) => {
                tokio::select! {
                    () = timers.clock.sleep_until(at) => {}
                    () = woken => {}
                }
            }
            None => woken.await,
        }
    }
}
