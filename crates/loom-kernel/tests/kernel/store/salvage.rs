//! Salvage (`DiskStore::salvage`): a store whose redb header roots are damaged no longer opens
//! at all, yet every log it held, the journal's recent commits included, comes back whole and
//! equal to what was written, large events too, and the damaged file is not written.

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::{DiskStore, DiskStoreConfig, EventStore, EventStoreExt};
use serde_json::json;

#[tokio::test]
async fn every_log_of_a_store_whose_roots_are_damaged_is_salvaged_whole() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.redb");
    // Checkpoints often, so that most events are in the file's pages and the last ones in
    // the journal only.
    let config = DiskStoreConfig {
        checkpoint_commits: 16,
        ..DiskStoreConfig::default()
    };
    let store = DiskStore::open_with(&live, config).unwrap();
    let mut expected = Vec::new();
    for n in 0..40 {
        let execution = id(&format!("exec-{n:02}"));
        let mut head = store.append(&execution, 0, &[started("f")]).await.unwrap();
        for i in 0..(n % 7) {
            // Every seventh execution carries an event larger than a page.
            let body = if n % 5 == 0 {
                "x".repeat(9000)
            } else {
                format!("{i}")
            };
            head = store
                .append(&execution, head, &[tagged(json!({"i": i, "body": body}))])
                .await
                .unwrap();
        }
        expected.push(execution);
    }
    // Taken while open: the last commits live in the journal only.
    let image = dir.path().join("image.redb");
    std::fs::copy(&live, &image).unwrap();
    std::fs::copy(
        dir.path().join("live.redb.journal"),
        dir.path().join("image.redb.journal"),
    )
    .unwrap();
    let mut logs = Vec::new();
    for execution in &expected {
        logs.push(store.read_all(execution).await.unwrap());
    }
    drop(store);

    // Both commit slots of redb's header damaged: no root is readable.
    let mut bytes = std::fs::read(&image).unwrap();
    for byte in &mut bytes[64..1024] {
        *byte ^= 0x5A;
    }
    std::fs::write(&image, &bytes).unwrap();
    assert!(DiskStore::open_read_only(&image, Default::default()).is_err());

    let mut reports = 0;
    let salvaged = DiskStore::salvage(&image, |_, _| reports += 1).unwrap();
    assert!(reports > 0, "progress is reported");
    assert!(salvaged.gaps.is_empty(), "{:?}", salvaged.gaps);
    assert!(
        salvaged.from_pages > 0,
        "the pages are read, not only the journal"
    );
    assert!(salvaged.from_journal > 0, "and the journal");
    assert!(
        salvaged.journal_error.is_none(),
        "{:?}",
        salvaged.journal_error
    );
    assert_eq!(salvaged.logs.len(), expected.len());
    for (log, written) in salvaged.logs.iter().zip(&logs) {
        assert_eq!(log, written, "{}", written[0].execution_id);
    }
    assert_eq!(
        std::fs::read(&image).unwrap(),
        bytes,
        "salvage writes nothing"
    );
}

#[tokio::test]
async fn salvage_of_a_missing_file_is_an_error_and_of_garbage_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    assert!(DiskStore::salvage(dir.path().join("none.redb"), |_, _| {}).is_err());
    let garbage = dir.path().join("garbage.redb");
    let bytes: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&garbage, &bytes).unwrap();
    let salvaged = DiskStore::salvage(&garbage, |_, _| {}).unwrap();
    assert!(salvaged.logs.is_empty());
    assert!(salvaged.journal_error.is_some(), "no journal beside it");
}

/// `DiskStore::check_pages` as a careless caller uses it: a missing file and an empty one are
/// refused as they are by an open (nothing made), a file a writer holds is refused as held, a
/// whole store checks whole twice in a row, and a file that is not a store is damaged.
#[tokio::test]
async fn check_pages_refuses_a_missing_empty_held_or_foreign_file_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.redb");
    assert!(matches!(
        DiskStore::check_pages(&missing),
        Err(loom_kernel::OpenError::Missing { .. })
    ));
    assert!(!missing.exists(), "nothing is made");
    let empty = dir.path().join("empty.redb");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        DiskStore::check_pages(&empty),
        Err(loom_kernel::OpenError::EmptyFile { .. })
    ));
    let path = dir.path().join("s.redb");
    let store = DiskStore::open(&path).unwrap();
    store.append(&id("e"), 0, &[started("f")]).await.unwrap();
    assert!(matches!(
        DiskStore::check_pages(&path),
        Err(loom_kernel::OpenError::AlreadyOpen { .. })
    ));
    drop(store);
    let before = std::fs::read(&path).unwrap();
    assert!(DiskStore::check_pages(&path).unwrap());
    assert!(DiskStore::check_pages(&path).unwrap());
    assert!(
        std::fs::read(&path).unwrap() == before,
        "the check wrote to the file"
    );
    let foreign = dir.path().join("foreign.redb");
    std::fs::write(&foreign, vec![0x5Au8; 64 * 1024]).unwrap();
    assert!(DiskStore::check_pages(&foreign).is_err());
}
