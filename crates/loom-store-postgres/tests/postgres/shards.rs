//! The sharded store on two databases of one server: the kernel's conformance suite (but the
//! single-number feed, which a sharded store refuses), and
//! executions of one runtime spread over both shards, children placed by their own id.

use loom_kernel::conformance::{self, StoreHarness};
use loom_kernel::{
    EventStore, ExecutionId, ExecutionStatus, FlowCtx, FlowError, Runtime, StartOptions,
    StatusFilter, flow_fn,
};
use loom_store_postgres::{
    PostgresStoreConfig, ShardCursor, ShardedStore, fresh_schema, server_url, shard_of,
};
use serde_json::{Value, json};

use crate::support::second_database;

/// Configurations of the two shards, one schema name on both.
pub(crate) async fn two_shards(url: &str, schema: &str) -> Vec<PostgresStoreConfig> {
    let second = second_database(url).await;
    vec![
        PostgresStoreConfig::new(url).schema(schema),
        PostgresStoreConfig::new(second).schema(schema),
    ]
}

struct Sharded {
    url: String,
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(future))
}

impl StoreHarness for Sharded {
    type Store = ShardedStore;

    fn fresh(&mut self) -> ShardedStore {
        let shards = block_on(two_shards(&self.url, &fresh_schema("sharded")));
        block_on(ShardedStore::connect(shards)).expect("connect")
    }

    fn reopen(&mut self, store: ShardedStore) -> ShardedStore {
        let shards = store.shards().iter().map(|s| s.config().clone()).collect();
        drop(store);
        block_on(ShardedStore::connect(shards)).expect("reconnect")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sharded_store_passes_the_conformance_suite() {
    let Some(url) = server_url("a_sharded_store_passes_the_conformance_suite") else {
        return;
    };
    let mut harness = Sharded { url };
    conformance::run_log_checks(&mut harness).await;
    // The index checks but those that read the single-number feed (the feed's own and
    // retention's), which has no order across shards; the merged feed, with a position per
    // shard, is checked below.
    conformance::invalid_appends_are_refused_whole(harness.fresh()).await;
    conformance::payloads_too_deep_to_read_back_are_refused(harness.fresh()).await;
    conformance::status_index_follows_every_transition(&mut harness).await;
    conformance::queries_agree_with_the_reference(&mut harness).await;
    conformance::wake_index_follows_deadlines_and_child_links(&mut harness).await;
}

async fn parent(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let child: Value = ctx.call_child("child", &input).await?;
    Ok(json!({ "child": child }))
}

async fn child(_ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    Ok(input)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_and_their_children_spread_over_two_databases_and_list_as_one_store() {
    let Some(url) = server_url("sharded_runtime") else {
        return;
    };
    let schema = fresh_schema("sharded_runtime");
    let store = ShardedStore::connect(two_shards(&url, &schema).await)
        .await
        .expect("connect");
    assert!(ShardedStore::connect(Vec::new()).await.is_err(), "no shard");
    let runtime = Runtime::builder(store.clone())
        .flow(flow_fn("parent", 1, parent))
        .flow(flow_fn("child", 1, child))
        .build()
        .expect("runtime");
    let ids: Vec<ExecutionId> = (0..12)
        .map(|n| ExecutionId::new(format!("p-{n:02}")).expect("id"))
        .collect();
    for (n, id) in ids.iter().enumerate() {
        runtime
            .start("parent", &json!(n), StartOptions::new(id.clone()))
            .await
            .expect("start");
    }
    for (n, id) in ids.iter().enumerate() {
        let ended = runtime.wait_ended(id).await.expect("ended");
        assert_eq!(ended.status(), ExecutionStatus::Completed, "{id}");
        assert_eq!(
            ended.output().expect("output").to_value(),
            json!({ "child": n })
        );
    }
    // Every execution, parents and children, is on the shard its own id says, and only there.
    let mut everything = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_executions(after.as_ref(), 5)
            .await
            .expect("list");
        everything.extend(page.executions.into_iter().map(|s| s.id));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(everything.len(), 24, "{everything:?}");
    assert!(
        everything.windows(2).all(|w| w[0] < w[1]),
        "in id order across shards"
    );
    let mut per_shard = [0; 2];
    for id in &everything {
        let home = shard_of(id, 2);
        per_shard[home] += 1;
        assert!(
            store.shards()[home].head(id).await.expect("head") > 0,
            "{id} on its shard"
        );
        assert_eq!(
            store.shards()[1 - home].head(id).await.expect("head"),
            0,
            "{id} elsewhere"
        );
    }
    assert!(
        per_shard.iter().all(|n| *n > 0),
        "both shards used: {per_shard:?}"
    );
    let children_away = ids
        .iter()
        .filter(|id| {
            everything.iter().any(|c| {
                c.as_str().starts_with(&format!("{id}/")) && shard_of(c, 2) != shard_of(id, 2)
            })
        })
        .count();
    assert!(
        children_away > 0,
        "some child lives on another shard than its parent"
    );
    // The status index across shards.
    let completed = store
        .list_by_status(StatusFilter::Status(ExecutionStatus::Completed), None, 100)
        .await
        .expect("by status");
    assert_eq!(completed.executions.len(), 24);
    // The merged feed: every event once, each shard's in its own order.
    let (events, cursor) = store
        .read_feed_merged(&ShardCursor(Vec::new()), 10_000)
        .await
        .expect("feed");
    let total: u64 = {
        let mut sum = 0;
        for id in &everything {
            sum += store.head(id).await.expect("head");
        }
        sum
    };
    assert_eq!(events.len() as u64, total);
    for shard in 0..2 {
        let positions: Vec<u64> = events
            .iter()
            .filter(|e| e.shard == shard)
            .map(|e| e.event.position)
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(cursor.0[shard], positions.last().map_or(0, |p| p + 1));
    }
    let (none, same) = store.read_feed_merged(&cursor, 10).await.expect("feed");
    assert!(none.is_empty());
    assert_eq!(same, cursor);
    // Leases: the last holder is read from the execution's shard.
    let info = store
        .lease_info(&ids[0])
        .await
        .expect("lease")
        .expect("leased");
    assert!(!info.live, "an ended execution's lease was given back");
    // Retention across shards, bounded by the limit asked for.
    let far = loom_kernel::kit::wall_clock_ms().expect("clock") + 60_000;
    let first = store.delete_ended(far, 10).await.expect("delete");
    assert_eq!(first.len(), 10);
    let rest = store.delete_ended(far, 100).await.expect("delete");
    assert_eq!(rest.len(), 14);
    let left = store.list_executions(None, 100).await.expect("list");
    assert!(left.executions.is_empty(), "{left:?}");
}
