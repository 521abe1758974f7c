//! `loom export-log`: executions written as JSON Lines files, one per execution, for
//! `replay-check --logs`.

use std::path::{Path, PathBuf};

use futures::TryStreamExt;
use loom_console::{AdminClient, ConsoleError, ExportPage};
use loom_kernel::{EventStore, EventStoreExt, ExecutionId};

use super::backend::{Backend, open_file};
use super::output::done;

/// `loom export-log`, from whichever backend.
pub(crate) async fn export_log(
    backend: &Backend,
    out: PathBuf,
    executions: Vec<String>,
    json: bool,
) -> Result<(), ConsoleError> {
    let only = executions
        .iter()
        .map(|id| loom_console::execution_id(id))
        .collect::<Result<Vec<_>, _>>()?;
    let written = match backend {
        Backend::File(path) => {
            let store = open_file(path, false)?;
            export(&store, &out, &only).await?
        }
        Backend::Postgres(store) => export(store, &out, &only).await?,
        Backend::Admin(client) => export_admin(client, &out, &executions).await?,
    };
    done(
        json,
        &format!("wrote {written} executions to {}", out.display()),
        None,
    );
    Ok(())
}

async fn export<S: EventStore>(
    store: &S,
    out: &Path,
    only: &[ExecutionId],
) -> Result<usize, ConsoleError> {
    std::fs::create_dir_all(out).map_err(|error| {
        ConsoleError::bad_request(format!("cannot create {}: {error}", out.display()))
    })?;
    let ids = if only.is_empty() {
        store
            .executions()
            .map_ok(|summary| summary.id)
            .try_collect::<Vec<_>>()
            .await?
    } else {
        only.to_vec()
    };
    // One execution that cannot be exported stops none of the others: each failure is said,
    // and the command fails once all were tried.
    let mut written = 0;
    let mut failed = Vec::new();
    for id in ids {
        match export_one(store, out, &id).await {
            Ok(true) => written += 1,
            Ok(false) => {}
            Err(error) => failed.push(error.message),
        }
    }
    if failed.is_empty() {
        return Ok(written);
    }
    Err(ConsoleError::internal(format!(
        "wrote {written} executions to {}; {} could not be exported: {}",
        out.display(),
        failed.len(),
        failed.join("; ")
    )))
}

async fn export_one<S: EventStore>(
    store: &S,
    out: &Path,
    id: &ExecutionId,
) -> Result<bool, ConsoleError> {
    let log = store.read_all(id).await?;
    if log.is_empty() {
        return Err(ConsoleError::unknown_execution(id.as_str()));
    }
    let path = loom_replay_check::write_log(out, &log).map_err(|error| {
        ConsoleError::internal(format!("cannot write the log of {id}: {error}"))
    })?;
    Ok(path.is_some())
}

/// `export-log --admin`: the logs of a live server, a page at a time, written as `export`
/// writes them.
async fn export_admin(
    client: &AdminClient,
    out: &Path,
    only: &[String],
) -> Result<usize, ConsoleError> {
    std::fs::create_dir_all(out).map_err(|error| {
        ConsoleError::bad_request(format!("cannot create {}: {error}", out.display()))
    })?;
    let mut written = 0;
    let mut write = |page: ExportPage| -> Result<(), ConsoleError> {
        for text in page.logs {
            let log = text
                .lines()
                .map(loom_kernel::EventEnvelope::from_json)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| {
                    ConsoleError::internal(format!(
                        "the admin API sent a log this client cannot read ({error}): is it the same version?"
                    ))
                })?;
            let path = loom_replay_check::write_log(out, &log).map_err(|error| {
                ConsoleError::internal(format!("cannot write an exported log: {error}"))
            })?;
            if path.is_some() {
                written += 1;
            }
        }
        Ok(())
    };
    if !only.is_empty() {
        for id in only {
            write(client.export_page(Some(id), None, 1).await?)?;
        }
        return Ok(written);
    }
    let mut after: Option<String> = None;
    loop {
        let page = client.export_page(None, after.as_deref(), 100).await?;
        let next = page.next.clone();
        write(page)?;
        match next {
            Some(next) => after = Some(next),
            None => return Ok(written),
        }
    }
}
