//! A child's end crosses workers: the parent parks on one worker while its child waits at a
//! gate; the child is resumed on another worker, and its end resumes the parent there, found
//! from the child's id and the parent's log (no link in that worker's memory). The same holds
//! when the first worker died: `recover()` on another finds the parked parent and its child.

use loom_kernel::{Event, EventStoreExt, ExecutionId, ExecutionStatus, Payload};
use loom_kernel::{FlowCtx, FlowError, Runtime, RuntimeBuilder, StartOptions, flow_fn};
use loom_store_postgres::PostgresStore;
use loom_store_postgres::{fresh_schema, server_url};
use serde_json::{Value, json};

use crate::support::{on_a_worker_that_dies, until_status, worker};

/// The child: waits for an approval of its order, and answers with it.
async fn approval(ctx: FlowCtx, order: String) -> Result<Value, FlowError> {
    let answer = ctx.suspend("Approve", &order).await?;
    Ok(json!({ "order": order, "approved": answer.to_value() }))
}

/// The parent: asks a child for the approval, then finishes with it.
async fn order(ctx: FlowCtx, order: String) -> Result<Value, FlowError> {
    let approved = ctx.child("approval", &order).await?;
    Ok(json!({ "done": approved.to_value() }))
}

fn compose(builder: RuntimeBuilder<PostgresStore>) -> RuntimeBuilder<PostgresStore> {
    builder
        .flow(flow_fn("approval", 1, approval))
        .flow(flow_fn("order", 1, order))
}

/// Starts the parent on `a` and returns once parent and child are both parked.
async fn parked_parent_and_child(
    a: &Runtime<PostgresStore>,
    parent: &ExecutionId,
    child: &ExecutionId,
) {
    a.start("order", "order-9", StartOptions::new(parent.clone()))
        .await
        .expect("start");
    until_status(a, child, ExecutionStatus::Suspended).await;
    until_status(a, parent, ExecutionStatus::Suspended).await;
}

/// The parent's end on `b`, and that each log holds one start and one resume.
async fn ends_once_on(b: &Runtime<PostgresStore>, parent: &ExecutionId, child: &ExecutionId) {
    until_status(b, parent, ExecutionStatus::Completed).await;
    let state = b.store().fold(parent).await.expect("fold");
    assert_eq!(
        state.output().map(Payload::to_value),
        Some(json!({ "done": { "order": "order-9", "approved": "yes" } }))
    );
    for execution in [parent, child] {
        let events = b.store().read_all(execution).await.expect("read");
        let count = |wanted: fn(&Event) -> bool| events.iter().filter(|e| wanted(&e.event)).count();
        assert_eq!(
            count(|e| matches!(e, Event::ExecutionStarted(_))),
            1,
            "{execution}"
        );
        assert_eq!(
            count(|e| matches!(e, Event::ExecutionResumed(_))),
            1,
            "{execution}"
        );
    }
}

#[test]
fn a_child_resumed_on_another_live_worker_resumes_its_parent_there() {
    let Some(url) = server_url("children_across_workers") else {
        return;
    };
    let schema = fresh_schema("children_live");
    let parent = ExecutionId::new("order-9").expect("id");
    let child = ExecutionId::new("order-9/approval#1").expect("id");
    tokio::runtime::Runtime::new()
        .expect("tokio")
        .block_on(async {
            let a = worker(&url, &schema, "worker-a", compose).await;
            let b = worker(&url, &schema, "worker-b", compose).await;
            parked_parent_and_child(&a, &parent, &child).await;
            b.resume(&child, "Approve", "order-9", Payload::from(json!("yes")))
                .await
                .expect("resume the child on B");
            ends_once_on(&b, &parent, &child).await;
            a.shutdown().await;
            b.shutdown().await;
        });
}

#[test]
fn a_parked_parent_of_a_worker_that_died_is_resumed_by_its_child_on_another() {
    let Some(url) = server_url("children_across_workers") else {
        return;
    };
    let schema = fresh_schema("children_died");
    let parent = ExecutionId::new("order-9").expect("id");
    let child = ExecutionId::new("order-9/approval#1").expect("id");
    on_a_worker_that_dies(|| async {
        let a = worker(&url, &schema, "worker-a", compose).await;
        parked_parent_and_child(&a, &parent, &child).await;
    });
    tokio::runtime::Runtime::new()
        .expect("tokio B")
        .block_on(async {
            let b = worker(&url, &schema, "worker-b", compose).await;
            let report = b.recover_report().await.expect("recover");
            assert!(report.skipped.is_empty(), "{report:?}");
            b.resume(&child, "Approve", "order-9", Payload::from(json!("yes")))
                .await
                .expect("resume the child on B");
            ends_once_on(&b, &parent, &child).await;
            b.shutdown().await;
        });
}
