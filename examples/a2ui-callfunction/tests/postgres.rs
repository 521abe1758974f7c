//! The example on PostgreSQL (`--store postgres://...`): the story as real processes (crash,
//! recovery parking the step in doubt, the verdict, completion, replay-check), and the
//! operator's commands on the database. Skipped loudly without a server (`cargo xtask pg-up`);
//! a failure with `LOOM_REQUIRE_POSTGRES=1` (as in CI).

use std::process::Command;
use std::sync::Arc;

use a2ui_callfunction::app::{self, CARD_NUMBER, FLOW, Order, SURFACE};
use a2ui_callfunction::client::read_ledger;
use a2ui_callfunction::narrate::Note;
use a2ui_callfunction::operator::{self, Target, VerdictArg};
use a2ui_callfunction::story::EXECUTION;
use futures::FutureExt;
use futures::future::BoxFuture;
use loom_kernel::StartOptions;
use loom_kernel::{EventStoreExt, ExecutionId, ExecutionStatus};
use loom_plugin_a2ui::AgentMessage;
use loom_plugin_a2ui::{CALL_FUNCTION_EFFECT, Transport, TransportError};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig};
use loom_store_postgres::{fresh_schema, server_url};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn in_own_runtime<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

async fn store(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::connect(PostgresStoreConfig::new(url).schema(schema))
        .await
        .unwrap()
}

#[test]
fn the_story_runs_on_postgresql_crash_in_doubt_verdict_and_all() {
    let Some(url) = server_url("a2ui-callfunction story on PostgreSQL") else {
        return;
    };
    let schema = fresh_schema("a2ui_story");
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_a2ui-callfunction"))
        .arg("--dir")
        .arg(dir.path().join("story"))
        .args(["--store", &url, "--schema", &schema])
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the story failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for told in [
        "runs on PostgreSQL",
        "SIGABRT",
        "EFFECT_INDOUBT",
        "EFFECT_RESOLVED",
        "deterministic",
        "The story is complete",
    ] {
        assert!(stdout.contains(told), "the story tells `{told}`:\n{stdout}");
    }
    assert!(
        !stdout.contains(CARD_NUMBER),
        "the card in clear:\n{stdout}"
    );
    let orders = read_ledger(&dir.path().join("story/orders.jsonl")).unwrap();
    assert_eq!(orders.len(), 1, "submitOrder ran once: {orders:?}");
    in_own_runtime(async {
        let store = store(&url, &schema).await;
        let state = store
            .fold(&ExecutionId::new(EXECUTION).unwrap())
            .await
            .unwrap();
        assert_eq!(state.status(), ExecutionStatus::Completed);
    });
    // The operator's listing reads the database (no file, no server needed).
    let listed = Command::new(env!("CARGO_BIN_EXE_a2ui-callfunction"))
        .args(["indoubt", "list", "--store", &url, "--schema", &schema])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("no step is in doubt"),
        "{listed:?}"
    );
}

/// A renderer that took the request and never answered: the reply is lost.
struct LosesReplies;

impl Transport for LosesReplies {
    fn call(
        &self,
        _request: AgentMessage,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Vec<u8>, TransportError>> {
        async { Err(TransportError::Lost("the socket closed".into())) }.boxed()
    }
}

#[test]
fn on_postgresql_the_operator_lists_the_step_and_a_verdict_finishes_the_flow() {
    let Some(url) = server_url("a2ui-callfunction operator on PostgreSQL") else {
        return;
    };
    let schema = fresh_schema("a2ui_operator");
    let e = ExecutionId::new("offline").unwrap();
    in_own_runtime(async {
        let hub = app::hub();
        let runtime = app::compose(store(&url, &schema).await, &hub, Arc::new(LosesReplies))
            .unwrap()
            .build()
            .unwrap();
        runtime
            .start(
                FLOW,
                &Order::demo(),
                StartOptions::new(e.clone()).grant(CALL_FUNCTION_EFFECT),
            )
            .await
            .unwrap();
        let _ = runtime.wait(&e).await;
        let locale = json!({"version": "v1.0", "rendererFunctionResponse": {
            "functionCallId": "offline:getLocale#1", "value": "fr-CH"}});
        hub.deliver_function_response(&runtime, SURFACE, locale.to_string().as_bytes())
            .await
            .unwrap();
        let _ = runtime.wait(&e).await;
        let approve = json!({"version": "v1.0", "action": {"name": "approve",
            "surfaceId": SURFACE, "sourceComponentId": "approve",
            "timestamp": "2026-12-01T00:00:00Z", "context": {}}});
        hub.deliver_action(&runtime, &e, SURFACE, approve.to_string().as_bytes())
            .await
            .unwrap();
        let state = runtime.wait(&e).await.unwrap();
        assert_eq!(state.status(), ExecutionStatus::InDoubt);
        runtime.shutdown().await;
    });
    let target = Target::Postgres {
        url: url.clone(),
        schema: schema.clone(),
    };
    let notes = in_own_runtime(operator::list(&target)).unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let Note::InDoubt { step, key, .. } = &notes[0] else {
        panic!("{notes:?}")
    };
    assert_eq!(key, &format!("offline:{step}"));
    let retry = in_own_runtime(operator::resolve(
        &target,
        "offline",
        step,
        VerdictArg::Retry,
    ));
    assert!(retry.is_err(), "a retry needs the renderer: refused");
    let wrong = in_own_runtime(operator::resolve(
        &target,
        "offline",
        "no-such-step",
        VerdictArg::Failed {
            message: "x".into(),
        },
    ));
    assert!(wrong.is_err(), "a step not in doubt is refused");
    in_own_runtime(operator::resolve(
        &target,
        "offline",
        step,
        VerdictArg::Completed {
            output: json!({"confirmation": "CONF-0042", "placed": true}),
        },
    ))
    .unwrap();
    in_own_runtime(async {
        let store = store(&url, &schema).await;
        assert_eq!(
            store.fold(&e).await.unwrap().status(),
            ExecutionStatus::Completed
        );
        assert!(
            loom_effect_runtime::steps_in_doubt(&store)
                .await
                .unwrap()
                .is_empty()
        );
    });
}
