//! `loom store`: a store file checked for damage, or the logs of one that no longer opens
//! salvaged.

use std::path::Path;

use loom_console::{ConsoleError, thousands};
use loom_kernel::{DiskStore, EventStoreExt, OpenError};

use super::args::StoreCommand;
use super::backend::{Backend, StoreFile, held_elsewhere, open_file};

/// `loom store ...`, on a store file only.
pub(crate) async fn store(
    backend: &Backend,
    command: StoreCommand,
    json: bool,
) -> Result<(), ConsoleError> {
    let Backend::File(file) = backend else {
        return Err(ConsoleError::bad_request(
            "`loom store` works on a store file: give --store FILE (not --admin or a postgres:// URL)",
        ));
    };
    match command {
        StoreCommand::Check => store_check(file, json).await?,
        StoreCommand::Salvage { out } => store_salvage(&file.path, &out, json)?,
    }
    Ok(())
}

/// `loom store check`: the file's pages (redb's check, in memory), then every log read and
/// folded, with progress on stderr; damage is reported and exits 4.
async fn store_check(file: &StoreFile, json: bool) -> Result<(), ConsoleError> {
    use futures::TryStreamExt;
    let path = file.path.as_path();
    eprintln!("checking the pages of {} ...", path.display());
    let pages = match DiskStore::check_pages(path) {
        Ok(true) => "ok".to_owned(),
        Ok(false) => {
            "ok; the allocator state needed repair (space leaked, no data lost: the next open for writing repairs it)".to_owned()
        }
        Err(OpenError::AlreadyOpen { .. }) => return Err(held_elsewhere(path)),
        Err(error) => format!("damaged: {error}"),
    };
    let store = open_file(file, false)?;
    let mut listed = store.executions();
    let (mut read, mut events, mut damaged) = (0u64, 0u64, Vec::new());
    while let Some(summary) = listed
        .try_next()
        .await
        .map_err(|error| ConsoleError::unavailable(error.to_string()))?
    {
        match store.read_all(&summary.id).await {
            Ok(log) => {
                events += log.len() as u64;
                if let Err(error) = loom_kernel::ExecutionState::fold(&log) {
                    damaged.push(format!("{}: its log does not fold: {error}", summary.id));
                }
            }
            Err(error) => damaged.push(format!("{}: {error}", summary.id)),
        }
        read += 1;
        if read % 10_000 == 0 {
            eprintln!("  {} executions read", thousands(read));
        }
    }
    let logs = format!(
        "{} executions, {} events read and folded",
        thousands(read),
        thousands(events)
    );
    let whole = !pages.starts_with("damaged") && damaged.is_empty();
    if json {
        out!(
            "{}",
            serde_json::json!({"ok": whole, "pages": pages, "executions": read, "events": events, "damaged": damaged})
        );
    } else {
        out!("pages     {pages}");
        out!("logs      {logs}");
        for line in &damaged {
            out!("damaged   {line}");
        }
    }
    if whole {
        Ok(())
    } else {
        Err(ConsoleError::unavailable(format!(
            "store file {} is damaged ({} logs unreadable{}): `loom --store FILE store salvage --out DIR` exports every log still readable",
            path.display(),
            damaged.len(),
            if pages.starts_with("damaged") {
                ", pages damaged"
            } else {
                ""
            }
        )))
    }
}

/// `loom store salvage`: every log readable from the file's pages and journal, without redb,
/// written to `out` as JSON Lines.
fn store_salvage(path: &Path, out: &Path, json: bool) -> Result<(), ConsoleError> {
    eprintln!("salvaging {} ...", path.display());
    let salvaged = DiskStore::salvage(path, |done, total| {
        eprintln!("  {} of {} MiB read", done >> 20, total >> 20);
    })
    .map_err(|error| ConsoleError::unavailable(error.to_string()))?;
    std::fs::create_dir_all(out).map_err(|error| {
        ConsoleError::unavailable(format!("cannot create {}: {error}", out.display()))
    })?;
    let mut events = 0;
    for log in &salvaged.logs {
        events += log.len();
        loom_replay_check::write_log(out, log)
            .map_err(|error| ConsoleError::unavailable(error.to_string()))?;
    }
    if json {
        let gaps: Vec<_> = salvaged
            .gaps
            .iter()
            .map(|(execution, kept, beyond)| serde_json::json!({"execution": execution.as_str(), "kept": kept, "leftOut": beyond}))
            .collect();
        out!(
            "{}",
            serde_json::json!({"ok": true, "logs": salvaged.logs.len(), "events": events, "fromJournal": salvaged.from_journal, "gaps": gaps, "conflicts": salvaged.conflicts, "journalError": salvaged.journal_error})
        );
        return Ok(());
    }
    out!(
        "salvaged {} logs ({} events; {} from the journal) to {}",
        thousands(salvaged.logs.len() as u64),
        thousands(events as u64),
        thousands(salvaged.from_journal),
        out.display()
    );
    for (execution, kept, beyond) in &salvaged.gaps {
        out!("gap       {execution}: {kept} events kept, {beyond} past a missing one left out");
    }
    if salvaged.conflicts > 0 {
        out!(
            "conflicts {} events found twice with different records (an id deleted and started again): the journal's or the first found kept",
            salvaged.conflicts
        );
    }
    if let Some(error) = &salvaged.journal_error {
        out!("journal   not read: {error}");
    }
    out!(
        "check them with `replay-check --logs {}`; a log deleted by retention may come back if its pages were never reused",
        out.display()
    );
    Ok(())
}
