//! The disk store's checkpoints (LD-027, LD-038): when one is due, how the applier is asked to
//! make the tables durable, how the writer then starts the journal's next generation with the
//! records the durable tables lack, and the blocking checkpoint of the close and the open.

use std::sync::atomic::Ordering;

use redb::Database;

use super::apply::ToApplier;
use super::writer::Writer;
use super::{JOURNAL_END, JOURNAL_GENERATION, META, checked};
use crate::store::StorageError;
use crate::store::journal::{self, Journal};

/// A checkpoint is taken once the journal holds this many bytes (or after
/// `DiskStoreConfig::checkpoint_commits` commits).
const CHECKPOINT_BYTES: u64 = 16 << 20;

impl Writer<'_> {
    /// Asks the applier for a checkpoint once the journal has grown enough: its next commit
    /// durable, covering every chunk handed so far ([`ToApplier::Checkpoint`]). The writer
    /// goes on committing meanwhile; [`Writer::rotate_if_durable`] finishes the checkpoint.
    pub(super) fn ask_checkpoint(&mut self) {
        if self.checkpoint_asked
            || (self.journal.end() < CHECKPOINT_BYTES
                && self.since_checkpoint < self.checkpoint_commits)
        {
            return;
        }
        self.hand_over();
        // Never a durable commit naming a generation the journal has left: a chunk of this
        // one must be the last the applier has (otherwise the next commit asks again).
        if self.handed_generation == Some(self.journal.generation()) {
            self.ask_applier(ToApplier::Checkpoint);
            self.checkpoint_asked = true;
        }
    }

    /// Once the applier has made the tables durable up to an offset of this generation,
    /// starts the journal's next generation with the records past that offset carried over
    /// (a few commits' worth: what the writer committed while the applier's fsync ran). An
    /// open then applies the new file whole. The writer's only pause for a checkpoint is
    /// this copy, instead of a wait for the applier and a durable commit of the B-tree.
    pub(super) fn rotate_if_durable(&mut self) {
        if !self.checkpoint_asked {
            return;
        }
        let Some((generation, end)) = self.applied.take_durable() else {
            return;
        };
        self.checkpoint_asked = false;
        if generation != self.journal.generation() || self.poisoned.is_some() {
            return;
        }
        let keep_from = end.max(self.durable_end);
        let _span = tracing::debug_span!(
            "rotate",
            generation,
            carried_bytes = self.journal.end() - keep_from
        )
        .entered();
        match self.journal.rotate_keeping(keep_from) {
            Ok(carried) => {
                // The queue's commits lie past `keep_from`: their offsets move with them.
                self.queued_end = self
                    .queued_end
                    .saturating_sub(carried.shift)
                    .max(journal::HEADER_LEN);
                self.durable_end = journal::HEADER_LEN;
                self.since_checkpoint = carried.records;
                self.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            Err(detail) => {
                tracing::error!(%detail, "checkpoint failed; the store stops writing");
                self.poisoned = Some(StorageError::msg(format!(
                    "the store stopped writing after a failed checkpoint ({detail}); open it again to recover"
                )));
            }
        }
    }
}

/// Makes every commit so far durable in the tables, recording the journal offset they cover,
/// then starts the next journal generation: the old journal is no longer needed.
pub(super) fn checkpoint(db: &Database, journal: &mut Journal) -> Result<(), StorageError> {
    let txn = db.begin_write().map_err(StorageError::new)?;
    record_journal_position(&txn, journal.generation(), journal.end())?;
    txn.commit().map_err(StorageError::new)?;
    let path = journal.path().to_path_buf();
    *journal = Journal::create(&path, journal.generation() + 1).map_err(StorageError::new)?;
    Ok(())
}

/// Writes where the tables stand in the journal (its generation, and the offset just past the
/// last record they hold) in `txn`'s `meta`.
pub(super) fn record_journal_position(
    txn: &redb::WriteTransaction,
    generation: u64,
    end: u64,
) -> Result<(), StorageError> {
    let mut meta = txn.open_table(META).map_err(StorageError::new)?;
    checked::write_meta(&mut meta, JOURNAL_GENERATION, generation)?;
    checked::write_meta(&mut meta, JOURNAL_END, end)
}
