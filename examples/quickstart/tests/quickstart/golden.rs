//! The repository's golden logs and their one harness: executions of the example's flows
//! recorded under `examples/quickstart/golden/`, replayed on every test run by the checker and
//! by the command, as CI runs it (`cargo xtask replay-check --logs examples/quickstart/golden`).
//! Record them again after a deliberate change to the flows with
//! `LOOM_BLESS_GOLDEN=1 cargo test -p quickstart --test quickstart golden`.

use std::path::{Path, PathBuf};

use loom_kernel::Runtime;
use loom_kernel::conformance::id;
use loom_kernel::{EventStoreExt, ExecutionStatus, MemoryStore, Payload};
use loom_replay_check::check_command;
use loom_replay_check::{Checker, Finding};
use serde_json::json;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

async fn record(dir: &Path) {
    let store = MemoryStore::new();
    let rt = quickstart::compose(Runtime::builder(store.clone()))
        .build()
        .unwrap();
    let mut names = Vec::new();
    for (name, approve) in [("checkout-approved", true), ("checkout-waiting", false)] {
        let e = id(name);
        rt.start(
            "checkout",
            &json!({"sku": "A1", "qty": 2}),
            quickstart::start_options(&e).budget(10),
        )
        .await
        .unwrap();
        assert_eq!(
            rt.wait(&e).await.unwrap().status(),
            ExecutionStatus::Suspended
        );
        if approve {
            let key = quickstart::approval_key(&e);
            rt.resume(
                &e,
                quickstart::APPROVAL_EVENT,
                &key,
                Payload::from(json!({"action": "approve", "by": "alice"})),
            )
            .await
            .unwrap();
            assert_eq!(
                rt.wait_ended(&e).await.unwrap().status(),
                ExecutionStatus::Completed
            );
            // Its child `notify`, with its timer.
            names.push(id(&format!("{name}/notify#1")));
        }
        names.push(e);
    }
    let e = id("greet-ada");
    rt.start("greet", &"ada", quickstart::start_options(&e))
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    names.push(e);
    std::fs::create_dir_all(dir).unwrap();
    for e in names {
        loom_replay_check::write_log(dir, &store.read_all(&e).await.unwrap()).unwrap();
    }
}

#[test]
fn the_example_golden_logs_replay_deterministically() {
    let dir = golden_dir();
    if std::env::var_os("LOOM_BLESS_GOLDEN").is_some() {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(record(&dir));
    }
    let logs = loom_replay_check::list_logs(&dir).unwrap();
    assert_eq!(
        logs.len(),
        4,
        "golden logs missing: record them with LOOM_BLESS_GOLDEN=1"
    );
    let checker = Checker::new(&quickstart::flows()).unwrap();
    for path in logs {
        let outcome = checker.check(loom_replay_check::read_log(&path).unwrap());
        assert_eq!(
            outcome.finding,
            Finding::Deterministic,
            "{}",
            path.display()
        );
    }
    // The same check as CI's command: exit code 0.
    let dir = dir.to_str().unwrap();
    assert_eq!(
        check_command(&quickstart::flows(), ["replay-check", "--logs", dir]),
        0
    );
}
