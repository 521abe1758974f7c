//! Events durable in the journal that the tables do not hold yet (LD-035).
//!
//! The writer answers an append once its journal record is durable and its events are here;
//! the applier thread (`apply.rs`) writes them to the redb tables later, from here (the writer
//! keeps no other copy of them), many commits in one transaction, then forgets them here. A
//! reader of one execution's log or head looks here first and in the tables second: whatever
//! an apply moved in between is in the tables by then, so the two reads together miss nothing
//! that was acknowledged before the first began.
//!
//! Nothing here is ever iterated to produce output in an order that matters: the map is looked
//! up by execution id only, so its hashing does not reach a fold, an id or a replayed path.
//! It is split in shards by id (each execution's records in one): the writer adding a commit's
//! appends and the readers of new executions' heads seldom wait for one another's lock.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::hash::{IdMap, Sharded};
use crate::store::EncodedRecords;

/// One execution's events past the tables' head, in seq order.
#[derive(Debug, Default)]
struct PendingLog {
    /// The seq of the first record held.
    first_seq: u64,
    records: EncodedRecords,
}

impl PendingLog {
    fn head(&self) -> u64 {
        self.first_seq + self.records.len() as u64
    }

    /// The index in `records` of the record of seq `seq`, if it is held or is the head.
    fn index_of(&self, seq: u64) -> Option<usize> {
        seq.checked_sub(self.first_seq)
            .and_then(|index| usize::try_from(index).ok())
            .filter(|index| *index <= self.records.len())
    }
}

/// The records of one execution copied out of [`Pending`]: seqs `first_seq..` in order, one
/// after another in one buffer (two allocations, however many records).
#[derive(Debug, Default)]
pub(super) struct PendingRecords {
    pub(super) first_seq: u64,
    records: EncodedRecords,
}

impl PendingRecords {
    /// How many records were copied.
    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    /// The records' bytes, one after another.
    pub(super) fn into_bytes(self) -> Vec<u8> {
        self.records.into_bytes()
    }

    /// Each record with its seq, in order.
    pub(super) fn records(&self) -> impl Iterator<Item = (u64, &[u8])> {
        (self.records.iter().enumerate())
            .map(|(index, record)| (self.first_seq + index as u64, record))
    }
}

/// Acknowledged events not yet applied to the tables, shared by the writer (which adds and
/// forgets them) and the readers.
#[derive(Debug, Default)]
pub(super) struct Pending {
    logs: Sharded<IdMap<String, PendingLog>>,
    /// How many events are held: a reader that sees 0 after its append was acknowledged knows
    /// the tables hold everything (the writer adds before it answers).
    events: AtomicUsize,
}

impl Pending {
    /// The shard holding `execution`'s records.
    fn logs(&self, execution: &str) -> std::sync::MutexGuard<'_, IdMap<String, PendingLog>> {
        self.logs.lock(execution)
    }

    /// Whether every acknowledged event is in the tables.
    pub(super) fn is_empty(&self) -> bool {
        self.events.load(Ordering::Acquire) == 0
    }

    /// Adds an accepted append's records (seqs `expected_seq..`), copied: by the writer after
    /// their journal record is durable and before it answers, and by an open for the journal's
    /// records it replays into the tables (into a `Pending` of its own). The appender's own
    /// buffer stays the appender's, freed on its thread: the applier frees what is held here,
    /// and freeing another thread's memory takes that thread's arena lock in glibc's allocator
    /// (the appender's buffer held here in place of a copy cost one-step executions 4% more
    /// CPU).
    pub(super) fn push<R: AsRef<[u8]>>(
        &self,
        execution: &str,
        expected_seq: u64,
        records: impl ExactSizeIterator<Item = R> + Clone,
    ) {
        let count = records.len();
        let bytes: usize = records.clone().map(|record| record.as_ref().len()).sum();
        let mut logs = self.logs(execution);
        let log = match logs.get_mut(execution) {
            Some(log) => log,
            None => logs.entry(execution.to_owned()).or_insert(PendingLog {
                first_seq: expected_seq,
                ..PendingLog::default()
            }),
        };
        debug_assert_eq!(log.head(), expected_seq, "pending records run gapless");
        log.records.reserve(count, bytes);
        for record in records {
            log.records.push(record.as_ref());
        }
        self.events.fetch_add(count, Ordering::Release);
    }

    /// Forgets `execution`'s records below `head`: the tables hold them now (and readers see
    /// them there).
    pub(super) fn forget(&self, execution: &str, head: u64) {
        let mut logs = self.logs(execution);
        let Some(log) = logs.get_mut(execution) else {
            return;
        };
        let dropped = if log.head() <= head {
            let dropped = log.records.len();
            logs.remove(execution);
            dropped
        } else {
            let dropped = usize::try_from(head.saturating_sub(log.first_seq)).unwrap_or(0);
            if dropped > 0 {
                log.records.forget_first(dropped);
                log.first_seq = head;
            }
            dropped
        };
        self.events.fetch_sub(dropped, Ordering::Release);
    }

    /// Writes the run (`runs.rs`) of `execution`'s `count` held records from seq `from` into
    /// `out`, under the lock, without copying them out first: how the applier writes the
    /// writer's appends, whose records are kept here only. `false` when they are not all held.
    pub(super) fn encode_run(
        &self,
        execution: &str,
        from: u64,
        count: usize,
        out: &mut Vec<u8>,
    ) -> bool {
        let logs = self.logs(execution);
        let Some(log) = logs.get(execution) else {
            return false;
        };
        let Some(skip) = log.index_of(from) else {
            return false;
        };
        if skip
            .checked_add(count)
            .is_none_or(|last| last > log.records.len())
        {
            return false;
        }
        super::runs::encode(
            execution,
            from,
            log.records.iter_range(skip..skip + count),
            out,
        );
        true
    }

    /// How many events are held.
    pub(super) fn len(&self) -> usize {
        self.events.load(Ordering::Acquire)
    }

    /// The head of `execution`'s log if it has events not yet in the tables.
    pub(super) fn head(&self, execution: &str) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        let logs = self.logs(execution);
        logs.get(execution).map(PendingLog::head)
    }

    /// Copies `execution`'s held records from seq `from` on (at most `limit`), if it has any
    /// held; `first_seq` is where the held records begin (it may be past `from`: the records
    /// before it are in the tables).
    pub(super) fn copy(&self, execution: &str, from: u64, limit: usize) -> Option<PendingRecords> {
        if self.is_empty() {
            return None;
        }
        let logs = self.logs(execution);
        let log = logs.get(execution)?;
        let start = from.max(log.first_seq);
        let skip = usize::try_from(start - log.first_seq).unwrap_or(usize::MAX);
        Some(PendingRecords {
            first_seq: start,
            records: log.records.copy_range(skip..skip.saturating_add(limit)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(held: &PendingRecords) -> Vec<(u64, &str)> {
        held.records()
            .map(|(seq, record)| (seq, std::str::from_utf8(record).expect("utf-8")))
            .collect()
    }

    #[test]
    fn a_run_of_held_records_is_encoded_as_the_records_themselves_would_be() {
        let pending = Pending::default();
        let records = [b"x".to_vec(), b"yy".to_vec(), b"zzz".to_vec()];
        pending.push("a", 3, records.iter());
        let expected = |from: usize, count: usize| {
            let mut run = Vec::new();
            let first = 3 + from as u64;
            let slice = &records[from..from + count];
            super::super::runs::encode("a", first, slice.iter().map(Vec::as_slice), &mut run);
            run
        };
        let mut run = vec![0xAA];
        assert!(pending.encode_run("a", 3, 3, &mut run));
        assert_eq!(run, expected(0, 3));
        assert!(pending.encode_run("a", 4, 2, &mut run));
        assert_eq!(run, expected(1, 2), "from a seq past the first held");
        assert!(pending.encode_run("a", 5, 1, &mut run));
        assert_eq!(run, expected(2, 1));
        for (from, count) in [(2, 1), (3, 4), (6, 1), (u64::MAX, 1), (4, usize::MAX)] {
            assert!(
                !pending.encode_run("a", from, count, &mut run),
                "{from}+{count} is not all held"
            );
        }
        assert!(
            !pending.encode_run("b", 0, 1, &mut run),
            "nothing held for b"
        );
        pending.forget("a", 4);
        assert!(
            !pending.encode_run("a", 3, 1, &mut run),
            "forgotten once applied"
        );
        assert!(pending.encode_run("a", 4, 2, &mut run));
        assert_eq!(run, expected(1, 2));
    }

    #[test]
    fn an_encoded_append_is_held_as_its_records_one_by_one_would_be() {
        use crate::conformance::{completed, started, step_completed};
        use crate::store::EncodedRecords;
        let first = [started("flow"), step_completed("a#1")];
        let second = [step_completed("a#2"), completed()];
        let one_by_one = Pending::default();
        let encoded = Pending::default();
        for (seq, events) in [(0, &first), (2, &second)] {
            let records: Vec<Vec<u8>> = events
                .iter()
                .map(|event| crate::kit::record::encode(event, Some(7)))
                .collect();
            one_by_one.push("a", seq, records.iter());
            let together = EncodedRecords::encode(events.as_slice(), Some(7));
            encoded.push("a", seq, together.iter());
        }
        assert_eq!(encoded.len(), 4);
        assert_eq!(encoded.head("a"), Some(4));
        let all = |pending: &Pending| pending.copy("a", 0, usize::MAX).expect("held");
        assert_eq!(all(&encoded).into_bytes(), all(&one_by_one).into_bytes());
        let (mut from_encoded, mut from_one_by_one) = (Vec::new(), Vec::new());
        assert!(encoded.encode_run("a", 1, 3, &mut from_encoded));
        assert!(one_by_one.encode_run("a", 1, 3, &mut from_one_by_one));
        assert_eq!(from_encoded, from_one_by_one);
    }

    #[test]
    fn held_records_are_copied_from_a_seq_and_forgotten_once_applied() {
        let pending = Pending::default();
        assert!(pending.is_empty());
        assert_eq!(pending.head("a"), None);
        pending.push("a", 3, [b"x".to_vec(), b"yy".to_vec()].iter());
        pending.push("a", 5, [b"zzz".to_vec()].iter());
        assert!(!pending.is_empty());
        assert_eq!(pending.head("a"), Some(6));
        assert_eq!(pending.head("b"), None);
        let all = pending.copy("a", 0, usize::MAX).expect("held");
        assert_eq!(all.first_seq, 3);
        assert_eq!(records(&all), vec![(3, "x"), (4, "yy"), (5, "zzz")]);
        let some = pending.copy("a", 4, 1).expect("held");
        assert_eq!(records(&some), vec![(4, "yy")]);
        let rest = pending.copy("a", 5, 10).expect("held");
        assert_eq!(records(&rest), vec![(5, "zzz")]);
        assert_eq!(pending.copy("a", 4, 0).expect("held").len(), 0);
        assert_eq!(pending.copy("a", 9, 10).expect("held").len(), 0);
        assert_eq!(pending.copy("a", u64::MAX, 10).expect("held").len(), 0);
        pending.forget("a", 4);
        assert_eq!(pending.len(), 2);
        let left = pending.copy("a", 0, usize::MAX).expect("held");
        assert_eq!(records(&left), vec![(4, "yy"), (5, "zzz")]);
        pending.push("a", 6, [b"w".to_vec()].iter());
        assert_eq!(pending.head("a"), Some(7));
        pending.forget("b", 10);
        pending.forget("a", 7);
        assert!(pending.is_empty());
        assert!(pending.copy("a", 0, 10).is_none());
    }
}
