//! `loom --store postgres://...`: reads and writes work while workers run.
//! Skipped loudly without a PostgreSQL server (CI starts one).

use crate::support::*;
use loom_kernel::conformance::{completed, started, tagged};
use loom_kernel::{EffectInDoubt, Event, StepStarted};
use loom_kernel::{EventStore, EventStoreExt, ExecutionStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_verdicts_work_on_postgresql_beside_a_running_worker() {
    let Some(url) = loom_store_postgres::server_url("loom-console reads_work_on_postgresql") else {
        return;
    };
    let schema = loom_store_postgres::fresh_schema("console");
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
                    max_cost: 0,
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
    assert_eq!(listed["executions"][0]["id"], "pay-1");
    assert_eq!(listed["executions"][0]["status"], "in-doubt");
    let shown = json_out(&run(&["--json", "show", "pay-1"]).await);
    assert_eq!(shown["state"]["stepsInDoubt"][0], "charge#1");
    let doubts = json_out(&run(&["--json", "in-doubt"]).await);
    assert_eq!(doubts[0]["idempotencyKey"], "pay-1:charge#1");
    // The lease's last holder, and that it is not live (the worker gave it back when the
    // execution parked in doubt): what an operator checks before a retry.
    for lease in [&shown["lease"], &doubts[0]["lease"]] {
        assert_eq!(lease["holder"], store.worker_id(), "{lease}");
        assert_eq!(lease["token"], 1, "{lease}");
        assert_eq!(lease["live"], false, "{lease}");
    }
    let table = run(&["in-doubt"]).await;
    assert!(
        stdout(&table).contains("LAST LEASE HOLDER"),
        "{}",
        stdout(&table)
    );
    assert!(
        stdout(&table).contains(&format!("{} #1 not live", store.worker_id())),
        "{}",
        stdout(&table)
    );
    let text = run(&["show", "pay-1"]).await;
    assert!(
        stdout(&text).contains(&format!(
            "lease         {} (token 1), not live",
            store.worker_id()
        )),
        "{}",
        stdout(&text)
    );

    // A verdict is recorded on the database while the worker's store stays open.
    let resolved = run(&["resolve", "pay-1", "charge#1", "--completed", "1"]).await;
    assert_eq!(code(&resolved), 0, "{}", stderr(&resolved));
    let state = loom_kernel::EventStoreExt::fold(&store, &execution)
        .await
        .unwrap();
    assert_eq!(
        state.status(),
        ExecutionStatus::Running,
        "the verdict is recorded"
    );
    // The command gave its lease back: a worker drives the execution on at once.
    let head = store.head(&execution).await.unwrap();
    store
        .append(&execution, head, &[tagged(serde_json::json!("driven on"))])
        .await
        .expect("the lease is free");
    // The same verdict again: the step is no longer in doubt, nothing is recorded.
    let again = run(&["resolve", "pay-1", "charge#1", "--completed", "1"]).await;
    assert_eq!(code(&again), 1, "{}", stderr(&again));
    // An operator working from a list made before: told that list is stale, and how to
    // refresh it.
    assert!(
        stderr(&again).contains("that list is stale") && stderr(&again).contains("loom in-doubt"),
        "{}",
        stderr(&again)
    );
    assert_eq!(store.head(&execution).await.unwrap(), head + 1);

    // An execution a live worker drives (it holds the lease): a cancel is refused, nothing
    // recorded, and the message points to the worker's admin API.
    let running = id("run-1");
    store.append(&running, 0, &[started("pay")]).await.unwrap();
    let refused = run(&["cancel", "run-1"]).await;
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--admin"), "{}", stderr(&refused));
    assert_eq!(
        store.head(&running).await.unwrap(),
        1,
        "nothing was recorded"
    );

    // Retention on the database beside the worker: an ended execution goes, the running one
    // and the one a worker drove on stay.
    let ended = id("done-1");
    store
        .append(&ended, 0, &[started("pay"), completed()])
        .await
        .unwrap();
    let future_cutoff = (loom_console::now_ms().unwrap_or(0) + 60_000).to_string();
    let dry = json_out(
        &run(&[
            "--json",
            "purge",
            "--ended-before-ms",
            &future_cutoff,
            "--dry-run",
        ])
        .await,
    );
    assert_eq!(dry["executions"], serde_json::json!(["done-1"]));
    assert_eq!(
        store.head(&ended).await.unwrap(),
        2,
        "a dry run deletes nothing"
    );
    let purged = json_out(&run(&["--json", "purge", "--ended-before-ms", &future_cutoff]).await);
    assert_eq!(purged["executions"], serde_json::json!(["done-1"]));
    assert_eq!(
        store.head(&ended).await.unwrap(),
        0,
        "the ended execution is gone"
    );
    assert_eq!(
        store.head(&running).await.unwrap(),
        1,
        "a running one stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_on_postgresql_is_checked_against_the_gates_schema_before_anything_is_recorded() {
    let Some(url) = loom_store_postgres::server_url("loom-console resume_checked_on_postgresql")
    else {
        return;
    };
    let schema = loom_store_postgres::fresh_schema("console_expects");
    let store = loom_store_postgres::PostgresStore::connect(
        loom_store_postgres::PostgresStoreConfig::new(&url).schema(&schema),
    )
    .await
    .unwrap();
    let execution = id("locale-pg");
    let key = locale_key("locale-pg");
    store
        .append(
            &execution,
            0,
            &[
                started("locale"),
                Event::DecisionRecorded(loom_kernel::DecisionRecorded {
                    step_id: loom_kernel::kit::payload_schema_step_id("A2UIFunctionResult#1"),
                    kind: loom_kernel::kit::PAYLOAD_SCHEMA_KIND.into(),
                    value: locale_schema().into(),
                }),
                Event::ExecutionSuspended(loom_kernel::ExecutionSuspended {
                    gate_id: "A2UIFunctionResult#1".into(),
                    event_type: LOCALE_GATE.into(),
                    correlation_key: key.clone(),
                }),
            ],
        )
        .await
        .unwrap();
    let resume = |payload: &'static str| {
        let args: Vec<String> = [
            "--store",
            &url,
            "--schema",
            &schema,
            "resume",
            "locale-pg",
            LOCALE_GATE,
            &key,
            payload,
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            loom_async(&args).await
        }
    };
    let refused = resume("\"de-CH\"").await;
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("It expects (JSON Schema)"),
        "{}",
        stderr(&refused)
    );
    let head = loom_kernel::EventStoreExt::fold(&store, &execution)
        .await
        .unwrap()
        .next_seq();
    assert_eq!(head, 3, "nothing was recorded");
    let accepted = resume(r#"{"value": "de-CH"}"#).await;
    assert_eq!(code(&accepted), 0, "{}", stderr(&accepted));
    let state = loom_kernel::EventStoreExt::fold(&store, &execution)
        .await
        .unwrap();
    assert_eq!(state.next_seq(), 4);
    assert!(state.pending_gates().is_empty());
}

/// The URL of the server's second database `loom_shard_1` (created if missing; the store's
/// tests use the same one).
async fn second_database(url: &str) -> String {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'loom_shard_1')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    if !exists && let Err(error) = client.batch_execute("CREATE DATABASE loom_shard_1").await {
        assert_eq!(
            error.code(),
            Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE),
            "{error}"
        );
    }
    drop(client);
    let _ = connection.await;
    format!("{}/loom_shard_1", url.rsplit_once('/').unwrap().0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_and_resolves_across_two_shards() {
    let Some(url) = loom_store_postgres::server_url("loom-console across_two_shards") else {
        return;
    };
    let schema = loom_store_postgres::fresh_schema("console_shards");
    let second = second_database(&url).await;
    let store = loom_store_postgres::ShardedStore::connect(
        [&url, &second]
            .into_iter()
            .map(|u| loom_store_postgres::PostgresStoreConfig::new(u).schema(&schema))
            .collect(),
    )
    .await
    .unwrap();
    // In doubt, on both shards.
    let ids: Vec<_> = (0..6).map(|n| id(&format!("pay-{n}"))).collect();
    for execution in &ids {
        store
            .append(
                execution,
                0,
                &[
                    started("pay"),
                    Event::StepStarted(StepStarted {
                        step_id: "charge#1".into(),
                        effect: "charge".into(),
                        input_digest: "d".into(),
                        attempt: 1,
                        max_cost: 0,
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
    }
    let shards: Vec<usize> = ids
        .iter()
        .map(|e| loom_store_postgres::shard_of(e, 2))
        .collect();
    assert!(shards.contains(&0) && shards.contains(&1), "{shards:?}");
    let both = format!("{url},{second}");
    let run = |rest: &[&str]| {
        let mut args = vec!["--store", both.as_str(), "--schema", schema.as_str()];
        args.extend_from_slice(rest);
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            loom_async(&args).await
        }
    };
    let listed = json_out(&run(&["--json", "executions"]).await);
    let mut listed: Vec<&str> = listed["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        ["pay-0", "pay-1", "pay-2", "pay-3", "pay-4", "pay-5"]
    );
    let doubts = json_out(&run(&["--json", "in-doubt"]).await);
    assert_eq!(doubts.as_array().unwrap().len(), 6);
    assert_eq!(doubts[0]["lease"]["live"], false);
    // A verdict on an execution of the second shard lands there.
    let on_second = ids
        .iter()
        .find(|e| loom_store_postgres::shard_of(e, 2) == 1)
        .unwrap();
    let resolved = run(&[
        "resolve",
        on_second.as_str(),
        "charge#1",
        "--completed",
        "1",
    ])
    .await;
    assert_eq!(code(&resolved), 0, "{}", stderr(&resolved));
    let state = loom_kernel::EventStoreExt::fold(&store.shards()[1], on_second)
        .await
        .unwrap();
    assert_eq!(
        state.status(),
        ExecutionStatus::Running,
        "recorded on its shard"
    );
    let shown = json_out(&run(&["--json", "show", on_second.as_str()]).await);
    assert_eq!(shown["execution"]["status"], "running");
}

/// An offline resume of one gate of a `first_of` on PostgreSQL closes the others in the same
/// append, as on a store file, and a worker takes the same branch when it recovers the
/// execution (issue 41, item 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_resume_of_a_first_of_gate_closes_the_others_on_postgresql() {
    use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, flow_fn};
    let Some(url) = loom_store_postgres::server_url("loom-console first_of on postgresql") else {
        return;
    };
    let schema = loom_store_postgres::fresh_schema("console_first_of");
    let config = loom_store_postgres::PostgresStoreConfig::new(&url).schema(&schema);
    let runtime = |store| {
        Runtime::builder(store)
            .flow(flow_fn(
                "either",
                1,
                |ctx: FlowCtx, _: serde_json::Value| async move {
                    let first = ctx.first_of(&[("Yes", "k"), ("No", "k")], None).await?;
                    Ok::<_, FlowError>(serde_json::json!(format!("{first:?}")))
                },
            ))
            .build()
            .unwrap()
    };
    let store = loom_store_postgres::PostgresStore::connect(config.clone())
        .await
        .unwrap();
    {
        let first = runtime(store.clone());
        first
            .start(
                "either",
                &serde_json::json!(null),
                StartOptions::new(id("e-1")),
            )
            .await
            .unwrap();
        let parked = first.wait(&id("e-1")).await.unwrap();
        assert_eq!(parked.status(), ExecutionStatus::Suspended);
        first.shutdown().await;
    }
    loom_console::resume(&store, &id("e-1"), "No", "k", serde_json::json!(7).into())
        .await
        .unwrap();
    let log = store.read_all(&id("e-1")).await.unwrap();
    let resumes: Vec<(String, serde_json::Value)> = log
        .iter()
        .filter_map(|envelope| match &envelope.event {
            Event::ExecutionResumed(r) => Some((r.gate_id.clone(), r.payload.to_value())),
            _ => None,
        })
        .collect();
    assert_eq!(
        resumes,
        [
            ("No#1".to_owned(), serde_json::json!(7)),
            (
                "Yes#1".to_owned(),
                serde_json::json!({"loom.closed": {"by": "No#1"}})
            )
        ]
    );
    let again = runtime(store.clone());
    again.recover().await.unwrap();
    let ended = again.wait(&id("e-1")).await.unwrap();
    assert_eq!(ended.status(), ExecutionStatus::Completed);
    let output = ended.output().map(loom_kernel::Payload::to_value).unwrap();
    assert!(output.as_str().unwrap().contains("index: 1"), "{output}");
}
