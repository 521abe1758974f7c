//! The embedded store answers an append once its journal record is durable and applies it to
//! its tables later, on its applier thread (LD-035). Whatever the applier is doing, a reader
//! sees every acknowledged event: logs and heads from the events held in memory and the
//! tables together, the indexes (status, listing, counts, feed) once the tables caught up; a
//! deletion sees executions that ended a moment ago; a crash image opens with all of them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use loom_kernel::conformance::{completed, id, started, tagged};
use loom_kernel::kit::ExecutionQuery;
use loom_kernel::{DiskStore, EventStore, EventStoreExt, ExecutionStatus, StatusFilter};
use serde_json::json;

fn journal_of(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".journal");
    PathBuf::from(name)
}

/// Writers append to their own executions in bursts (a pause between bursts lets the writer
/// hand what it holds to the applier, so applies run while readers read); readers check after
/// every acknowledged append that the log reads back whole, gapless and in order, and that
/// its head is where the append left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_see_every_acknowledged_event_while_the_tables_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path().join("held.redb")).unwrap();
    let mut tasks = Vec::new();
    for writer in 0..8u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let e = id(&format!("held-{writer}"));
            let mut head = store.append(&e, 0, &[started("f")]).await.unwrap();
            for burst in 0..6u64 {
                for i in 0..15u64 {
                    let tag = json!({"burst": burst, "i": i});
                    head = store.append(&e, head, &[tagged(tag)]).await.unwrap();
                    // Read back at once, and from the middle.
                    assert_eq!(store.head(&e).await.unwrap(), head, "{e}");
                    let log = store.read_all(&e).await.unwrap();
                    assert_eq!(log.len() as u64, head, "{e}");
                    for (seq, envelope) in log.iter().enumerate() {
                        assert_eq!(envelope.seq, seq as u64, "{e}");
                    }
                    let from = head / 2;
                    let tail = store.read(&e, from, usize::MAX).await.unwrap();
                    assert_eq!(tail.len() as u64, head - from, "{e}");
                    assert_eq!(tail.first().map(|event| event.seq), Some(from), "{e}");
                    let one = store.read(&e, head - 1, 1).await.unwrap();
                    assert_eq!(one.len(), 1, "{e}");
                    assert!(store.read(&e, head, 10).await.unwrap().is_empty(), "{e}");
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            (e, head)
        }));
    }
    let mut expected = Vec::new();
    for task in tasks {
        expected.push(task.await.unwrap());
    }
    // Everything reads back whole once more, after the last applies.
    let ids: Vec<_> = expected.iter().map(|(e, _)| e.clone()).collect();
    let logs = store.read_logs(&ids).await.unwrap();
    for ((e, head), log) in expected.iter().zip(&logs) {
        assert_eq!(log.len() as u64, *head, "{e}");
        assert_eq!(log, &store.read_all(e).await.unwrap(), "{e}");
    }
}

/// A new execution's lookups (its first read, its head, which its id's claim also reads)
/// read the tables' snapshot that the applier takes after each commit, once what it applied is no longer held
/// in memory. Readers spin on executions acknowledged a moment ago while the applier forgets
/// them: each must show its events, whichever of memory and snapshot holds them (a snapshot
/// taken after the events were forgotten, not before, leaves a window in which both miss).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lookups_of_new_executions_see_them_as_the_applier_forgets_them() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path().join("forget.redb")).unwrap();
    let acknowledged: Arc<Mutex<Vec<loom_kernel::ExecutionId>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (store, acknowledged, done) =
                (store.clone(), Arc::clone(&acknowledged), Arc::clone(&done));
            tokio::spawn(async move {
                let mut checks = 0u64;
                while !done.load(Ordering::Acquire) {
                    let recent: Vec<_> = {
                        let all = acknowledged.lock().unwrap();
                        all.iter().rev().take(40).cloned().collect()
                    };
                    for e in &recent {
                        assert_eq!(store.head(e).await.unwrap(), 1, "{e}: head");
                        assert_eq!(store.read(e, 0, 10).await.unwrap().len(), 1, "{e}: read");
                        checks += 1;
                    }
                    tokio::task::yield_now().await;
                }
                checks
            })
        })
        .collect();
    for round in 0..30 {
        for n in 0..40 {
            let e = id(&format!("new-{round}-{n}"));
            store.append(&e, 0, &[started("f")]).await.unwrap();
            acknowledged.lock().unwrap().push(e);
        }
        // The writer hands what it holds to the applier once idle for 20 ms.
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    done.store(true, Ordering::Release);
    let mut checks = 0;
    for reader in readers {
        checks += reader.await.unwrap();
    }
    assert!(checks > 0, "the readers checked nothing");
}

/// The status index, the listing, the counts and the feed are read from the tables: each
/// read waits for the applier to bring them up to what was acknowledged before it.
#[tokio::test]
async fn an_index_read_right_after_an_append_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path().join("index.redb")).unwrap();
    for n in 0..20 {
        let e = id(&format!("listed-{n}"));
        store.append(&e, 0, &[started("f")]).await.unwrap();
        let running = store
            .list_by_status(StatusFilter::Status(ExecutionStatus::Running), None, 100)
            .await
            .unwrap();
        assert!(running.executions.iter().any(|summary| summary.id == e));
        let counts = store.count_by_status().await.unwrap();
        assert_eq!(counts.get(ExecutionStatus::Running), n + 1);
        let page = store
            .query_executions(&ExecutionQuery {
                limit: 100,
                ..ExecutionQuery::default()
            })
            .await
            .unwrap();
        // Newest first by start time, then by id: one started in the same millisecond as others
        // may come after them ("listed-9" sorts after "listed-10").
        let newest = page.executions.first().and_then(|row| row.started_at_ms);
        assert!(
            page.executions
                .iter()
                .take_while(|row| row.started_at_ms == newest)
                .any(|row| row.id == e),
            "{e} is not among the newest: {:?}",
            page.executions
        );
        let feed = store.read_feed(0, 1000).await.unwrap();
        assert_eq!(feed.len() as u64, n + 1);
        assert_eq!(
            feed.last().map(|event| &event.envelope.execution_id),
            Some(&e)
        );
    }
}

/// Retention deletes an execution that ended a moment ago, before the applier took its end.
#[tokio::test]
async fn executions_that_just_ended_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path().join("retention.redb")).unwrap();
    let e = id("short-lived");
    store
        .append(&e, 0, &[started("f"), completed()])
        .await
        .unwrap();
    let deleted = store.delete_ended(u64::MAX, 10).await.unwrap();
    assert_eq!(deleted, vec![e.clone()]);
    assert_eq!(store.head(&e).await.unwrap(), 0);
    assert!(store.read_all(&e).await.unwrap().is_empty());
    // A new log under the same id starts afresh.
    store.append(&e, 0, &[started("f")]).await.unwrap();
    assert_eq!(store.read_all(&e).await.unwrap().len(), 1);
}

/// Copied while open, right after appends the applier has not taken (the store holds them
/// in memory; the tables on disk are at their last checkpoint): the copy opens with all of
/// them, from the journal.
#[tokio::test]
async fn a_crash_image_with_events_held_opens_with_all_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.redb");
    let store = DiskStore::open(&path).unwrap();
    let mut heads = Vec::new();
    for n in 0..5 {
        let e = id(&format!("image-{n}"));
        let mut head = store.append(&e, 0, &[started("f")]).await.unwrap();
        for i in 0..n * 3 {
            head = store
                .append(&e, head, &[tagged(json!({"i": i}))])
                .await
                .unwrap();
        }
        heads.push((e, head));
    }
    let image = dir.path().join("image.redb");
    std::fs::copy(&path, &image).unwrap();
    std::fs::copy(journal_of(&path), journal_of(&image)).unwrap();
    drop(store);
    let reopened = DiskStore::open(&image).unwrap();
    for (e, head) in &heads {
        assert_eq!(reopened.head(e).await.unwrap(), *head, "{e}");
        assert_eq!(
            reopened.read_all(e).await.unwrap().len() as u64,
            *head,
            "{e}"
        );
    }
    let counts = reopened.count_by_status().await.unwrap();
    assert_eq!(counts.get(ExecutionStatus::Running), 5);
}

/// Readers of logs that retention deletes while they read: each read returns the whole log or
/// nothing, never an error (a copy of the held events taken just before an apply and the
/// deletion is read again, not taken for the tables and the memory disagreeing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_racing_retention_see_the_whole_log_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path().join("racing.redb")).unwrap();
    for round in 0..5 {
        let ids: Vec<_> = (0..20).map(|n| id(&format!("gone-{round}-{n}"))).collect();
        for e in &ids {
            let head = store.append(e, 0, &[started("f")]).await.unwrap();
            let head = store
                .append(e, head, &[tagged(json!({"round": round}))])
                .await
                .unwrap();
            store.append(e, head, &[completed()]).await.unwrap();
        }
        let readers: Vec<_> = ids
            .iter()
            .cloned()
            .map(|e| {
                let store = store.clone();
                tokio::spawn(async move {
                    loop {
                        let log = store.read_all(&e).await.unwrap();
                        let logs = store.read_logs(std::slice::from_ref(&e)).await.unwrap();
                        assert!(matches!(log.len(), 0 | 3), "{e}: {}", log.len());
                        assert!(matches!(logs[0].len(), 0 | 3), "{e}: {}", logs[0].len());
                        if log.is_empty() && logs[0].is_empty() {
                            return;
                        }
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        let mut deleted = 0;
        while deleted < ids.len() {
            deleted += store.delete_ended(u64::MAX, 3).await.unwrap().len();
        }
        for reader in readers {
            reader.await.unwrap();
        }
    }
}

/// A caller that goes away once its append is sent (its future dropped before the answer)
/// leaves the writer the only holder of the append's records: the append is still committed,
/// read back whole from memory and from the tables, and found by an open after the store is
/// closed, as every other one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_whose_callers_went_away_are_committed_and_applied_whole() {
    use futures::FutureExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone.redb");
    let store = DiskStore::open(&path).unwrap();
    let ids: Vec<_> = (0..40).map(|n| id(&format!("gone-{n}"))).collect();
    for e in &ids {
        store.append(e, 0, &[started("f")]).await.unwrap();
    }
    for round in 1..=5u64 {
        for e in &ids {
            // Polled once: encoded and handed to the writer; then dropped, unanswered.
            let events = [tagged(json!({"round": round}))];
            if let Some(answered) = store.append(e, round, &events).now_or_never() {
                assert_eq!(answered.unwrap(), round + 1, "{e}");
            }
        }
        // The head moves once the writer has committed it, whoever waited for it.
        for e in &ids {
            store.wait_for(e, round).await.unwrap();
        }
    }
    let expected = |log: &[loom_kernel::EventEnvelope], e: &loom_kernel::ExecutionId| {
        assert_eq!(log.len(), 6, "{e}");
        for (seq, envelope) in log.iter().enumerate() {
            assert_eq!(envelope.seq, seq as u64, "{e}");
        }
    };
    for e in &ids {
        expected(&store.read_all(e).await.unwrap(), e);
    }
    // The tables caught up (an index read has the applier apply everything first).
    assert_eq!(store.list_all_executions().await.unwrap().len(), ids.len());
    for e in &ids {
        expected(&store.read_all(e).await.unwrap(), e);
    }
    drop(store);
    let store = DiskStore::open(&path).unwrap();
    for e in &ids {
        expected(&store.read_all(e).await.unwrap(), e);
    }
}
