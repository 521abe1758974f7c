//! What only the process that runs the flows can do, through its admin API: list the flows,
//! start an execution, cancel by filter.

use loom_console::ConsoleError;

use super::args::parse_payload;
use super::backend::{Backend, admin_only};
use super::output::lists::print_cancel_many;
use super::output::print_json;

/// `loom flows`.
pub(crate) async fn flows(backend: &Backend, json: bool) -> Result<(), ConsoleError> {
    let flows = admin_only(backend, "list the flows")?.flows().await?;
    if json {
        print_json(&flows);
    } else {
        for flow in &flows {
            let input = flow.input_schema.as_ref().map_or_else(
                || "any JSON".to_owned(),
                |schema| loom_console::describe(schema, 0),
            );
            out!("{} v{}  input: {input}", flow.name, flow.version);
        }
    }
    Ok(())
}

/// `loom start`.
pub(crate) async fn start(
    backend: &Backend,
    flow: String,
    input: String,
    id: Option<String>,
    json: bool,
) -> Result<(), ConsoleError> {
    let client = admin_only(backend, "start an execution")?;
    let input = parse_payload(&input, "the input")?.to_value();
    let started = client.start(&flow, &input, id.as_deref()).await?;
    if json {
        print_json(&started);
    } else {
        out!(
            "started execution {} ({} v{})",
            started.execution,
            started.flow,
            started.version
        );
    }
    Ok(())
}

/// `loom cancel-many`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn cancel_many(
    backend: &Backend,
    status: Option<String>,
    flow: Option<String>,
    id_prefix: Option<String>,
    since: Option<String>,
    all: bool,
    dry_run: bool,
    limit: Option<usize>,
    reason: Option<String>,
    json: bool,
) -> Result<(), ConsoleError> {
    let client = admin_only(backend, "cancel by filter")?;
    let request = loom_console::CancelManyRequest {
        status,
        flow,
        id_prefix,
        started_from_ms: since
            .map(|age| loom_console::parse_age(&age).map(loom_console::cutoff_ms))
            .transpose()?,
        all,
        dry_run,
        limit,
        reason,
        ..loom_console::CancelManyRequest::default()
    };
    let answer = client.cancel_many(&request).await?;
    print_cancel_many(&answer, json);
    Ok(())
}
