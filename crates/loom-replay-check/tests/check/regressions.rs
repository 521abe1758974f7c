//! What `replay-check` must never call deterministic (issue 10, items 2, 7 and 8): a flow that
//! panics on replay, a store file that is missing or empty, a completed log the flow now goes
//! past or fails.

use std::path::Path;

use loom_kernel::conformance::id;
use loom_kernel::{EventStoreExt, ExecutionStatus, MemoryStore};
use loom_kernel::{FlowCtx, FlowError, FlowSet, Runtime, StartOptions, flow_fn};
use loom_replay_check::check_command;
use loom_replay_check::{Checker, Finding};

async fn greet(ctx: FlowCtx, name: String) -> Result<String, FlowError> {
    let pick: u64 = ctx.decide("variant", || 2)?;
    Ok(format!("hello {name} #{pick}"))
}

async fn greet_panics(_ctx: FlowCtx, _name: String) -> Result<String, FlowError> {
    panic!("the greeting is broken")
}

async fn greet_fails(ctx: FlowCtx, _name: String) -> Result<String, FlowError> {
    let _: u64 = ctx.decide("variant", || 2)?;
    Err(FlowError::new("broken", "the greeting now fails"))
}

async fn greet_goes_on(ctx: FlowCtx, name: String) -> Result<String, FlowError> {
    let pick: u64 = ctx.decide("variant", || 2)?;
    let again: u64 = ctx.decide("again", || 3)?;
    Ok(format!("hello {name} #{pick}{again}"))
}

/// Writes the log of one completed greeting into `dir`.
fn record(dir: &Path) -> Vec<loom_kernel::EventEnvelope> {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = MemoryStore::new();
        let loom = Runtime::builder(store.clone())
            .flow(flow_fn("greet", 1, greet))
            .build()
            .unwrap();
        let execution = loom
            .start("greet", &"ada", StartOptions::new(id("greet-ada")))
            .await
            .unwrap();
        let state = loom.wait(&execution).await.unwrap();
        assert_eq!(state.status(), ExecutionStatus::Completed);
        let log = store.read_all(&execution).await.unwrap();
        loom_replay_check::write_log(dir, &log).unwrap();
        log
    })
}

fn boxed(
    flow: impl Fn(FlowCtx, String) -> futures::future::BoxFuture<'static, Result<String, FlowError>>
    + Send
    + Sync
    + 'static,
) -> FlowSet {
    FlowSet::new().with(flow_fn("greet", 1, flow))
}

#[test]
fn a_flow_that_panics_on_replay_fails_the_check_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let log = record(dir.path());
    let panics = boxed(|ctx, name| Box::pin(greet_panics(ctx, name)));
    let outcome = Checker::new(&panics).unwrap().check(log);
    assert!(
        !matches!(outcome.finding, Finding::Deterministic),
        "{outcome:?}"
    );
    let logs = dir.path().to_str().unwrap();
    assert_ne!(check_command(&panics, ["replay-check", "--logs", logs]), 0);
    let fine = boxed(|ctx, name| Box::pin(greet(ctx, name)));
    assert_eq!(check_command(&fine, ["replay-check", "--logs", logs]), 0);
}

#[test]
fn a_completed_log_the_flow_now_goes_past_or_fails_is_not_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let log = record(dir.path());
    let logs = dir.path().to_str().unwrap();
    for changed in [
        boxed(|ctx, name| Box::pin(greet_goes_on(ctx, name))),
        boxed(|ctx, name| Box::pin(greet_fails(ctx, name))),
    ] {
        let outcome = Checker::new(&changed).unwrap().check(log.clone());
        assert!(
            !matches!(outcome.finding, Finding::Deterministic),
            "{outcome:?}"
        );
        assert_eq!(check_command(&changed, ["replay-check", "--logs", logs]), 1);
    }
}

#[test]
fn a_missing_or_empty_store_file_fails_and_is_never_created() {
    let dir = tempfile::tempdir().unwrap();
    let flows = boxed(|ctx, name| Box::pin(greet(ctx, name)));
    let missing = dir.path().join("missing.redb");
    assert_eq!(
        check_command(
            &flows,
            ["replay-check", "--store", missing.to_str().unwrap()]
        ),
        2
    );
    assert!(
        !missing.exists(),
        "replay-check created the store it checks"
    );
    let empty = dir.path().join("empty.redb");
    std::fs::write(&empty, b"").unwrap();
    assert_eq!(
        check_command(&flows, ["replay-check", "--store", empty.to_str().unwrap()]),
        2
    );
    assert_eq!(
        std::fs::metadata(&empty).unwrap().len(),
        0,
        "the empty file was written"
    );
}

const VARIANT: loom_kernel::EffectHandle<String, String> =
    loom_kernel::EffectHandle::new("text.variant");

#[test]
fn flows_declaring_their_effects_are_checked_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = record(dir.path());
    let declared = FlowSet::new().with(flow_fn("greet", 1, greet).uses(&[&VARIANT]));
    let outcome = Checker::new(&declared).unwrap().check(log);
    assert_eq!(outcome.finding, Finding::Deterministic);
}

#[test]
fn a_log_nested_too_deep_to_replay_is_reported_as_an_error_not_a_divergence() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path());
    let path = loom_replay_check::path_for(dir.path(), &id("greet-ada"));
    let text = std::fs::read_to_string(&path).unwrap();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let text = text.replacen("\"ada\"", &deep, 1);
    assert!(text.contains("[[[["), "the input was replaced");
    std::fs::write(&path, text).unwrap();

    let fine = FlowSet::new().with(flow_fn("greet", 1, greet));
    let finding = match loom_replay_check::read_log(&path) {
        Ok(log) => Checker::new(&fine).unwrap().check(log).finding,
        Err(error) => Finding::Error {
            detail: error.to_string(),
        },
    };
    assert!(matches!(finding, Finding::Error { .. }), "{finding:?}");
    let logs = dir.path().to_str().unwrap();
    assert_eq!(check_command(&fine, ["replay-check", "--logs", logs]), 2);
}

#[test]
fn every_valid_id_names_a_log_file_that_fits_and_is_its_own() {
    let dir = Path::new("logs");
    let ids = [
        "x".repeat(256),
        format!("{}y", "x".repeat(255)),
        "/".repeat(256),
        "é".repeat(128),
        "short/child#1".to_owned(),
    ];
    let names: Vec<String> = ids
        .iter()
        .map(|text| {
            let path = loom_replay_check::path_for(dir, &id(text));
            path.file_name().unwrap().to_str().unwrap().to_owned()
        })
        .collect();
    for name in &names {
        assert!(name.len() <= 255, "{} bytes: {name}", name.len());
        assert!(name.ends_with(".jsonl"), "{name}");
    }
    let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), names.len(), "{names:?}");
    assert_eq!(names[4], "short%2Fchild#1.jsonl");
}
