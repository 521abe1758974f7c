//! Stores written by earlier builds stay readable: records kept as JSON objects read back the
//! same, and new (binary) records append after them.

use loom_kernel::Event;
use loom_kernel::conformance::{completed, id, started, step_started, suspended, tagged};
use loom_kernel::kit::encode_json_record;
use loom_kernel::{
    DiskStore, DiskStoreConfig, EventStore, EventStoreExt, ExecutionStatus, OpenError, StatusFilter,
};
use serde_json::json;

/// Writes a store file as builds of layout version 1 did: `events`, `heads`, `meta` with
/// format 1, records written by `encode`, and no index, tails or feed.
fn layout_1_file(
    path: &std::path::Path,
    logs: &[(&str, Vec<Event>)],
    encode: impl Fn(&Event) -> Vec<u8>,
) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut events = txn
            .open_table(redb::TableDefinition::<(&str, u64), &[u8]>::new("events"))
            .unwrap();
        let mut heads = txn
            .open_table(redb::TableDefinition::<&str, u64>::new("heads"))
            .unwrap();
        for (name, log) in logs {
            for (seq, event) in log.iter().enumerate() {
                events
                    .insert((*name, seq as u64), encode(event).as_slice())
                    .unwrap();
            }
            heads.insert(*name, log.len() as u64).unwrap();
        }
        let mut meta = txn
            .open_table(redb::TableDefinition::<&str, u64>::new("meta"))
            .unwrap();
        meta.insert("format", 1).unwrap();
    }
    txn.commit().unwrap();
}

#[tokio::test]
async fn json_records_of_earlier_builds_read_and_extend() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    let old_events = [started("f"), tagged(json!("written as JSON"))];
    layout_1_file(&path, &[("old", old_events.to_vec())], |event| {
        encode_json_record(event, Some(1_700_000_000_000))
    });
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
    use loom_kernel::kit::{decode_record as decode, encode_record};
    use loom_kernel::{EffectInDoubt, Event};

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
    assert_eq!(now[10], 13, "this build writes the layout with a reason");
    assert!(decode(&e, 0, &now[..now.len() - 1]).is_err());
}

/// A layout 1 file is brought to the current layout on open: every execution is indexed by
/// the status its log folds to, the feed holds every old event once, and a log the fold
/// refuses (written before appends were validated) is listed as needing driving, so that
/// recovery reports it rather than skipping it, while the others stay usable.
#[tokio::test]
async fn a_layout_1_file_is_indexed_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.redb");
    let logs = vec![
        ("done", vec![started("f"), completed()]),
        ("parked", vec![started("f"), suspended("g")]),
        ("working", vec![started("f"), step_started("s")]),
        (
            "broken",
            vec![started("f"), completed(), tagged(json!("after the end"))],
        ),
    ];
    layout_1_file(&path, &logs, |event| {
        loom_kernel::kit::encode_record(event, Some(5))
    });
    assert!(matches!(
        DiskStore::open_read_only(&path, DiskStoreConfig::default()),
        Err(OpenError::NeedsUpgrade { found: 1, .. })
    ));
    let store = DiskStore::open(&path).unwrap();
    let listed = |filter| {
        let store = store.clone();
        async move {
            use futures::TryStreamExt;
            store
                .executions_by_status(filter)
                .map_ok(|summary| summary.id.to_string())
                .try_collect::<Vec<_>>()
                .await
                .unwrap()
        }
    };
    assert_eq!(
        listed(StatusFilter::NeedsDriving).await,
        ["broken", "working"]
    );
    assert_eq!(
        listed(StatusFilter::Status(ExecutionStatus::Completed)).await,
        ["done"]
    );
    assert_eq!(
        listed(StatusFilter::Status(ExecutionStatus::Suspended)).await,
        ["parked"]
    );
    assert!(store.fold(&id("broken")).await.is_err());
    let feed = store.read_feed(0, 100).await.unwrap();
    assert_eq!(feed.len(), 2 + 2 + 2 + 3);
    // Appends continue after the old events, in the log and in the feed.
    store
        .append(&id("parked"), 2, &[tagged(json!("new"))])
        .await
        .unwrap();
    let after = store
        .read_feed(feed.last().unwrap().position + 1, 10)
        .await
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].envelope.seq, 2);
    drop(store);
    // The upgrade is done once: a read-only open now succeeds.
    let read_only = DiskStore::open_read_only(&path, DiskStoreConfig::default()).unwrap();
    assert_eq!(read_only.head(&id("parked")).await.unwrap(), 3);
}

/// `STEP_STARTED` as earlier builds wrote it (type tag 1, no `max_cost`) reads with
/// `max_cost` 0, and this build still writes tag 1, byte for byte, when `max_cost` is 0; with a
/// cost it writes tag 14, and a record cut before the cost is an error, not an old record. The
/// JSON form leaves out a `maxCost` of 0 and reads its absence as 0 (LD-024).
#[test]
fn step_started_records_without_a_max_cost_read_back_as_costing_nothing() {
    use loom_kernel::kit::{decode_record as decode, encode_record};
    use loom_kernel::{Event, StepStarted};

    let mut old = vec![0xB1];
    old.extend_from_slice(&1u32.to_le_bytes()); // schema
    old.push(0); // no recordedAtMs
    old.push(1); // STEP_STARTED, first layout
    for text in ["charge#1", "payments.charge", "digest"] {
        old.extend_from_slice(&(text.len() as u32).to_le_bytes());
        old.extend_from_slice(text.as_bytes());
    }
    old.extend_from_slice(&1u32.to_le_bytes()); // attempt
    let e = id("old");
    let free = StepStarted {
        step_id: "charge#1".into(),
        effect: "payments.charge".into(),
        input_digest: "digest".into(),
        attempt: 1,
        max_cost: 0,
    };
    assert_eq!(
        decode(&e, 0, &old).unwrap().event,
        Event::StepStarted(free.clone())
    );
    let now = encode_record(&Event::StepStarted(free.clone()), None);
    assert_eq!(now[10], 1, "a step without a cost is written as before");
    assert_eq!(now[5..], old[1..], "the same body as an earlier build's");

    let costly = StepStarted {
        max_cost: 3,
        ..free.clone()
    };
    let now = encode_record(&Event::StepStarted(costly.clone()), None);
    assert_eq!(now[10], 14, "this build writes the layout with a cost");
    assert_eq!(
        decode(&e, 0, &now).unwrap().event,
        Event::StepStarted(costly.clone())
    );
    assert!(decode(&e, 0, &now[..now.len() - 1]).is_err());

    let json = |event: StepStarted| {
        serde_json::to_value(Event::StepStarted(event)).unwrap()["maxCost"].clone()
    };
    let old_json = encode_json_record(&Event::StepStarted(free.clone()), None);
    assert_eq!(
        decode(&e, 0, &old_json).unwrap().event,
        Event::StepStarted(free.clone())
    );
    assert_eq!(json(free), serde_json::Value::Null);
    assert_eq!(json(costly), json!(3));
}
