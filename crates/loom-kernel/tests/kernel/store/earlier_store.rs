//! A store file written by an earlier build (`tests/fixtures/store-2026-12-07.redb` and its
//! journal, written by main at `4f3b88b`, before the execution's machine was one `Execution`) is read, folded,
//! replayed and driven on by this build: executions that completed, wait at a gate (one of a
//! `first_of`, one with a deadline), have a step in doubt, and wait for a child.
//!
//! `LOOM_WRITE_STORE_FIXTURE=<path> cargo test -p loom-kernel --test kernel
//! store::earlier_store::write -- --ignored` writes such a file with the build at hand.

use std::time::Duration;

use loom_kernel::kit::Replayer;
use loom_kernel::*;
use serde_json::{Value, json};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/store-2026-12-07.redb"
);
const T0: u64 = 1_800_000_000_000;

/// Charges once (non-idempotent), waits for an approval, mails (idempotent).
async fn order(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let charged = ctx.execute("charge", &json!({"cents": 500})).await?;
    let approved = ctx.suspend("Approval", "order").await?;
    let mailed = ctx.execute("mail", &json!("sent")).await?;
    Ok(json!([
        charged.to_value(),
        approved.to_value(),
        mailed.to_value()
    ]))
}

/// Waits for whichever of two answers comes first, or an hour.
async fn choice(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let picked = ctx
        .first_of(
            &[("Yes", "k"), ("No", "k")],
            Some(Duration::from_secs(3600)),
        )
        .await?;
    Ok(json!(matches!(picked, Selected::Gate { index: 1, .. })))
}

/// Waits for a child that waits for a signal.
async fn parent(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let out = ctx.child("kid", &json!(null)).await?;
    Ok(json!({"child": out.to_value()}))
}

async fn kid(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let signal = ctx.suspend("Signal", "go").await?;
    Ok(signal.to_value())
}

fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("order", 1, order))
        .with(flow_fn("choice", 1, choice))
        .with(flow_fn("parent", 1, parent))
        .with(flow_fn("kid", 1, kid))
}

/// The charge is answered by `answer` (in doubt for the execution named `doubt`).
fn runtime(store: DiskStore, clock: ManualClock) -> Runtime<DiskStore> {
    let charge = FnEffect::new(false, |call: EffectCall| async move {
        if call.execution_id.as_str() == "doubt" {
            EffectOutcome::in_doubt(ErrorInfo::new("gateway.timeout", "no answer"))
        } else {
            EffectOutcome::ok(Payload::from_value(&json!("charged")))
        }
    });
    let mail = FnEffect::new(true, |_call: EffectCall| async move {
        EffectOutcome::ok(Payload::from_value(&json!("mailed")))
    });
    Runtime::builder(store)
        .flows(&flows())
        .effect("charge", charge)
        .effect("mail", mail)
        .clock(clock)
        .build()
        .unwrap()
}

fn options(name: &str) -> StartOptions {
    StartOptions::new(ExecutionId::new(name).unwrap())
        .grant("charge")
        .grant("mail")
}

fn id(name: &str) -> ExecutionId {
    ExecutionId::new(name).unwrap()
}

#[tokio::test]
#[ignore = "writes the fixture: LOOM_WRITE_STORE_FIXTURE=<path>"]
async fn write() {
    let Ok(path) = std::env::var("LOOM_WRITE_STORE_FIXTURE") else {
        return;
    };
    let loom = runtime(DiskStore::open(&path).unwrap(), ManualClock::new(T0));
    let null = json!(null);
    for name in ["done", "waiting", "doubt"] {
        loom.start("order", &null, options(name)).await.unwrap();
        loom.wait(&id(name)).await.unwrap();
    }
    loom.resume(
        &id("done"),
        "Approval",
        "order",
        Payload::from_value(&json!("ok")),
    )
    .await
    .unwrap();
    loom.wait(&id("done")).await.unwrap();
    loom.start("choice", &null, options("choice"))
        .await
        .unwrap();
    loom.wait(&id("choice")).await.unwrap();
    loom.start("parent", &null, options("parent"))
        .await
        .unwrap();
    loom.wait(&id("parent")).await.unwrap();
    loom.shutdown().await;
}

#[tokio::test]
async fn a_store_an_earlier_build_wrote_folds_replays_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    std::fs::copy(FIXTURE, &path).unwrap();
    // The store's journal beside it, as the earlier build left it at its shutdown.
    std::fs::copy(
        format!("{FIXTURE}.journal"),
        dir.path().join("store.redb.journal"),
    )
    .unwrap();
    let store = DiskStore::open(&path).unwrap();
    let expected = [
        ("done", ExecutionStatus::Completed),
        ("waiting", ExecutionStatus::Suspended),
        ("doubt", ExecutionStatus::InDoubt),
        ("choice", ExecutionStatus::Suspended),
        ("parent", ExecutionStatus::Suspended),
        ("parent/kid#1", ExecutionStatus::Suspended),
    ];
    let replayer = Replayer::new(&flows(), Default::default()).unwrap();
    for (name, status) in expected {
        let log = store.read_all(&id(name)).await.unwrap();
        let state = ExecutionState::fold(&log).unwrap();
        assert_eq!(state.status(), status, "{name}");
        replayer
            .replay_log(log)
            .unwrap_or_else(|error| panic!("{name} does not replay: {error}"));
    }
    let loom = runtime(store, ManualClock::new(T0 + 1_000));
    loom.recover().await.unwrap();
    let payload = |v: Value| Payload::from_value(&v);
    loom.resume(&id("waiting"), "Approval", "order", payload(json!("yes")))
        .await
        .unwrap();
    let resolved = Verdict::Completed {
        output: payload(json!("charged after all")),
    };
    loom.resolve(&id("doubt"), "charge#1", resolved, None)
        .await
        .unwrap();
    loom.resume(&id("doubt"), "Approval", "order", payload(json!("yes")))
        .await
        .unwrap();
    loom.resume(&id("choice"), "No", "k", payload(json!("no")))
        .await
        .unwrap();
    loom.resume(&id("parent/kid#1"), "Signal", "go", payload(json!("went")))
        .await
        .unwrap();
    for name in ["waiting", "doubt", "choice", "parent"] {
        let ended = loom.wait_ended(&id(name)).await.unwrap();
        assert_eq!(ended.status(), ExecutionStatus::Completed, "{name}");
    }
    loom.shutdown().await;
}
