//! K10-R6 in replay-check: a divergence found with a classification never prints a
//! classified value, whether the classification comes from `--mask`, `--mask-file` or the
//! `<store>.masks` file beside the store.

use clap::Parser;
use loom_kernel::conformance::id;
use loom_kernel::{DataClassification, MASK};
use loom_kernel::{EventStoreExt, ExecutionStatus, MemoryStore};
use loom_kernel::{FlowCtx, FlowError, FlowSet, Runtime, StartOptions, flow_fn};
use loom_replay_check::CheckArgs;
use loom_replay_check::{Checker, Finding};
use serde_json::{Value, json};

const CARD: &str = "4111111111111111";

async fn pay(_ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    Ok(json!({"card": {"number": input["card"]}, "total": 1}))
}

async fn pay_changed(_ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    Ok(json!({"card": {"number": input["card"]}, "total": 2}))
}

fn recorded() -> Vec<loom_kernel::EventEnvelope> {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = MemoryStore::new();
        let loom = Runtime::builder(store.clone())
            .flow(flow_fn("pay", 1, pay))
            .build()
            .unwrap();
        let execution = loom
            .start(
                "pay",
                &json!({"card": CARD}),
                StartOptions::new(id("pay-1")),
            )
            .await
            .unwrap();
        assert_eq!(
            loom.wait(&execution).await.unwrap().status(),
            ExecutionStatus::Completed
        );
        store.read_all(&execution).await.unwrap()
    })
}

fn divergence(checker: &Checker) -> String {
    match checker.check(recorded()).finding {
        Finding::Divergent {
            recorded,
            attempted,
            ..
        } => format!("{recorded} / {attempted}"),
        other => panic!("expected a divergence, got {other:?}"),
    }
}

#[test]
fn a_divergence_found_with_a_classification_masks_classified_values() {
    let changed = FlowSet::new().with(flow_fn("pay", 1, pay_changed));
    // Without a classification the finding shows the values (the test sees the path taken).
    let plain = divergence(&Checker::new(&changed).unwrap());
    assert!(plain.contains(CARD), "{plain}");
    let classification = DataClassification::mask_paths(["card.number"]).unwrap();
    let masked = divergence(&Checker::with_classification(&changed, classification).unwrap());
    assert!(!masked.contains(CARD), "card number in clear: {masked}");
    assert!(masked.contains(MASK), "{masked}");
}

#[test]
fn the_classification_comes_from_mask_options_or_the_file_beside_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("app.redb");
    let store_arg = store.to_str().unwrap();

    // No option and no file beside the store: nothing is classified.
    let args = CheckArgs::try_parse_from(["replay-check", "--store", store_arg]).unwrap();
    assert!(args.classification().unwrap().is_empty());

    // `<store>.masks`, written by the process that runs the flows, is read by default.
    std::fs::write(
        dir.path().join("app.redb.masks"),
        "# classified\ncard.number\n\n",
    )
    .unwrap();
    let args = CheckArgs::try_parse_from(["replay-check", "--store", store_arg]).unwrap();
    assert_eq!(args.classification().unwrap().paths(), ["card.number"]);

    // `--mask` adds to it; `--mask-file` replaces the default file.
    let other = dir.path().join("other.masks");
    std::fs::write(&other, "iban\n").unwrap();
    let args = CheckArgs::try_parse_from([
        "replay-check",
        "--store",
        store_arg,
        "--mask",
        "customer.email",
        "--mask-file",
        other.to_str().unwrap(),
    ])
    .unwrap();
    assert_eq!(
        args.classification().unwrap().paths(),
        ["customer.email", "iban"]
    );

    // A mask file that cannot be read, or a path that does not parse, is a clear error.
    let args = CheckArgs::try_parse_from([
        "replay-check",
        "--logs",
        dir.path().to_str().unwrap(),
        "--mask-file",
        dir.path().join("missing.masks").to_str().unwrap(),
    ])
    .unwrap();
    let error = args.classification().unwrap_err().to_string();
    assert!(error.contains("cannot read the mask file"), "{error}");
    let args = CheckArgs::try_parse_from([
        "replay-check",
        "--logs",
        dir.path().to_str().unwrap(),
        "--mask",
        "card..number",
    ])
    .unwrap();
    assert!(args.classification().is_err());
}
