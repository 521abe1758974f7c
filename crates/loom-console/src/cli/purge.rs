//! `loom purge`: ended executions deleted, or listed, a bounded batch at a time.

use loom_console::{ConsoleError, utc};

use super::backend::{Backend, open_file};
use super::output::print_json;

/// The cutoff `--ended-before` or `--ended-before-ms` gives, in Unix milliseconds.
pub(crate) fn cutoff(
    ended_before: Option<String>,
    ended_before_ms: Option<u64>,
) -> Result<u64, ConsoleError> {
    Ok(match (ended_before_ms, ended_before) {
        (Some(at), _) => at,
        (None, Some(age)) => loom_console::cutoff_ms(loom_console::parse_age(&age)?),
        (None, None) => {
            return Err(ConsoleError::bad_request(
                "give --ended-before AGE (30d, 12h) or --ended-before-ms UNIX_MS",
            ));
        }
    })
}

/// `loom purge`: deletes (or, with `dry_run`, lists) the executions that ended before the
/// cutoff, a batch at a time, printing each id as its batch is committed.
pub(crate) async fn purge(
    backend: &Backend,
    ended_before_ms: u64,
    batch: usize,
    dry_run: bool,
    json: bool,
) -> Result<(), ConsoleError> {
    if batch == 0 || batch > loom_console::MAX_BATCH {
        return Err(ConsoleError::bad_request(format!(
            "--batch {batch} is out of range: 1 to {}",
            loom_console::MAX_BATCH
        )));
    }
    let verb = if dry_run { "would delete" } else { "deleted" };
    let mut listed: Vec<String> = Vec::new();
    let mut print = |ids: &[String]| {
        if !json {
            for id in ids {
                out!("{verb} {id}");
            }
        }
        listed.extend_from_slice(ids);
    };
    match backend {
        Backend::File(path) => {
            let store = open_file(path, !dry_run)?;
            if dry_run {
                let found = loom_console::would_purge(&store, ended_before_ms).await?;
                print(&found.iter().map(|id| id.to_string()).collect::<Vec<_>>());
            } else {
                loom_console::purge(&store, ended_before_ms, batch, |ids| {
                    print(&ids.iter().map(|id| id.to_string()).collect::<Vec<_>>())
                })
                .await?;
            }
        }
        Backend::Postgres(store) => {
            // Ended executions hold no lease: deleting them races no worker.
            if dry_run {
                let found = loom_console::would_purge(store, ended_before_ms).await?;
                print(&found.iter().map(|id| id.to_string()).collect::<Vec<_>>());
            } else {
                loom_console::purge(store, ended_before_ms, batch, |ids| {
                    print(&ids.iter().map(|id| id.to_string()).collect::<Vec<_>>())
                })
                .await?;
            }
        }
        Backend::Admin(client) => {
            if dry_run {
                print(&client.would_delete_ended(ended_before_ms).await?);
            } else {
                loop {
                    let ids = client.delete_ended(ended_before_ms, batch).await?;
                    print(&ids);
                    if ids.len() < batch {
                        break;
                    }
                }
            }
        }
    }
    let cutoff = utc(ended_before_ms);
    if json {
        print_json(&serde_json::json!({
            "dryRun": dry_run,
            "endedBeforeMs": ended_before_ms,
            "count": listed.len(),
            "executions": listed,
        }));
    } else {
        out!(
            "{verb} {} execution{} that ended before {cutoff}",
            listed.len(),
            if listed.len() == 1 { "" } else { "s" }
        );
    }
    Ok(())
}
