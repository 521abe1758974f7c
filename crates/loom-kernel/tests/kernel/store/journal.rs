//! The embedded store's journal (since layout 3, LD-027): what a crash leaves behind opens with every
//! acknowledged commit; a torn last record is cut; damage anywhere else, a missing or foreign
//! journal, is refused; a read-only open reads every commit without writing; older layouts
//! are brought up to date.
//!
//! A crash image is made by copying the store file and its journal while the store is open:
//! the tables on disk then hold the last checkpoint only, and the journal every commit since,
//! as after a SIGKILL (`crash_consistency.rs` kills a real process).

use std::path::{Path, PathBuf};

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::{DiskStore, DiskStoreConfig, EventStore, EventStoreExt, OpenError};
use serde_json::json;

/// The end of what was written to a journal: it is grown ahead with zeros.
fn written_len(journal: &Path) -> u64 {
    let bytes = std::fs::read(journal).unwrap();
    bytes
        .iter()
        .rposition(|byte| *byte != 0)
        .map_or(0, |last| last + 1) as u64
}

fn journal_of(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".journal");
    PathBuf::from(name)
}

/// A store with `commits` acknowledged appends to `victim` (each its own commit), copied to
/// `image` (the file and its journal) while still open, as a crash would leave it.
async fn crash_image(dir: &Path, commits: u64) -> PathBuf {
    let path = dir.join("live.redb");
    let store = DiskStore::open(&path).unwrap();
    let e = id("victim");
    let mut head = store.append(&e, 0, &[started("f")]).await.unwrap();
    for i in 1..commits {
        head = store
            .append(&e, head, &[tagged(json!({"i": i}))])
            .await
            .unwrap();
    }
    let image = dir.join("image.redb");
    std::fs::copy(&path, &image).unwrap();
    std::fs::copy(journal_of(&path), journal_of(&image)).unwrap();
    drop(store);
    image
}

#[tokio::test]
async fn a_crash_image_opens_with_every_acknowledged_commit() {
    let dir = tempfile::tempdir().unwrap();
    let image = crash_image(dir.path(), 50).await;
    let store = DiskStore::open(&image).unwrap();
    assert_eq!(store.head(&id("victim")).await.unwrap(), 50);
    assert_eq!(store.read_all(&id("victim")).await.unwrap().len(), 50);
    // Applied once: opening again finds the same log and appends after it.
    drop(store);
    let store = DiskStore::open(&image).unwrap();
    assert_eq!(
        store
            .append(&id("victim"), 50, &[tagged(json!("after"))])
            .await
            .unwrap(),
        51
    );
}

/// A journal cut at a record boundary (a copy or restore that stopped short) opens without
/// any sign of damage but for the zeros missing after its last record: the open for writing
/// and the read-only open refuse it, naming the loss; with `accept_cut_journal` the store
/// opens as of the cut; whole images are never refused.
#[tokio::test]
async fn a_journal_cut_at_a_record_boundary_is_refused_unless_the_loss_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let image = crash_image(dir.path(), 20).await;
    let journal = journal_of(&image);
    let whole = std::fs::read(&journal).unwrap();
    let len = written_len(&journal) as usize;
    // Where the image's records end: every offset the reader stops at whole.
    let keep = dir.path().join("keep.redb");
    for (to, what) in [(len, "after the last record"), (32, "to its header")] {
        std::fs::copy(&image, &keep).unwrap();
        std::fs::write(journal_of(&keep), &whole[..to]).unwrap();
        let err = DiskStore::open(&keep).unwrap_err();
        assert!(
            matches!(err, OpenError::JournalCut { .. }),
            "{what}: {err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("cut short") && text.contains("accept_cut_journal"),
            "{text}"
        );
        let err = DiskStore::open_read_only(&keep, DiskStoreConfig::default()).unwrap_err();
        assert!(
            matches!(err, OpenError::JournalCut { .. }),
            "{what}: {err:?}"
        );
        let accepting = DiskStoreConfig {
            accept_cut_journal: true,
            ..DiskStoreConfig::default()
        };
        let read = DiskStore::open_read_only(&keep, accepting.clone()).unwrap();
        let head = read.head(&id("victim")).await.unwrap();
        drop(read);
        let store = DiskStore::open_with(&keep, accepting).unwrap();
        assert_eq!(store.head(&id("victim")).await.unwrap(), head, "{what}");
        if to == len {
            assert_eq!(head, 20, "a cut after the last record loses nothing here");
        } else {
            assert!(
                head < 20,
                "a cut to the header loses what the tables lacked"
            );
        }
        drop(store);
        // Recovered for good: the next open is an ordinary one.
        DiskStore::open(&keep).unwrap();
    }
    // The whole image, and one cut inside the zeros after its records, open as they are.
    std::fs::write(&journal, &whole[..len + 1]).unwrap();
    assert_eq!(
        DiskStore::open(&image)
            .unwrap()
            .head(&id("victim"))
            .await
            .unwrap(),
        20
    );
}

#[tokio::test]
async fn a_torn_last_journal_record_is_cut_at_the_last_whole_commit() {
    let dir = tempfile::tempdir().unwrap();
    let image = crash_image(dir.path(), 20).await;
    let journal = journal_of(&image);
    let len = written_len(&journal);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let store = DiskStore::open(&image).unwrap();
    assert_eq!(store.head(&id("victim")).await.unwrap(), 19);
    let log = store.read_all(&id("victim")).await.unwrap();
    assert_eq!(log.len(), 19, "a whole prefix, gapless");
}

#[tokio::test]
async fn a_flipped_byte_before_the_journals_last_record_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let image = crash_image(dir.path(), 20).await;
    let journal = journal_of(&image);
    let whole = std::fs::read(&journal).unwrap();
    // The header, the first records' headers, payloads and checksums.
    let written = written_len(&journal) as usize;
    for at in [3usize, 40, 60, written / 2] {
        let mut damaged = whole.clone();
        damaged[at] ^= 0x04;
        std::fs::write(&journal, &damaged).unwrap();
        let err = DiskStore::open(&image).unwrap_err();
        assert!(
            matches!(err, OpenError::Corrupt { .. }),
            "byte {at}: {err:?}"
        );
        assert!(err.to_string().contains("journal"), "{err}");
    }
}

#[tokio::test]
async fn a_missing_or_foreign_journal_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let image = crash_image(dir.path(), 5).await;
    let journal = journal_of(&image);
    let kept = std::fs::read(&journal).unwrap();
    std::fs::remove_file(&journal).unwrap();
    let err = DiskStore::open(&image).unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("missing"), "{err}");

    // Another store's journal (of a later generation) is not this one's.
    let other = dir.path().join("other.redb");
    for _ in 0..3 {
        drop(DiskStore::open(&other).unwrap());
    }
    std::fs::copy(journal_of(&other), &journal).unwrap();
    let err = DiskStore::open(&image).unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");

    std::fs::write(&journal, b"not a journal at all").unwrap();
    let err = DiskStore::open(&image).unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");
    std::fs::write(&journal, kept).unwrap();
    assert_eq!(
        DiskStore::open(&image)
            .unwrap()
            .head(&id("victim"))
            .await
            .unwrap(),
        5
    );
}

/// A read-only open of what a crash left reads every acknowledged commit (redb's repair and the
/// journal applied in memory) and writes nothing: the file and its journal are byte for byte
/// what they were, appends are refused, and a second reader at once, or a writer after, both
/// work.
#[tokio::test]
async fn a_read_only_open_of_a_crash_image_reads_every_commit_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let image = crash_image(dir.path(), 10).await;
    let journal = journal_of(&image);
    let before = (
        std::fs::read(&image).unwrap(),
        std::fs::read(&journal).unwrap(),
    );
    let store = DiskStore::open_read_only(&image, DiskStoreConfig::default()).unwrap();
    assert_eq!(store.head(&id("victim")).await.unwrap(), 10);
    assert_eq!(store.read_all(&id("victim")).await.unwrap().len(), 10);
    let refused = store
        .append(&id("victim"), 10, &[tagged(json!({"i": 10}))])
        .await;
    assert!(refused.is_err(), "a read-only store takes no append");
    let second = DiskStore::open_read_only(&image, DiskStoreConfig::default()).unwrap();
    assert_eq!(second.head(&id("victim")).await.unwrap(), 10);
    let err = DiskStore::open(&image).unwrap_err();
    assert!(
        matches!(err, OpenError::AlreadyOpen { .. }),
        "a writer waits for the readers: {err:?}"
    );
    drop((store, second));
    let after = (
        std::fs::read(&image).unwrap(),
        std::fs::read(&journal).unwrap(),
    );
    assert!(
        before == after,
        "a read-only open wrote to the store or its journal"
    );

    // The writer's open recovers the same commits for good.
    drop(DiskStore::open(&image).unwrap());
    let store = DiskStore::open_read_only(&image, DiskStoreConfig::default()).unwrap();
    assert_eq!(store.head(&id("victim")).await.unwrap(), 10);
}

/// A read-only open of a store a writer holds is refused as held, crash image or not.
#[tokio::test]
async fn a_read_only_open_of_a_store_a_writer_holds_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let image = crash_image(dir.path(), 3).await;
    let writer = DiskStore::open(&image).unwrap();
    writer
        .append(&id("victim"), 3, &[tagged(json!({"i": 3}))])
        .await
        .unwrap();
    let err = DiskStore::open_read_only(&image, DiskStoreConfig::default()).unwrap_err();
    assert!(matches!(err, OpenError::AlreadyOpen { .. }), "{err:?}");
}

/// Checkpoints are taken while commits go on (the applier makes the tables durable, then the
/// writer starts the journal's next generation with the commits they may lack carried over):
/// a crash image taken at any point, before a rotation or after it, opens with every
/// acknowledged commit, and a store closed after rotations opens read-only with nothing
/// pending.
#[tokio::test]
async fn crash_images_taken_around_checkpoints_open_with_every_acknowledged_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.redb");
    let config = DiskStoreConfig {
        checkpoint_commits: 3,
        ..DiskStoreConfig::default()
    };
    let store = DiskStore::open_with(&path, config).unwrap();
    let (a, b) = (id("a"), id("b"));
    let mut heads = (store.append(&a, 0, &[started("f")]).await.unwrap(), 0);
    heads.1 = store.append(&b, 0, &[started("f")]).await.unwrap();
    let mut images = Vec::new();
    // 60 commits, and on until the writer has rotated its journal twice: how fast the applier
    // (which runs at a lower priority) makes the tables durable depends on the machine's load.
    for i in 0u64.. {
        if i >= 60 && store.checkpoints() >= 2 {
            break;
        }
        assert!(
            i < 2_000,
            "{} checkpoints after {i} commits",
            store.checkpoints()
        );
        heads.0 = store
            .append(&a, heads.0, &[tagged(json!({"i": i}))])
            .await
            .unwrap();
        if i % 3 == 0 {
            heads.1 = store
                .append(&b, heads.1, &[tagged(json!({"i": i}))])
                .await
                .unwrap();
        }
        if i % 2 == 0 {
            // Time for the applier's durable commit: the image is then often taken between it
            // and the rotation the next commit makes.
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        if i < 60 || i % 10 == 0 {
            let image = dir.path().join(format!("image-{i}.redb"));
            std::fs::copy(&path, &image).unwrap();
            std::fs::copy(journal_of(&path), journal_of(&image)).unwrap();
            images.push((image, heads));
        }
    }
    drop(store);
    for (image, (head_a, head_b)) in images {
        let opened = DiskStore::open(&image).unwrap();
        assert_eq!(
            opened.head(&a).await.unwrap(),
            head_a,
            "{}",
            image.display()
        );
        assert_eq!(
            opened.head(&b).await.unwrap(),
            head_b,
            "{}",
            image.display()
        );
        assert_eq!(opened.read_all(&a).await.unwrap().len() as u64, head_a);
    }
    let store = DiskStore::open_read_only(&path, DiskStoreConfig::default()).unwrap();
    assert_eq!(store.head(&a).await.unwrap(), heads.0);
    assert_eq!(store.head(&b).await.unwrap(), heads.1);
}

/// A careless `checkpoint_commits` of 0 is taken as 1 (a checkpoint after every commit), not
/// as "never" or a division by zero: the store works and closes cleanly.
#[tokio::test]
async fn a_checkpoint_every_zero_commits_is_one_after_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zero.redb");
    let config = DiskStoreConfig {
        checkpoint_commits: 0,
        ..DiskStoreConfig::default()
    };
    let store = DiskStore::open_with(&path, config).unwrap();
    let e = id("e");
    let mut head = store.append(&e, 0, &[started("f")]).await.unwrap();
    for i in 0..20 {
        head = store
            .append(&e, head, &[tagged(json!({"i": i}))])
            .await
            .unwrap();
    }
    drop(store);
    let store = DiskStore::open_read_only(&path, DiskStoreConfig::default()).unwrap();
    assert_eq!(store.head(&e).await.unwrap(), 21);
}

/// The header of an empty journal of generation 1: what a store's creation writes first.
fn first_journal() -> Vec<u8> {
    fn crc32c(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for byte in bytes {
            crc ^= u32::from(*byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    let mut header = b"LOOMJNL1".to_vec();
    header.extend_from_slice(&1u64.to_le_bytes());
    header.extend_from_slice(&0u64.to_le_bytes());
    let crc = crc32c(&header);
    header.extend_from_slice(&crc.to_le_bytes());
    header.extend_from_slice(&[0; 4]);
    header
}

#[tokio::test]
async fn an_empty_store_file_left_by_an_interrupted_creation_opens_as_new() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.redb");
    std::fs::write(&path, b"").unwrap();
    // A 0-byte file alone is refused: nothing says it was ever being created.
    let err = DiskStore::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::EmptyFile { .. }), "{err:?}");
    // Beside the empty first journal a creation writes first, it is that creation,
    // interrupted: a new store.
    std::fs::write(journal_of(&path), first_journal()).unwrap();
    let err = DiskStore::open_read_only(&path, DiskStoreConfig::default()).unwrap_err();
    assert!(matches!(err, OpenError::EmptyFile { .. }), "{err:?}");
    let store = DiskStore::open(&path).unwrap();
    store.append(&id("e"), 0, &[started("f")]).await.unwrap();
    drop(store);
    assert_eq!(
        DiskStore::open(&path)
            .unwrap()
            .head(&id("e"))
            .await
            .unwrap(),
        1
    );
    // A journal of a store that was used is not a creation's: its empty file is refused.
    std::fs::write(&path, b"").unwrap();
    let err = DiskStore::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::EmptyFile { .. }), "{err:?}");
}

#[tokio::test]
async fn a_layout_2_file_reads_as_it_is_and_is_brought_to_the_current_layout_for_writing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    {
        let store = DiskStore::open(&path).unwrap();
        store.append(&id("old"), 0, &[started("f")]).await.unwrap();
    }
    // Layout 2: the same tables, no journal, no journal position.
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn
                .open_table(redb::TableDefinition::<&str, u64>::new("meta"))
                .unwrap();
            meta.insert("format", 2).unwrap();
            meta.remove("journal_generation").unwrap();
            meta.remove("journal_end").unwrap();
        }
        txn.commit().unwrap();
    }
    std::fs::remove_file(journal_of(&path)).unwrap();
    let read_only = DiskStore::open_read_only(&path, DiskStoreConfig::default()).unwrap();
    assert_eq!(read_only.head(&id("old")).await.unwrap(), 1);
    drop(read_only);
    assert!(
        !journal_of(&path).exists(),
        "a read-only open writes nothing"
    );
    let store = DiskStore::open(&path).unwrap();
    assert!(journal_of(&path).exists());
    store
        .append(&id("old"), 1, &[tagged(json!(1))])
        .await
        .unwrap();
    drop(store);
    let store = DiskStore::open(&path).unwrap();
    assert_eq!(store.head(&id("old")).await.unwrap(), 2);
}
