//! A durable timer set by a worker that died fires on another worker: the deadline is in the
//! log, the parked execution holds no lease, and `recover()` on any worker arms it again.

use std::time::{Duration, Instant};

use loom_kernel::{Event, EventStoreExt, ExecutionId, ExecutionStatus};
use loom_kernel::{FlowCtx, FlowError, RuntimeBuilder, StartOptions, flow_fn};
use loom_store_postgres::PostgresStore;
use loom_store_postgres::{fresh_schema, server_url};
use serde_json::{Value, json};

use crate::support::{on_a_worker_that_dies, until_status, worker};

/// Long enough that worker A, connecting and starting the flow, is gone before the deadline
/// even while the other PostgreSQL tests of this binary (worker processes among them) load the
/// machine and the server.
const NAP: Duration = Duration::from_secs(2);

async fn nap(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    ctx.sleep(NAP).await?;
    Ok(json!({ "woke": input }))
}

fn compose(builder: RuntimeBuilder<PostgresStore>) -> RuntimeBuilder<PostgresStore> {
    builder.flow(flow_fn("nap", 1, nap))
}

#[test]
fn a_timer_set_by_a_worker_that_died_fires_on_another() {
    let Some(url) = server_url("timers_across_workers") else {
        return;
    };
    let schema = fresh_schema("timers_across");
    let execution = ExecutionId::new("nap-1").expect("id");

    // Worker A starts the flow, which parks on its timer; then A's whole process runtime goes
    // away with every task it had (its timer task included), long before the deadline.
    let set_at = Instant::now();
    on_a_worker_that_dies(|| async {
        let a = worker(&url, &schema, "worker-a", compose).await;
        a.start("nap", &json!(1), StartOptions::new(execution.clone()))
            .await
            .expect("start");
        let state = a.store().fold(&execution).await.expect("fold");
        assert_eq!(state.status(), ExecutionStatus::Suspended);
    });
    assert!(
        set_at.elapsed() < NAP,
        "worker A must die before its deadline for this test to mean anything"
    );

    // Worker B knows nothing of it until it recovers: the deadline comes from the log.
    let tokio_b = tokio::runtime::Runtime::new().expect("tokio B");
    tokio_b.block_on(async {
        let b = worker(&url, &schema, "worker-b", compose).await;
        let report = b.recover_report().await.expect("recover");
        assert_eq!(report.timers, 1, "{report:?}");
        // `wait` answers when the execution parks or ends; the timer ends it on B.
        until_status(&b, &execution, ExecutionStatus::Completed).await;
        assert!(set_at.elapsed() >= NAP, "fired before its deadline");
        let resumes = b
            .store()
            .read_all(&execution)
            .await
            .expect("read")
            .iter()
            .filter(|e| matches!(e.event, Event::ExecutionResumed(_)))
            .count();
        assert_eq!(resumes, 1, "the timer fires once");
    });
}
