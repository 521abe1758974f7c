//! replay-check before a deploy: an unguarded change to a flow breaks the executions the old
//! code recorded (named, by flow and version, with the first difference; exit code 1), while the
//! same change under `ctx.patched` breaks none (exit code 0).

use std::path::Path;

use loom_kernel::conformance::id;
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FlowSet, FnEffect, Runtime, StartOptions,
    flow_fn,
};
use loom_kernel::{EventStoreExt, MemoryStore};
use loom_replay_check::Checker;
use loom_replay_check::check_command;
use loom_replay_check::summary;
use serde_json::{Value, json};

use crate::support::child::child_test;

/// The code in production: reserve, wait for approval, charge.
async fn order_v1(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("reserve", &json!({})).await?;
    ctx.suspend("Approval", "a").await?;
    ctx.execute("charge", &json!({})).await?;
    Ok(json!("done"))
}

/// The change, unguarded: a fraud check before the approval.
async fn order_unguarded(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("reserve", &json!({})).await?;
    ctx.execute("fraud.check", &json!({})).await?;
    ctx.suspend("Approval", "a").await?;
    ctx.execute("charge", &json!({})).await?;
    Ok(json!("done"))
}

/// The same change, guarded.
async fn order_patched(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("reserve", &json!({})).await?;
    if ctx.patched("fraud-check")? {
        ctx.execute("fraud.check", &json!({})).await?;
    }
    ctx.suspend("Approval", "a").await?;
    ctx.execute("charge", &json!({})).await?;
    Ok(json!("done"))
}

async fn greet(_ctx: FlowCtx, name: String) -> Result<String, FlowError> {
    Ok(format!("hello {name}"))
}

fn with(order: FlowSet) -> FlowSet {
    order.with(flow_fn("greet", 1, greet))
}

fn ok() -> FnEffect<impl Fn(EffectCall) -> std::future::Ready<EffectOutcome> + Send + Sync> {
    FnEffect::new(true, |_| {
        std::future::ready(EffectOutcome::ok(json!("ok").into()))
    })
}

/// Records, with the old code, one order parked at its gate, one completed, and a greeting,
/// and exports them to `dir`.
async fn record(dir: &Path) {
    let store = MemoryStore::new();
    let rt = Runtime::builder(store.clone())
        .flows(&with(FlowSet::new().with(flow_fn("order", 1, order_v1))))
        .effect("reserve", ok())
        .effect("charge", ok())
        .build()
        .unwrap();
    let options = |name: &str| StartOptions::new(id(name)).grant("reserve").grant("charge");
    for name in ["order-parked", "order-done"] {
        rt.start("order", &json!({}), options(name)).await.unwrap();
        rt.wait(&id(name)).await.unwrap();
    }
    rt.resume(&id("order-done"), "Approval", "a", json!("yes").into())
        .await
        .unwrap();
    rt.wait(&id("order-done")).await.unwrap();
    rt.start("greet", "ada", options("greet-ada"))
        .await
        .unwrap();
    rt.wait(&id("greet-ada")).await.unwrap();
    for name in ["order-parked", "order-done", "greet-ada"] {
        loom_replay_check::write_log(dir, &store.read_all(&id(name)).await.unwrap()).unwrap();
    }
}

fn outcomes(flows: &FlowSet, dir: &Path) -> Vec<loom_replay_check::Outcome> {
    let checker = Checker::new(flows).unwrap();
    loom_replay_check::list_logs(dir)
        .unwrap()
        .iter()
        .map(|path| checker.check(loom_replay_check::read_log(path).unwrap()))
        .collect()
}

#[test]
fn an_unguarded_change_breaks_old_executions_and_a_patched_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(record(dir.path()));
    let args = || {
        vec![
            "replay-check".to_owned(),
            "--logs".to_owned(),
            dir.path().display().to_string(),
            "--jobs".to_owned(),
            "1".to_owned(),
        ]
    };

    let unguarded = with(FlowSet::new().with(flow_fn("order", 1, order_unguarded)));
    assert_eq!(check_command(&unguarded, args()), 1, "a divergence exits 1");
    let found = outcomes(&unguarded, dir.path());
    let broken = loom_replay_check::breakages(&found);
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert_eq!(broken[0].flow.as_deref(), Some("order"));
    assert_eq!(broken[0].version, Some(1));
    assert_eq!(broken[0].executions, ["order-done", "order-parked"]);
    assert_eq!(broken[0].first.execution, "order-done");
    // The first step is one event (its outcome): the store claimed the new id.
    assert_eq!(broken[0].first.seq, 2);
    assert_eq!(
        broken[0].first.recorded,
        "EXECUTION_SUSPENDED gate 'Approval#1' (Approval, key 'a')"
    );
    assert_eq!(
        broken[0].first.attempted,
        "calls effect 'fraud.check' as step 'fraud.check#1'"
    );
    let text = summary(&found);
    assert!(
        text.starts_with("The current code would break 2 of 3 stored executions"),
        "{text}"
    );
    assert!(
        text.contains("order v1: 2 execution(s): order-done, order-parked"),
        "{text}"
    );

    let patched = with(FlowSet::new().with(flow_fn("order", 1, order_patched)));
    assert_eq!(check_command(&patched, args()), 0, "nothing breaks");
    let found = outcomes(&patched, dir.path());
    assert!(loom_replay_check::breakages(&found).is_empty(), "{found:?}");
    assert_eq!(summary(&found), "");
}

/// Set in the child process of the test below: the folder of the logs it checks.
const JSON_CHILD_LOGS: &str = "LOOM_REPLAY_CHECK_JSON_CHILD_LOGS";

/// `--json` prints `breaks` as the library finds them: the command line runs in a child process
/// (this test binary again), whose standard output is read here.
#[test]
fn the_printed_json_report_lists_the_breaks() {
    let unguarded = with(FlowSet::new().with(flow_fn("order", 1, order_unguarded)));
    if let Some(logs) = std::env::var_os(JSON_CHILD_LOGS) {
        let logs = logs.to_string_lossy().into_owned();
        let args = ["replay-check", "--logs", &logs, "--jobs", "1", "--json"];
        std::process::exit(i32::from(check_command(&unguarded, args)));
    }
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(record(dir.path()));
    let child = child_test(concat!(
        module_path!(),
        "::the_printed_json_report_lists_the_breaks"
    ))
    .env(JSON_CHILD_LOGS, dir.path())
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert_eq!(
        child.status.code(),
        Some(1),
        "a divergence exits 1: {stdout}"
    );
    // The test harness may print its own words before the report on the same line.
    let line = stdout
        .lines()
        .find(|line| line.contains("\"breaks\""))
        .unwrap_or_else(|| panic!("no JSON report on stdout: {stdout}"));
    let report: Value = serde_json::from_str(&line[line.find('{').unwrap()..]).unwrap();
    assert_eq!(
        report["breaks"],
        json!([{
            "flow": "order",
            "version": 1,
            "executions": ["order-done", "order-parked"],
            "first": {
                "execution": "order-done",
                "seq": 2,
                "recorded": "EXECUTION_SUSPENDED gate 'Approval#1' (Approval, key 'a')",
                "attempted": "calls effect 'fraud.check' as step 'fraud.check#1'",
            },
        }])
    );
    assert_eq!(report["summary"]["executions"], 3);
    assert_eq!(report["summary"]["divergent"], 2);
    // The same as the library's own listing of the same logs.
    let found = outcomes(&unguarded, dir.path());
    let broken = loom_replay_check::breakages(&found);
    let listed = report["breaks"].as_array().unwrap();
    assert_eq!(listed.len(), broken.len());
    assert_eq!(listed[0]["executions"], json!(broken[0].executions));
}

#[test]
fn a_childs_log_exports_to_one_file_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let child = id("order-1/notify#1");
    let path = loom_replay_check::path_for(dir.path(), &child);
    assert_eq!(path, dir.path().join("order-1%2Fnotify#1.jsonl"));
    let log = vec![loom_kernel::EventEnvelope::new(
        child.clone(),
        0,
        loom_kernel::Event::ExecutionStarted(loom_kernel::ExecutionStarted {
            flow: "notify".into(),
            flow_version: 1,
            input: json!(null).into(),
            capabilities: Default::default(),
            budget: None,
        }),
    )];
    assert_eq!(
        loom_replay_check::write_log(dir.path(), &log).unwrap(),
        Some(path.clone())
    );
    assert_eq!(
        loom_replay_check::read_log(&path).unwrap()[0].execution_id,
        child
    );
}
