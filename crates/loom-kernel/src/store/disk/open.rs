//! Opening the store file: its layout read or brought up to date, its journal checked and the
//! commits the tables lack applied (`docs/STORAGE.md`, "The journal", "Older layouts").

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable};

use super::super::journal::{self, Journal};
use super::super::tail::ExecutionTail;
use super::pending::Pending;
use super::tables::WriteTables;
use super::writer::Queued;
use super::{
    BY_STATUS, Db, DiskStoreConfig, ENDED, EVENTS, FEED, FEED_NEXT, HEADS, JOURNAL_END,
    JOURNAL_GENERATION, META, Mode, OpenError, PURGED, PURGES_RECORDED, STORE_FORMAT, TAILS,
    checked, heads, panic_message,
};
use crate::envelope::decode_record;
use crate::id::ExecutionId;
use crate::store::StorageError;

/// Refuses a 0-byte file (redb would take it for a new database), and a missing one when
/// `must_exist`. A 0-byte file beside a journal of no commit is what a crash during the
/// store's very first creation leaves (the journal is written first): opened for writing, it
/// is a new store.
pub(super) fn check_not_empty(
    path: &Path,
    must_exist: bool,
    writing: bool,
) -> Result<(), OpenError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() && meta.len() == 0 => {
            let interrupted_creation = writing
                && journal::scan(&journal::journal_path(path), journal::HEADER_LEN)
                    .ok()
                    .flatten()
                    .is_some_and(|journal| journal.records.is_empty() && journal.generation == 1);
            if interrupted_creation {
                tracing::info!(path = %path.display(), "an empty store file left by an interrupted creation opens as new");
                Ok(())
            } else {
                Err(OpenError::EmptyFile {
                    path: path.to_path_buf(),
                })
            }
        }
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if must_exist {
                Err(OpenError::Missing {
                    path: path.to_path_buf(),
                })
            } else {
                Ok(())
            }
        }
        Err(source) => Err(OpenError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Opens the database and returns it with the next feed position and, opened for writing,
/// its journal (every journaled commit the tables lacked applied, and a new generation
/// begun).
pub(super) fn open_database(
    path: &Path,
    config: &DiskStoreConfig,
    mode: Mode,
) -> Result<(Db, u64, Option<Journal>), OpenError> {
    let journal_path = journal::journal_path(path);
    if mode == Mode::CreateOrOpen && !path.exists() {
        // The journal first: a store file that a crash leaves empty during its creation is
        // then known for what it is (beside an empty journal) and opened as new.
        Journal::create(&journal_path, 1).map_err(|error| journal_open_error(path, error))?;
    }
    let has_pages = std::fs::metadata(path).is_ok_and(|meta| meta.len() > 0);
    if config.verify_on_open && mode != Mode::ReadOnly && has_pages {
        // In proportion to the file: said before and after, so that a long open is not silent.
        let bytes = std::fs::metadata(path).map_or(0, |meta| meta.len());
        tracing::info!(path = %path.display(), mib = bytes >> 20, "checking every page of the store before opening it (DiskStoreConfig::verify_on_open)");
        let started = std::time::Instant::now();
        contained(path, || verify_pages(path))?;
        tracing::info!(path = %path.display(), seconds = started.elapsed().as_secs_f64(), "every page checked");
    }
    let mut builder = Database::builder();
    builder.set_cache_size(config.cache_size_bytes);
    let db = match mode {
        Mode::CreateOrOpen => contained(path, || builder.create(path).map(Db::Write))?,
        Mode::OpenExisting => contained(path, || builder.open(path).map(Db::Write))?,
        Mode::ReadOnly => {
            let opened = catch_unwind(AssertUnwindSafe(|| builder.open_read_only(path)));
            match opened {
                Ok(Err(redb::DatabaseError::RepairAborted)) => {
                    return super::read_only::open_snapshot(
                        path,
                        &journal_path,
                        config,
                        Some("its tables need repair"),
                    );
                }
                // Held by a writer, or by another snapshot (its locks look like a writer's to
                // a plain read-only open): the snapshot's open tells which.
                Ok(Err(redb::DatabaseError::DatabaseAlreadyOpen)) => {
                    return super::read_only::open_snapshot(path, &journal_path, config, None);
                }
                Ok(result) => contained(path, || result.map(Db::Read))?,
                Err(panic) => {
                    return Err(OpenError::Corrupt {
                        path: path.to_path_buf(),
                        detail: panic_message(&panic),
                    });
                }
            }
        }
    };
    match prepare(&db, path, &journal_path, mode, config.accept_cut_journal) {
        Ok(Prepared::Ready(feed_next, journal)) => Ok((db, feed_next, journal)),
        Ok(Prepared::Pending(commits)) => {
            drop_contained(db);
            super::read_only::open_snapshot(
                path,
                &journal_path,
                config,
                Some(&format!(
                    "its journal holds {commits} commits not yet in its tables"
                )),
            )
        }
        Err(error) => {
            drop_contained(db);
            Err(error)
        }
    }
}

/// Closes a database whose open went wrong. A damaged file can leave redb's own locks poisoned
/// by a panic contained during the open; closing the database then panics again, and the open's
/// answer is the error it already has.
pub(super) fn drop_contained<T>(db: T) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(db)));
}

/// `open` (an open of `path` in redb), its panic or error as the store's. redb documents that a
/// plain open of an altered file may panic; a damaged file must be an error, never a crash of
/// the embedding process.
pub(super) fn contained<T>(
    path: &Path,
    open: impl FnOnce() -> Result<T, redb::DatabaseError>,
) -> Result<T, OpenError> {
    let corrupt = |detail: String| OpenError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let error = match catch_unwind(AssertUnwindSafe(open)) {
        Ok(Ok(opened)) => return Ok(opened),
        Ok(Err(error)) => error,
        Err(panic) => return Err(corrupt(panic_message(&panic))),
    };
    Err(match error {
        redb::DatabaseError::DatabaseAlreadyOpen => OpenError::AlreadyOpen {
            path: path.to_path_buf(),
        },
        redb::DatabaseError::Storage(redb::StorageError::Io(source))
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            OpenError::Missing {
                path: path.to_path_buf(),
            }
        }
        redb::DatabaseError::Storage(redb::StorageError::Io(source))
            if source.kind() == std::io::ErrorKind::InvalidData =>
        {
            corrupt(source.to_string())
        }
        redb::DatabaseError::Storage(redb::StorageError::Io(source)) => OpenError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => corrupt(other.to_string()),
    })
}

/// redb's check of every page of `path` (`verify_on_open`), in an open of its own without a page
/// cache, closed again. The check reads each page once: through a cache it would spend most of
/// its time filling and evicting it (at 1,000,000 executions 0.55 s of the open instead of 0.3
/// s; docs/PERFORMANCE.md). The store then opens the checked file with its cache and without
/// the check, so it loads the allocator state the check has just rebuilt and committed. Between
/// the two opens the file is not locked: another process that opens it there makes the store's
/// own open fail as `AlreadyOpen`.
fn verify_pages(path: &Path) -> Result<(), redb::DatabaseError> {
    let mut builder = Database::builder();
    builder.set_cache_size(0).set_check_integrity_on_open(true);
    builder.open(path)?.close()
}

/// What [`prepare`] found.
enum Prepared {
    /// The next feed position and, opened for writing, the journal.
    Ready(u64, Option<Journal>),
    /// Opened read-only: the journal holds this many commits the tables lack, which a
    /// snapshot applies in memory.
    Pending(usize),
}

/// Brings the opened file's tables to where this build reads them (layout, journal, indexes,
/// checks).
fn prepare(
    db: &Db,
    path: &Path,
    journal_path: &Path,
    mode: Mode,
    accept_cut: bool,
) -> Result<Prepared, OpenError> {
    let corrupt = |detail: String| OpenError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let found = catch_unwind(AssertUnwindSafe(|| match db {
        Db::Write(db) => init_tables(db, journal_path),
        Db::Read(db) => read_layout(db),
        Db::Snapshot(db) => read_layout(db),
    }))
    .map_err(|panic| corrupt(panic_message(&panic)))?
    .map_err(|error| corrupt(error.to_string()))?;
    match found {
        Layout::Current {
            feed_next,
            journal: position,
        } => match db {
            Db::Write(database) => {
                let recovered = catch_unwind(AssertUnwindSafe(|| {
                    recover_journal(
                        database,
                        path,
                        journal_path,
                        position,
                        feed_next,
                        accept_cut,
                    )
                }))
                .map_err(|panic| corrupt(panic_message(&panic)))??;
                let (journal, feed_next) = recovered;
                // A file written before the listing tables gets them now (LD-032), once.
                catch_unwind(AssertUnwindSafe(|| super::listing::ensure_built(database)))
                    .map_err(|panic| corrupt(panic_message(&panic)))?
                    .map_err(|error| corrupt(error.to_string()))?;
                // A file written before the wake-up index gets it now (LD-033), once.
                catch_unwind(AssertUnwindSafe(|| super::wake::backfill(database)))
                    .map_err(|panic| corrupt(panic_message(&panic)))?
                    .map_err(|error| corrupt(error.to_string()))?;
                // A file written before the in-doubt index files what it lacks, once.
                catch_unwind(AssertUnwindSafe(|| super::in_doubt::backfill(database)))
                    .map_err(|panic| corrupt(panic_message(&panic)))?
                    .map_err(|error| corrupt(error.to_string()))?;
                // A file written before layout 5 gets a check in every head (LD-037), once.
                catch_unwind(AssertUnwindSafe(|| heads::ensure_checked(database)))
                    .map_err(|panic| corrupt(panic_message(&panic)))?
                    .map_err(|error| corrupt(error.to_string()))?;
                Ok(Prepared::Ready(feed_next, Some(journal)))
            }
            Db::Read(_) | Db::Snapshot(_) => {
                let pending = match position {
                    Some(position) => pending_records(path, journal_path, position, accept_cut)?
                        .records
                        .len(),
                    None => 0,
                };
                Ok(match pending {
                    0 => Prepared::Ready(feed_next, None),
                    commits => Prepared::Pending(commits),
                })
            }
        },
        Layout::Other(found) if found == 1 && mode == Mode::ReadOnly => {
            Err(OpenError::NeedsUpgrade {
                path: path.to_path_buf(),
                found,
            })
        }
        Layout::Other(found) => Err(OpenError::UnsupportedFormat {
            path: path.to_path_buf(),
            found,
        }),
    }
}

fn journal_open_error(path: &Path, error: journal::JournalError) -> OpenError {
    match error {
        journal::JournalError::Io { path: _, source } => OpenError::Io {
            path: journal::journal_path(path),
            source,
        },
        corrupt @ journal::JournalError::Corrupt { .. } => OpenError::Corrupt {
            path: path.to_path_buf(),
            detail: corrupt.to_string(),
        },
    }
}

/// Where the tables stand in the journal: its generation and the offset just past the last
/// record they hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct JournalPosition {
    generation: u64,
    end: u64,
}

/// The records the tables lack: those of the tables' generation past their offset, or every
/// record of the next generation (a checkpoint began it after making the tables durable).
/// A journal cut short ([`journal::Scanned::cut`]) is refused unless `accept_cut`
/// ([`DiskStoreConfig::accept_cut_journal`]), which opens the store as of the cut.
fn pending_records(
    store: &Path,
    journal_path: &Path,
    position: JournalPosition,
    accept_cut: bool,
) -> Result<journal::Scanned, OpenError> {
    let corrupt = |detail: String| OpenError::Corrupt {
        path: store.to_path_buf(),
        detail,
    };
    let from = |start: u64| {
        journal::scan(journal_path, start)
            .map_err(|error| journal_open_error(store, error))?
            .ok_or_else(|| {
                corrupt(format!(
                    "its journal {} is missing; the commits it held cannot be recovered without it",
                    journal_path.display()
                ))
            })
    };
    let scanned = from(journal::HEADER_LEN)?;
    let pending = if scanned.generation == position.generation {
        from(position.end)?
    } else if scanned.generation == position.generation + 1 {
        scanned
    } else {
        return Err(corrupt(format!(
            "its journal {} is of generation {}, but the store's tables follow generation {}: not this store's journal",
            journal_path.display(),
            scanned.generation,
            position.generation
        )));
    };
    if pending.cut {
        if !accept_cut {
            return Err(OpenError::JournalCut {
                path: store.to_path_buf(),
                journal: journal_path.to_path_buf(),
                end: pending.end,
                records: pending.records.len(),
            });
        }
        tracing::warn!(
            journal = %journal_path.display(),
            at = pending.end,
            records = pending.records.len(),
            "the journal was cut short; opened as of the cut (accept_cut_journal): the commits written after it are lost"
        );
    }
    Ok(pending)
}

/// Applies the journaled commits the tables lack, makes the tables durable, and begins a new
/// journal generation. Returns the journal and the next feed position.
fn recover_journal(
    db: &Database,
    store: &Path,
    journal_path: &Path,
    position: Option<JournalPosition>,
    feed_next: u64,
    accept_cut: bool,
) -> Result<(Journal, u64), OpenError> {
    let position = position.ok_or_else(|| OpenError::Corrupt {
        path: store.to_path_buf(),
        detail: "the store records no journal position".into(),
    })?;
    let (feed, generation) = apply_pending(
        db,
        store,
        journal_path,
        position,
        feed_next,
        true,
        accept_cut,
    )?;
    let journal = Journal::create(journal_path, generation + 1)
        .map_err(|error| journal_open_error(store, error))?;
    Ok((journal, feed))
}

/// Applies the journaled commits the tables lack in one commit (durable only when the database
/// writes to its file: a snapshot's stays in memory). Returns the next feed position and the
/// generation of the journal read. `writing` says whether a torn last record will be cut from
/// the file (a new generation follows) or only left out.
pub(super) fn apply_pending(
    db: &Database,
    store: &Path,
    journal_path: &Path,
    position: JournalPosition,
    feed_next: u64,
    writing: bool,
    accept_cut: bool,
) -> Result<(u64, u64), OpenError> {
    let corrupt = |detail: String| OpenError::Corrupt {
        path: store.to_path_buf(),
        detail,
    };
    let pending = pending_records(store, journal_path, position, accept_cut)?;
    if pending.torn > 0 {
        tracing::warn!(
            journal = %journal_path.display(),
            bytes = pending.torn,
            at = pending.end,
            "the journal ends with an incomplete commit record (a crash during its write); {}",
            if writing { "it is cut" } else { "it is left out" }
        );
    }
    let storage = |error: StorageError| corrupt(error.to_string());
    let txn = db.begin_write().map_err(|e| corrupt(e.to_string()))?;
    let mut feed = feed_next;
    {
        let mut tables = WriteTables::open(&txn).map_err(storage)?;
        let mut replayed = Vec::new();
        // The records as the writer holds them for its applier: one way to the tables.
        let held = Pending::default();
        for (index, (payload, _)) in pending.records.iter().enumerate() {
            let appends = journal::read_payload(payload).ok_or_else(|| {
                corrupt(format!(
                    "journal record {index} past the tables' position does not decode"
                ))
            })?;
            for append in appends {
                let execution = ExecutionId::from_stored(append.execution)
                    .map_err(|e| corrupt(e.to_string()))?;
                let mut changes = Vec::with_capacity(append.records.len());
                for (seq, record) in (append.expected_seq..).zip(&append.records) {
                    let envelope = decode_record(&execution, seq, record).map_err(|e| {
                        corrupt(format!("journaled event {seq} of {execution}: {e}"))
                    })?;
                    changes.push(crate::store::TailChange::of(&envelope.event));
                }
                // Held records run gapless; one that does not follow the append before it
                // would not follow the tables either.
                if held
                    .head(execution.as_str())
                    .is_some_and(|head| head != append.expected_seq)
                {
                    return Err(corrupt(format!(
                        "a journaled append to execution {execution} at seq {} does not follow the one before it",
                        append.expected_seq
                    )));
                }
                held.push(
                    execution.as_str(),
                    append.expected_seq,
                    append.records.iter(),
                );
                replayed.push(Queued {
                    execution,
                    expected_seq: append.expected_seq,
                    record_count: append.records.len(),
                    changes,
                    recorded_at_ms: append.recorded_at_ms,
                });
            }
        }
        // As the applier applies them: a record that does not follow the tables is refused.
        tables
            .apply_accepted(replayed.iter(), &held, &mut feed)
            .map_err(storage)?;
        tables
            .set_position(feed, pending.generation, pending.end)
            .map_err(storage)?;
    }
    txn.commit().map_err(|e| corrupt(e.to_string()))?;
    if !pending.records.is_empty() {
        tracing::info!(
            commits = pending.records.len(),
            in_memory_only = !writing,
            "journaled commits applied to the store's tables"
        );
    }
    Ok((feed, pending.generation))
}

/// What [`init_tables`] or [`read_layout`] found.
pub(super) enum Layout {
    /// A layout this build reads, with the next feed position and, in the journaled layout,
    /// where its tables stand in the journal.
    Current {
        feed_next: u64,
        journal: Option<JournalPosition>,
    },
    /// Another layout version, left as it is.
    Other(u64),
}

fn journal_position(
    meta: &impl ReadableTable<&'static str, u64>,
) -> Result<Option<JournalPosition>, StorageError> {
    let get = |key: &str| checked::read_meta(meta, key);
    Ok(match (get(JOURNAL_GENERATION)?, get(JOURNAL_END)?) {
        (Some(generation), Some(end)) => Some(JournalPosition { generation, end }),
        _ => None,
    })
}

/// Creates the tables of a new file, brings a file of an older layout to the current one
/// (its journal begun before the new version is committed), and says what the file now is.
fn init_tables(db: &Database, journal_path: &Path) -> Result<Layout, StorageError> {
    let txn = db.begin_write().map_err(StorageError::new)?;
    let layout = {
        txn.open_table(EVENTS).map_err(StorageError::new)?;
        txn.open_table(HEADS).map_err(StorageError::new)?;
        let (existing, stored_feed_next, journal) = {
            let meta = txn.open_table(META).map_err(StorageError::new)?;
            let existing = meta
                .get("format")
                .map_err(StorageError::new)?
                .map(|v| v.value());
            let feed_next = checked::read_meta(&meta, FEED_NEXT)?.unwrap_or(0);
            (existing, feed_next, journal_position(&meta)?)
        };
        let feed_next = match existing {
            Some(STORE_FORMAT) => {
                txn.abort().map_err(StorageError::new)?;
                return Ok(Layout::Current {
                    feed_next: stored_feed_next,
                    journal,
                });
            }
            // Layout 3 differs from 4 only in writing one events row per event: its rows are
            // rows of one event, and its journal goes on. Layout 4 differs from 5 only in the
            // check its `heads` values lack, which layout 5 reads as they are; they get it
            // after the journal is applied (`heads::ensure_checked`).
            Some(version @ (3 | 4)) => {
                let journal = journal.ok_or_else(|| {
                    StorageError::msg(format!(
                        "the layout {version} store records no journal position"
                    ))
                })?;
                // Nothing is changed in a file that will not open: its journal is read after
                // this commit, and a missing one refuses the file.
                if !journal_path.exists() {
                    txn.abort().map_err(StorageError::new)?;
                    return Err(StorageError::msg(format!(
                        "its journal {} is missing; the commits it held cannot be recovered without it",
                        journal_path.display()
                    )));
                }
                {
                    let mut meta = txn.open_table(META).map_err(StorageError::new)?;
                    meta.insert("format", STORE_FORMAT)
                        .map_err(StorageError::new)?;
                }
                txn.commit().map_err(StorageError::new)?;
                tracing::info!(
                    "store file brought from layout {version} to {STORE_FORMAT} (checked heads)"
                );
                return Ok(Layout::Current {
                    feed_next: stored_feed_next,
                    journal: Some(journal),
                });
            }
            Some(1) => {
                let feed_next = upgrade_from_1(&txn)?;
                tracing::info!(feed_next, "store file brought from layout 1 to 2");
                Some(feed_next)
            }
            Some(2) => Some(stored_feed_next),
            Some(other) => {
                txn.abort().map_err(StorageError::new)?;
                return Ok(Layout::Other(other));
            }
            None => {
                // A new file: every deletion from now on is recorded in `purged` (a file from
                // before `purged` existed may have deleted logs it does not name).
                let mut meta = txn.open_table(META).map_err(StorageError::new)?;
                checked::write_meta(&mut meta, PURGES_RECORDED, 1)?;
                Some(0)
            }
        };
        let feed_next = feed_next.unwrap_or_default();
        begin_journal(journal_path)?;
        let mut meta = txn.open_table(META).map_err(StorageError::new)?;
        meta.insert("format", STORE_FORMAT)
            .map_err(StorageError::new)?;
        checked::write_meta(&mut meta, FEED_NEXT, feed_next)?;
        checked::write_meta(&mut meta, JOURNAL_GENERATION, 1)?;
        checked::write_meta(&mut meta, JOURNAL_END, journal::HEADER_LEN)?;
        if existing.is_some() {
            tracing::info!(from = ?existing, "store file brought to layout {STORE_FORMAT} (journaled commits)");
        }
        Layout::Current {
            feed_next,
            journal: Some(JournalPosition {
                generation: 1,
                end: journal::HEADER_LEN,
            }),
        }
    };
    txn.open_table(TAILS).map_err(StorageError::new)?;
    txn.open_table(BY_STATUS).map_err(StorageError::new)?;
    txn.open_table(ENDED).map_err(StorageError::new)?;
    txn.open_table(FEED).map_err(StorageError::new)?;
    txn.open_table(PURGED).map_err(StorageError::new)?;
    txn.commit().map_err(StorageError::new)?;
    Ok(layout)
}

/// Writes the first journal (generation 1) of a store that has none yet: a new store, or one
/// of an older layout. A journal already there must hold no commit (one left by a creation
/// that a crash interrupted): commits in it would belong to no tables.
fn begin_journal(journal_path: &Path) -> Result<(), StorageError> {
    if let Some(existing) =
        journal::scan(journal_path, journal::HEADER_LEN).map_err(StorageError::new)?
        && !existing.records.is_empty()
    {
        return Err(StorageError::msg(format!(
            "the journal {} holds {} commits, but the store's tables never used a journal: not this store's journal",
            journal_path.display(),
            existing.records.len()
        )));
    }
    Journal::create(journal_path, 1).map_err(StorageError::new)?;
    Ok(())
}

/// The layout of a file opened read-only, changing nothing. Layout 2 (before the journal)
/// reads as it is.
pub(super) fn read_layout(db: &impl ReadableDatabase) -> Result<Layout, StorageError> {
    let txn = db.begin_read().map_err(StorageError::new)?;
    let meta = txn.open_table(META).map_err(StorageError::new)?;
    let format = meta
        .get("format")
        .map_err(StorageError::new)?
        .map(|v| v.value());
    let feed_next = || Ok::<_, StorageError>(checked::read_meta(&meta, FEED_NEXT)?.unwrap_or(0));
    match format {
        // Layouts 3 and 4 read as layout 5: their rows are rows of one append, their heads
        // values written before the check (`heads.rs`).
        Some(STORE_FORMAT | 4 | 3) => Ok(Layout::Current {
            feed_next: feed_next()?,
            journal: Some(
                journal_position(&meta)?
                    .ok_or_else(|| StorageError::msg("the store records no journal position"))?,
            ),
        }),
        Some(2) => Ok(Layout::Current {
            feed_next: feed_next()?,
            journal: None,
        }),
        Some(other) => Ok(Layout::Other(other)),
        None => Err(StorageError::msg(
            "the file has no layout version: not a Loom store",
        )),
    }
}

/// Builds the tails, the status index and the feed of a version 1 file, in the write
/// transaction that also records the new version: a crash leaves the file at version 1,
/// and the next open builds them again. Returns the next feed position. A log that does
/// not decode or that the tail refuses (written before appends were validated) is indexed as
/// [`ExecutionTail::unreadable`], so recovery reports it instead of skipping it silently.
fn upgrade_from_1(txn: &redb::WriteTransaction) -> Result<u64, StorageError> {
    let events = txn.open_table(EVENTS).map_err(StorageError::new)?;
    let heads = txn.open_table(HEADS).map_err(StorageError::new)?;
    let mut tails = txn.open_table(TAILS).map_err(StorageError::new)?;
    let mut by_status = txn.open_table(BY_STATUS).map_err(StorageError::new)?;
    let mut ended = txn.open_table(ENDED).map_err(StorageError::new)?;
    let mut feed = txn.open_table(FEED).map_err(StorageError::new)?;
    let mut position = 0u64;
    for entry in heads.iter().map_err(StorageError::new)? {
        let (id, _) = entry.map_err(StorageError::new)?;
        let id = id.value();
        let execution = ExecutionId::from_stored(id).map_err(StorageError::new)?;
        let mut tail = ExecutionTail::new();
        let mut readable = true;
        for record in events
            .range((id, 0)..=(id, u64::MAX))
            .map_err(StorageError::new)?
        {
            let (key, value) = record.map_err(StorageError::new)?;
            let seq = key.value().1;
            feed.insert(position, (id, seq))
                .map_err(StorageError::new)?;
            position += 1;
            if readable {
                readable = decode_record(&execution, seq, value.value())
                    .ok()
                    .is_some_and(|envelope| {
                        tail.apply(&envelope.event, envelope.recorded_at_ms).is_ok()
                    });
            }
        }
        if !readable {
            tail = ExecutionTail::unreadable();
        }
        for code in tail.index_codes() {
            by_status
                .insert((code, id), ())
                .map_err(StorageError::new)?;
        }
        if let Some(at) = tail.ended_at_ms() {
            ended.insert((at, id), ()).map_err(StorageError::new)?;
        }
        tails
            .insert(id, checked::tail_value(id, &tail).as_slice())
            .map_err(StorageError::new)?;
    }
    Ok(position)
}
