//! What an operator is shown of an execution's lease (`EventStore::lease_info`): who holds it
//! or held it last, under which token, and whether it is live, as it changes hands.

use std::time::Duration;

use loom_kernel::kit::LeaseHold;
use loom_kernel::{
    EventStore, ExecutionId, ExecutionStatus, FlowCtx, FlowError, MemoryStore, Runtime,
    StartOptions, flow_fn,
};
use loom_store_postgres::{fresh_schema, server_url};
use serde_json::{Value, json};

use crate::many_workers::worker;

async fn approve(ctx: FlowCtx, _input: Value) -> Result<Value, FlowError> {
    let answer = ctx.suspend("Approval", "k").await?;
    Ok(answer.to_value())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_s_last_holder_token_and_liveness_are_shown_as_it_changes_hands() {
    let Some(url) = server_url("lease_info") else {
        return;
    };
    let schema = fresh_schema("lease_info");
    let lease = Duration::from_secs(30);
    let a = worker(&url, &schema, "worker-a", lease).await;
    let b = worker(&url, &schema, "worker-b", lease).await;
    let id = ExecutionId::new("order-1").expect("id");
    assert_eq!(a.lease_info(&id).await.expect("unknown"), None);

    let runtime = Runtime::builder(a.clone())
        .flow(flow_fn("approve", 1, approve))
        .build()
        .expect("runtime");
    runtime
        .start("approve", &json!(1), StartOptions::new(id.clone()))
        .await
        .expect("start");
    let parked = runtime.wait(&id).await.expect("parked");
    assert_eq!(parked.status(), ExecutionStatus::Suspended);
    let head = parked.next_seq();

    // Parked: the lease was given back, and its last holder is still named.
    let info = b.lease_info(&id).await.expect("info").expect("leased once");
    assert_eq!(
        (info.holder.as_str(), info.token, info.live),
        ("worker-a", 1, false)
    );
    assert_eq!(info.expires_in_ms, None);

    // Taken by worker B: B, the next token, live, running out within the lease.
    assert!(matches!(
        b.hold_lease(&id, head).await.expect("hold"),
        LeaseHold::Held { token: 2 }
    ));
    let info = a.lease_info(&id).await.expect("info").expect("leased");
    assert_eq!(
        (info.holder.as_str(), info.token, info.live),
        ("worker-b", 2, true)
    );
    assert!(
        info.expires_in_ms.is_some_and(|ms| ms <= 30_000),
        "{info:?}"
    );
    // A cannot take it while B's is live.
    assert_eq!(
        a.hold_lease(&id, head).await.expect("hold"),
        LeaseHold::NotHeld
    );

    // Given back by B: B is still the last holder, no longer live.
    b.release_leases().await.expect("release");
    let info = a.lease_info(&id).await.expect("info").expect("leased");
    assert_eq!(
        (info.holder.as_str(), info.token, info.live),
        ("worker-b", 2, false)
    );

    // A store without leases has nothing to show.
    assert_eq!(
        MemoryStore::new().lease_info(&id).await.expect("memory"),
        None
    );
}
