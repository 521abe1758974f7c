//! `replay-check` reads a PostgreSQL store through its generic entry point.

use loom_kernel::{ExecutionId, ExecutionStatus};
use loom_kernel::{FlowCtx, FlowError, FlowSet, Runtime, StartOptions, flow_fn};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig};
use loom_store_postgres::{fresh_schema, server_url};
use serde_json::{Value, json};

async fn decide_twice(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let a: u64 = ctx.decide("a", || 1)?;
    let b: u64 = ctx.decide("b", || 2)?;
    Ok(json!([input, a, b]))
}

async fn decide_once(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let a: u64 = ctx.decide("a", || 1)?;
    Ok(json!([input, a]))
}

fn check(flows: &FlowSet, url: &str, schema: &str) -> u8 {
    let config = PostgresStoreConfig::new(url).schema(schema).check_only();
    loom_replay_check::check_store_command(flows, ["replay-check"], "test", || async {
        PostgresStore::connect(config).await.map_err(Into::into)
    })
}

#[test]
fn replay_check_passes_a_postgres_store_and_flags_changed_code() {
    let Some(url) = server_url("replay_check") else {
        return;
    };
    let schema = fresh_schema("replay_check");
    let recorded = FlowSet::new().with(flow_fn("f", 1, decide_twice));
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async {
            let store = PostgresStore::connect(PostgresStoreConfig::new(&url).schema(&schema))
                .await
                .expect("connect");
            let rt = Runtime::builder(store)
                .flows(&recorded)
                .build()
                .expect("rt");
            for n in 0..5 {
                let e = ExecutionId::new(format!("e{n}")).expect("id");
                rt.start("f", &json!(n), StartOptions::new(e.clone()))
                    .await
                    .expect("start");
                let state = rt.wait(&e).await.expect("wait");
                assert_eq!(state.status(), ExecutionStatus::Completed);
            }
        });
    assert_eq!(
        check(&recorded, &url, &schema),
        0,
        "the recorded code replays"
    );
    let changed = FlowSet::new().with(flow_fn("f", 1, decide_once));
    assert_eq!(check(&changed, &url, &schema), 1, "changed code diverges");
}
