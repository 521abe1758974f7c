//! `loom --store FILE` after the process that ran a step stopped mid-effect (issue 41, hole
//! 12): the step is listed `(stopped)`, and an offline verdict or cancel records it in doubt
//! first, as recovery would, instead of refusing until a server has recovered the execution.

use loom_kernel::conformance::{started, step_started};
use loom_kernel::{DiskStore, Event, EventStore, EventStoreExt, ExecutionStatus};

use crate::support::*;

/// A store with `paying-1` and `paying-2`, each stopped while its step `charge#1` ran.
async fn stopped_store(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("loom.redb");
    let store = DiskStore::open(&path).expect("the store opens");
    for name in ["paying-1", "paying-2"] {
        store
            .append(
                &id(name),
                0,
                &[started("checkout"), step_started("charge#1")],
            )
            .await
            .expect("append");
    }
    path
}

fn loom_on(path: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["--store", path.to_str().expect("a UTF-8 path")];
    all.extend_from_slice(args);
    loom(&all)
}

#[tokio::test]
async fn a_step_stopped_mid_effect_is_listed_and_a_verdict_or_a_cancel_records_it_in_doubt_first() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = stopped_store(dir.path()).await;

    let listed = loom_on(&path, &["in-doubt"]);
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let text = stdout(&listed);
    assert!(text.contains("paying-1 (stopped)"), "{text}");
    assert!(text.contains("paying-1:charge#1"), "{text}");
    let listed = json_out(&loom_on(&path, &["--json", "in-doubt"]));
    assert_eq!(listed[0]["stopped"], true, "{listed}");

    let resolved = loom_on(
        &path,
        &[
            "resolve",
            "paying-1",
            "charge#1",
            "--failed",
            "the bank has no charge",
        ],
    );
    assert_eq!(code(&resolved), 0, "{}", stderr(&resolved));
    let retry = loom_on(&path, &["resolve", "paying-2", "charge#1", "--retry"]);
    assert_eq!(
        code(&retry),
        1,
        "a retry needs the process: {}",
        stderr(&retry)
    );
    let cancelled = loom_on(&path, &["cancel", "paying-2", "--reason", "stopped"]);
    assert_eq!(code(&cancelled), 0, "{}", stderr(&cancelled));

    let store = DiskStore::open(&path).expect("the store opens");
    let names = |events: Vec<loom_kernel::EventEnvelope>| -> Vec<&'static str> {
        events.iter().map(|e| e.event.type_name()).collect()
    };
    let first = store.read_all(&id("paying-1")).await.expect("read");
    assert_eq!(
        names(first.clone()),
        [
            "EXECUTION_STARTED",
            "STEP_STARTED",
            "EFFECT_INDOUBT",
            "EFFECT_RESOLVED"
        ]
    );
    let Event::EffectInDoubt(doubt) = &first[2].event else {
        panic!("{first:?}")
    };
    assert_eq!(
        doubt.reason.as_ref().map(|reason| reason.code.as_str()),
        Some(loom_kernel::codes::WORKER_STOPPED)
    );
    assert_eq!(
        names(store.read_all(&id("paying-2")).await.expect("read")),
        [
            "EXECUTION_STARTED",
            "STEP_STARTED",
            "EFFECT_INDOUBT",
            "EXECUTION_CANCELLED"
        ]
    );
    let cancelled = store.fold(&id("paying-2")).await.expect("fold");
    assert_eq!(cancelled.status(), ExecutionStatus::Cancelled);
    assert!(cancelled.steps_in_doubt().contains("charge#1"));
    drop(store);
    let text = stdout(&loom_on(&path, &["in-doubt"]));
    assert!(text.contains("paying-2 (cancelled)"), "{text}");
    assert!(!text.contains("(stopped)"), "{text}");
}
