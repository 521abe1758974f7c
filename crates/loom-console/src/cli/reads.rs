//! The reads: the executions listed, one shown, its events followed live, the steps in doubt.

use std::time::Duration;

use loom_console::{ConsoleError, EventsPage, ListFilter, mask_events, parse_status};
use loom_kernel::DataClassification;

use super::backend::{Backend, open_file};
use super::output::lists::{print_event, print_executions, print_in_doubt};
use super::output::show::print_show;

/// `loom executions`: a page of the listing, newest first.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn executions(
    backend: &Backend,
    status: Option<String>,
    flow: Option<String>,
    limit: Option<usize>,
    before: Option<String>,
    since: Option<String>,
    ended_since: Option<String>,
    id_prefix: Option<String>,
    parent: Option<String>,
    json: bool,
) -> Result<(), ConsoleError> {
    // Refused here too, before any store is read: `--limit 0` is a mistake.
    loom_console::list_limit(limit)?;
    let within = |age: Option<String>| -> Result<Option<u64>, ConsoleError> {
        age.map(|age| loom_console::parse_age(&age).map(loom_console::cutoff_ms))
            .transpose()
    };
    let filter = ListFilter {
        status: status.as_deref().map(parse_status).transpose()?,
        flow,
        limit,
        before,
        id_prefix,
        parent,
        started_from_ms: within(since)?,
        ended_from_ms: within(ended_since)?,
        ..ListFilter::default()
    };
    let listed = match backend {
        Backend::File(path) => {
            let store = open_file(path, false)?;
            loom_console::list_executions(&store, &filter).await?
        }
        Backend::Postgres(store) => loom_console::list_executions(store, &filter).await?,
        Backend::Admin(client) => client.executions(&filter).await?,
    };
    print_executions(&listed, json);
    Ok(())
}

/// `loom show`: the folded state, then the log, masked.
pub(crate) async fn show(
    backend: &Backend,
    classification: &DataClassification,
    id: &str,
    full: bool,
    json: bool,
) -> Result<(), ConsoleError> {
    let execution = loom_console::execution_id(id)?;
    let mut shown = match backend {
        Backend::File(path) => {
            let store = open_file(path, false)?;
            loom_console::show(&store, &execution, classification).await?
        }
        Backend::Postgres(store) => loom_console::show(store, &execution, classification).await?,
        Backend::Admin(client) => client.show(id).await?,
    };
    mask_events(classification, &mut shown.events);
    for payload in [&mut shown.outcome.input, &mut shown.outcome.output]
        .into_iter()
        .flatten()
    {
        *payload = classification.mask_message_value(payload);
    }
    for gate in &mut shown.state.pending_gates {
        if let Some(request) = &mut gate.request {
            *request = classification.mask_message_value(request);
        }
    }
    print_show(&shown, json, full);
    Ok(())
}

/// `loom in-doubt`.
pub(crate) async fn in_doubt(backend: &Backend, json: bool) -> Result<(), ConsoleError> {
    let listed = match backend {
        Backend::File(path) => {
            // No process runs the store's flows while the CLI holds it: a step in flight was
            // cut off when its process stopped, and is listed with the steps in doubt.
            let store = open_file(path, false)?;
            let mut listed = loom_console::in_doubt(&store, loom_console::now_ms()).await?;
            listed.extend(loom_console::stopped_steps(&store, loom_console::now_ms()).await?);
            listed.sort_by(|a, b| (&a.execution, &a.step_id).cmp(&(&b.execution, &b.step_id)));
            listed
        }
        Backend::Postgres(store) => loom_console::in_doubt(store, loom_console::now_ms()).await?,
        Backend::Admin(client) => client.in_doubt().await?,
    };
    print_in_doubt(&listed, json);
    Ok(())
}

/// How often `tail` looks at a store file or PostgreSQL again.
const POLL: Duration = Duration::from_millis(500);

pub(crate) async fn tail(
    backend: &Backend,
    id: &str,
    mut from: u64,
    follow: bool,
    classification: &DataClassification,
    json: bool,
) -> Result<(), ConsoleError> {
    let execution = loom_console::execution_id(id)?;
    let mut first = true;
    loop {
        let mut page: EventsPage = match backend {
            Backend::File(path) => {
                // Opened and closed at each look, so the file is never held for long: the
                // server may start meanwhile (and then this says to use --admin).
                let store = open_file(path, false)?;
                loom_console::events_from(&store, &execution, from, 4096, classification).await?
            }
            Backend::Postgres(store) => {
                loom_console::events_from(store, &execution, from, 4096, classification).await?
            }
            Backend::Admin(client) => {
                let wait = if follow && !first {
                    Duration::from_secs(25)
                } else {
                    Duration::ZERO
                };
                client.events(id, from, wait).await?
            }
        };
        first = false;
        mask_events(classification, &mut page.events);
        for event in &page.events {
            print_event(event, json, false);
            from = event.seq + 1;
        }
        let caught_up = from >= page.head;
        if !follow || (page.ended && caught_up) {
            return Ok(());
        }
        if caught_up && !matches!(backend, Backend::Admin(_)) {
            tokio::time::sleep(POLL).await;
        }
    }
}
