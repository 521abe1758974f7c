//! The writer thread: group commit. It gathers the appends queued at a moment into one batch,
//! decides each against the heads and tails as they stand after every commit before it, makes
//! the accepted ones durable as one journal record, and answers; the tables follow later,
//! through the applier (`apply.rs`).

use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use redb::{Database, ReadableDatabase};
use tokio::sync::oneshot;

use super::apply::{Applied, Chunk, FlushReply, ToApplier};
use super::checked::tail_of;
use super::checkpoint::checkpoint;
use super::heads::head_of;
use super::pending::Pending;
use super::retention::delete_ended;
use super::snapshot::LastCommit;
#[cfg(doc)]
use super::{DiskStore, DiskStoreConfig};
use super::{HEADS, TAILS, WriterStats, panic_message};
use crate::id::ExecutionId;
use crate::store::claim::{ClaimTable, FirstAppend};
use crate::store::journal::{self, Journal};
use crate::store::tail::{ExecutionTail, TailChange};
use crate::store::watch::{FeedWatch, HeadWatch};
use crate::store::{AppendError, EncodedAppend, RetentionError, StorageError};

pub(super) enum WriteRequest {
    Append(Append),
    Delete(DeleteRequest),
    /// A claim was given back: first appends waiting for it may go ahead.
    ClaimReleased,
    /// A reader of an index needs the tables to hold every acknowledged event.
    Apply(oneshot::Sender<Result<(), StorageError>>),
}

/// An append, with the token of the claim it was made under (a claimed first append).
pub(super) struct Append {
    pub(super) encoded: EncodedAppend,
    pub(super) claim: Option<u64>,
}

impl Append {
    /// Answers the caller, letting go of the writer's share of the records first: the caller,
    /// who encoded them and keeps its own share until answered, frees them on its thread
    /// (freeing another thread's memory takes that thread's arena lock in glibc's allocator).
    fn answer(self, outcome: Result<u64, AppendError>) {
        let EncodedAppend { records, reply, .. } = self.encoded;
        drop(records);
        let _ = reply.send(outcome);
    }
}

pub(super) struct DeleteRequest {
    pub(super) ended_before_ms: u64,
    pub(super) limit: usize,
    pub(super) reply: oneshot::Sender<Result<Vec<ExecutionId>, RetentionError>>,
}

/// The writer thread: the journal, and the store's durable redb commits (checkpoints, deletions);
/// the applier thread (`apply.rs`) makes the non-durable ones.
pub(super) struct Writer<'a> {
    pub(super) db: &'a Database,
    pub(super) requests: &'a mpsc::Receiver<WriteRequest>,
    pub(super) watch: &'a HeadWatch,
    pub(super) feed_head: &'a FeedWatch,
    pub(super) claims: &'a ClaimTable,
    /// Acknowledged events the tables do not hold yet, as readers see them.
    pub(super) pending: &'a Pending,
    /// Replaced after each deletion (`snapshot.rs`).
    pub(super) last_commit: &'a LastCommit,
    /// The applier thread (`apply.rs`): what is handed to it, and what it reports.
    pub(super) to_applier: Option<mpsc::Sender<ToApplier>>,
    pub(super) applier: Option<JoinHandle<()>>,
    pub(super) applied: &'a Applied,
    pub(super) max_batch_events: usize,
    pub(super) journal: Journal,
    /// Journaled commits the durable tables may lack: since the last checkpoint, counting
    /// those a rotation carried over.
    pub(super) since_checkpoint: u64,
    /// Commits between checkpoints ([`DiskStoreConfig::checkpoint_commits`]).
    pub(super) checkpoint_commits: u64,
    /// A checkpoint was asked of the applier and the journal has not started its next
    /// generation yet.
    pub(super) checkpoint_asked: bool,
    /// The generation of the journal when a chunk was last handed to the applier.
    pub(super) handed_generation: Option<u64>,
    /// An offset of the journal's current generation the tables are known to be durable up to
    /// (a deletion's commit): a rotation carries over nothing before it.
    pub(super) durable_end: u64,
    /// Checkpoints taken since the store opened, as [`DiskStore::checkpoints`] reports them.
    pub(super) checkpoints: &'a AtomicU64,
    /// Commits, appends and latencies, as [`DiskStore::stats`] reports them.
    pub(super) stats: &'a WriterStats,
    /// Journaled commits since the store opened: the applier reports the last one it applied.
    pub(super) commits: u64,
    /// Journaled appends not handed to the applier yet, in commit order.
    pub(super) queue: Vec<Queued>,
    /// Events and record bytes in `queue`.
    pub(super) queued_events: usize,
    pub(super) queued_bytes: usize,
    /// The journal offset just past the last queued commit's record.
    pub(super) queued_end: u64,
    /// The head and tail of each execution appended to by a commit the tables may not hold
    /// yet, as they stand after it, and the number of that commit: what the next append is
    /// decided against (the tables lag behind the journal).
    pub(super) decided: HashMap<String, (u64, ExecutionTail, u64)>,
    /// The last commit the applier had applied when `decided` was last pruned.
    pub(super) pruned_at: u64,
    /// The next feed position, counting the queued appends.
    pub(super) feed_next: u64,
    /// The journal record being built, kept to reuse its allocation.
    pub(super) payload: Vec<u8>,
    /// Set when the journal and the tables may disagree (a failed journal write, or an apply
    /// that failed after its journal records were durable): every later write fails with it,
    /// and the next open brings the tables up to the journal.
    pub(super) poisoned: Option<StorageError>,
}

/// An append durable in the journal, waiting to be applied to the tables.
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) execution: ExecutionId,
    pub(super) expected_seq: u64,
    /// How many records it appends. The records themselves are in [`Pending`] from
    /// `expected_seq` on until the tables hold them: readers need that copy anyway, so the
    /// writer keeps no second one for the applier (in a burst of new executions, that second
    /// copy was the memory of a tenth of the page faults).
    pub(super) record_count: usize,
    pub(super) changes: Vec<TailChange>,
    pub(super) recorded_at_ms: Option<u64>,
}

/// The queue is handed to the applier once it holds this many events...
const APPLY_EVENTS: usize = 65_536;
/// ...or this many bytes of records, or this many appends (so that the checkpoint, every
/// `CHECKPOINT_COMMITS`, finds most of them applied already)...
const APPLY_BYTES: usize = 16 << 20;
const APPLY_APPENDS: usize = 2048;
/// ...or once no request came for this long: an idle store's tables catch up, and a reader of
/// an index then finds nothing to wait for.
const APPLY_WHEN_IDLE: std::time::Duration = std::time::Duration::from_millis(20);
/// The writer waits for the applier once this many events are held for it: what the tables
/// lack stays bounded in memory when the applier falls behind.
const MAX_HELD_EVENTS: usize = 262_144;

impl Writer<'_> {
    pub(super) fn run(&mut self) {
        // Requests met while gathering a batch that are not appends (a deletion, an apply)
        // wait until that batch is committed, in the order they came.
        let mut held_back: VecDeque<WriteRequest> = VecDeque::new();
        // First appends of ids another caller claimed, until that claim is over.
        let mut waiting: Vec<Append> = Vec::new();
        loop {
            self.rotate_if_durable();
            let mut batch = Vec::new();
            let mut events = 0;
            for append in std::mem::take(&mut waiting) {
                self.admit(append, &mut batch, &mut waiting, &mut events);
            }
            if batch.is_empty() {
                let request = match held_back.pop_front() {
                    Some(request) => request,
                    None => match self.next_request() {
                        Some(request) => request,
                        None => {
                            self.close();
                            return;
                        }
                    },
                };
                match request {
                    WriteRequest::Append(append) => {
                        self.admit(append, &mut batch, &mut waiting, &mut events);
                    }
                    WriteRequest::Delete(delete) => {
                        self.delete(delete);
                        continue;
                    }
                    WriteRequest::Apply(reply) => {
                        self.hand_over();
                        self.ask_applier(ToApplier::Flush(FlushReply::Task(reply)));
                        continue;
                    }
                    WriteRequest::ClaimReleased => continue,
                }
                if batch.is_empty() {
                    continue;
                }
            }
            while held_back.is_empty() && events < self.max_batch_events {
                match self.requests.try_recv() {
                    Ok(WriteRequest::Append(append)) => {
                        self.admit(append, &mut batch, &mut waiting, &mut events);
                    }
                    Ok(WriteRequest::ClaimReleased) => {}
                    Ok(other) => held_back.push_back(other),
                    Err(_) => break,
                }
            }
            self.commit(batch, events);
        }
    }

    /// The next request; while appends wait to be applied, a moment without requests applies
    /// them first. `None` once the store is dropped.
    fn next_request(&mut self) -> Option<WriteRequest> {
        if self.queue.is_empty() || self.poisoned.is_some() {
            return self.requests.recv().ok();
        }
        match self.requests.recv_timeout(APPLY_WHEN_IDLE) {
            Ok(request) => Some(request),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.hand_over();
                self.requests.recv().ok()
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Puts `append` in the batch, unless it is the first append of an id another caller
    /// holds (a claim, or an unclaimed first append earlier in this batch): it then waits.
    fn admit(
        &self,
        append: Append,
        batch: &mut Vec<Append>,
        waiting: &mut Vec<Append>,
        events: &mut usize,
    ) {
        let first = append.encoded.expected_seq == 0;
        if first && self.claims.admit(&append.encoded.execution, append.claim) == FirstAppend::Wait
        {
            waiting.push(append);
            return;
        }
        *events += append.encoded.records.len();
        batch.push(append);
    }

    /// The store is closed: what is queued goes to the tables and a last checkpoint is taken,
    /// so that the journal holds nothing the tables lack (a read-only open then needs no
    /// replay). Then the applier ends.
    fn close(&mut self) {
        if self.poisoned.is_none() && self.since_checkpoint > 0 {
            let closed = self
                .flush()
                .and_then(|()| checkpoint(self.db, &mut self.journal));
            if let Err(detail) = closed {
                tracing::warn!(%detail, "the closing checkpoint failed; the next open replays the journal");
            }
        }
        self.to_applier.take();
        if let Some(applier) = self.applier.take() {
            let _ = applier.join();
        }
    }

    /// Hands the queue to the applier, which applies it to the tables in its own time.
    pub(super) fn hand_over(&mut self) {
        if self.queue.is_empty() {
            return;
        }
        let chunk = Chunk {
            appends: std::mem::take(&mut self.queue),
            generation: self.journal.generation(),
            journal_end: self.queued_end,
            feed_next: self.feed_next,
            last_commit: self.commits,
        };
        self.queued_events = 0;
        self.queued_bytes = 0;
        self.handed_generation = Some(self.journal.generation());
        self.ask_applier(ToApplier::Chunk(chunk));
    }

    pub(super) fn ask_applier(&mut self, request: ToApplier) {
        let sent = self
            .to_applier
            .as_ref()
            .is_some_and(|applier| applier.send(request).is_ok());
        if !sent && self.poisoned.is_none() {
            self.poisoned = Some(StorageError::msg(
                "the store stopped writing: its applier thread is gone; open it again to recover",
            ));
        }
    }

    /// Hands the queue over and waits until the tables hold every commit; a failure stops the
    /// writer (the journal holds what the tables lack, and the next open applies it).
    fn flush(&mut self) -> Result<(), StorageError> {
        if let Some(poisoned) = &self.poisoned {
            return Err(poisoned.clone());
        }
        self.hand_over();
        let (reply, answer) = mpsc::sync_channel(1);
        self.ask_applier(ToApplier::Flush(FlushReply::Thread(reply)));
        let outcome = answer
            .recv()
            .unwrap_or_else(|_| Err(StorageError::msg("the store's applier thread is gone")));
        if let Err(detail) = &outcome {
            self.poisoned.get_or_insert_with(|| detail.clone());
        }
        outcome
    }

    /// More events are held than [`MAX_HELD_EVENTS`]: waits, transaction by transaction of the
    /// applier's, until they are back under it. Not a flush: the commits behind wait for the
    /// applier's next transaction, not for all it has to do (which took 1.4 s once at 20,000
    /// executions/s, `docs/PERFORMANCE.md`, "Sustained load").
    fn wait_for_applier(&mut self) {
        self.hand_over();
        while self.pending.len() >= MAX_HELD_EVENTS && self.poisoned.is_none() {
            if let Some(failed) = self.applied.failure() {
                self.poisoned = Some(failed.clone());
                break;
            }
            let applied = self.applied.last_commit();
            self.applied
                .wait_past(applied, std::time::Duration::from_millis(50));
        }
    }

    /// Forgets the decided heads and tails of executions whose last commit the tables hold.
    fn prune_decided(&mut self) {
        let applied = self.applied.last_commit();
        if applied != self.pruned_at {
            self.decided.retain(|_, (_, _, commit)| *commit > applied);
            self.pruned_at = applied;
        }
    }

    fn delete(&mut self, delete: DeleteRequest) {
        let outcome = self.flush().and_then(|()| {
            catch_unwind(AssertUnwindSafe(|| {
                delete_ended(self.db, &self.journal, delete.ended_before_ms, delete.limit)
            }))
            .unwrap_or_else(|panic| Err(StorageError::msg(panic_message(&panic))))
        });
        // Before the answer: no lookup made after it sees a deleted log.
        self.last_commit.replace(self.db);
        if outcome.is_ok() {
            // That commit was durable: the journal up to here is covered.
            self.since_checkpoint = 0;
            self.durable_end = self.journal.end();
        }
        let _ = delete.reply.send(outcome.map_err(|detail| {
            tracing::error!(%detail, "deleting ended executions failed");
            RetentionError::Storage { source: detail }
        }));
    }

    fn commit(&mut self, mut batch: Vec<Append>, events: usize) {
        let _span = tracing::debug_span!("group_commit", requests = batch.len(), events).entered();
        let started = std::time::Instant::now();
        let commits_before = self.commits;
        if self.poisoned.is_none()
            && let Some(failed) = self.applied.failure()
        {
            self.poisoned = Some(failed.clone());
        }
        self.prune_decided();
        let outcome = match &self.poisoned {
            Some(poisoned) => Err(poisoned.clone()),
            None => catch_unwind(AssertUnwindSafe(|| self.commit_batch(&mut batch)))
                .unwrap_or_else(|panic| {
                    // Where it panicked is unknown: past the journal write, perhaps.
                    Err(CommitError::Journal(StorageError::msg(panic_message(
                        &panic,
                    ))))
                })
                .map_err(|error| match error {
                    CommitError::Before(detail) => detail,
                    CommitError::Journal(detail) => {
                        let poisoned = StorageError::msg(format!(
                            "the store stopped writing after a failed commit ({detail}); open it again to recover"
                        ));
                        self.poisoned = Some(poisoned);
                        detail
                    }
                }),
        };
        let committed = outcome.is_ok();
        // The first appends of the batch are over, committed or not: their ids are free again
        // (a committed log fences later first appends by its head).
        for append in &batch {
            if append.encoded.expected_seq == 0 {
                self.claims.settle(&append.encoded.execution);
            }
        }
        match outcome {
            Ok(heads) => {
                // The batch's one line at debug (README, "Logs"): the span alone prints nothing.
                tracing::debug!("group committed");
                self.feed_head.publish(self.feed_next);
                for (append, head) in batch.into_iter().zip(heads) {
                    if let Ok(head) = head {
                        self.watch.publish(&append.encoded.execution, head);
                    }
                    append.answer(head);
                }
            }
            Err(detail) => {
                tracing::error!(%detail, "group commit failed");
                for append in batch {
                    let execution = append.encoded.execution.clone();
                    append.answer(Err(AppendError::Storage {
                        execution,
                        source: detail.clone(),
                    }));
                }
            }
        }
        if self.commits != commits_before {
            // A batch of conflicts alone wrote no record: it is no commit.
            self.stats.commit_latency.record(started.elapsed());
        }
        // After the replies: the batch is durable whatever a checkpoint or a wait for the
        // applier takes.
        if committed {
            self.since_checkpoint += 1;
            self.ask_checkpoint();
            if self.pending.len() >= MAX_HELD_EVENTS {
                self.wait_for_applier();
            } else if self.queued_events >= APPLY_EVENTS
                || self.queued_bytes >= APPLY_BYTES
                || self.queue.len() >= APPLY_APPENDS
            {
                self.hand_over();
            }
        }
    }

    /// Decides every request of the batch against the heads and tails as they stand after
    /// the queue (a conflict or a refused batch takes no part), writes the accepted ones to the
    /// journal as one record made durable there, then queues them for the tables and hands
    /// their records to readers. Returns each request's outcome. The batch's changes are moved
    /// into the queue; its records are copied to `pending`.
    fn commit_batch(
        &mut self,
        batch: &mut [Append],
    ) -> Result<Vec<Result<u64, AppendError>>, CommitError> {
        let mut stored: Option<StoredState> = None;
        // Heads and tails this batch moved, ahead of `decided` until the record is durable.
        let mut staged: HashMap<&str, (u64, ExecutionTail)> = HashMap::new();
        let mut outcomes = Vec::with_capacity(batch.len());
        self.payload.clear();
        for append in batch.iter() {
            let request = &append.encoded;
            let id = request.execution.as_str();
            let decided = match staged.get(id) {
                Some((head, tail)) => Some((*head, tail.clone())),
                None => self
                    .decided
                    .get(id)
                    .map(|(head, tail, _)| (*head, tail.clone())),
            };
            let (head, mut tail) = match decided {
                Some(decided) => decided,
                None => {
                    let stored = match &mut stored {
                        Some(stored) => stored,
                        None => stored.insert(StoredState::open(self.db)?),
                    };
                    stored.head_and_tail(id)?
                }
            };
            if head != request.expected_seq {
                outcomes.push(Err(AppendError::Conflict {
                    execution: request.execution.clone(),
                    expected_seq: request.expected_seq,
                    actual_seq: head,
                }));
                continue;
            }
            if let Err(refused) = tail.apply_changes(&request.changes, request.recorded_at_ms) {
                outcomes.push(Err(
                    refused.into_append_error(&request.execution, request.expected_seq)
                ));
                continue;
            }
            let new_head = head + request.records.len() as u64;
            staged.insert(id, (new_head, tail));
            journal::push_append(
                &mut self.payload,
                id,
                request.expected_seq,
                request.recorded_at_ms,
                request.records.iter(),
            );
            outcomes.push(Ok(new_head));
        }
        if self.payload.is_empty() {
            // Nothing accepted: nothing to write.
            return Ok(outcomes);
        }
        self.queued_end = self
            .journal
            .append(&self.payload)
            .map_err(|error| CommitError::Journal(StorageError::new(error)))?;
        self.commits += 1;
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        self.stats.fsync_latency.record(self.journal.last_sync());
        let accepted = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        self.stats
            .appends
            .fetch_add(accepted as u64, Ordering::Relaxed);
        for (id, (head, tail)) in staged {
            self.decided
                .insert(id.to_owned(), (head, tail, self.commits));
        }
        for (append, outcome) in batch.iter_mut().zip(&outcomes) {
            if outcome.is_err() {
                continue;
            }
            let request = &mut append.encoded;
            let records = &request.records;
            let record_count = records.len();
            self.feed_next += record_count as u64;
            self.queued_events += record_count;
            self.queued_bytes += records.byte_len();
            self.pending.push(
                request.execution.as_str(),
                request.expected_seq,
                records.iter(),
            );
            self.queue.push(Queued {
                execution: request.execution.clone(),
                expected_seq: request.expected_seq,
                record_count,
                changes: std::mem::take(&mut request.changes),
                recorded_at_ms: request.recorded_at_ms,
            });
        }
        Ok(outcomes)
    }
}

/// The heads and tails the tables hold, read by the writer for executions the queue does not
/// touch.
struct StoredState {
    heads: redb::ReadOnlyTable<&'static str, u64>,
    tails: redb::ReadOnlyTable<&'static str, &'static [u8]>,
}

impl StoredState {
    fn open(db: &Database) -> Result<Self, CommitError> {
        let txn = db.begin_read().map_err(CommitError::before)?;
        Ok(Self {
            heads: txn.open_table(HEADS).map_err(CommitError::before)?,
            tails: txn.open_table(TAILS).map_err(CommitError::before)?,
        })
    }

    fn head_and_tail(&self, id: &str) -> Result<(u64, ExecutionTail), CommitError> {
        let head = head_of(&self.heads, id).map_err(CommitError::before)?;
        let tail = tail_of(&self.tails, id).map_err(CommitError::Before)?;
        Ok((head, tail))
    }
}

/// Why a group commit failed, and whether its batch may be in the journal.
#[derive(Debug)]
enum CommitError {
    /// Before the journal was written: nothing of the batch is stored.
    Before(StorageError),
    /// Writing the journal failed: its state on disk is unknown.
    Journal(StorageError),
}

impl CommitError {
    fn before(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Before(StorageError::new(error))
    }
}
