//! Crash safety for real: a child process appends in a loop on the disk store (while another
//! task reads an index, so the store keeps applying its journal to its tables) and is killed
//! with SIGKILL at varied moments; after each kill the store must hold every append that was
//! acknowledged, whole, and nothing partial. The child takes a checkpoint every 16 commits
//! (the default is 8,192), so kills also land while the applier makes the tables durable and
//! while the writer starts the journal's next generation with what they lack.
//!
//! The child is this test binary run again with `LOOM_CRASH_CHILD_STORE` set: it then runs
//! `crash_child_process_entry`, which does nothing in an ordinary test run.

use std::collections::BTreeMap;
use std::time::Duration;

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::{DiskStore, DiskStoreConfig, Event, EventStore, EventStoreExt, ExecutionState};
use serde_json::json;

use crate::support::child::{child_runtime, child_test, say};
use crate::support::kill;

const CHILD_ENV: &str = "LOOM_CRASH_CHILD_STORE";
const WRITERS: usize = 6;
const BATCH: usize = 3;

#[test]
fn crash_child_process_entry() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let runtime = child_runtime();
    runtime.block_on(async move {
        let config = DiskStoreConfig {
            checkpoint_commits: 16,
            ..DiskStoreConfig::default()
        };
        let store = DiskStore::open_with(&path, config).unwrap();
        let (acks, printed) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in printed {
                say(&line);
            }
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (store, acks) = (store.clone(), acks.clone());
                tokio::spawn(async move {
                    let e = id(&format!("writer-{w}"));
                    let mut head = store.head(&e).await.unwrap();
                    if head == 0 {
                        head = store.append(&e, 0, &[started("crash")]).await.unwrap();
                    }
                    loop {
                        let batch: Vec<Event> = (0..BATCH as u64)
                            .map(|i| tagged(json!({"seq": head + i, "pad": "p".repeat(200)})))
                            .collect();
                        head = store.append(&e, head, &batch).await.unwrap();
                        acks.send(format!("ack writer-{w} {head}")).unwrap();
                    }
                })
            })
            .collect();
        // An index reader, so that the store applies what it holds to its tables all the
        // time (each such read waits for an apply, LD-035): kills land during applies too.
        let indexer = {
            let store = store.clone();
            tokio::spawn(async move {
                loop {
                    store.count_by_status().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        };
        // The writers never stop: the parent kills this process while they append.
        futures::future::join_all(writers).await;
        indexer.abort();
    });
}

/// Runs one child until it has acknowledged appends, kills it after `delay`, and returns the
/// highest head acknowledged per execution.
fn run_and_kill(store_path: &std::path::Path, delay: Duration) -> BTreeMap<String, u64> {
    let child = kill::Child::start(
        concat!(module_path!(), "::crash_child_process_entry"),
        CHILD_ENV,
        store_path,
        |line| line.starts_with("ack "),
    );
    let first = child
        .lines
        .recv_timeout(Duration::from_secs(60))
        .expect("the child acknowledged no append within 60 s");
    std::thread::sleep(delay);
    let rest = child.kill();
    let mut acked = BTreeMap::new();
    for line in std::iter::once(first).chain(rest) {
        let mut parts = line.split_whitespace().skip(1);
        let (execution, head) = (parts.next().unwrap(), parts.next().unwrap());
        let head: u64 = head.parse().unwrap();
        let entry = acked.entry(execution.to_owned()).or_insert(0);
        *entry = (*entry).max(head);
    }
    acked
}

#[test]
fn sigkill_loses_no_acknowledged_append_and_shows_nothing_partial() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut floor: BTreeMap<String, u64> = BTreeMap::new();
    for (round, delay_ms) in [0u64, 3, 17, 40, 90, 1, 150, 7].into_iter().enumerate() {
        let acked = run_and_kill(&path, Duration::from_millis(delay_ms));
        assert!(!acked.is_empty());
        for (execution, head) in acked {
            let entry = floor.entry(execution).or_insert(0);
            *entry = (*entry).max(head);
        }
        runtime.block_on(async {
            let store = DiskStore::open(&path).unwrap();
            for (execution, acked_head) in &floor {
                let e = id(execution);
                let log = store.read_all(&e).await.unwrap();
                let head = log.len() as u64;
                assert!(
                    head >= *acked_head,
                    "round {round}: {execution} holds {head} events but {acked_head} were acknowledged"
                );
                assert_eq!(store.head(&e).await.unwrap(), head);
                assert_eq!((head - 1) % BATCH as u64, 0, "round {round}: a partial batch is visible");
                for envelope in &log[1..] {
                    let loom_kernel::Event::SurfacePatch(patch) = &envelope.event else {
                        panic!("unexpected event {:?}", envelope.event)
                    };
                    assert_eq!(patch.ops.to_value()[0]["seq"], json!(envelope.seq));
                }
                ExecutionState::fold(&log).unwrap();
            }
        });
    }
}

#[test]
#[should_panic(expected = "has no test named 'store::crash_consistency::no_such_entry'")]
fn a_child_process_entry_that_is_not_in_this_binary_is_refused_not_run_empty() {
    child_test(concat!(module_path!(), "::no_such_entry"));
}
