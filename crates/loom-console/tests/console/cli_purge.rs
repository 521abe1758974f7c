//! `loom purge` (retention): on a store file and through the admin API, only executions that
//! ended before the cutoff are deleted, in bounded batches, each printed; running, in-doubt
//! and newer ended executions stay; `--dry-run` deletes nothing; the server keeps working while
//! and after it runs.

use std::process::Output;
use std::time::Duration;

use loom_kernel::{DiskStore, EventStoreExt, ExecutionId, ExecutionStatus};

use crate::support::*;

/// Three executions that end, one in doubt; then the cutoff; then one that ends and one in
/// doubt after it. Returns the cutoff.
async fn seed(runtime: &loom_kernel::Runtime<DiskStore>) -> u64 {
    for name in ["old-1", "old-2", "old-3"] {
        start_hello(runtime, name).await;
    }
    start_order(runtime, "old-in-doubt").await;
    tokio::time::sleep(Duration::from_millis(3)).await;
    let cutoff = loom_console::now_ms().unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(3)).await;
    start_hello(runtime, "new-1").await;
    start_order(runtime, "new-in-doubt").await;
    cutoff
}

async fn present(store: &DiskStore, name: &str) -> bool {
    !store.read_all(&id(name)).await.unwrap().is_empty()
}

/// Asserts that the executions [`seed`] ended before the cutoff are deleted and the others
/// stay.
async fn assert_only_the_old_are_deleted(store: &DiskStore) {
    for name in ["old-1", "old-2", "old-3"] {
        assert!(!present(store, name).await, "{name} is deleted");
    }
    for name in ["old-in-doubt", "new-1", "new-in-doubt"] {
        assert!(present(store, name).await, "{name} stays");
    }
}

/// Runs `loom <target> purge <args>`: `target` names the store or the admin API.
async fn purge(target: &[&str], args: &[&str]) -> Output {
    loom_async(&[target, &["purge"], args].concat()).await
}

/// [`purge`], asserting it succeeds.
async fn purge_ok(target: &[&str], args: &[&str]) -> Output {
    let output = purge(target, args).await;
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_on_a_store_file_deletes_only_what_ended_before_the_cutoff() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    let cutoff = {
        let runtime = compose(DiskStore::open(&path).unwrap());
        let cutoff = seed(&runtime).await;
        runtime.shutdown().await;
        cutoff
    };
    let file = path.to_str().unwrap();
    let cut = cutoff.to_string();

    let target = ["--store", file];
    let dry = purge_ok(&target, &["--ended-before-ms", &cut, "--dry-run"]).await;
    let text = stdout(&dry);
    for name in ["old-1", "old-2", "old-3"] {
        assert!(text.contains(&format!("would delete {name}\n")), "{text}");
    }
    assert!(
        text.contains("would delete 3 executions that ended before"),
        "{text}"
    );
    assert!(
        !text.contains("new-1") && !text.contains("in-doubt"),
        "{text}"
    );

    // An age: nothing ended 30 days ago.
    let none = purge_ok(&target, &["--ended-before", "30d"]).await;
    assert!(
        stdout(&none).contains("deleted 0 executions"),
        "{}",
        stdout(&none)
    );

    // Batches of two: two batches, each printed.
    let purged = purge_ok(
        &["--store", file, "--json"],
        &["--ended-before-ms", &cut, "--batch", "2"],
    )
    .await;
    let answer = json_out(&purged);
    assert_eq!(answer["count"], 3);
    assert_eq!(answer["dryRun"], false);
    let mut deleted: Vec<_> = answer["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    deleted.sort();
    assert_eq!(deleted, ["old-1", "old-2", "old-3"]);

    let again = purge(&target, &["--ended-before-ms", &cut]).await;
    assert!(
        stdout(&again).contains("deleted 0 executions"),
        "{}",
        stdout(&again)
    );

    assert_only_the_old_are_deleted(&DiskStore::open(&path).unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_through_the_admin_api_loops_in_batches_while_the_server_works() {
    let server = server().await;
    let cutoff = seed(&server.runtime).await.to_string();
    let admin = ["--admin", server.url.as_str(), "--token", TOKEN];

    let dry = purge_ok(&admin, &["--ended-before-ms", &cutoff, "--dry-run"]).await;
    assert!(
        stdout(&dry).contains("would delete 3 executions"),
        "{}",
        stdout(&dry)
    );
    assert!(present(server.runtime.store(), "old-1").await);

    let purged = purge_ok(&admin, &["--ended-before-ms", &cutoff, "--batch", "1"]).await;
    let text = stdout(&purged);
    assert_eq!(text.matches("deleted old-").count(), 3, "{text}");
    assert!(text.contains("deleted 3 executions"), "{text}");

    assert_only_the_old_are_deleted(server.runtime.store()).await;
    // The runtime goes on: a new execution runs, the one in doubt still waits for a verdict.
    start_hello(&server.runtime, "after-purge").await;
    let state = server.runtime.state(&id("old-in-doubt")).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::InDoubt);

    // Malformed input is refused clearly.
    let bad = purge(&admin, &["--ended-before", "soon"]).await;
    assert_eq!(code(&bad), 2, "{}", stderr(&bad));
    assert!(stderr(&bad).contains("is not an age"), "{}", stderr(&bad));
    let zero = purge(&admin, &["--ended-before", "1d", "--batch", "0"]).await;
    assert_eq!(code(&zero), 2, "{}", stderr(&zero));
}

#[test]
fn ages_parse_with_their_units() {
    assert_eq!(
        loom_console::parse_age("30d").unwrap(),
        Duration::from_secs(30 * 86_400)
    );
    assert_eq!(
        loom_console::parse_age("12h").unwrap(),
        Duration::from_secs(12 * 3_600)
    );
    assert_eq!(loom_console::parse_age("0s").unwrap(), Duration::ZERO);
    assert_eq!(
        loom_console::parse_age("2w").unwrap(),
        Duration::from_secs(14 * 86_400)
    );
    for bad in ["", "d", "30", "30y", "-1d", "99999999999999999999d"] {
        assert!(loom_console::parse_age(bad).is_err(), "{bad}");
    }
}

/// A parent that awaits one child, which waits for `go`.
fn family(store: DiskStore) -> loom_kernel::Runtime<DiskStore> {
    use loom_kernel::{FlowCtx, FlowError, flow_fn};
    loom_kernel::Runtime::builder(store)
        .flow(flow_fn(
            "parent",
            1,
            |ctx: FlowCtx, _: serde_json::Value| async move {
                let ended = ctx.child("waits", &serde_json::json!(null)).await;
                Ok::<_, FlowError>(serde_json::json!(format!("{ended:?}")))
            },
        ))
        .flow(flow_fn(
            "waits",
            1,
            |ctx: FlowCtx, _: serde_json::Value| async move {
                Ok::<_, FlowError>(ctx.suspend("go", "k").await?.to_value())
            },
        ))
        .build()
        .unwrap()
}

/// Starts the parent `p` on the store at `path`, waits until its child `p/waits#1` is parked,
/// and stops the runtime: a parent and its child, both waiting, on a store no process holds.
async fn parked_family(path: &std::path::Path) -> (ExecutionId, ExecutionId) {
    let (parent, child) = (id("p"), id("p/waits#1"));
    {
        let runtime = family(DiskStore::open(path).unwrap());
        runtime
            .start(
                "parent",
                &serde_json::json!(null),
                loom_kernel::StartOptions::new(parent.clone()),
            )
            .await
            .unwrap();
        for _ in 0..2_000 {
            let state = runtime.state(&child).await.unwrap();
            if state.status() == ExecutionStatus::Suspended {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(
            runtime.state(&child).await.unwrap().status(),
            ExecutionStatus::Suspended
        );
        runtime.shutdown().await;
    }
    (parent, child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_cancelled_offline_then_purged_is_not_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    let (parent, child) = parked_family(&path).await;
    let store = path.to_str().unwrap();
    let cancelled = loom_async(&["--store", store, "cancel", "p/waits#1"]).await;
    assert_eq!(code(&cancelled), 0, "{}", stderr(&cancelled));
    let purged = loom_async(&[
        "--store",
        store,
        "purge",
        "--ended-before-ms",
        "99999999999999",
    ])
    .await;
    assert_eq!(code(&purged), 0, "{}", stderr(&purged));

    let runtime = family(DiskStore::open(&path).unwrap());
    runtime.recover().await.unwrap();
    let mut ended = runtime.state(&parent).await.unwrap();
    for _ in 0..2_000 {
        if ended.status().is_terminal() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        ended = runtime.state(&parent).await.unwrap();
    }
    assert!(ended.status().is_terminal(), "{:?}", ended.status());
    let output = ended.output().map(loom_kernel::Payload::to_value);
    assert!(
        format!("{output:?}").contains("cancel"),
        "the parent learnt its child was cancelled: {output:?}"
    );
    assert!(
        runtime.store().read_all(&child).await.unwrap().is_empty(),
        "the child was started again"
    );
}

/// Issue 41, hole 6: an offline `loom cancel` of a parked parent cancels the child it waits
/// for, as a live cancel does; after a `purge` of both, nothing is left parked and a server's
/// `recover()` starts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_cancel_of_a_parent_cancels_its_child_so_a_purge_leaves_nothing_parked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    let (parent, child) = parked_family(&path).await;
    let store = path.to_str().unwrap();
    let cancelled = loom_async(&["--store", store, "cancel", "p"]).await;
    assert_eq!(code(&cancelled), 0, "{}", stderr(&cancelled));
    let purged = loom_async(&[
        "--store",
        store,
        "purge",
        "--ended-before-ms",
        "99999999999999",
    ])
    .await;
    assert_eq!(code(&purged), 0, "{}", stderr(&purged));
    assert!(
        stdout(&purged).contains("p/waits#1"),
        "the child ended and was purged too: {}",
        stdout(&purged)
    );
    let runtime = family(DiskStore::open(&path).unwrap());
    let report = runtime.recover_report().await.unwrap();
    assert_eq!(report.started, 0);
    assert!(runtime.store().read_all(&child).await.unwrap().is_empty());
    assert!(runtime.store().read_all(&parent).await.unwrap().is_empty());
}
