//! The writes a store file or PostgreSQL takes as one driver event, or the admin API carries
//! out: verdicts on steps in doubt, resumes, cancels.

use loom_console::ConsoleError;
use loom_kernel::{ErrorInfo, Verdict};

use super::args::{VerdictArgs, parse_payload};
use super::backend::{Backend, env, give_back, open_file};
use super::output::done;

/// `loom resolve`: a verdict on a step in doubt.
pub(crate) async fn resolve(
    backend: &Backend,
    id: String,
    step: String,
    verdict: VerdictArgs,
    code: String,
    operator: Option<String>,
    json: bool,
) -> Result<(), ConsoleError> {
    let execution = loom_console::execution_id(&id)?;
    let verdict = match verdict {
        VerdictArgs {
            completed: Some(output),
            ..
        } => Verdict::Completed {
            output: parse_payload(&output, "--completed")?,
        },
        VerdictArgs {
            failed: Some(message),
            ..
        } => Verdict::Failed {
            error: ErrorInfo::new(code, message),
        },
        _ => Verdict::Retry,
    };
    let operator = operator
        .or_else(|| env("LOOM_OPERATOR"))
        .or_else(|| env("USER"));
    let note = match backend {
        Backend::File(path) => {
            let store = open_file(path, true)?;
            loom_console::resolve(&store, &execution, &step, verdict, operator).await?;
            Some(loom_console::GOES_ON_WHEN_RECOVERED)
        }
        Backend::Postgres(store) => {
            loom_console::resolve(store, &execution, &step, verdict, operator).await?;
            give_back(store).await;
            Some(loom_console::GOES_ON_WHEN_RECOVERED_POSTGRES)
        }
        Backend::Admin(client) => {
            client
                .resolve(&id, &step, &verdict, operator.as_deref())
                .await?;
            None
        }
    };
    done(
        json,
        &format!("verdict recorded on step '{step}' of execution {id}"),
        note,
    );
    Ok(())
}

/// `loom resume`: a pending gate resumed with a payload.
pub(crate) async fn resume(
    backend: &Backend,
    id: String,
    event_type: String,
    key: String,
    payload: String,
    operator: Option<String>,
    json: bool,
) -> Result<(), ConsoleError> {
    let operator = operator.or_else(|| env("LOOM_OPERATOR"));
    let execution = loom_console::execution_id(&id)?;
    let payload = parse_payload(&payload, "the payload")?;
    let note = match backend {
        Backend::File(path) => {
            let store = open_file(path, true)?;
            loom_console::resume(&store, &execution, &event_type, &key, payload).await?;
            Some(loom_console::GOES_ON_WHEN_RECOVERED)
        }
        Backend::Postgres(store) => {
            loom_console::resume(store, &execution, &event_type, &key, payload).await?;
            give_back(store).await;
            Some(loom_console::GOES_ON_WHEN_RECOVERED_POSTGRES)
        }
        Backend::Admin(client) => {
            client
                .resume_by(
                    &id,
                    &event_type,
                    &key,
                    &payload.to_value(),
                    operator.as_deref(),
                )
                .await?;
            None
        }
    };
    done(
        json,
        &format!("execution {id} resumed ({event_type}, key '{key}')"),
        note,
    );
    Ok(())
}

/// `loom cancel`.
pub(crate) async fn cancel(
    backend: &Backend,
    id: String,
    reason: Option<String>,
    json: bool,
) -> Result<(), ConsoleError> {
    let execution = loom_console::execution_id(&id)?;
    match backend {
        Backend::File(path) => {
            let store = open_file(path, true)?;
            loom_console::cancel(&store, &execution, reason).await?;
        }
        Backend::Postgres(store) => {
            loom_console::cancel(store, &execution, reason).await?;
            give_back(store).await;
        }
        Backend::Admin(client) => client.cancel(&id, reason.as_deref()).await?,
    }
    done(json, &format!("execution {id} cancelled"), None);
    Ok(())
}
