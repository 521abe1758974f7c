//! The embedded store's rows of many events (layout 4, LD-036): one `events` row and one feed
//! row per append. Every slice of a log and every feed position reads back from the tables
//! whatever row it falls in; a layout 3 file (one row per event) reads as it is and goes on in
//! layout 4.

use std::path::Path;

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::{DiskStore, DiskStoreConfig, Event, EventStore, EventStoreExt};
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};
use serde_json::json;

use crate::support::older_layouts::{HEAD_BITS, TAIL_MARKER, as_layout_4, strip_checks};

/// Appends `sizes` appends (of tagged events, after a start) to `e`, returning the events.
async fn append_in_sizes(store: &DiskStore, e: &str, sizes: &[usize]) -> Vec<Event> {
    let e = id(e);
    let mut all = vec![started("f")];
    store.append(&e, 0, &all).await.unwrap();
    for (n, size) in sizes.iter().enumerate() {
        let batch: Vec<Event> = (0..*size)
            .map(|i| tagged(json!({"append": n, "i": i})))
            .collect();
        store.append(&e, all.len() as u64, &batch).await.unwrap();
        all.extend(batch);
    }
    all
}

#[tokio::test]
async fn every_slice_of_a_log_and_every_feed_position_read_back_from_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.redb");
    let (a, b) = {
        let store = DiskStore::open(&path).unwrap();
        let a = append_in_sizes(&store, "a", &[3, 1, 5, 2]).await;
        let b = append_in_sizes(&store, "b", &[2, 4]).await;
        (a, b)
    };
    // Reopened: the close applied everything to the tables, so nothing is held in memory.
    let store = DiskStore::open(&path).unwrap();
    for (name, log) in [("a", &a), ("b", &b)] {
        let e = id(name);
        let len = log.len() as u64;
        for from in 0..=len + 1 {
            for limit in 0..=log.len() + 1 {
                let read = store.read(&e, from, limit).await.unwrap();
                let expected: Vec<&Event> = log.iter().skip(from as usize).take(limit).collect();
                assert_eq!(
                    read.iter().map(|x| &x.event).collect::<Vec<_>>(),
                    expected,
                    "{name} from {from} limit {limit}"
                );
                for (envelope, seq) in read.iter().zip(from..) {
                    assert_eq!(envelope.seq, seq);
                }
            }
        }
    }
    let feed = store.read_feed(0, 1000).await.unwrap();
    assert_eq!(feed.len(), a.len() + b.len());
    for (position, event) in feed.iter().enumerate() {
        assert_eq!(event.position, position as u64);
        let one = store.read_feed(position as u64, 1).await.unwrap();
        assert_eq!(one, std::slice::from_ref(event), "feed position {position}");
        let rest = store.read_feed(position as u64, 1000).await.unwrap();
        assert_eq!(rest, feed[position..], "feed from {position}");
    }
}

/// The values of `table` (`heads` or `meta`) of the closed store at `path`, as stored.
fn stored(path: &Path, table: &str) -> Vec<(String, u64)> {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_read().unwrap();
    let values = txn
        .open_table(redb::TableDefinition::<&str, u64>::new(table))
        .unwrap();
    values
        .iter()
        .unwrap()
        .map(|row| {
            let (key, value) = row.unwrap();
            (key.value().to_owned(), value.value())
        })
        .collect()
}

/// Rewrites a closed store whose appends were all of one event as a layout 3 build wrote it:
/// each `events` row a bare record, the `heads` values without their check, the format 3.
fn as_layout_3(path: &Path) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    strip_checks(&txn);
    {
        let definition = redb::TableDefinition::<(&str, u64), &[u8]>::new("events");
        let mut events = txn.open_table(definition).unwrap();
        let rows: Vec<((String, u64), Vec<u8>)> = events
            .iter()
            .unwrap()
            .map(|row| {
                let (key, value) = row.unwrap();
                let (id, seq) = key.value();
                ((id.to_owned(), seq), value.value().to_vec())
            })
            .collect();
        for ((id, seq), row) in rows {
            // A run: marker, checksum, count, one length, then the record.
            assert_eq!(row[0], 0xB3, "a run");
            assert_eq!(u32::from_le_bytes(row[5..9].try_into().unwrap()), 1);
            events.insert((id.as_str(), seq), &row[13..]).unwrap();
        }
        let mut meta = txn
            .open_table(redb::TableDefinition::<&str, u64>::new("meta"))
            .unwrap();
        meta.insert("format", 3).unwrap();
    }
    txn.commit().unwrap();
}

fn format_of(path: &Path) -> u64 {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_read().unwrap();
    let meta = txn
        .open_table(redb::TableDefinition::<&str, u64>::new("meta"))
        .unwrap();
    meta.get("format").unwrap().unwrap().value()
}

#[tokio::test]
async fn a_layout_3_file_reads_as_it_is_and_goes_on_in_layout_5() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("three.redb");
    let e = id("old");
    let mut log = {
        let store = DiskStore::open(&path).unwrap();
        let log = append_in_sizes(&store, "old", &[1, 1]).await;
        store
            .append(&id("other"), 0, &[started("g")])
            .await
            .unwrap();
        log
    };
    as_layout_3(&path);
    let old_feed = {
        let read_only = DiskStore::open_read_only(&path, DiskStoreConfig::default()).unwrap();
        let read = read_only.read_all(&e).await.unwrap();
        assert_eq!(
            read.iter().map(|x| &x.event).collect::<Vec<_>>(),
            log.iter().collect::<Vec<_>>()
        );
        assert_eq!(read_only.read(&e, 1, 10).await.unwrap().len(), 2);
        let feed = read_only.read_feed(0, 100).await.unwrap();
        assert_eq!(feed.len(), 4);
        feed
    };
    assert_eq!(format_of(&path), 3, "a read-only open changes nothing");
    {
        let store = DiskStore::open(&path).unwrap();
        let more: Vec<Event> = (0..3).map(|i| tagged(json!({"new": i}))).collect();
        store.append(&e, 3, &more).await.unwrap();
        log.extend(more);
    }
    assert_eq!(format_of(&path), 5);
    assert!(
        stored(&path, "heads")
            .iter()
            .all(|(_, value)| value & !HEAD_BITS != 0),
        "every head checked"
    );
    let store = DiskStore::open(&path).unwrap();
    for from in 0..log.len() as u64 {
        let read = store.read(&e, from, 100).await.unwrap();
        assert_eq!(
            read.iter().map(|x| &x.event).collect::<Vec<_>>(),
            log.iter().skip(from as usize).collect::<Vec<_>>(),
            "from {from}"
        );
    }
    let feed = store.read_feed(0, 100).await.unwrap();
    assert_eq!(feed[..4], old_feed[..], "the old rows keep their positions");
    assert_eq!(feed.len(), 7);
    for position in 0..7 {
        assert_eq!(
            store.read_feed(position, 1).await.unwrap(),
            [feed[position as usize].clone()],
            "feed position {position}"
        );
    }
    assert_eq!(feed[6].envelope.event, tagged(json!({"new": 2})));
    assert_eq!(feed[6].envelope.seq, 5);
}

/// Appends of random sizes to a few executions, interleaved, then every slice of every log and
/// the whole feed read against what was appended: while the events are held in memory, and
/// from the tables after a reopen.
fn reads_agree_with_the_appends(appends: &[(usize, usize)]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.redb");
        let names = ["m0", "m1", "m2"];
        let mut logs: Vec<Vec<Event>> = vec![Vec::new(); names.len()];
        let mut feed: Vec<(usize, u64)> = Vec::new();
        {
            let store = DiskStore::open(&path).unwrap();
            for (n, &(which, size)) in appends.iter().enumerate() {
                let log = &mut logs[which];
                let mut batch = Vec::new();
                if log.is_empty() {
                    batch.push(started("f"));
                }
                batch.extend((0..size).map(|i| tagged(json!({"n": n, "i": i}))));
                let first = log.len() as u64;
                store
                    .append(&id(names[which]), first, &batch)
                    .await
                    .unwrap();
                feed.extend((first..).take(batch.len()).map(|seq| (which, seq)));
                log.extend(batch);
            }
            check(&store, &names, &logs, &feed).await;
        }
        let store = DiskStore::open(&path).unwrap();
        check(&store, &names, &logs, &feed).await;
    });
}

async fn check(store: &DiskStore, names: &[&str], logs: &[Vec<Event>], feed: &[(usize, u64)]) {
    for (name, log) in names.iter().zip(logs) {
        let e = id(name);
        let len = log.len();
        for from in 0..=len + 1 {
            for limit in [0, 1, 2, 3, len + 1] {
                let read = store.read(&e, from as u64, limit).await.unwrap();
                let expected: Vec<&Event> = log.iter().skip(from).take(limit).collect();
                assert_eq!(
                    read.iter().map(|x| &x.event).collect::<Vec<_>>(),
                    expected,
                    "{name} from {from} limit {limit}"
                );
            }
        }
    }
    let read = store.read_feed(0, usize::MAX).await.unwrap();
    let got: Vec<(String, u64, u64)> = read
        .iter()
        .map(|event| {
            (
                event.envelope.execution_id.to_string(),
                event.envelope.seq,
                event.position,
            )
        })
        .collect();
    let expected: Vec<(String, u64, u64)> = feed
        .iter()
        .zip(0u64..)
        .map(|(&(which, seq), position)| (names[which].to_owned(), seq, position))
        .collect();
    assert_eq!(got, expected);
    for position in 0..feed.len() as u64 {
        let one = store.read_feed(position, 2).await.unwrap();
        assert_eq!(one.first().map(|event| event.position), Some(position));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    #[test]
    fn reads_of_random_appends_agree_with_what_was_appended(
        appends in proptest::collection::vec((0usize..3, 1usize..5), 1..14),
    ) {
        reads_agree_with_the_appends(&appends);
    }
}

fn journal_of(store: &Path) -> std::path::PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".journal");
    std::path::PathBuf::from(name)
}

/// A layout 3 store that crashed with commits in its journal (its tables at their last
/// checkpoint): the open brings it to layout 5 first, then applies the journal as runs.
#[tokio::test]
async fn a_layout_3_crash_image_opens_with_its_journal_applied() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.redb");
    let store = DiskStore::open(&path).unwrap();
    let log = append_in_sizes(&store, "victim", &[2, 1, 4, 3]).await;
    let image = dir.path().join("image.redb");
    std::fs::copy(&path, &image).unwrap();
    std::fs::copy(journal_of(&path), journal_of(&image)).unwrap();
    drop(store);
    as_layout_3(&image);
    let store = DiskStore::open(&image).unwrap();
    let read = store.read_all(&id("victim")).await.unwrap();
    assert_eq!(
        read.iter().map(|x| &x.event).collect::<Vec<_>>(),
        log.iter().collect::<Vec<_>>()
    );
    let feed = store.read_feed(0, 100).await.unwrap();
    assert_eq!(feed.len(), log.len());
    drop(store);
    assert_eq!(format_of(&image), 5);
    let store = DiskStore::open(&image).unwrap();
    for from in 0..log.len() as u64 {
        assert_eq!(
            store.read(&id("victim"), from, 2).await.unwrap()[0].event,
            log[from as usize],
            "from {from}"
        );
    }
}

/// Reads at the ends of the seq and position ranges on rows of many events: nothing past a
/// log's head or the feed's end, and no panic or damage report for `u64::MAX`.
#[tokio::test]
async fn reads_past_the_end_of_rows_of_many_events_are_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ends.redb");
    let log = {
        let store = DiskStore::open(&path).unwrap();
        append_in_sizes(&store, "ends", &[4, 3]).await
    };
    let store = DiskStore::open(&path).unwrap();
    let e = id("ends");
    for from in [log.len() as u64, log.len() as u64 + 1, u64::MAX] {
        assert!(
            store.read(&e, from, usize::MAX).await.unwrap().is_empty(),
            "from {from}"
        );
    }
    assert!(store.read(&e, 2, 0).await.unwrap().is_empty());
    assert_eq!(store.read_all(&e).await.unwrap().len(), log.len());
    for from in [log.len() as u64, u64::MAX] {
        assert!(
            store.read_feed(from, usize::MAX).await.unwrap().is_empty(),
            "feed from {from}"
        );
    }
    assert_eq!(
        store.read_feed(5, 0).await.unwrap().len(),
        1,
        "a limit of 0 reads as 1"
    );
}

/// A layout 4 file (its `heads` values without their check) reads as it is read-only and
/// changes nothing; opened for writing it is brought to layout 5, every head rewritten with its
/// check, in one commit, and reads the same.
#[tokio::test]
async fn a_layout_4_file_reads_as_it_is_and_gets_checked_heads_in_layout_5() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("four.redb");
    let names: Vec<String> = (0..5000).map(|n| format!("e{n:05}")).collect();
    {
        let store = DiskStore::open(&path).unwrap();
        for (n, name) in names.iter().enumerate() {
            let mut events = vec![started("f")];
            events.extend((0..n % 3).map(|i| tagged(json!(i))));
            store.append(&id(name), 0, &events).await.unwrap();
        }
    }
    as_layout_4(&path);
    let untagged = stored(&path, "heads");
    assert_eq!(untagged.len(), names.len());
    let read = |store: DiskStore| async move {
        let listed = store.list_all_executions().await.unwrap();
        let mut heads = Vec::new();
        for summary in &listed {
            heads.push(store.head(&summary.id).await.unwrap());
        }
        (listed, heads, store.read_feed(0, 100_000).await.unwrap())
    };
    let before = read(DiskStore::open_read_only(&path, DiskStoreConfig::default()).unwrap()).await;
    assert_eq!(before.0.len(), names.len());
    assert_eq!(format_of(&path), 4, "a read-only open changes nothing");
    assert_eq!(stored(&path, "heads"), untagged);
    let after = read(DiskStore::open(&path).unwrap()).await;
    assert_eq!(before, after);
    assert_eq!(format_of(&path), 5);
    let tagged = stored(&path, "heads");
    for ((id, old), (same_id, new)) in untagged.iter().zip(&tagged) {
        assert_eq!(id, same_id);
        assert_eq!(new & HEAD_BITS, *old, "{id}");
        assert_ne!(new & !HEAD_BITS, 0, "{id} checked");
    }
    for (key, value) in stored(&path, "meta") {
        if key != "format" {
            assert_ne!(value & !HEAD_BITS, 0, "meta {key} checked");
        }
    }
    let db = redb::Database::create(&path).unwrap();
    let txn = db.begin_read().unwrap();
    let tails = txn
        .open_table(redb::TableDefinition::<&str, &[u8]>::new("tails"))
        .unwrap();
    assert_eq!(tails.len().unwrap(), names.len() as u64);
    for row in tails.iter().unwrap() {
        let (id, value) = row.unwrap();
        assert_eq!(
            value.value()[0],
            TAIL_MARKER,
            "{}'s tail framed",
            id.value()
        );
    }
}

/// A layout 4 file whose journal is gone is refused for writing, and nothing of it changes: its
/// version and its heads are as they were.
#[tokio::test]
async fn a_layout_4_file_without_its_journal_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("four.redb");
    {
        let store = DiskStore::open(&path).unwrap();
        store.append(&id("e"), 0, &[started("f")]).await.unwrap();
    }
    as_layout_4(&path);
    std::fs::remove_file(journal_of(&path)).unwrap();
    let heads = stored(&path, "heads");
    let err = DiskStore::open(&path).unwrap_err();
    assert!(err.to_string().contains("journal"), "{err}");
    assert_eq!(format_of(&path), 4);
    assert_eq!(stored(&path, "heads"), heads);
}
