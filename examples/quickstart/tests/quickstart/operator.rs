//! What an operator does between two runs of the quickstart, on the store file while no process
//! holds it (`loom --store ... resume|cancel`, docs/CONSOLE.md), and what the next run says.

use std::path::Path;
use std::process::{Command, Stdio};

use loom_kernel::{DiskStore, ExecutionId, Payload};

fn quickstart(store: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_quickstart"))
        .arg("--store")
        .arg(store)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "the quickstart failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn checkout_3() -> ExecutionId {
    ExecutionId::new("checkout-3").unwrap()
}

#[tokio::test]
async fn a_checkout_resumed_offline_is_driven_on_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    let first = quickstart(&path);
    assert!(
        first.contains("checkout-3 (waiting for its approval)"),
        "{first}"
    );

    // As `loom resume checkout-3 <event type> <key> <json>` with the hint `loom show` prints.
    {
        let store = DiskStore::open(&path).unwrap();
        let key = quickstart::approval_key(&checkout_3());
        let payload = Payload::from_value(&serde_json::json!({"action": "approve", "by": "ops"}));
        loom_console::resume(
            &store,
            &checkout_3(),
            quickstart::APPROVAL_EVENT,
            &key,
            payload,
        )
        .await
        .unwrap();
    }

    let second = quickstart(&path);
    assert!(
        second.contains("checkout-3, resumed while no process ran: driven on now"),
        "{second}"
    );
    assert!(
        second.contains("  checkout-3: completed, reservation"),
        "{second}"
    );
    assert!(second.contains("Every checkout has completed"), "{second}");
    // And the run after that finds nothing to do.
    let third = quickstart(&path);
    assert!(third.contains("Nothing waits for an approval."), "{third}");
}

#[tokio::test]
async fn after_a_cancel_the_next_run_does_not_say_every_checkout_completed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    quickstart(&path);
    {
        let store = DiskStore::open(&path).unwrap();
        loom_console::cancel(&store, &checkout_3(), Some("out of stock".into()))
            .await
            .unwrap();
    }
    let next = quickstart(&path);
    assert!(
        !next.to_lowercase().contains("every checkout has completed"),
        "{next}"
    );
    assert!(next.contains("checkout-3 is cancelled"), "{next}");
}
