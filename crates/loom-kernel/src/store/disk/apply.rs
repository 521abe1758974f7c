//! The applier thread: brings the redb tables up to the journal behind the writer (LD-035).
//!
//! The writer answers an append once its journal record is durable; it hands what it
//! committed to this thread in chunks (when enough has gathered, when it has been idle a
//! moment, or when someone needs the tables current), and this thread applies each gathering
//! of chunks in one redb commit without an fsync, then tells [`Pending`] to forget what the
//! tables now hold. The commit path thus never waits for a B-tree; the writer waits for this
//! thread only before a deletion and at close, and, for one transaction at a time, when too
//! much is held.
//!
//! A checkpoint is this thread's too: asked for one, it makes its next commit durable and
//! publishes the journal offset that commit covers ([`Applied::take_durable`]); the writer then
//! starts the journal's next generation with the records past that offset carried over, so
//! neither the B-tree's writes nor their fsync stand on the commit path (`docs/STORAGE.md`).

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, mpsc};

use redb::Database;
use tokio::sync::oneshot;

use super::panic_message;
use super::pending::Pending;
use super::snapshot::LastCommit;
use super::tables::WriteTables;
use super::writer::Queued;
use crate::store::StorageError;

/// Appends the writer committed, in commit order, and where the journal and the feed stand
/// after them.
pub(super) struct Chunk {
    pub(super) appends: Vec<Queued>,
    pub(super) generation: u64,
    pub(super) journal_end: u64,
    pub(super) feed_next: u64,
    /// The writer's number of the last commit in the chunk.
    pub(super) last_commit: u64,
}

/// What the applier is asked.
pub(super) enum ToApplier {
    Chunk(Chunk),
    /// Answered once every chunk sent before it is in the tables.
    Flush(FlushReply),
    /// Make the commit of every chunk sent before it durable, and publish the journal
    /// position it covers. Asked only once a chunk of the journal's current generation was
    /// sent: a durable commit must never name a generation the journal has left.
    Checkpoint,
}

/// Where a flush is answered: a reader's task, or the writer thread itself.
pub(super) enum FlushReply {
    Task(oneshot::Sender<Result<(), StorageError>>),
    Thread(mpsc::SyncSender<Result<(), StorageError>>),
}

impl FlushReply {
    fn send(self, outcome: Result<(), StorageError>) {
        match self {
            Self::Task(reply) => {
                let _ = reply.send(outcome);
            }
            Self::Thread(reply) => {
                let _ = reply.send(outcome);
            }
        }
    }
}

/// What the applier publishes to the writer.
#[derive(Debug, Default)]
pub(super) struct Applied {
    /// The number of the last commit the tables hold.
    last_commit: AtomicU64,
    /// Set when an apply failed: the tables lag behind the journal, and the store must stop
    /// writing until it is opened again (the open applies the journal).
    failed: OnceLock<StorageError>,
    /// The journal position (generation, offset) of the last durable commit asked for with
    /// [`ToApplier::Checkpoint`], until the writer takes it.
    durable: Mutex<Option<(u64, u64)>>,
    /// Signalled after every transaction, applied or failed ([`Applied::wait_past`]).
    progress: (Mutex<()>, Condvar),
}

impl Applied {
    pub(super) fn last_commit(&self) -> u64 {
        self.last_commit.load(Ordering::Acquire)
    }

    pub(super) fn failure(&self) -> Option<&StorageError> {
        self.failed.get()
    }

    /// Waits until the tables hold a commit after `commit`, an apply failed, or `timeout`
    /// passed.
    pub(super) fn wait_past(&self, commit: u64, timeout: std::time::Duration) {
        let (lock, signal) = &self.progress;
        let Ok(guard) = lock.lock() else {
            return;
        };
        let _ = signal.wait_timeout_while(guard, timeout, |()| {
            self.last_commit() <= commit && self.failed.get().is_none()
        });
    }

    fn signal_progress(&self) {
        let (lock, signal) = &self.progress;
        // Taken so that a waiter between its check and its wait cannot miss the signal.
        drop(lock.lock());
        signal.notify_all();
    }

    /// The position a checkpoint made durable, once.
    pub(super) fn take_durable(&self) -> Option<(u64, u64)> {
        self.durable
            .lock()
            .ok()
            .and_then(|mut durable| durable.take())
    }

    fn publish_durable(&self, position: (u64, u64)) {
        if let Ok(mut durable) = self.durable.lock() {
            *durable = Some(position);
        }
    }
}

/// Runs until the writer drops its sender.
pub(super) fn run(
    db: &Database,
    pending: &Pending,
    last_commit: &LastCommit,
    applied: &Applied,
    requests: &mpsc::Receiver<ToApplier>,
) {
    yield_to_the_commit_path();
    // The journal position the tables hold: that of the last chunk applied.
    let mut position: Option<(u64, u64)> = None;
    // A request that did not fit in the last transaction: the first of the next.
    let mut carried: Option<ToApplier> = None;
    loop {
        let first = match carried.take() {
            Some(request) => request,
            None => match requests.recv() {
                Ok(request) => request,
                Err(_) => break,
            },
        };
        // Everything already waiting goes into the same transaction, up to
        // `MAX_TRANSACTION_EVENTS`: a transaction's time, during which nothing it holds is
        // forgotten and the writer may wait, stays bounded however far behind this thread is.
        let mut gathered = Gathering::default();
        gathered.take(first);
        while let Ok(next) = requests.try_recv() {
            let full = matches!(&next, ToApplier::Chunk(chunk)
                if gathered.events + chunk_events(chunk) > MAX_TRANSACTION_EVENTS);
            if full {
                carried = Some(next);
                break;
            }
            gathered.take(next);
        }
        let Gathering {
            chunks,
            flushes,
            checkpoint,
            ..
        } = gathered;
        if let Some(last) = chunks.last() {
            position = Some((last.generation, last.journal_end));
        }
        // The whole step is contained: a panic anywhere in it stops the store from writing
        // with a storage error, not by a thread that is silently gone.
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            apply_and_forget(db, pending, last_commit, applied, &chunks)?;
            match position {
                Some(position) if checkpoint => {
                    make_durable(db, position)?;
                    applied.publish_durable(position);
                    Ok(())
                }
                _ => Ok(()),
            }
        }))
        .unwrap_or_else(|panic| Err(StorageError::msg(panic_message(&panic))));
        if let Err(detail) = &outcome
            && applied.failed.get().is_none()
        {
            tracing::error!(%detail, "applying journaled commits to the tables failed; the store stops writing");
            let _ = applied.failed.set(StorageError::msg(format!(
                "the store stopped writing after a failed apply of journaled commits ({detail}); open it again to recover"
            )));
        }
        applied.signal_progress();
        for reply in flushes {
            reply.send(outcome.clone());
        }
    }
}

/// The requests one transaction answers.
#[derive(Default)]
struct Gathering {
    chunks: Vec<Chunk>,
    flushes: Vec<FlushReply>,
    checkpoint: bool,
    events: usize,
}

impl Gathering {
    fn take(&mut self, request: ToApplier) {
        match request {
            ToApplier::Chunk(chunk) => {
                self.events += chunk_events(&chunk);
                self.chunks.push(chunk);
            }
            ToApplier::Flush(reply) => self.flushes.push(reply),
            ToApplier::Checkpoint => self.checkpoint = true,
        }
    }
}

/// The most events one of the applier's transactions takes (a chunk is never split).
const MAX_TRANSACTION_EVENTS: usize = 65_536;

fn chunk_events(chunk: &Chunk) -> usize {
    chunk.appends.iter().map(|queued| queued.record_count).sum()
}

/// How much lower than the process's the applier's scheduling priority is (in nice steps).
const APPLIER_NICENESS: i32 = 10;

/// Lowers this thread's scheduling priority by [`APPLIER_NICENESS`]: its B-tree commits run for
/// tens of milliseconds and can wait, while the writer and the runtime's workers answer
/// callers. At the same priority, an apply on one of two cores held a sustained load's p99 at
/// about 13 ms; below it, about 5 ms; and at 20,000 executions/s an applier at the same
/// priority let the load fall behind for good (`docs/PERFORMANCE.md`, "Sustained load"). An
/// applier starved for too long holds more than the writer lets it hold, and the writer then
/// waits for its next transaction, leaving it the CPU: it cannot fall behind without bound.
/// Linux sets a nice value per thread; elsewhere, and where the call is refused, the applier
/// keeps the process's.
pub(super) fn yield_to_the_commit_path() {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getpriority_process, setpriority_process};
        let this_thread = Some(rustix::thread::gettid());
        let lowered = getpriority_process(this_thread)
            .and_then(|nice| setpriority_process(this_thread, (nice + APPLIER_NICENESS).min(19)));
        if let Err(error) = lowered {
            tracing::debug!(%error, "the applier keeps the process's scheduling priority");
        }
    }
}

/// Applies `chunks` (unless an apply failed before), takes the tables' new snapshot, then
/// forgets their events from memory, once per execution (a log whose appends are forgotten
/// one by one would be moved as many times), and publishes the last commit the tables hold.
fn apply_and_forget(
    db: &Database,
    pending: &Pending,
    last_commit: &LastCommit,
    applied: &Applied,
    chunks: &[Chunk],
) -> Result<(), StorageError> {
    if let Some(failed) = applied.failed.get() {
        return Err(failed.clone());
    }
    let Some(last) = chunks.last() else {
        return Ok(());
    };
    apply(db, pending, chunks)?;
    // Before anything is forgotten: a reader that no longer finds an event held finds it in
    // the snapshot it takes next (`snapshot.rs`).
    last_commit.replace(db);
    let mut heads: HashMap<&str, u64> = HashMap::new();
    for queued in chunks.iter().flat_map(|chunk| &chunk.appends) {
        let head = queued.expected_seq + queued.record_count as u64;
        let entry = heads.entry(queued.execution.as_str()).or_insert(head);
        *entry = (*entry).max(head);
    }
    for (execution, head) in heads {
        pending.forget(execution, head);
    }
    applied
        .last_commit
        .store(last.last_commit, Ordering::Release);
    Ok(())
}

/// Makes every commit so far durable: one redb commit with an fsync that writes again the
/// journal position the tables hold (redb then keeps the non-durable commits before it too).
/// Apart from the writer's (a deletion, the close), the only durable commit.
fn make_durable(db: &Database, (generation, end): (u64, u64)) -> Result<(), StorageError> {
    let _span = tracing::debug_span!("checkpoint", generation, end).entered();
    let txn = db.begin_write().map_err(StorageError::new)?;
    super::checkpoint::record_journal_position(&txn, generation, end)?;
    txn.commit().map_err(StorageError::new)
}

/// Applies `chunks` to the tables in one redb commit without an fsync, recording the journal
/// offset they then cover.
fn apply(db: &Database, pending: &Pending, chunks: &[Chunk]) -> Result<(), StorageError> {
    let Some(last) = chunks.last() else {
        return Ok(());
    };
    let _span = tracing::debug_span!(
        "apply",
        appends = chunks
            .iter()
            .map(|chunk| chunk.appends.len())
            .sum::<usize>()
    )
    .entered();
    let mut txn = db.begin_write().map_err(StorageError::new)?;
    txn.set_durability(redb::Durability::None)
        .map_err(StorageError::new)?;
    {
        let mut tables = WriteTables::open(&txn)?;
        let mut position = tables.feed_next()?;
        tables.apply_accepted(
            chunks.iter().flat_map(|chunk| &chunk.appends),
            pending,
            &mut position,
        )?;
        if position != last.feed_next {
            return Err(StorageError::msg(format!(
                "the tables' feed stands at {position} after the apply, the journal's at {}",
                last.feed_next
            )));
        }
        tables.set_position(position, last.generation, last.journal_end)?;
    }
    txn.commit().map_err(StorageError::new)
}
