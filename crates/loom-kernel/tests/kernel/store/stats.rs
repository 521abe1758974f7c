//! What the stores and the runtime count for an operator's metrics (`EventStore::stats`,
//! `Runtime::stats`): plain numbers that move with the work done, and nothing for a store
//! that keeps none.

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::{
    DiskStore, EffectCall, EffectOutcome, ErrorInfo, EventStore, FlowCtx, FlowError, FnEffect,
    MemoryStore, Runtime, StartOptions, flow_fn,
};
use serde_json::{Value, json};

#[tokio::test]
async fn the_disk_store_counts_its_commits_appends_and_their_latency() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path().join("loom.redb")).unwrap();
    let fresh = store.stats();
    assert_eq!((fresh.commits, fresh.appends), (Some(0), Some(0)));
    assert_eq!(fresh.lease_takeovers, None, "the disk store has no leases");

    let e = id("counted");
    let head = store.append(&e, 0, &[started("f")]).await.unwrap();
    store
        .append(&e, head, &[tagged(json!(1)), tagged(json!(2))])
        .await
        .unwrap();
    // A conflict writes no journal record: it is not a commit.
    store.append(&e, 0, &[started("f")]).await.unwrap_err();

    let stats = EventStore::stats(&store).expect("the disk store counts");
    assert_eq!(stats.commits, Some(2));
    assert_eq!(stats.appends, Some(2));
    for latency in [stats.commit_latency, stats.fsync_latency] {
        let latency = latency.expect("a histogram");
        assert_eq!(latency.count(), 2);
    }
}

#[tokio::test]
async fn the_memory_store_reports_nothing() {
    assert_eq!(EventStore::stats(&MemoryStore::new()), None);
}

async fn two_steps(ctx: FlowCtx, _input: Value) -> Result<Value, FlowError> {
    ctx.execute("works", &json!({})).await?;
    let failed = ctx.execute("breaks", &json!({})).await;
    Ok(json!({"failed": failed.is_err()}))
}

#[tokio::test]
async fn the_runtime_counts_the_steps_it_starts_and_ends() {
    let runtime = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("two_steps", 1, two_steps))
        .effect(
            "works",
            FnEffect::new(true, |_call: EffectCall| async {
                EffectOutcome::ok(json!(1).into())
            }),
        )
        .effect(
            "breaks",
            FnEffect::new(true, |_call: EffectCall| async {
                EffectOutcome::failed(ErrorInfo::new("test.broken", "it breaks"))
            }),
        )
        .build()
        .unwrap();
    assert_eq!(runtime.stats().steps_started, 0);
    let e = id("steps");
    runtime
        .start(
            "two_steps",
            &json!({}),
            StartOptions::new(e.clone()).grant("works").grant("breaks"),
        )
        .await
        .unwrap();
    runtime.wait(&e).await.unwrap();
    let stats = runtime.stats();
    assert_eq!(stats.steps_started, 2);
    assert_eq!(stats.steps_completed, 1);
    assert_eq!(stats.steps_failed, 1);
}
