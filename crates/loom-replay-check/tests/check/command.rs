//! The command and the checker on recorded logs: executions of the flows below are recorded
//! into a temporary directory, then checked, exported, damaged and checked against a changed
//! flow; logs an earlier build recorded (`tests/earlier-builds/`) still replay. (The
//! repository's one set of golden logs, committed and replayed on every run, is the
//! example's: `examples/quickstart/golden/`, checked by `examples/quickstart/tests/quickstart/golden.rs`.)

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use loom_kernel::conformance::id;
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FlowSet, FnEffect, Runtime, StartOptions,
    flow_fn,
};
use loom_kernel::{EventStoreExt, ExecutionStatus, MemoryStore, Payload};
use loom_replay_check::check_command;
use loom_replay_check::{Checker, Finding};
use serde_json::{Value, json};

async fn order(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let reserved = ctx.execute("inventory.reserve", &input).await?;
    let at = ctx.now()?;
    ctx.emit_surface_patch(
        "order",
        json!([{"op": "set", "path": "status", "value": "reserved"}]).into(),
    )?;
    let approval = ctx.suspend("Approval", "approve").await?;
    let (a, b) = futures::join!(
        ctx.execute("notify", &json!({"to": "ops"})),
        ctx.execute("notify", &json!({"to": "customer"}))
    );
    Ok(json!({
        "reserved": reserved.to_value(), "at": at, "approval": approval.to_value(),
        "notified": [a?.to_value(), b?.to_value()],
    }))
}

/// The same flow after a careless edit: the customer is notified before approval.
async fn order_changed(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let reserved = ctx.execute("inventory.reserve", &input).await?;
    let at = ctx.now()?;
    ctx.execute("notify", &json!({"to": "customer"})).await?;
    Ok(json!({"reserved": reserved.to_value(), "at": at}))
}

async fn greet(ctx: FlowCtx, name: String) -> Result<String, FlowError> {
    let pick: u64 = ctx.decide("variant", || 2)?;
    Ok(format!("hello {name} #{pick}"))
}

fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("order", 1, order))
        .with(flow_fn("greet", 1, greet))
}

fn echo() -> FnEffect<impl Fn(EffectCall) -> std::future::Ready<EffectOutcome> + Send + Sync> {
    FnEffect::new(true, |call: EffectCall| {
        std::future::ready(EffectOutcome::ok(
            json!({"key": call.idempotency_key(), "input": call.input.to_value()}).into(),
        ))
    })
}

/// Records the executions: one completed order, one parked at its gate, one greeting.
async fn record(dir: &Path) {
    let store = MemoryStore::new();
    let rt = Runtime::builder(store.clone())
        .flows(&flows())
        .effect("inventory.reserve", echo())
        .effect("notify", echo())
        .build()
        .unwrap();
    for (name, resume) in [("order-done", true), ("order-waiting", false)] {
        let e = rt
            .start(
                "order",
                &json!({"sku": "A1", "qty": 2}),
                StartOptions::new(id(name))
                    .grant("inventory.reserve")
                    .grant("notify"),
            )
            .await
            .unwrap();
        assert_eq!(
            rt.wait(&e).await.unwrap().status(),
            ExecutionStatus::Suspended
        );
        if resume {
            rt.resume(&e, "Approval", "approve", Payload::from(json!("yes")))
                .await
                .unwrap();
            assert_eq!(
                rt.wait(&e).await.unwrap().status(),
                ExecutionStatus::Completed
            );
        }
    }
    let e = rt
        .start(
            "greet",
            &"ada",
            StartOptions::new(id("greet-ada")).grant("notify"),
        )
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    std::fs::create_dir_all(dir).unwrap();
    for name in ["order-done", "order-waiting", "greet-ada"] {
        let log = store.read_all(&id(name)).await.unwrap();
        loom_replay_check::write_log(dir, &log).unwrap();
    }
}

/// The recorded logs, in a directory of their own, sorted by name.
struct Recorded {
    dir: TempDir,
    logs: Vec<PathBuf>,
}

impl Recorded {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(record(dir.path()));
        let logs = loom_replay_check::list_logs(dir.path()).unwrap();
        assert_eq!(logs.len(), 3);
        Self { dir, logs }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn log(&self, file: &str) -> &Path {
        self.logs.iter().find(|path| path.ends_with(file)).unwrap()
    }
}

/// Asserts that `log`, read from `path`, replays deterministically.
fn assert_replays(checker: &Checker, path: &Path, log: Vec<loom_kernel::EventEnvelope>) {
    let finding = checker.check(log).finding;
    assert_eq!(finding, Finding::Deterministic, "{}", path.display());
}

#[test]
fn recorded_logs_replay_deterministically() {
    let checker = Checker::new(&flows()).unwrap();
    for path in &Recorded::new().logs {
        assert_replays(&checker, path, loom_replay_check::read_log(path).unwrap());
    }
}

/// Logs of these flows that an earlier build recorded (before an idempotent step recorded its
/// `STEP_STARTED`), kept as they were and never recorded again: today's code replays them
/// deterministically.
#[test]
fn logs_an_earlier_build_recorded_replay_deterministically() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/earlier-builds");
    let logs = loom_replay_check::list_logs(&dir).unwrap();
    assert_eq!(logs.len(), 3);
    let checker = Checker::new(&flows()).unwrap();
    for path in logs {
        let log = loom_replay_check::read_log(&path).unwrap();
        assert!(
            !log.iter().any(|e| e.event.type_name() == "STEP_STARTED"),
            "{}: recorded by an earlier build",
            path.display()
        );
        assert_replays(&checker, &path, log);
    }
}

#[test]
fn a_changed_flow_is_caught_at_the_right_seq() {
    let changed = FlowSet::new()
        .with(flow_fn("order", 1, order_changed))
        .with(flow_fn("greet", 1, greet));
    let checker = Checker::new(&changed).unwrap();
    let recorded = Recorded::new();
    let outcome =
        checker.check(loom_replay_check::read_log(recorded.log("order-done.jsonl")).unwrap());
    assert_eq!(
        outcome.finding,
        Finding::Divergent {
            // The first step is one event (its outcome): the store claimed the new id.
            seq: 3,
            recorded: "SURFACE_PATCH 'surface:order#1' on surface 'order'".into(),
            attempted: "calls effect 'notify' as step 'notify#1'".into(),
        }
    );
}

/// `replay-check --logs <recorded> <extra>...`.
fn logs_args(recorded: &Recorded, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "replay-check".to_owned(),
        "--logs".to_owned(),
        recorded.path().to_str().unwrap().to_owned(),
    ];
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    args
}

#[test]
fn the_command_reports_with_exit_codes() {
    let recorded = Recorded::new();
    let args = |extra: &[&str]| logs_args(&recorded, extra);
    assert_eq!(check_command(&flows(), args(&[])), 0);
    assert_eq!(
        check_command(&flows(), args(&["--json", "--flow", "greet"])),
        0
    );
    let changed = FlowSet::new()
        .with(flow_fn("order", 1, order_changed))
        .with(flow_fn("greet", 1, greet));
    assert_eq!(check_command(&changed, args(&[])), 1);
    assert_eq!(check_command(&changed, args(&["--flow", "greet"])), 0);
    assert_eq!(
        check_command(&FlowSet::new(), args(&[])),
        2,
        "flows that are not registered cannot be checked"
    );
    assert_eq!(check_command(&flows(), ["replay-check"]), 2, "no source");
    // Bad arguments: exit code 2, and the usage error goes through the captured output.
    assert_eq!(
        check_command(&flows(), ["replay-check", "--logs", "x", "--jobs", "many"]),
        2
    );
    assert_eq!(
        loom_replay_check::export_main(["export-log", "--store", "x.redb"]),
        std::process::ExitCode::from(2)
    );
    assert_eq!(
        check_command(&flows(), ["replay-check", "--logs", "/nonexistent/dir"]),
        2
    );
}

#[test]
fn damaged_and_newer_logs_are_errors_not_divergences() {
    let dir = tempfile::tempdir().unwrap();
    let recorded = Recorded::new();
    let text = std::fs::read_to_string(recorded.log("greet-ada.jsonl")).unwrap();
    std::fs::write(dir.path().join("truncated.jsonl"), &text[..text.len() / 2]).unwrap();
    let newer = text.replacen("\"schema\":1", "\"schema\":7", 1);
    std::fs::write(dir.path().join("newer.jsonl"), newer).unwrap();
    for (file, expected) in [
        ("truncated.jsonl", "truncated.jsonl:"),
        ("newer.jsonl", "EVENT_SCHEMA 7"),
    ] {
        let err = loom_replay_check::read_log(&dir.path().join(file)).unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
    }
    let args = ["replay-check", "--logs", dir.path().to_str().unwrap()];
    assert_eq!(check_command(&flows(), args), 2);
}

/// Appends each of the recorded logs to `store`, as their executions recorded them.
async fn append_logs(store: &loom_kernel::DiskStore, recorded: &Recorded) {
    use loom_kernel::EventStore;
    for path in &recorded.logs {
        let log = loom_replay_check::read_log(path).unwrap();
        let events: Vec<_> = log.iter().map(|e| e.event.clone()).collect();
        store
            .append(&log[0].execution_id, 0, &events)
            .await
            .unwrap();
    }
}

#[test]
fn a_store_exports_and_checks_the_same_as_its_logs() {
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("store.redb");
    let recorded = Recorded::new();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = loom_kernel::DiskStore::open(&store_path).unwrap();
        append_logs(&store, &recorded).await;
    });
    let out = dir.path().join("exported");
    let (store_arg, out_arg) = (store_path.to_str().unwrap(), out.to_str().unwrap());
    let export =
        loom_replay_check::export_main(["export-log", "--store", store_arg, "--out", out_arg]);
    assert_eq!(
        format!("{export:?}"),
        format!("{:?}", std::process::ExitCode::SUCCESS)
    );
    assert_eq!(loom_replay_check::list_logs(&out).unwrap().len(), 3);
    assert_eq!(
        check_command(&flows(), ["replay-check", "--store", store_arg]),
        0
    );
    assert_eq!(
        check_command(&flows(), ["replay-check", "--logs", out_arg]),
        0
    );
    assert_eq!(
        check_command(
            &flows(),
            [
                "replay-check",
                "--store",
                store_arg,
                "--execution",
                "greet-ada",
                "--json"
            ]
        ),
        0
    );
}

#[test]
fn stored_records_check_as_their_logs_do() {
    use loom_kernel::EventStore;
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("store.redb");
    let logs: Vec<_> = Recorded::new()
        .logs
        .iter()
        .map(|path| loom_replay_check::read_log(path).unwrap())
        .collect();
    let changed = FlowSet::new()
        .with(flow_fn("order", 1, order_changed))
        .with(flow_fn("greet", 1, greet));
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = loom_kernel::DiskStore::open(&store_path).unwrap();
        for log in &logs {
            let events: Vec<_> = log.iter().map(|e| e.event.clone()).collect();
            store
                .append(&log[0].execution_id, 0, &events)
                .await
                .unwrap();
        }
        let ids: Vec<_> = logs.iter().map(|log| log[0].execution_id.clone()).collect();
        let stored = store.read_stored_logs(&ids).await.unwrap();
        assert_eq!(stored.len(), logs.len());
        let mut divergent = 0;
        for flows in [flows(), changed] {
            let checker = Checker::new(&flows).unwrap();
            for (stored, log) in stored.iter().zip(&logs) {
                assert_eq!(stored.execution_id(), &log[0].execution_id);
                assert_eq!(stored.len(), log.len());
                let outcome = checker.check_stored(stored);
                assert_eq!(outcome, checker.check(log.clone()));
                divergent += usize::from(matches!(outcome.finding, Finding::Divergent { .. }));
            }
        }
        // The changed flow's two orders diverge; its greeting and the unchanged flows do not.
        assert_eq!(divergent, 2);
    });
}

#[test]
fn a_source_with_flows_the_program_does_not_have_is_refused_naming_them() {
    let recorded = Recorded::new();
    let args = |extra: &[&str]| logs_args(&recorded, extra);
    // A program with only `order` cannot say whether the `greet` executions replay: the whole
    // source is refused, not checked in part and reported as a divergence to guard.
    let only_order = FlowSet::new().with(flow_fn("order", 1, order));
    assert_eq!(check_command(&only_order, args(&[])), 2);
    assert_eq!(check_command(&only_order, args(&["--json"])), 2);
    // The flows it has can still be checked on their own.
    assert_eq!(check_command(&only_order, args(&["--flow", "order"])), 0);
    // Another version of a flow is another flow.
    let order_v2 = FlowSet::new()
        .with(flow_fn("order", 2, order))
        .with(flow_fn("greet", 1, greet));
    assert_eq!(check_command(&order_v2, args(&["--flow", "order"])), 2);
}

/// What a crash leaves (the store file and its journal copied while the store is open) checks
/// as the whole store does, read-only: redb's repair and the journal applied in memory, the
/// files not written.
#[test]
fn a_store_left_by_a_crash_checks_without_being_written() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.redb");
    let image = dir.path().join("image.redb");
    let recorded = Recorded::new();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = loom_kernel::DiskStore::open(&live).unwrap();
        append_logs(&store, &recorded).await;
        std::fs::copy(&live, &image).unwrap();
        std::fs::copy(
            dir.path().join("live.redb.journal"),
            dir.path().join("image.redb.journal"),
        )
        .unwrap();
    });
    let before = std::fs::read(&image).unwrap();
    assert_eq!(
        check_command(
            &flows(),
            ["replay-check", "--store", image.to_str().unwrap()]
        ),
        0
    );
    assert!(
        std::fs::read(&image).unwrap() == before,
        "the check wrote to the store"
    );
}
