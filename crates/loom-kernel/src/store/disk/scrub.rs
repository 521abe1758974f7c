//! The scrub: after an open for writing, a thread of low priority reads every row of the
//! store's tables once and checks what can be checked, so that damage at rest is found and
//! reported without the open reading the whole file first (`docs/STORAGE.md`, "The scrub";
//! LD-039).
//!
//! What it checks: every `events` row splits into its records under its run's checksum and
//! each record decodes under its own; every `heads`, `tails` and `meta` value matches its
//! check (LD-037); every other table is read whole, so a page redb cannot read there is
//! found. A row is checked on its own, so rows that change while the scrub runs (it reads
//! each table in one read transaction of its own) are never taken for damage. It blocks
//! nothing: the writer and readers go on, and a read of a damaged row fails by the same checks
//! whether the scrub has reached it or not. Damage is logged as an error and kept in
//! [`ScrubStatus`] ([`DiskStore::scrub_status`](super::DiskStore::scrub_status)).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::{
    BY_STATUS, ENDED, EVENTS, FEED, HEADS, META, PURGED, STORE_FORMAT, TAILS, checked, heads,
    panic_message,
};
use crate::envelope::decode_record;
use crate::id::ExecutionId;

/// The damages kept in [`ScrubStatus::damage`]; past it they are counted only.
const KEPT: usize = 100;
/// Rows read between two looks at the stop flag.
const STOP_EVERY: u64 = 1024;

/// How far the scrub has gone and what it found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScrubStatus {
    /// Whether it has read every table (or stopped: the store closed first).
    pub finished: bool,
    /// The rows read so far.
    pub rows: u64,
    /// How many damaged rows or unreadable tables it found.
    pub damaged: u64,
    /// The first of them, in words.
    pub damage: Vec<String>,
}

/// The scrub's shared state: its status, and the flag that stops it when the store closes.
#[derive(Debug, Default)]
pub(super) struct Scrub {
    status: Mutex<ScrubStatus>,
    stop: AtomicBool,
}

impl Scrub {
    pub(super) fn status(&self) -> ScrubStatus {
        self.status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn update(&self, change: impl FnOnce(&mut ScrubStatus)) {
        change(
            &mut self
                .status
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
    }

    fn damaged(&self, what: String) {
        tracing::error!(damage = %what, "the scrub found damage in the store file");
        self.update(|status| {
            status.damaged += 1;
            if status.damage.len() < KEPT {
                status.damage.push(what);
            }
        });
    }

    fn read(&self, rows: u64) {
        self.update(|status| status.rows += rows);
    }
}

/// How one table is read and checked.
type ReadTable = dyn Fn(&Database, &Scrub) -> Result<(), String>;

/// Reads every table of `db` once (see the module's docs); `path` names the file in messages.
pub(super) fn run(db: &Database, scrub: &Arc<Scrub>, path: &std::path::Path) {
    super::apply::yield_to_the_commit_path();
    let started = Instant::now();
    let tables: [(&str, &ReadTable); 9] = [
        ("events", &events),
        ("heads", &heads_table),
        ("tails", &tails),
        ("meta", &meta),
        ("by_status", &|db, scrub| read_all(db, scrub, BY_STATUS)),
        ("ended", &|db, scrub| read_all(db, scrub, ENDED)),
        ("feed", &|db, scrub| read_all(db, scrub, FEED)),
        ("purged", &|db, scrub| read_all(db, scrub, PURGED)),
        ("wakeups", &|db, scrub| {
            read_all(db, scrub, super::wake::WAKEUPS)
        }),
    ];
    for (name, table) in tables {
        if scrub.stopped() {
            break;
        }
        match catch_unwind(AssertUnwindSafe(|| table(db, scrub))) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => scrub.damaged(format!("table {name} could not be read: {error}")),
            Err(panic) => scrub.damaged(format!(
                "table {name} could not be read: {}",
                panic_message(&panic)
            )),
        }
    }
    scrub.update(|status| status.finished = true);
    let status = scrub.status();
    tracing::info!(
        path = %path.display(),
        rows = status.rows,
        damaged = status.damaged,
        seconds = started.elapsed().as_secs_f64(),
        format = STORE_FORMAT,
        "the scrub read every row of the store"
    );
}

/// Reads `table` whole, checking `each` row; counts the rows read.
fn scan<K: redb::Key + 'static, V: redb::Value + 'static>(
    db: &Database,
    scrub: &Scrub,
    table: TableDefinition<K, V>,
    mut each: impl FnMut(&redb::AccessGuard<'_, K>, &redb::AccessGuard<'_, V>) -> Option<String>,
) -> Result<(), String> {
    let txn = db.begin_read().map_err(|error| error.to_string())?;
    let opened = match txn.open_table(table) {
        Ok(opened) => opened,
        // A file from before the table was made: nothing to read.
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(error) => return Err(error.to_string()),
    };
    let mut rows = 0;
    for row in opened.iter().map_err(|error| error.to_string())? {
        let (key, value) = row.map_err(|error| error.to_string())?;
        if let Some(damage) = each(&key, &value) {
            scrub.damaged(damage);
        }
        rows += 1;
        if rows % STOP_EVERY == 0 {
            scrub.read(STOP_EVERY);
            if scrub.stopped() {
                return Ok(());
            }
        }
    }
    scrub.read(rows % STOP_EVERY);
    Ok(())
}

fn read_all<K: redb::Key + 'static, V: redb::Value + 'static>(
    db: &Database,
    scrub: &Scrub,
    table: TableDefinition<K, V>,
) -> Result<(), String> {
    scan(db, scrub, table, |_, _| None)
}

fn events(db: &Database, scrub: &Scrub) -> Result<(), String> {
    scan(db, scrub, EVENTS, |key, value| {
        let (id, first) = key.value();
        let Ok(execution) = ExecutionId::from_stored(id) else {
            return Some(format!("an events row under the invalid id {id:?}"));
        };
        let records = match super::runs::split(id, first, value.value()) {
            Ok(records) => records,
            Err(damaged) => return Some(damaged.to_string()),
        };
        for (seq, record) in (first..).zip(records) {
            if let Err(error) = decode_record(&execution, seq, record) {
                return Some(format!("event {seq} of execution {id}: {error}"));
            }
        }
        None
    })
}

fn heads_table(db: &Database, scrub: &Scrub) -> Result<(), String> {
    scan(db, scrub, HEADS, |key, value| {
        heads::decode(key.value(), value.value())
            .err()
            .map(|error| error.to_string())
    })
}

fn tails(db: &Database, scrub: &Scrub) -> Result<(), String> {
    scan(db, scrub, TAILS, |key, value| {
        checked::tail(key.value(), value.value())
            .err()
            .map(|error| error.to_string())
    })
}

fn meta(db: &Database, scrub: &Scrub) -> Result<(), String> {
    scan(db, scrub, META, |key, value| {
        let key = key.value();
        // The layout version is read before any check can be: it carries none.
        (key != "format" && checked::decode(key, value.value()).is_none())
            .then(|| format!("the {key} in `meta` does not match its check"))
    })
}
