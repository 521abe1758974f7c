//! Damaged, foreign and newer files give clear errors, never a panic.

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::{DiskStore, EventStore, OpenError, ReadError, kit::DecodeError};
use serde_json::json;

async fn write_some(path: &std::path::Path) {
    let store = DiskStore::open(path).unwrap();
    let e = id("victim");
    let mut head = store.append(&e, 0, &[started("f")]).await.unwrap();
    for i in 0..200 {
        head = store
            .append(&e, head, &[tagged(json!({"i": i, "pad": "z".repeat(500)}))])
            .await
            .unwrap();
    }
}

/// A closed store at `path` holding `appends` to `name`, one commit each.
async fn closed_store_with(
    path: &std::path::Path,
    name: &str,
    appends: &[Vec<loom_kernel::Event>],
) {
    let store = DiskStore::open(path).unwrap();
    let e = id(name);
    let mut head = 0;
    for events in appends {
        head = store.append(&e, head, events).await.unwrap();
    }
}

/// A closed store at `path` holding one execution, `name`, started and completed.
async fn closed_store_of_one_ended(path: &std::path::Path, name: &str) {
    let ended = [
        vec![started("f")],
        vec![loom_kernel::conformance::completed()],
    ];
    closed_store_with(path, name, &ended).await;
}

/// Edits the `events` table of the closed store at `path`, opened as a bare redb file: what
/// damage at rest does to a key or a row.
fn edit_events(
    path: &std::path::Path,
    edit: impl FnOnce(&mut redb::Table<'_, (&'static str, u64), &'static [u8]>),
) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut events = txn
            .open_table(redb::TableDefinition::<(&str, u64), &[u8]>::new("events"))
            .unwrap();
        edit(&mut events);
    }
    txn.commit().unwrap();
}

/// Edits the table `name` of the closed store at `path`, opened as a bare redb file: a damaged
/// key or value that still decodes, which redb's check of every page does not see (the edit is
/// a valid commit).
fn edit_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    path: &std::path::Path,
    name: &str,
    edit: impl FnOnce(&mut redb::Table<'_, K, V>),
) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn
            .open_table(redb::TableDefinition::<K, V>::new(name))
            .unwrap();
        edit(&mut table);
    }
    txn.commit().unwrap();
}

/// The store at `path` opened without redb's check of every page, which would refuse some
/// damage before the store's own checks meet it.
fn open_unverified(path: &std::path::Path) -> DiskStore {
    let config = loom_kernel::DiskStoreConfig {
        verify_on_open: false,
        ..loom_kernel::DiskStoreConfig::default()
    };
    DiskStore::open_with(path, config).unwrap()
}

#[test]
fn garbage_file_is_refused_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.redb");
    std::fs::write(
        &path,
        b"this is not a database, just some text ".repeat(200),
    )
    .unwrap();
    let err = DiskStore::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("garbage.redb"), "{err}");
}

#[tokio::test]
async fn truncated_file_is_refused_or_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truncated.redb");
    write_some(&path).await;
    let len = std::fs::metadata(&path).unwrap().len();
    for cut in [len / 2, len / 3, 4096, 100] {
        let copy = dir.path().join(format!("cut-{cut}.redb"));
        std::fs::copy(&path, &copy).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&copy)
            .unwrap()
            .set_len(cut)
            .unwrap();
        match DiskStore::open(&copy) {
            Err(OpenError::Corrupt { .. } | OpenError::Io { .. }) => {}
            Err(other) => panic!("cut at {cut}: unexpected error {other:?}"),
            Ok(store) => {
                // Whatever survived must be a consistent prefix.
                let head = store.head(&id("victim")).await.unwrap();
                let log = store.read(&id("victim"), 0, usize::MAX).await.unwrap();
                assert_eq!(log.len() as u64, head);
            }
        }
    }
}

#[test]
fn flipped_bytes_are_detected_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flipped.redb");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(write_some(&path));
    let mut bytes = std::fs::read(&path).unwrap();
    // 64 bytes in the middle of every 4 KiB page but the file's first (its header): which pages
    // hold live data and which are free depends on how the applier grouped the commits, and a
    // flip in a free page is rightly not noticed. With every page hit, a live one is.
    for page in bytes.chunks_mut(4096).skip(1) {
        if page.len() == 4096 {
            for byte in &mut page[2048..2048 + 64] {
                *byte ^= 0x5a;
            }
        }
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = DiskStore::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");
}

#[test]
fn a_second_open_of_the_same_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.redb");
    let _first = DiskStore::open(&path).unwrap();
    let err = DiskStore::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::AlreadyOpen { .. }), "{err:?}");
}

/// Opens of an existing file at once, each checking its pages in an open of its own first (the
/// file is unlocked between that open and the store's): at most one holds the store, the others
/// are refused as `AlreadyOpen`, never as a damaged file, and the file opens afterwards.
#[test]
fn opens_of_one_file_at_once_give_it_to_at_most_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("contended.redb");
    drop(DiskStore::open(&path).unwrap());
    for _ in 0..20 {
        let barrier = std::sync::Barrier::new(4);
        let outcomes: Vec<Result<DiskStore, OpenError>> = std::thread::scope(|scope| {
            let opens: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        DiskStore::open(&path)
                    })
                })
                .collect();
            opens.into_iter().map(|open| open.join().unwrap()).collect()
        });
        let held = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        assert!(held <= 1, "{held} opens hold the file");
        for outcome in &outcomes {
            if let Err(err) = outcome {
                assert!(matches!(err, OpenError::AlreadyOpen { .. }), "{err:?}");
            }
        }
        drop(outcomes);
        drop(DiskStore::open(&path).expect("the file opens once the others are closed"));
    }
}

#[test]
fn a_file_of_another_layout_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.redb");
    drop(DiskStore::open(&path).unwrap());
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn
                .open_table(redb::TableDefinition::<&str, u64>::new("meta"))
                .unwrap();
            meta.insert("format", 99).unwrap();
        }
        txn.commit().unwrap();
    }
    let err = DiskStore::open(&path).unwrap_err();
    assert!(
        matches!(err, OpenError::UnsupportedFormat { found: 99, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_event_from_a_newer_schema_is_refused_naming_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("newer.redb");
    {
        let store = DiskStore::open(&path).unwrap();
        store.append(&id("e"), 0, &[started("f")]).await.unwrap();
    }
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut events = txn
                .open_table(redb::TableDefinition::<(&str, u64), &[u8]>::new("events"))
                .unwrap();
            events
                .insert(
                    ("e", 1),
                    &br#"{"schema":2,"event":{"type":"TIME_TRAVELLED"}}"#[..],
                )
                .unwrap();
            let mut heads = txn
                .open_table(redb::TableDefinition::<&str, u64>::new("heads"))
                .unwrap();
            heads.insert("e", 2).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = DiskStore::open(&path).unwrap();
    let err = store.read(&id("e"), 0, 10).await.unwrap_err();
    assert!(
        matches!(
            &err,
            ReadError::Decode {
                seq: 1,
                source: DecodeError::UnsupportedSchema {
                    found: 2,
                    supported: 1
                },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("event 1 of execution e"), "{err}");
}

/// A 0-byte file is not a store: every way of opening it refuses it with `EmptyFile`, and
/// none turns it into an empty store (the file stays 0 bytes).
#[test]
fn a_zero_byte_file_does_not_open_as_an_empty_store() {
    use loom_kernel::{DiskStoreConfig, OpenError};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truncated.redb");
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(
        DiskStore::open(&path),
        Err(OpenError::EmptyFile { .. })
    ));
    assert!(matches!(
        DiskStore::open_existing(&path, DiskStoreConfig::default()),
        Err(OpenError::EmptyFile { .. })
    ));
    assert!(matches!(
        DiskStore::open_read_only(&path, DiskStoreConfig::default()),
        Err(OpenError::EmptyFile { .. })
    ));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
}

/// Opening an existing store (for writing or read-only) never creates a missing file.
#[test]
fn opening_an_existing_store_never_creates_the_file() {
    use loom_kernel::{DiskStoreConfig, OpenError};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.redb");
    assert!(matches!(
        DiskStore::open_existing(&path, DiskStoreConfig::default()),
        Err(OpenError::Missing { .. })
    ));
    assert!(matches!(
        DiskStore::open_read_only(&path, DiskStoreConfig::default()),
        Err(OpenError::Missing { .. })
    ));
    assert!(!path.exists());
}

/// A store opened read-only reads what was written, refuses writes, and leaves the file's
/// bytes as they were.
#[tokio::test]
async fn a_read_only_store_reads_and_writes_nothing() {
    use loom_kernel::{AppendError, DiskStoreConfig, EventStore, EventStoreExt};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.redb");
    let e = id("ro");
    {
        let store = DiskStore::open(&path).unwrap();
        store.append(&e, 0, &[started("f")]).await.unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let store = DiskStore::open_read_only(&path, DiskStoreConfig::default()).unwrap();
    assert_eq!(store.read_all(&e).await.unwrap().len(), 1);
    assert!(matches!(
        store.append(&e, 1, &[tagged(serde_json::json!(1))]).await,
        Err(AppendError::Closed)
    ));
    drop(store);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

/// With `verify_on_open` off, a byte flipped inside a record (here a payload character, so
/// that the record still parses) is caught by the record's checksum when read, instead of
/// reading back as a silently different event.
#[tokio::test]
async fn a_flipped_payload_byte_is_detected_without_verify_on_open() {
    use loom_kernel::EventStoreExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flip.redb");
    let e = id("flip");
    let marker = "amount-1000-marker-unique";
    {
        let store = DiskStore::open(&path).unwrap();
        store
            .append(&e, 0, &[started("f"), tagged(json!(marker))])
            .await
            .unwrap();
    }
    let mut bytes = std::fs::read(&path).unwrap();
    let found: Vec<usize> = bytes
        .windows(marker.len())
        .enumerate()
        .filter(|(_, window)| *window == marker.as_bytes())
        .map(|(at, _)| at)
        .collect();
    assert!(!found.is_empty(), "the payload is in the file");
    for at in &found {
        // "1000" becomes "9000": still valid JSON, another amount.
        bytes[at + 7] = b'9';
    }
    std::fs::write(&path, &bytes).unwrap();
    let store = open_unverified(&path);
    let err = store.read_all(&e).await.unwrap_err();
    assert!(
        matches!(
            &err,
            ReadError::Decode {
                seq: 1,
                source: DecodeError::ChecksumMismatch { .. },
                ..
            }
        ),
        "{err:?}"
    );
}

/// What a flipped byte in an `events` key does (a row of an append's events moves to another
/// seq or id): with `verify_on_open` off redb does not see it; the row's checksum binds it to
/// its key, so every read that reaches it reports the damage instead of returning a shorter
/// or shifted log.
#[tokio::test]
async fn events_under_a_damaged_key_are_reported_not_skipped() {
    use loom_kernel::EventStoreExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key.redb");
    let e = id("keyed");
    closed_store_with(
        &path,
        "keyed",
        &[
            vec![started("f"), tagged(json!(1))],
            vec![tagged(json!(2))],
            vec![tagged(json!(3)), tagged(json!(4))],
        ],
    )
    .await;
    edit_events(&path, |events| {
        let moved = events
            .remove(("keyed", 2))
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        events.insert(("keyed", 9), moved.as_slice()).unwrap();
    });
    let store = open_unverified(&path);
    for read in [
        store.read_all(&e).await.map(|log| log.len()),
        store.read(&e, 1, 10).await.map(|log| log.len()),
        store.read(&e, 2, 10).await.map(|log| log.len()),
        store
            .read_logs(std::slice::from_ref(&e))
            .await
            .map(|logs| logs[0].len()),
    ] {
        let err = read.unwrap_err();
        assert!(err.to_string().contains("(at seq 2)"), "{err}");
    }
    assert_eq!(
        store.read(&e, 0, 2).await.unwrap().len(),
        2,
        "before the hole"
    );
    let err = store.read(&e, 5, 10).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("the events row of execution keyed at seq 9 is damaged"),
        "the stray row past the head: {err}"
    );
}

/// A flipped byte in a row's framing (its count or a length) is refused by the row's
/// checksum, at any offset the read starts from.
#[tokio::test]
async fn a_damaged_row_framing_is_reported() {
    use loom_kernel::EventStoreExt;
    use redb::ReadableTable;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("framing.redb");
    let e = id("framed");
    closed_store_with(
        &path,
        "framed",
        &[vec![started("f"), tagged(json!(1)), tagged(json!(2))]],
    )
    .await;
    edit_events(&path, |events| {
        let mut row = events.get(("framed", 0)).unwrap().unwrap().value().to_vec();
        // The first record's length (after the marker, the checksum and the count).
        row[9] ^= 0x01;
        events.insert(("framed", 0), row.as_slice()).unwrap();
    });
    let store = open_unverified(&path);
    for from in 0..3 {
        let err = store.read(&e, from, 10).await.unwrap_err();
        assert!(
            err.to_string().contains("its checksum does not match"),
            "from {from}: {err}"
        );
    }
    assert!(store.read_all(&e).await.is_err());
}

/// A damaged feed row (its value naming other events, or events that are not there; its
/// position moved) is reported by a feed read, not read back as other events.
#[tokio::test]
async fn a_damaged_feed_row_is_reported() {
    type Feed<'a> = redb::Table<'a, u64, (&'static str, u64)>;
    type Damage = fn(&mut Feed<'_>);
    fn edit_feed(path: &std::path::Path, edit: impl FnOnce(&mut Feed<'_>)) {
        let db = redb::Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut feed = txn
                .open_table(redb::TableDefinition::<u64, (&str, u64)>::new("feed"))
                .unwrap();
            edit(&mut feed);
        }
        txn.commit().unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    // The feed: 0 -> (fed, 0) two events, 2 -> (fed, 2) one, 3 -> (fed, 3) three.
    let cases: [(&str, Damage); 4] = [
        ("a value naming another row", |feed| {
            feed.insert(2, ("fed", 3)).unwrap();
        }),
        ("a value naming no row of a log that is there", |feed| {
            feed.insert(2, ("fed", 1)).unwrap();
        }),
        (
            "a value naming a seq past the head of a log that is there",
            |feed| {
                feed.insert(2, ("fed", 9)).unwrap();
            },
        ),
        ("a moved position", |feed| {
            feed.remove(2).unwrap();
            feed.insert(9, ("fed", 2)).unwrap();
        }),
    ];
    for (n, (case, damage)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("feed-{n}.redb"));
        closed_store_with(
            &path,
            "fed",
            &[
                vec![started("f"), tagged(json!(1))],
                vec![tagged(json!(2))],
                vec![tagged(json!(3)), tagged(json!(4)), tagged(json!(5))],
            ],
        )
        .await;
        edit_feed(&path, damage);
        let store = open_unverified(&path);
        let err = store.read_feed(0, 100).await.unwrap_err();
        assert!(
            err.to_string().contains("the feed row at position"),
            "{case}: {err}"
        );
    }
}

/// A damaged key in the status index names an execution that has no log: a listing by status
/// reports it instead of listing an execution that is not there.
#[tokio::test]
async fn a_status_index_key_naming_no_log_is_reported() {
    use loom_kernel::{ExecutionStatus, StatusFilter, kit::status_code};
    type ByStatus<'a> = redb::Table<'a, (u8, &'static str), ()>;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("by-status.redb");
    closed_store_of_one_ended(&path, "filed").await;
    edit_table(&path, "by_status", |by_status: &mut ByStatus<'_>| {
        let completed = status_code(ExecutionStatus::Completed);
        by_status.remove((completed, "filed")).unwrap();
        by_status.insert((completed, "filez"), ()).unwrap();
    });
    let store = open_unverified(&path);
    let err = store
        .list_by_status(StatusFilter::Status(ExecutionStatus::Completed), None, 10)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("the status index files execution filez, which has no log"),
        "{err}"
    );
}

/// A damaged `heads` value (a flipped bit) or key (the value moved under another id): with
/// `verify_on_open` off redb does not see it; the value's check binds it to its id and head, so
/// the head is refused where it is read instead of read back wrong, and a listing reports the
/// moved one instead of listing an execution that is not there.
#[tokio::test]
async fn a_damaged_head_is_reported_not_read_back() {
    use loom_kernel::EventStoreExt;
    use redb::ReadableTable;
    type Heads<'a> = redb::Table<'a, &'static str, u64>;
    type Damage = fn(&mut Heads<'_>);
    let cases: [(&str, Damage); 3] = [
        ("a flipped bit of the head", |heads| {
            let value = heads.get("keyed").unwrap().unwrap().value();
            heads.insert("keyed", value ^ 0b100).unwrap();
        }),
        ("a flipped bit of the check", |heads| {
            let value = heads.get("keyed").unwrap().unwrap().value();
            heads.insert("keyed", value ^ (1 << 60)).unwrap();
        }),
        ("the value moved under another id", |heads| {
            let value = heads.remove("keyed").unwrap().unwrap().value();
            heads.insert("keyeD", value).unwrap();
        }),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (n, (case, damage)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("heads-{n}.redb"));
        closed_store_with(
            &path,
            "keyed",
            &[vec![started("f"), tagged(json!(1))], vec![tagged(json!(2))]],
        )
        .await;
        {
            let db = redb::Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            damage(
                &mut txn
                    .open_table(redb::TableDefinition::<&str, u64>::new("heads"))
                    .unwrap(),
            );
            txn.commit().unwrap();
        }
        let store = open_unverified(&path);
        let e = id("keyed");
        assert!(store.read_all(&e).await.is_err(), "{case}: the log");
        let listed = store.list_all_executions().await;
        if n < 2 {
            let err = store.head(&e).await.unwrap_err();
            assert!(
                err.to_string()
                    .contains("the head stored for execution keyed does not match its check"),
                "{case}: {err}"
            );
            assert!(listed.is_err(), "{case}: {listed:?}");
        } else {
            let err = listed.unwrap_err();
            assert!(
                err.to_string()
                    .contains("the head stored for execution keyeD does not match its check"),
                "{case}: {err}"
            );
        }
    }
}

/// A flipped bit in a `meta` value (a count per status, the journal's position): its check
/// refuses it where it is read (the counts; the open, which reads the position) instead of
/// answering another count or replaying the journal from another offset.
#[tokio::test]
async fn a_damaged_meta_value_is_reported_not_read_back() {
    use redb::ReadableTable;
    let dir = tempfile::tempdir().unwrap();
    for (n, key) in ["count_completed", "journal_end"].into_iter().enumerate() {
        let path = dir.path().join(format!("meta-{n}.redb"));
        closed_store_of_one_ended(&path, "counted").await;
        {
            let db = redb::Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut meta = txn
                    .open_table(redb::TableDefinition::<&str, u64>::new("meta"))
                    .unwrap();
                let value = meta.get(key).unwrap().unwrap().value();
                meta.insert(key, value ^ 1).unwrap();
            }
            txn.commit().unwrap();
        }
        let expected = format!("its {key} in `meta` does not match its check");
        match key {
            "count_completed" => {
                let err = open_unverified(&path).count_by_status().await.unwrap_err();
                assert!(err.to_string().contains(&expected), "{err}");
            }
            _ => {
                let config = loom_kernel::DiskStoreConfig {
                    verify_on_open: false,
                    ..loom_kernel::DiskStoreConfig::default()
                };
                let err = DiskStore::open_with(&path, config).unwrap_err();
                assert!(err.to_string().contains(&expected), "{err}");
            }
        }
    }
}

/// A damaged `tails` value (a flipped bit of a step's id) or key (the tail moved under another
/// id): the tail's check binds it to its id, so the append it would validate is refused and a
/// listing by id reports it, instead of validating against another execution's tail.
#[tokio::test]
async fn a_damaged_tail_is_reported_not_read_back() {
    use redb::ReadableTable;
    type Tails<'a> = redb::Table<'a, &'static str, &'static [u8]>;
    type Damage = fn(&mut Tails<'_>);
    let cases: [(&str, Damage); 2] = [
        ("a flipped bit of the tail", |tails| {
            let mut value = tails.get("tailed").unwrap().unwrap().value().to_vec();
            *value.last_mut().unwrap() ^= 0x01;
            tails.insert("tailed", value.as_slice()).unwrap();
        }),
        ("the tail moved under another id", |tails| {
            let value = tails.remove("tailed").unwrap().unwrap().value().to_vec();
            tails.insert("tailee", value.as_slice()).unwrap();
        }),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (n, (case, damage)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("tails-{n}.redb"));
        closed_store_with(
            &path,
            "tailed",
            &[vec![
                started("f"),
                loom_kernel::conformance::step_started("a"),
            ]],
        )
        .await;
        {
            let db = redb::Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            damage(
                &mut txn
                    .open_table(redb::TableDefinition::<&str, &[u8]>::new("tails"))
                    .unwrap(),
            );
            txn.commit().unwrap();
        }
        let store = open_unverified(&path);
        let damaged = if n == 0 { "tailed" } else { "tailee" };
        let expected = format!("the stored tail of execution {damaged} is damaged");
        let query = loom_kernel::kit::ExecutionQuery {
            id_prefix: Some("tail".into()),
            ..Default::default()
        };
        let err = store.query_executions(&query).await.unwrap_err();
        assert!(err.to_string().contains(&expected), "{case}: {err}");
        if n == 0 {
            let err = store
                .append(&id("tailed"), 2, &[tagged(json!(1))])
                .await
                .unwrap_err();
            assert!(err.to_string().contains(&expected), "{case}: {err}");
        }
    }
}

/// Deleting is the one change that cannot be undone: a damaged row of the index of ended
/// executions that names a running execution, or moves an ended one to an earlier end, makes
/// retention say the file is damaged and delete nothing, not remove a log that is running or
/// not old enough. The edit is a valid redb commit, so the open's check passes it.
#[tokio::test]
async fn retention_deletes_nothing_on_a_damaged_row_of_ended_executions() {
    use redb::ReadableTable;
    type Ended<'a> = redb::Table<'a, (u64, &'static str), ()>;
    type Damage = fn(&mut Ended<'_>, u64);
    let cases: [(&str, Damage); 2] = [
        ("a row naming a running execution", |ended, _| {
            ended.insert((1, "alive"), ()).unwrap();
        }),
        ("an end moved earlier", |ended, real| {
            ended.remove((real, "old")).unwrap();
            ended.insert((1, "old"), ()).unwrap();
        }),
    ];
    for (n, (case, damage)) in cases.into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("ended-{n}.redb"));
        {
            let store = DiskStore::open(&path).unwrap();
            let old = id("old");
            let head = store.append(&old, 0, &[started("f")]).await.unwrap();
            store
                .append(&old, head, &[loom_kernel::conformance::completed()])
                .await
                .unwrap();
            store
                .append(&id("alive"), 0, &[started("f")])
                .await
                .unwrap();
        }
        edit_table(&path, "ended", |ended: &mut Ended<'_>| {
            let rows: Vec<(u64, String)> = ended
                .iter()
                .unwrap()
                .map(|row| {
                    let (key, _) = row.unwrap();
                    let (at, id) = key.value();
                    (at, id.to_owned())
                })
                .collect();
            let [(real, only)] = rows.as_slice() else {
                panic!("{case}: one ended execution, not {rows:?}");
            };
            assert_eq!(only, "old");
            assert!(*real > 2, "{case}: the end was recorded with a clock");
            damage(ended, *real);
        });
        let store = DiskStore::open(&path).unwrap();
        let err = store.delete_ended(2, 10).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("the index of ended executions files"),
            "{case}: {err}"
        );
        assert_eq!(store.head(&id("old")).await.unwrap(), 2, "{case}");
        assert_eq!(store.head(&id("alive")).await.unwrap(), 1, "{case}");
    }
}

/// A damaged key of the status index, or a damaged row of the listing, that still names an
/// execution that is there, under a status, a start or a flow it does not have: the
/// execution's tail and first record say where it belongs, and the read reports the damage
/// instead of listing it there.
#[tokio::test]
async fn a_listing_row_that_disagrees_with_the_log_is_reported() {
    use loom_kernel::{ExecutionStatus, StatusFilter, kit::ExecutionQuery, kit::status_code};
    use redb::ReadableTable;
    type ByStatus<'a> = redb::Table<'a, (u8, &'static str), ()>;
    type ByStatusStart<'a> = redb::Table<'a, (u8, u64, &'static str), (Option<u64>, &'static str)>;
    let (completed, running) = (
        status_code(ExecutionStatus::Completed),
        status_code(ExecutionStatus::Running),
    );
    let dir = tempfile::tempdir().unwrap();
    let status_path = dir.path().join("by-status.redb");
    closed_store_of_one_ended(&status_path, "filed").await;
    edit_table(&status_path, "by_status", |by_status: &mut ByStatus<'_>| {
        by_status.remove((completed, "filed")).unwrap();
        by_status.insert((running, "filed"), ()).unwrap();
    });
    let store = DiskStore::open(&status_path).unwrap();
    let err = store
        .list_by_status(StatusFilter::Status(ExecutionStatus::Running), None, 10)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("the status index files execution filed under code"),
        "{err}"
    );
    drop(store);

    // The listing's key holds the status and the start: either moved, the row still decodes.
    type MoveKey = fn((u8, u64)) -> (u8, u64);
    let moves: [(&str, MoveKey); 2] = [
        ("another status", |(_, start)| {
            (status_code(ExecutionStatus::Running), start)
        }),
        ("another start", |(code, start)| (code, start ^ 0x10)),
    ];
    for (n, (case, move_key)) in moves.into_iter().enumerate() {
        let path = dir.path().join(format!("listing-{n}.redb"));
        closed_store_of_one_ended(&path, "listed").await;
        edit_table(
            &path,
            "by_status_start",
            |listing: &mut ByStatusStart<'_>| {
                let (key, value) = {
                    let (key, value) = listing.first().unwrap().unwrap();
                    let (code, start, id) = key.value();
                    assert_eq!((code, id), (completed, "listed"));
                    let (ended, flow) = value.value();
                    ((code, start), (ended, flow.to_owned()))
                };
                listing.remove((key.0, key.1, "listed")).unwrap();
                let (code, start) = move_key(key);
                listing
                    .insert((code, start, "listed"), (value.0, value.1.as_str()))
                    .unwrap();
            },
        );
        let store = DiskStore::open(&path).unwrap();
        let err = store
            .query_executions(&ExecutionQuery {
                limit: 10,
                ..ExecutionQuery::default()
            })
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("the listing files execution listed under code"),
            "{case}: {err}"
        );
    }
}
