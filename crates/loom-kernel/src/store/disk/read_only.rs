//! What the store does over [`Overlay`], the backend that keeps every write in memory: a
//! read-only open of a file that was not closed cleanly (or that another reader holds), and
//! the check of every page that `loom store check` runs (`docs/STORAGE.md`, "Reading a store
//! that was not closed cleanly"). Neither writes to the file.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use redb::Database;

use super::open::{Layout, apply_pending, contained, drop_contained, read_layout};
use super::overlay::Overlay;
use super::{Db, DiskStoreConfig, OpenError, panic_message};
use crate::store::journal::Journal;

/// The store file at `path` under [`Overlay`], opened for reading.
fn overlay_of(path: &Path) -> Result<Overlay, OpenError> {
    std::fs::File::open(path)
        .and_then(Overlay::new)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => OpenError::Missing {
                path: path.to_path_buf(),
            },
            _ => OpenError::Io {
                path: path.to_path_buf(),
                source,
            },
        })
}

/// A read-only open of a store that was not closed cleanly (`not_clean` says why) or that a
/// plain read-only open found held: redb's repair and the journal's commits the tables lack
/// are applied over [`Overlay`], in memory, so the store reads as of its journal's last
/// durable commit and the file is not written. A writer that holds the file refuses it
/// ([`OpenError::AlreadyOpen`]); another snapshot or reader does not.
pub(super) fn open_snapshot(
    path: &Path,
    journal_path: &Path,
    config: &DiskStoreConfig,
    not_clean: Option<&str>,
) -> Result<(Db, u64, Option<Journal>), OpenError> {
    if let Some(why) = not_clean {
        tracing::info!(
            path = %path.display(),
            why,
            "the store was not closed cleanly: read as of its journal's last durable commit, applied in memory; the file is not written"
        );
    }
    let overlay = overlay_of(path)?;
    let mut builder = Database::builder();
    builder.set_cache_size(config.cache_size_bytes);
    let db = contained(path, || builder.create_with_backend(overlay))?;
    let corrupt = |detail: String| OpenError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let prepared = catch_unwind(AssertUnwindSafe(|| {
        let layout = read_layout(&db).map_err(|error| corrupt(error.to_string()))?;
        match layout {
            Layout::Current {
                feed_next,
                journal: Some(position),
            } => apply_pending(
                &db,
                path,
                journal_path,
                position,
                feed_next,
                false,
                config.accept_cut_journal,
            )
            .map(|(feed_next, _)| feed_next),
            Layout::Current {
                feed_next,
                journal: None,
            } => Ok(feed_next),
            Layout::Other(found) if found == 1 => Err(OpenError::NeedsUpgrade {
                path: path.to_path_buf(),
                found,
            }),
            Layout::Other(found) => Err(OpenError::UnsupportedFormat {
                path: path.to_path_buf(),
                found,
            }),
        }
    }))
    .map_err(|panic| corrupt(panic_message(&panic)))
    .and_then(|prepared| prepared);
    match prepared {
        Ok(feed_next) => Ok((Db::Snapshot(db), feed_next, None)),
        Err(error) => {
            drop_contained(db);
            Err(error)
        }
    }
}

/// redb's check of every page of `path` and of its allocator state, over [`Overlay`]: what a
/// crash left is repaired in memory first, and nothing is written. `Ok(true)` when all is
/// whole, `Ok(false)` when the allocator state needed repair (space leaked, no data lost),
/// an error naming the damage otherwise.
pub(super) fn check_pages(path: &Path) -> Result<bool, OpenError> {
    let overlay = overlay_of(path)?;
    let mut builder = Database::builder();
    builder.set_cache_size(0);
    let mut db = contained(path, || builder.create_with_backend(overlay))?;
    let checked = contained(path, || db.check_integrity());
    drop_contained(db);
    checked
}
