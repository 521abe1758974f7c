//! The tables a commit writes, open together in one write transaction, and how appends the
//! writer accepted are applied to them: one way to the tables for the applier, the open's
//! replay of the journal and retention's deletions.

use std::collections::BTreeMap;

use super::checked::tail_of;
use super::heads::head_of;
use super::pending::Pending;
use super::writer::Queued;
use super::{
    BY_STATUS, ENDED, EVENTS, FEED, FEED_NEXT, HEADS, JOURNAL_END, JOURNAL_GENERATION, META, TAILS,
    checked, heads, listing, wake,
};
use crate::store::StorageError;
use crate::store::tail::ExecutionTail;

/// The tables an append writes, open in one write transaction.
pub(super) struct WriteTables<'txn> {
    pub(super) events: redb::Table<'txn, (&'static str, u64), &'static [u8]>,
    pub(super) heads: redb::Table<'txn, &'static str, u64>,
    pub(super) tails: redb::Table<'txn, &'static str, &'static [u8]>,
    pub(super) by_status: redb::Table<'txn, (u8, &'static str), ()>,
    pub(super) ended: redb::Table<'txn, (u64, &'static str), ()>,
    pub(super) feed: redb::Table<'txn, u64, (&'static str, u64)>,
    pub(super) meta: redb::Table<'txn, &'static str, u64>,
    pub(super) listing: listing::ListingTables<'txn>,
    pub(super) wake: wake::WakeTables<'txn>,
    /// The run being written, reused from one append to the next.
    pub(super) run: Vec<u8>,
}

impl<'txn> WriteTables<'txn> {
    pub(super) fn open(txn: &'txn redb::WriteTransaction) -> Result<Self, StorageError> {
        Ok(Self {
            meta: txn.open_table(META).map_err(StorageError::new)?,
            events: txn.open_table(EVENTS).map_err(StorageError::new)?,
            heads: txn.open_table(HEADS).map_err(StorageError::new)?,
            tails: txn.open_table(TAILS).map_err(StorageError::new)?,
            by_status: txn.open_table(BY_STATUS).map_err(StorageError::new)?,
            ended: txn.open_table(ENDED).map_err(StorageError::new)?,
            feed: txn.open_table(FEED).map_err(StorageError::new)?,
            listing: listing::ListingTables::open(txn)?,
            wake: wake::WakeTables::open(txn)?,
            run: Vec::new(),
        })
    }

    pub(super) fn feed_next(&self) -> Result<u64, StorageError> {
        Ok(checked::read_meta(&self.meta, FEED_NEXT)?.unwrap_or(0))
    }

    /// Records the next feed position and the journal offset the tables now cover.
    pub(super) fn set_position(
        &mut self,
        feed_next: u64,
        generation: u64,
        journal_end: u64,
    ) -> Result<(), StorageError> {
        checked::write_meta(&mut self.meta, FEED_NEXT, feed_next)?;
        checked::write_meta(&mut self.meta, JOURNAL_GENERATION, generation)?;
        checked::write_meta(&mut self.meta, JOURNAL_END, journal_end)
    }

    /// Applies appends the writer accepted (or the open replays from the journal), in commit
    /// order for each execution, with each execution's head and tail read and written once and
    /// its events inserted together, executions in id order: fewer B-tree operations, each near
    /// the one before. Feed rows follow commit order from `position`. An append that does not
    /// follow the tables (its seq, or its tail's checks) is an error: the writer decided it
    /// against the same heads and tails.
    pub(super) fn apply_accepted<'q>(
        &mut self,
        appends: impl Iterator<Item = &'q Queued> + Clone,
        pending: &Pending,
        position: &mut u64,
    ) -> Result<(), StorageError> {
        let mut by_execution: BTreeMap<&str, Vec<&Queued>> = BTreeMap::new();
        for queued in appends.clone() {
            let id = queued.execution.as_str();
            // One row for the append's events, which take as many positions.
            if queued.record_count > 0 {
                self.feed
                    .insert(*position, (id, queued.expected_seq))
                    .map_err(StorageError::new)?;
                *position += queued.record_count as u64;
            }
            by_execution.entry(id).or_default().push(queued);
        }
        for (id, group) in by_execution {
            let mut head = head_of(&self.heads, id).map_err(StorageError::new)?;
            let old_tail = self.tail(id)?;
            let mut tail = old_tail.clone();
            for queued in group {
                if head != queued.expected_seq {
                    return Err(StorageError::msg(format!(
                        "a journaled append to execution {id} at seq {} does not follow the tables (head {head})",
                        queued.expected_seq
                    )));
                }
                let before = tail.clone();
                tail.apply_changes(&queued.changes, queued.recorded_at_ms)
                    .map_err(|refused| {
                        StorageError::msg(format!(
                            "a journaled append does not follow the tables: {}",
                            refused.into_append_error(&queued.execution, queued.expected_seq)
                        ))
                    })?;
                if queued.record_count > 0 {
                    let count = queued.record_count;
                    if !pending.encode_run(id, queued.expected_seq, count, &mut self.run) {
                        return Err(StorageError::msg(format!(
                            "the {count} records of a journaled append to execution {id} at seq {} are not held for the tables",
                            queued.expected_seq
                        )));
                    }
                    self.events
                        .insert((id, queued.expected_seq), self.run.as_slice())
                        .map_err(StorageError::new)?;
                }
                head += queued.record_count as u64;
                self.listing.refile(
                    id,
                    &before,
                    &tail,
                    &queued.changes,
                    queued.recorded_at_ms,
                    &self.events,
                    &mut self.meta,
                )?;
                self.wake.apply(&queued.execution, &queued.changes)?;
            }
            self.heads
                .insert(id, heads::encode(id, head)?)
                .map_err(StorageError::new)?;
            self.tails
                .insert(id, checked::tail_value(id, &tail).as_slice())
                .map_err(StorageError::new)?;
            // The status index and the end times are functions of the tail: from the first
            // to the last is what each step in between would have come to.
            self.refile(id, &old_tail, &tail)?;
        }
        Ok(())
    }

    pub(super) fn tail(&self, id: &str) -> Result<ExecutionTail, StorageError> {
        tail_of(&self.tails, id)
    }

    /// Moves `id` in the status index from what `old` filed it under to what `new` does.
    pub(super) fn refile(
        &mut self,
        id: &str,
        old: &ExecutionTail,
        new: &ExecutionTail,
    ) -> Result<(), StorageError> {
        let (old_codes, new_codes): (Vec<u8>, Vec<u8>) =
            (old.index_codes().collect(), new.index_codes().collect());
        if old_codes != new_codes {
            for code in &old_codes {
                self.by_status
                    .remove((*code, id))
                    .map_err(StorageError::new)?;
            }
            for code in &new_codes {
                self.by_status
                    .insert((*code, id), ())
                    .map_err(StorageError::new)?;
            }
        }
        if old.ended_at_ms() != new.ended_at_ms() {
            if let Some(at) = old.ended_at_ms() {
                self.ended.remove((at, id)).map_err(StorageError::new)?;
            }
            if let Some(at) = new.ended_at_ms() {
                self.ended.insert((at, id), ()).map_err(StorageError::new)?;
            }
        }
        Ok(())
    }
}
