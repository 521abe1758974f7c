//! The tables as the store's last commit of `heads` or `events` left them, kept open for the
//! lookups every new execution makes (its id claimed, its first read, the head `wait`
//! checks): a redb read transaction and two opened tables cost more than the lookups
//! themselves, and those three came to a tenth of a short execution's work.
//!
//! Fresh enough by construction, without a check on the read path:
//! - the applier, the one thread that adds to `heads` and `events` while the store is open,
//!   replaces the snapshot after its commit and *before* it tells [`super::pending::Pending`]
//!   to forget what it applied; a reader looks in `Pending` first and takes the snapshot
//!   after, so an acknowledged event is in one or the other (if `Pending` no longer has it,
//!   the snapshot taken after that is the one that does);
//! - a deletion replaces it before it is answered, so no lookup made after `delete_ended`
//!   returns sees a deleted log (one made while it runs may, as it may see the log itself);
//! - replacements happen under one lock that also begins the read, so of two commits' the
//!   later in time is kept, never an older one over a newer.
//!
//! Other commits (a checkpoint writes `meta` only) leave it. A store opened read-only keeps
//! none, nor does one whose snapshot could not be taken: lookups then read the tables afresh,
//! as they did before. What a snapshot shows that the tables have since lost is harmless
//! where it is used: "the log has events past here" sends a first read to the full read,
//! which begins its own transaction.

use std::sync::{Arc, Mutex, PoisonError};

use redb::{Database, ReadOnlyTable, ReadTransaction, ReadableDatabase};

use super::{EVENTS, HEADS};

/// `heads` and `events` as one read transaction sees them.
pub(super) struct Tables {
    pub(super) heads: ReadOnlyTable<&'static str, u64>,
    pub(super) events: ReadOnlyTable<(&'static str, u64), &'static [u8]>,
}

impl Tables {
    /// The two tables of `txn` (they keep its snapshot open after `txn` itself is dropped).
    pub(super) fn of(txn: &ReadTransaction) -> Result<Self, redb::TableError> {
        Ok(Self {
            heads: txn.open_table(HEADS)?,
            events: txn.open_table(EVENTS)?,
        })
    }
}

/// The current snapshot, if any.
#[derive(Default)]
pub(super) struct LastCommit(Mutex<Option<Arc<Tables>>>);

impl LastCommit {
    /// Takes the tables as they are now in place of the snapshot held. A snapshot that cannot
    /// be taken leaves none: lookups read afresh until the next replacement.
    pub(super) fn replace(&self, db: &Database) {
        let mut current = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // The old one goes first: redb keeps the pages of every snapshot still open.
        *current = None;
        *current = db
            .begin_read()
            .ok()
            .and_then(|txn| Tables::of(&txn).ok())
            .map(Arc::new);
    }

    /// The snapshot to look up in, if one is held.
    pub(super) fn current(&self) -> Option<Arc<Tables>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Drops the snapshot, before the file's handle goes: no read transaction outlives the
    /// store.
    pub(super) fn clear(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}
