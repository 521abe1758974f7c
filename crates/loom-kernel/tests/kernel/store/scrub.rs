//! The open no longer reads the whole file (`verify_on_open` is off by default, LD-039): a byte
//! flipped at rest in an event's record, in a page the open does not read, opens at once; the
//! first read of that log fails cleanly, naming the damage, while the other logs read; and the
//! scrub that reads every row after the open finds and reports it. A whole store scrubs clean,
//! and closing it stops the scrub at once.

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::{DiskStore, DiskStoreConfig, EventStore, EventStoreExt};
use serde_json::json;

async fn scrubbed(store: &DiskStore) -> loom_kernel::kit::ScrubStatus {
    for _ in 0..2000 {
        let status = store
            .scrub_status()
            .expect("a scrub runs after an open for writing");
        if status.finished {
            return status;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("the scrub did not finish in 10 s");
}

#[tokio::test]
async fn a_byte_flipped_at_rest_fails_the_first_read_of_its_log_and_the_scrub_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let marker = "MARKER-0123456789-abcdefghij";
    {
        let store = DiskStore::open(&path).unwrap();
        for n in 0..20 {
            let e = id(&format!("e-{n:02}"));
            let head = store.append(&e, 0, &[started("f")]).await.unwrap();
            let text = if n == 7 {
                marker.to_owned()
            } else {
                format!("plain-{n}")
            };
            store
                .append(&e, head, &[tagged(json!({ "text": text }))])
                .await
                .unwrap();
        }
        assert!(
            scrubbed(&store).await.damage.is_empty(),
            "a whole store scrubs clean"
        );
    }
    // The marker's last copy in the file is the live one (older pages come first when
    // redb reuses none); flipping a byte of each copy damages whichever is read.
    let mut bytes = std::fs::read(&path).unwrap();
    let mut flipped = 0;
    for at in 0..bytes.len().saturating_sub(marker.len()) {
        if &bytes[at..at + marker.len()] == marker.as_bytes() {
            bytes[at + 3] ^= 0x10;
            flipped += 1;
        }
    }
    assert!(flipped > 0, "the marker is in the file");
    std::fs::write(&path, &bytes).unwrap();

    let store = DiskStore::open(&path).unwrap();
    let damaged = store.read_all(&id("e-07")).await;
    assert!(
        damaged.is_err(),
        "the damaged record is refused, not read back: {damaged:?}"
    );
    assert_eq!(store.read_all(&id("e-08")).await.unwrap().len(), 2);
    let status = scrubbed(&store).await;
    assert_eq!(status.damaged, 1, "{status:?}");
    assert!(status.damage[0].contains("e-07"), "{status:?}");
    assert!(status.rows > 40, "{status:?}");
}

#[tokio::test]
async fn a_store_closed_while_its_scrub_runs_is_released_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = DiskStore::open(&path).unwrap();
        for n in 0..2000 {
            store
                .append(&id(&format!("e-{n:04}")), 0, &[started("f")])
                .await
                .unwrap();
        }
    }
    for _ in 0..5 {
        let store = DiskStore::open(&path).unwrap();
        drop(store);
    }
    let off = DiskStore::open_with(
        &path,
        DiskStoreConfig {
            scrub_after_open: false,
            ..DiskStoreConfig::default()
        },
    )
    .unwrap();
    assert!(off.scrub_status().is_none());
    drop(off);
    let read_only = DiskStore::open_read_only(&path, DiskStoreConfig::default()).unwrap();
    assert!(
        read_only.scrub_status().is_none(),
        "a read-only open runs none"
    );
}
