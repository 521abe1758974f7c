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

/// `EFFECT_INDOUBT` as earlier builds wrote it (type tag 4, no `reason`) reads with no reason;
/// this build writes tag 13, and a record cut before its reason is an error, not an old record.
#[test]
fn in_doubt_records_without_a_reason_read_back() {
    use loom_kernel::envelope::{decode_record as decode, encode_record};
    use loom_kernel::event::{EffectInDoubt, Event};

    let mut old = vec![0xB1];
    old.extend_from_slice(&1u32.to_le_bytes()); // schema
    old.push(0); // no recordedAtMs
    old.push(4); // EFFECT_INDOUBT, first layout
    for text in ["charge#1", "payments.charge"] {
        old.extend_from_slice(&(text.len() as u32).to_le_bytes());
        old.extend_from_slice(text.as_bytes());
    }
    old.extend_from_slice(&2u32.to_le_bytes()); // attempt
    let e = id("old");
    let read = decode(&e, 0, &old).unwrap();
    let expected = EffectInDoubt {
        step_id: "charge#1".into(),
        effect: "payments.charge".into(),
        attempt: 2,
        reason: None,
    };
    assert_eq!(read.event, Event::EffectInDoubt(expected.clone()));

    let now = encode_record(&Event::EffectInDoubt(expected), None);
    assert_eq!(now[6], 13, "this build writes the layout with a reason");
    assert!(decode(&e, 0, &now[..now.len() - 1]).is_err());
}
