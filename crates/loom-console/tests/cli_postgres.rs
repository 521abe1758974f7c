//! `loom --store postgres://...`: the reads work while workers run; writes point to `--admin`.
//! Skipped loudly without a PostgreSQL server (CI starts one).

mod support;

use loom_kernel::conformance::started;
use loom_kernel::event::{EffectInDoubt, Event, StepStarted};
use loom_kernel::{EventStore, ExecutionStatus};
use loom_store_postgres::testing;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_work_on_postgresql_and_writes_point_to_the_admin_api() {
    let Some(url) = testing::server_url("loom-console reads_work_on_postgresql") else {
        return;
    };
    let schema = testing::fresh_schema("console");
    let store = loom_store_postgres::PostgresStore::connect(
        loom_store_postgres::PostgresStoreConfig::new(&url).schema(&schema),
    )
    .await
    .unwrap();
    let execution = id("pay-1");
    store
        .append(
            &execution,
            0,
            &[
                started("pay"),
                Event::StepStarted(StepStarted {
                    step_id: "charge#1".into(),
                    effect: "charge".into(),
                    input_digest: "d".into(),
                    attempt: 1,
                }),
                Event::EffectInDoubt(EffectInDoubt {
                    step_id: "charge#1".into(),
                    effect: "charge".into(),
                    attempt: 1,
                    reason: None,
                }),
            ],
        )
        .await
        .unwrap();

    let args = |rest: &[&str]| {
        let mut all = vec!["--store", url.as_str(), "--schema", schema.as_str()];
        all.extend_from_slice(rest);
        all.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let run = |rest: &[&str]| {
        let args = args(rest);
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            loom_async(&args).await
        }
    };
    // The store stays open here, as a worker's would.
    let listed = json_out(&run(&["--json", "executions"]).await);
    assert_eq!(listed[0]["id"], "pay-1");
    assert_eq!(listed[0]["status"], "in-doubt");
    let shown = json_out(&run(&["--json", "show", "pay-1"]).await);
    assert_eq!(shown["state"]["stepsInDoubt"][0], "charge#1");
    let doubts = json_out(&run(&["--json", "in-doubt"]).await);
    assert_eq!(doubts[0]["idempotencyKey"], "pay-1:charge#1");

    let refused = run(&["resolve", "pay-1", "charge#1", "--completed", "1"]).await;
    assert_eq!(code(&refused), 1);
    assert!(stderr(&refused).contains("--admin"), "{}", stderr(&refused));
    let state = loom_kernel::EventStoreExt::fold(&store, &execution)
        .await
        .unwrap();
    assert_eq!(
        state.status(),
        ExecutionStatus::InDoubt,
        "nothing was recorded"
    );
}
