//! The operator's commands (K9): list the steps in doubt and record a verdict, through the
//! running server's admin socket, on the store file when no server holds it, or on
//! PostgreSQL.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use futures::{SinkExt, StreamExt};
use loom_effect_runtime::InDoubtStep;
use loom_kernel::Runtime;
use loom_kernel::Verdict;
use loom_kernel::{ErrorInfo, EventStore, ExecutionId, Payload};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::app;
use crate::narrate::{self, Note};
use crate::store::AnyStore;
use crate::transport::NoRenderer;

/// Who records the verdicts, for the audit trail.
pub const OPERATOR: &str = "operator";
/// The environment variable holding the admin token, for the server and the operator's
/// commands that go through it.
pub const ADMIN_TOKEN_ENV: &str = "LOOM_ADMIN_TOKEN";

/// The error code of a `--failed` verdict.
pub const FAILED_BY_OPERATOR: &str = "operator.failed";

/// An operator's verdict, as the admin socket carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum VerdictArg {
    /// The effect ran: this is its output.
    Completed {
        /// The output the flow gets.
        output: Value,
    },
    /// Run it again with the same call id (the renderer's dedup answers a repeat).
    Retry,
    /// It did not run, or it failed: the step fails with this message.
    Failed {
        /// Why, recorded with the failure.
        message: String,
    },
}

impl VerdictArg {
    fn to_verdict(&self) -> Result<Verdict> {
        Ok(match self {
            Self::Completed { output } => Verdict::Completed {
                output: Payload::encode(output)?,
            },
            Self::Retry => Verdict::Retry,
            Self::Failed { message } => Verdict::Failed {
                error: ErrorInfo::new(FAILED_BY_OPERATOR, message.clone()),
            },
        })
    }
}

/// A request on the admin socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum AdminRequest {
    /// Every step in doubt.
    List,
    /// Records a verdict on one step.
    Resolve {
        /// The execution the step belongs to.
        execution: String,
        /// The step in doubt.
        step: String,
        /// The verdict.
        verdict: VerdictArg,
    },
}

/// Where the operator's commands act.
#[derive(Debug, Clone)]
pub enum Target {
    /// The running server's admin socket (`ws://host:port`).
    Server(String),
    /// The store file, when no server holds it, or a `postgres://` URL.
    Store(PathBuf),
    /// A PostgreSQL store: the URL and the schema.
    Postgres {
        /// The server's URL.
        url: String,
        /// The schema the store's tables are in.
        schema: String,
    },
}

/// The note that tells a step in doubt.
pub fn note_of(step: &InDoubtStep) -> Note {
    Note::InDoubt {
        execution: step.execution.to_string(),
        step: step.step_id.clone(),
        effect: step.effect.clone(),
        key: step.idempotency_key(),
        reason: step
            .reason
            .as_ref()
            .map(|r| format!("{}: {}", r.code, r.message)),
    }
}

fn step_json(step: &InDoubtStep) -> Value {
    json!({
        "execution": step.execution.to_string(),
        "step": step.step_id,
        "effect": step.effect,
        "key": step.idempotency_key(),
        "reason": step.reason.as_ref().map(|r| format!("{}: {}", r.code, r.message)),
    })
}

/// Answers one admin request on `runtime`.
pub async fn answer<S: EventStore>(runtime: &Runtime<S>, request: AdminRequest) -> Value {
    match request {
        AdminRequest::List => match loom_effect_runtime::steps_in_doubt(runtime.store()).await {
            Ok(steps) => {
                json!({"ok": true, "steps": steps.iter().map(step_json).collect::<Vec<_>>()})
            }
            Err(error) => json!({"ok": false, "error": error.to_string()}),
        },
        AdminRequest::Resolve {
            execution,
            step,
            verdict,
        } => match resolve_on(runtime, &execution, &step, &verdict).await {
            Ok(()) => json!({"ok": true}),
            Err(error) => {
                json!({"ok": false, "error": loom_replay_check::error_sentence(&*error)})
            }
        },
    }
}

async fn resolve_on<S: EventStore>(
    runtime: &Runtime<S>,
    execution: &str,
    step: &str,
    verdict: &VerdictArg,
) -> Result<()> {
    let execution = ExecutionId::new(execution)?;
    runtime
        .resolve(
            &execution,
            step,
            verdict.to_verdict()?,
            Some(OPERATOR.into()),
        )
        .await?;
    Ok(())
}

async fn ask(url: &str, request: &AdminRequest) -> Result<Value> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let admin = format!("{}/operator", url.trim_end_matches('/'));
    // The server answers only the holder of its admin token.
    let token = std::env::var(ADMIN_TOKEN_ENV)
        .with_context(|| format!("{ADMIN_TOKEN_ENV} must hold the server's admin token"))?;
    let mut upgrade = admin.as_str().into_client_request()?;
    upgrade
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    let (mut socket, _) = tokio_tungstenite::connect_async(upgrade)
        .await
        .with_context(|| format!("connecting to {admin}"))?;
    socket
        .send(Message::Text(serde_json::to_string(request)?.into()))
        .await?;
    while let Some(frame) = socket.next().await {
        if let Message::Text(text) = frame? {
            let answer: Value = serde_json::from_str(text.as_str())?;
            let _ = socket.close(None).await;
            if answer["ok"] != json!(true) {
                bail!("the server refused: {}", answer["error"]);
            }
            return Ok(answer);
        }
    }
    bail!("the server closed the admin socket without answering")
}

async fn open_store(target: &Target) -> Result<AnyStore> {
    match target {
        Target::Store(path) => AnyStore::open_existing(path, crate::store::DEFAULT_SCHEMA).await,
        Target::Postgres { url, schema } => AnyStore::postgres(url, schema, None).await,
        Target::Server(url) => bail!("{url} is a server, not a store"),
    }
}

/// `indoubt list`: tells every step in doubt.
pub async fn list(target: &Target) -> Result<Vec<Note>> {
    let notes: Vec<Note> = match target {
        Target::Server(url) => {
            let answer = ask(url, &AdminRequest::List).await?;
            let steps = answer["steps"].as_array().cloned().unwrap_or_default();
            steps
                .into_iter()
                .map(|s| Note::InDoubt {
                    execution: s["execution"].as_str().unwrap_or_default().into(),
                    step: s["step"].as_str().unwrap_or_default().into(),
                    effect: s["effect"].as_str().unwrap_or_default().into(),
                    key: s["key"].as_str().unwrap_or_default().into(),
                    reason: s["reason"].as_str().map(str::to_owned),
                })
                .collect()
        }
        Target::Store(_) | Target::Postgres { .. } => match open_store(target).await? {
            AnyStore::Disk(store) => notes_in(&store).await?,
            AnyStore::Postgres(store) => notes_in(&store).await?,
        },
    };
    if notes.is_empty() {
        narrate::say("no step is in doubt");
    }
    for note in &notes {
        narrate::emit(note);
    }
    Ok(notes)
}

/// A note for every step in doubt in `store`.
async fn notes_in<S: EventStore>(store: &S) -> Result<Vec<Note>> {
    Ok(loom_effect_runtime::steps_in_doubt(store)
        .await?
        .iter()
        .map(note_of)
        .collect())
}

/// `resolve`: records a verdict. On the store file, the flow is then driven on as far as it
/// goes without a renderer; a retry needs the renderer, so it goes through the server.
pub async fn resolve(
    target: &Target,
    execution: &str,
    step: &str,
    verdict: VerdictArg,
) -> Result<()> {
    match target {
        Target::Server(url) => {
            ask(
                url,
                &AdminRequest::Resolve {
                    execution: execution.into(),
                    step: step.into(),
                    verdict: verdict.clone(),
                },
            )
            .await?;
        }
        Target::Store(_) | Target::Postgres { .. } => {
            if verdict == VerdictArg::Retry {
                bail!(
                    "a retry sends the call to the renderer again: give it through the running server (--server URL)"
                );
            }
            match open_store(target).await? {
                AnyStore::Disk(store) => resolve_in(store, execution, step, &verdict).await?,
                AnyStore::Postgres(store) => {
                    resolve_in(store.clone(), execution, step, &verdict).await?;
                    // A lease this command still holds is given back, so that a server's
                    // `recover()` drives the execution on at once.
                    store.release_leases().await?;
                }
            }
        }
    }
    narrate::say(format!(
        "verdict on {execution} step {step}: {}",
        serde_json::to_string(&verdict)?
    ));
    Ok(())
}

/// Records a verdict in `store` and drives the flow on as far as it goes without a renderer.
async fn resolve_in<S: EventStore>(
    store: S,
    execution: &str,
    step: &str,
    verdict: &VerdictArg,
) -> Result<()> {
    let hub = app::hub();
    let runtime = app::compose(store, &hub, Arc::new(NoRenderer))?.build()?;
    resolve_on(&runtime, execution, step, verdict).await?;
    let state = runtime.wait(&ExecutionId::new(execution)?).await?;
    narrate::say(format!("execution {execution} is now {}", state.status()));
    runtime.shutdown().await;
    Ok(())
}
