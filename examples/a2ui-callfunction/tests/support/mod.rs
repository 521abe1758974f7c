//! What the example's tests share: the renderer's replies (the locale, a click on Approve), a
//! renderer that loses every reply, a checkout driven until its order is in doubt, and the
//! operator's verdicts on it, on whichever store.
#![allow(dead_code)]

#[path = "../../../../crates/loom-console/tests/support/chromium.rs"]
pub mod chromium;

use std::sync::Arc;

use a2ui_callfunction::app::{self, FLOW, Order, SURFACE};
use a2ui_callfunction::narrate::Note;
use a2ui_callfunction::operator::{self, Target, VerdictArg};
use futures::FutureExt;
use futures::future::BoxFuture;
use loom_kernel::StartOptions;
use loom_kernel::{EventStore, ExecutionId, ExecutionStatus, Runtime};
use loom_plugin_a2ui::AgentMessage;
use loom_plugin_a2ui::{
    CALL_FUNCTION_EFFECT, SurfaceHub, Transport, TransportError, per_execution_wire_id,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The renderer's answer to the flow's read of its locale.
pub fn locale_reply(execution: &ExecutionId) -> Vec<u8> {
    json!({"version": "v1.0", "rendererFunctionResponse": {
        "functionCallId": format!("{}:getLocale#1", execution.as_str()), "value": "fr-CH"}})
    .to_string()
    .into_bytes()
}

/// A click on Approve on `execution`'s surface, with the context the button binds (`orderId`).
pub fn approve(execution: &ExecutionId) -> Vec<u8> {
    json!({"version": "v1.0", "action": {"name": "approve", "surfaceId": per_execution_wire_id(execution, SURFACE),
        "sourceComponentId": "approve", "timestamp": "2026-12-01T00:00:00Z", "context": {"orderId": Order::demo().id}}})
    .to_string()
    .into_bytes()
}

/// A renderer that took the request and never answered: the reply is lost.
pub struct LosesReplies;

impl Transport for LosesReplies {
    fn call(
        &self,
        _request: AgentMessage,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Vec<u8>, TransportError>> {
        async { Err(TransportError::Lost("the socket closed".into())) }.boxed()
    }
}

/// Runs `future` on a runtime of its own, dropped after: its tasks, and the store handles they
/// hold, are gone when it returns, as when an operator command's process exits.
pub fn in_own_runtime<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Starts the checkout `e` on `runtime` and answers its read of the locale.
pub async fn start_and_answer_the_locale<S: EventStore>(
    runtime: &Runtime<S>,
    hub: &SurfaceHub,
    e: &ExecutionId,
) {
    runtime
        .start(
            FLOW,
            &Order::demo(),
            StartOptions::new(e.clone()).grant(CALL_FUNCTION_EFFECT),
        )
        .await
        .unwrap();
    let _ = runtime.wait(e).await;
    hub.deliver_function_response(runtime, SURFACE, &locale_reply(e))
        .await
        .unwrap();
}

/// Runs the example's binary with `args`, checks it succeeded, and returns what it printed on
/// standard output and standard error.
pub fn run_example<I: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = I>,
) -> (String, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_a2ui-callfunction"))
        .args(args)
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "the story failed: {}\n{stdout}\n{stderr}",
        output.status
    );
    (stdout, stderr)
}

/// Starts the checkout `e` on `store` with a renderer that loses the order's reply, answers the
/// locale, clicks Approve, and checks the order step is in doubt; then shuts the runtime down.
pub async fn checkout_in_doubt<S: EventStore + Clone>(store: S, e: &ExecutionId) {
    let hub = app::hub();
    let runtime = app::compose(store, &hub, Arc::new(LosesReplies))
        .unwrap()
        .build()
        .unwrap();
    start_and_answer_the_locale(&runtime, &hub, e).await;
    let _ = runtime.wait(e).await;
    hub.deliver_action(&runtime, e, SURFACE, &approve(e))
        .await
        .unwrap();
    let state = runtime.wait(e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::InDoubt);
    runtime.shutdown().await;
}

/// With no server running, the operator lists the one step in doubt of `execution` on
/// `target`; a retry (it needs the renderer) and a step not in doubt are refused; the verdict
/// `completed` with confirmation CONF-0042 is recorded.
pub fn operator_completes_the_step(target: &Target, execution: &str) {
    let notes = in_own_runtime(operator::list(target)).unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let Note::InDoubt { step, key, .. } = &notes[0] else {
        panic!("{notes:?}")
    };
    assert_eq!(key, &format!("{execution}:{step}"));
    let retry = in_own_runtime(operator::resolve(
        target,
        execution,
        step,
        VerdictArg::Retry,
    ));
    assert!(
        retry.is_err(),
        "a retry needs the renderer: refused offline"
    );
    let wrong = in_own_runtime(operator::resolve(
        target,
        execution,
        "no-such-step",
        VerdictArg::Failed {
            message: "x".into(),
        },
    ));
    assert!(wrong.is_err(), "a step not in doubt is refused");
    in_own_runtime(operator::resolve(
        target,
        execution,
        step,
        VerdictArg::Completed {
            output: json!({"confirmation": "CONF-0042", "placed": true}),
        },
    ))
    .unwrap();
}

/// A renderer credential for `execution`'s checkout, minted with the key of the server whose
/// store file is `store` (kept beside it; whichever of the test and the server comes first
/// makes it, and both read the one made), good for an hour.
pub fn credential(store: &std::path::Path, execution: &str) -> String {
    let key = renderer_key(store);
    let binding = loom_plugin_a2ui::Binding::new(ExecutionId::new(execution).unwrap(), SURFACE);
    key.mint(&binding, loom_plugin_a2ui::unix_now() + 3600)
}

/// The key renderer credentials are signed with by the server whose store file is `store`.
pub fn renderer_key(store: &std::path::Path) -> loom_plugin_a2ui::CredentialKey {
    let path = std::path::PathBuf::from(format!("{}.renderer-key", store.display()));
    a2ui_callfunction::renderer_key::load_or_create(&path).unwrap()
}
