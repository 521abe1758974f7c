//! K9 with real processes: a child process runs a flow whose effect does its work (a line in a
//! file, synced) and then hangs, so its outcome is never recorded; the parent kills it with
//! SIGKILL and restarts on the same disk store.
//!
//! - Not idempotent: the step parks at `EFFECT_INDOUBT`, is never run again on its own, and
//!   each verdict (`retry`, `completed`, `failed`) leads where it should.
//! - Idempotent: the step runs again, with the same idempotency key.
//!
//! The child is this test binary run again with `LOOM_EFFECT_CRASH_DIR` set: it then runs
//! `effect_crash_child_entry`, which does nothing in an ordinary test run.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use loom_effect_runtime::*;
use loom_kernel::conformance::id;
use loom_kernel::{DiskStore, ErrorInfo, EventStoreExt, ExecutionStatus};
use loom_kernel::{Event, Verdict};
use loom_kernel::{FlowCtx, FlowError, ResolveError, Runtime, StartOptions, flow_fn};
use serde_json::{Value, json};

use crate::support::child::{child_runtime, child_test, say};

const DIR_ENV: &str = "LOOM_EFFECT_CRASH_DIR";
const KIND_ENV: &str = "LOOM_EFFECT_CRASH_IDEMPOTENT";
const EXECUTION: &str = "order-1";

async fn pay(ctx: FlowCtx, order: Value) -> Result<Value, FlowError> {
    let receipt = ctx.execute("charge", &order).await?;
    Ok(json!({"receipt": receipt.to_value()}))
}

/// The side effect: one line per run, `key dispatch`, synced before the handler goes on.
fn charge_the_card(dir: &Path, ctx: &EffectContext) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("charges"))?;
    writeln!(file, "{} {}", ctx.idempotency_key(), ctx.dispatch())?;
    file.sync_all()
}

fn charges(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("charges"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// The charge effect; in the child it hangs after charging, so no outcome is ever recorded.
fn registry(dir: PathBuf, idempotent: bool, hang: bool) -> EffectRegistry {
    let def = EffectDef::new("charge", move |ctx: EffectContext, _order: Value| {
        let charged = charge_the_card(&dir, &ctx);
        async move {
            charged.map_err(|err| EffectError::terminal("test.io", err.to_string()))?;
            if hang {
                std::future::pending::<()>().await;
            }
            Ok(json!({"key": ctx.idempotency_key()}))
        }
    })
    .without_timeout();
    let def = if idempotent { def.idempotent() } else { def };
    EffectRegistry::new().with(def).unwrap()
}

fn runtime(dir: &Path, idempotent: bool, hang: bool) -> Runtime<DiskStore> {
    // A runtime dropped a moment ago may still be closing the file on a driver's task.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let store = loop {
        match DiskStore::open(dir.join("loom.redb")) {
            Ok(store) => break store,
            Err(loom_kernel::OpenError::AlreadyOpen { .. })
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(err) => panic!("{err}"),
        }
    };
    Runtime::builder(store)
        .flow(flow_fn("pay", 1, pay))
        .plugin(&registry(dir.to_owned(), idempotent, hang))
        .build()
        .unwrap()
}

#[test]
fn effect_crash_child_entry() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let idempotent = std::env::var(KIND_ENV).is_ok_and(|v| v == "1");
    let tokio = child_runtime();
    tokio.block_on(async move {
        let rt = runtime(&dir, idempotent, true);
        let options = StartOptions::new(id(EXECUTION)).grant("charge");
        rt.start("pay", &json!({"amount": 5}), options)
            .await
            .unwrap();
        // The first append (EXECUTION_STARTED, STEP_STARTED) is durable.
        say("started");
        std::future::pending::<()>().await;
    });
}

/// Runs the child until it has charged the card and its start is durable, then kills it.
fn run_child_and_kill(dir: &Path, idempotent: bool) {
    let mut child = child_test(concat!(module_path!(), "::effect_crash_child_entry"))
        .env(DIR_ENV, dir)
        .env(KIND_ENV, if idempotent { "1" } else { "0" })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let started = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.ends_with("started"));
    assert!(started, "the child ended before its start was durable");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while charges(dir).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never charged"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// After the kill: restart, recover, and check the step is in doubt and was not run again.
async fn restart_in_doubt(dir: &Path) -> Runtime<DiskStore> {
    let rt = runtime(dir, false, false);
    assert_eq!(rt.recover().await.unwrap(), 1);
    let e = id(EXECUTION);
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::InDoubt);
    assert_eq!(charges(dir).len(), 1, "never run again without a verdict");
    let listed = steps_in_doubt(rt.store()).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].step_id, "charge#1");
    assert_eq!(listed[0].idempotency_key(), "order-1:charge#1");
    assert_eq!(
        listed[0].reason.as_ref().map(|r| r.code.as_str()),
        Some("loom.worker_stopped")
    );
    // A second restart does not run it either.
    drop(rt);
    let rt = runtime(dir, false, false);
    assert_eq!(
        rt.recover().await.unwrap(),
        0,
        "a step in doubt needs no driving"
    );
    assert_eq!(charges(dir).len(), 1);
    rt
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_non_idempotent_effect_parks_in_doubt_and_a_retry_verdict_runs_it_again() {
    let dir = tempfile::tempdir().unwrap();
    run_child_and_kill(dir.path(), false);
    let rt = restart_in_doubt(dir.path()).await;
    let e = id(EXECUTION);
    rt.resolve(&e, "charge#1", Verdict::Retry, Some("ops".into()))
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(
        charges(dir.path()),
        ["order-1:charge#1 1", "order-1:charge#1 2"],
        "the retry runs with the same key, as the next dispatch"
    );
    assert!(steps_in_doubt(rt.store()).await.unwrap().is_empty());
    let err = rt
        .resolve(&e, "charge#1", Verdict::Retry, None)
        .await
        .unwrap_err();
    assert!(matches!(err, ResolveError::NotInDoubt { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_verdict_serves_the_operators_output_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    run_child_and_kill(dir.path(), false);
    let rt = restart_in_doubt(dir.path()).await;
    let e = id(EXECUTION);
    let err = rt
        .resolve(&e, "charge#2", Verdict::Retry, None)
        .await
        .unwrap_err();
    assert!(matches!(err, ResolveError::NotInDoubt { .. }), "{err}");
    let output = json!({"key": "order-1:charge#1", "from": "the bank's statement"});
    rt.resolve(
        &e,
        "charge#1",
        Verdict::Completed {
            output: output.clone().into(),
        },
        Some("ops".into()),
    )
    .await
    .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(charges(dir.path()).len(), 1);
    let log = rt.store().read_all(&e).await.unwrap();
    let Some(Event::ExecutionCompleted(done)) = log.last().map(|e| &e.event) else {
        panic!("{log:?}")
    };
    assert_eq!(done.output.to_value(), json!({"receipt": output}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_verdict_fails_the_step_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    run_child_and_kill(dir.path(), false);
    let rt = restart_in_doubt(dir.path()).await;
    let e = id(EXECUTION);
    let error = ErrorInfo::new("ops.not_charged", "no such charge at the bank");
    rt.resolve(
        &e,
        "charge#1",
        Verdict::Failed { error },
        Some("ops".into()),
    )
    .await
    .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Failed);
    assert_eq!(charges(dir.path()).len(), 1);
    let log = rt.store().read_all(&e).await.unwrap();
    let Some(Event::ExecutionFailed(failed)) = log.last().map(|e| &e.event) else {
        panic!("{log:?}")
    };
    assert!(
        failed.error.message.contains("no such charge"),
        "{failed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_idempotent_effect_runs_again_with_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    run_child_and_kill(dir.path(), true);
    let rt = runtime(dir.path(), true, false);
    assert_eq!(rt.recover().await.unwrap(), 1);
    let e = id(EXECUTION);
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(
        charges(dir.path()),
        ["order-1:charge#1 1", "order-1:charge#1 2"]
    );
    assert!(steps_in_doubt(rt.store()).await.unwrap().is_empty());
}
