//! The disk store's wake-up index (`store/wake.rs`, LD-033): two tables written in the same
//! redb transaction as the events that change them, and built from the logs when a file
//! written before them is opened for writing.
//!
//! - `wakeups`: `(at ms, execution id, tag)`, read by time window;
//! - `wake_rows`: `(execution id, tag) -> at ms`, an execution's rows, read only by an append
//!   that may change them (a deadline, a gate resumed, a start or an end: never a step's).

use std::ops::Bound;

use redb::{Database, ReadableTable, TableDefinition};

use super::{EVENTS, META, TAILS, checked};
use crate::id::ExecutionId;
use crate::store::tail::TailChange;
use crate::store::wake::{self, WakeRows, Wakeup};
use crate::store::{ReadError, StorageError};

/// `(at ms, execution id, tag)` for every row of the index.
pub(super) const WAKEUPS: TableDefinition<(u64, &str, &str), ()> = TableDefinition::new("wakeups");
/// `(execution id, tag) -> at ms`: each execution's rows.
pub(super) const WAKE_ROWS: TableDefinition<(&str, &str), u64> = TableDefinition::new("wake_rows");

/// The meta key set once the index holds the rows of every log in the file.
const BUILT: &str = "wake_index";

/// The two tables, opened in a write transaction when an append first needs them: most
/// appends (steps; a start and an end with no deadline) change no row, and opening a table
/// costs a lookup in the commit.
pub(super) struct WakeTables<'txn> {
    txn: &'txn redb::WriteTransaction,
    open: Option<OpenWakeTables<'txn>>,
}

struct OpenWakeTables<'txn> {
    wakeups: redb::Table<'txn, (u64, &'static str, &'static str), ()>,
    rows: redb::Table<'txn, (&'static str, &'static str), u64>,
}

impl<'txn> WakeTables<'txn> {
    pub(super) fn open(txn: &'txn redb::WriteTransaction) -> Result<Self, StorageError> {
        Ok(Self { txn, open: None })
    }

    fn tables(&mut self) -> Result<&mut OpenWakeTables<'txn>, StorageError> {
        if self.open.is_none() {
            self.open = Some(OpenWakeTables {
                wakeups: self.txn.open_table(WAKEUPS).map_err(StorageError::new)?,
                rows: self.txn.open_table(WAKE_ROWS).map_err(StorageError::new)?,
            });
        }
        match self.open.as_mut() {
            Some(tables) => Ok(tables),
            None => Err(StorageError::msg("the wake-up tables did not open")),
        }
    }

    /// `id`'s rows as they stand.
    fn rows_of(&mut self, id: &str) -> Result<WakeRows, StorageError> {
        let mut rows = WakeRows::new();
        for entry in self
            .tables()?
            .rows
            .range::<(&str, &str)>((Bound::Included((id, "")), Bound::Unbounded))
            .map_err(StorageError::new)?
        {
            let (key, at) = entry.map_err(StorageError::new)?;
            let (owner, tag) = key.value();
            if owner != id {
                break;
            }
            rows.insert(tag.to_owned(), at.value());
        }
        Ok(rows)
    }

    /// Applies an append's `changes` to `execution`'s rows.
    pub(super) fn apply(
        &mut self,
        execution: &ExecutionId,
        changes: &[TailChange],
    ) -> Result<(), StorageError> {
        if !wake::touches_wakeups(changes) {
            return Ok(());
        }
        let id = execution.as_str();
        // An append that starts the execution finds no rows: it has none before its start (an
        // id deleted by retention had ended, and an end clears them).
        let current = if wake::starts_execution(changes) {
            WakeRows::new()
        } else {
            self.rows_of(id)?
        };
        let diff = wake::wake_diff(execution, &current, changes);
        if diff.is_empty() {
            return Ok(());
        }
        self.write(id, diff)
    }

    fn write(&mut self, id: &str, diff: wake::WakeDiff) -> Result<(), StorageError> {
        let tables = self.tables()?;
        for (tag, at) in &diff.removed {
            tables
                .wakeups
                .remove((*at, id, tag.as_str()))
                .map_err(StorageError::new)?;
            tables
                .rows
                .remove((id, tag.as_str()))
                .map_err(StorageError::new)?;
        }
        for (tag, at) in &diff.added {
            tables
                .wakeups
                .insert((*at, id, tag.as_str()), ())
                .map_err(StorageError::new)?;
            tables
                .rows
                .insert((id, tag.as_str()), *at)
                .map_err(StorageError::new)?;
        }
        Ok(())
    }
}

/// Builds the index from the logs of a file written before it (layout 3 without it): the
/// executions that have not ended are read once, the others not at all. Once built, only makes
/// sure both tables exist: a file built with no row had none (a table is made when first
/// written), and a reader that finds no table reads every open log instead (issue 41, hole 8:
/// 6 to 18 s for `recover()` over 100,000 parked executions with no deadline).
pub(super) fn backfill(db: &Database) -> Result<usize, StorageError> {
    let txn = db.begin_write().map_err(StorageError::new)?;
    let built = {
        let meta = txn.open_table(META).map_err(StorageError::new)?;
        meta.get(BUILT).map_err(StorageError::new)?.is_some()
    };
    if built {
        if tables_exist(&txn)? {
            txn.abort().map_err(StorageError::new)?;
        } else {
            create_tables(&txn)?;
            txn.commit().map_err(StorageError::new)?;
        }
        return Ok(0);
    }
    let mut indexed = 0;
    {
        let tails = txn.open_table(TAILS).map_err(StorageError::new)?;
        let events = txn.open_table(EVENTS).map_err(StorageError::new)?;
        let mut tables = WakeTables::open(&txn)?;
        for entry in tails.iter().map_err(StorageError::new)? {
            let (id, tail) = entry.map_err(StorageError::new)?;
            let id = id.value();
            let open =
                checked::tail(id, tail.value()).map_or(true, |tail| !tail.status().is_terminal());
            if !open {
                continue;
            }
            let execution = ExecutionId::from_stored(id).map_err(StorageError::new)?;
            // A log that does not decode gets no rows: recovery reports it when it folds.
            let log: Vec<_> = super::runs::decoded_log(&events, &execution)?
                .unwrap_or_default()
                .into_iter()
                .map(|envelope| envelope.event)
                .collect();
            let fresh = wake::rows_of_log(&execution, &log);
            let current = tables.rows_of(id)?;
            let diff = wake::WakeDiff {
                removed: current.into_iter().collect(),
                added: fresh.into_iter().collect(),
            };
            tables.write(id, diff)?;
            indexed += 1;
        }
    }
    create_tables(&txn)?;
    checked::commit_with_flag(txn, BUILT)?;
    if indexed > 0 {
        tracing::info!(
            executions = indexed,
            "wake-up index built from the logs of the executions that have not ended"
        );
    }
    Ok(indexed)
}

/// Whether both tables of the index are in the file.
fn tables_exist(txn: &redb::WriteTransaction) -> Result<bool, StorageError> {
    use redb::TableHandle;
    let names: Vec<String> = txn
        .list_tables()
        .map_err(StorageError::new)?
        .map(|table| table.name().to_owned())
        .collect();
    Ok([WAKEUPS.name(), WAKE_ROWS.name()]
        .iter()
        .all(|name| names.iter().any(|found| found == name)))
}

/// Makes both tables of the index (opening a table in a write transaction makes it).
fn create_tables(txn: &redb::WriteTransaction) -> Result<(), StorageError> {
    txn.open_table(WAKEUPS).map_err(StorageError::new)?;
    txn.open_table(WAKE_ROWS).map_err(StorageError::new)?;
    Ok(())
}

/// Reads a page of the index; `None` when the file has no index (opened read-only from before
/// it): the caller then reads the logs.
pub(super) fn list(
    txn: &redb::ReadTransaction,
    before_ms: u64,
    after: Option<&Wakeup>,
    limit: usize,
) -> Result<Option<Vec<Wakeup>>, ReadError> {
    let table = match txn.open_table(WAKEUPS) {
        Ok(table) => table,
        // Built with no row by a build before the tables were always made: nothing is due.
        Err(redb::TableError::TableDoesNotExist(_)) => {
            let meta = txn.open_table(META).map_err(ReadError::storage)?;
            let built = meta.get(BUILT).map_err(ReadError::storage)?.is_some();
            return Ok(built.then(Vec::new));
        }
        Err(error) => return Err(ReadError::storage(error)),
    };
    if after.is_some_and(|row| !wake::listed_before(row.at_ms, before_ms)) {
        return Ok(Some(Vec::new()));
    }
    let after_tag = after.map(|row| row.reason.tag());
    let lower = match (after, &after_tag) {
        (Some(row), Some(tag)) => {
            Bound::Excluded((row.at_ms, row.execution.as_str(), tag.as_str()))
        }
        _ => Bound::Unbounded,
    };
    let upper = match before_ms {
        u64::MAX => Bound::Unbounded,
        before_ms => Bound::Excluded((before_ms, "", "")),
    };
    let mut found = Vec::new();
    for entry in table
        .range::<(u64, &str, &str)>((lower, upper))
        .map_err(ReadError::storage)?
        .take(limit.max(1))
    {
        let (key, _) = entry.map_err(ReadError::storage)?;
        let (at_ms, id, tag) = key.value();
        let execution = ExecutionId::from_stored(id).map_err(ReadError::storage)?;
        if let Some(row) = Wakeup::from_stored(at_ms, execution, tag) {
            found.push(row);
        }
    }
    Ok(Some(found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{started, suspended};
    use crate::event::{DecisionRecorded, Event};
    use crate::store::{DiskStore, EventStore};

    fn deadline(gate: &str, at: u64) -> Event {
        Event::DecisionRecorded(DecisionRecorded {
            step_id: gate.into(),
            kind: crate::runtime::markers::DEADLINE_KIND.into(),
            value: crate::payload::Payload::from_value(&serde_json::json!({ "deadlineMs": at })),
        })
    }

    /// A file of layout 3 written before the index (no tables, no meta key) gets the rows of
    /// its open executions when opened for writing.
    #[tokio::test]
    async fn a_file_written_before_the_index_gets_it_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let parked = ExecutionId::new("parked").unwrap();
        let ended = ExecutionId::new("ended").unwrap();
        {
            let store = DiskStore::open(&path).unwrap();
            store
                .append(
                    &parked,
                    0,
                    &[started("f"), deadline("g", 42), suspended("g")],
                )
                .await
                .unwrap();
            store
                .append(
                    &ended,
                    0,
                    &[
                        started("f"),
                        deadline("g", 7),
                        suspended("g"),
                        crate::conformance::completed(),
                    ],
                )
                .await
                .unwrap();
            drop(store);
        }
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.delete_table(WAKEUPS).unwrap();
            txn.delete_table(WAKE_ROWS).unwrap();
            txn.open_table(META).unwrap().remove(BUILT).unwrap();
            txn.commit().unwrap();
        }
        let store = DiskStore::open(&path).unwrap();
        let rows = store.list_wakeups(u64::MAX, None, 10).await.unwrap();
        assert_eq!(
            rows,
            vec![Wakeup {
                at_ms: 42,
                execution: parked.clone(),
                reason: crate::store::WakeReason::Deadline {
                    gate_id: "g".into()
                },
            }]
        );
        // A page after the last row, or before its time, is empty.
        assert!(
            store
                .list_wakeups(u64::MAX, rows.first(), 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(store.list_wakeups(42, None, 10).await.unwrap().is_empty());
    }
}
