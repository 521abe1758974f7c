//! The index of executions with a step in doubt (`StatusFilter::StepsInDoubt`) in a file of an
//! older build, which never filed an execution under it: a read-only open lists them by
//! folding, and the first open for writing files them.

use std::path::Path;

use loom_kernel::conformance::{completed, id, in_doubt, started, step_started};
use loom_kernel::kit::ExecutionSummary;
use loom_kernel::{
    DiskStore, DiskStoreConfig, Event, EventStore, ExecutionCancelled, StatusFilter,
};

/// Takes away what this build files under `StepsInDoubt` (code 0x81) and the meta key saying
/// every execution is filed there, as a file of an older build is.
fn as_before_the_in_doubt_index(path: &Path) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut by_status = txn
            .open_table(redb::TableDefinition::<(u8, &str), ()>::new("by_status"))
            .unwrap();
        by_status.retain(|(code, _), ()| code != 0x81).unwrap();
        let mut meta = txn
            .open_table(redb::TableDefinition::<&str, u64>::new("meta"))
            .unwrap();
        assert!(meta.remove("in_doubt_index").unwrap().is_some());
    }
    txn.commit().unwrap();
}

async fn in_doubt_names(store: &DiskStore) -> Vec<String> {
    let page = store
        .list_by_status(StatusFilter::StepsInDoubt, None, 100)
        .await
        .unwrap();
    page.executions
        .iter()
        .map(|ExecutionSummary { id, .. }| id.to_string())
        .collect()
}

#[tokio::test]
async fn a_file_of_an_older_build_lists_its_steps_in_doubt_read_only_and_files_them_when_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let logs: Vec<(&str, Vec<Event>)> = vec![
        ("completed", vec![started("f"), completed()]),
        (
            "in-doubt",
            vec![started("f"), step_started("s"), in_doubt("s")],
        ),
        (
            "cancelled-in-doubt",
            vec![
                started("f"),
                step_started("s"),
                in_doubt("s"),
                Event::ExecutionCancelled(ExecutionCancelled { reason: None }),
            ],
        ),
        (
            "cancelled",
            vec![
                started("f"),
                Event::ExecutionCancelled(ExecutionCancelled { reason: None }),
            ],
        ),
    ];
    {
        let store = DiskStore::open(&path).unwrap();
        for (name, events) in &logs {
            store.append(&id(name), 0, events).await.unwrap();
        }
        assert_eq!(
            in_doubt_names(&store).await,
            ["cancelled-in-doubt", "in-doubt"]
        );
    }
    as_before_the_in_doubt_index(&path);
    let expected = ["cancelled-in-doubt", "in-doubt"];
    {
        let reader = DiskStore::open_read_only(&path, DiskStoreConfig::default()).unwrap();
        assert_eq!(in_doubt_names(&reader).await, expected, "by folding");
    }
    let store = DiskStore::open(&path).unwrap();
    assert_eq!(in_doubt_names(&store).await, expected, "filed at the open");
    drop(store);
    let reader = DiskStore::open_read_only(&path, DiskStoreConfig::default()).unwrap();
    assert_eq!(in_doubt_names(&reader).await, expected, "from the index");
}
