//! Stores written by earlier builds stay readable: records kept as JSON objects read back the
//! same, and new (binary) records append after them.

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::envelope::encode_json_record;
use loom_kernel::{DiskStore, EventStore, EventStoreExt, ExecutionStatus};
use serde_json::json;

#[tokio::test]
async fn json_records_of_earlier_builds_read_and_extend() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    drop(DiskStore::open(&path).unwrap());
    let old_events = [started("f"), tagged(json!("written as JSON"))];
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut events = txn
                .open_table(redb::TableDefinition::<(&str, u64), &[u8]>::new("events"))
                .unwrap();
            for (seq, event) in old_events.iter().enumerate() {
                let record = encode_json_record(event, Some(1_700_000_000_000));
                events
                    .insert(("old", seq as u64), record.as_slice())
                    .unwrap();
            }
            let mut heads = txn
                .open_table(redb::TableDefinition::<&str, u64>::new("heads"))
                .unwrap();
            heads.insert("old", 2).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = DiskStore::open(&path).unwrap();
    let e = id("old");
    let log = store.read_all(&e).await.unwrap();
    assert_eq!(
        log.iter().map(|x| x.event.clone()).collect::<Vec<_>>(),
        old_events
    );
    assert_eq!(log[0].recorded_at_ms, Some(1_700_000_000_000));
    let stored = store
        .read_stored_logs(std::slice::from_ref(&e))
        .await
        .unwrap();
    assert_eq!(stored[0].record(1).and_then(|r| r.first()), Some(&b'{'));
    assert_eq!(stored[0].decode().unwrap(), log);
    store
        .append(&e, 2, &[tagged(json!("written as binary"))])
        .await
        .unwrap();
    let state = store.fold(&e).await.unwrap();
    assert_eq!(state.next_seq(), 3);
    assert_eq!(state.status(), ExecutionStatus::Running);
}
