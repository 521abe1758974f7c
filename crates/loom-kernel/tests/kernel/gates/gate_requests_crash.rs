//! Durable gate requests across a real crash (LD-018): a child process starts executions
//! that each record a request with their gate on the disk store, and is killed with SIGKILL
//! at varied moments (while they start, once all of them wait). The next process recovers,
//! lists every pending request with the key the first process minted, sends each again (to a
//! receiver that counts what it gets), and resumes each gate with the answer: every execution
//! completes exactly once, its request recorded once, its gate resumed once, and a second
//! answer to the same request is refused.
//!
//! The child is this test binary run again with `LOOM_REQUESTS_CHILD_STORE` set: it then runs
//! `requests_child_process_entry`, which does nothing in an ordinary test run.

use crate::support::child::{child_runtime, say};
use crate::support::kill;

use std::collections::BTreeMap;
use std::time::Duration;

use loom_kernel::Event;
use loom_kernel::conformance::id;
use loom_kernel::kit::REQUEST_KIND;
use loom_kernel::*;
use loom_kernel::{DiskStore, EventStoreExt, ExecutionStatus};
use serde_json::{Value, json};

const CHILD_ENV: &str = "LOOM_REQUESTS_CHILD_STORE";
const EXECUTIONS: usize = 8;

/// Asks a partner to ship order `n` and returns the tracking number it answers.
async fn ship(ctx: FlowCtx, n: u64) -> Result<Value, FlowError> {
    let key = format!("ship-{n}");
    let tracking = ctx
        .suspend_with_request("Shipped", &key, &json!({"ship": n}))
        .await?;
    Ok(json!({"order": n, "tracking": tracking.to_value()}))
}

fn runtime(store: DiskStore) -> Runtime<DiskStore> {
    Runtime::builder(store)
        .flow(flow_fn("ship", 1, ship))
        .build()
        .unwrap()
}

fn execution(n: usize) -> loom_kernel::ExecutionId {
    id(&format!("ship-{n}"))
}

#[test]
fn requests_child_process_entry() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let tokio = child_runtime();
    tokio.block_on(async move {
        let runtime = runtime(DiskStore::open(&path).unwrap());
        for n in 0..EXECUTIONS {
            runtime
                .start("ship", &n, StartOptions::new(execution(n)))
                .await
                .unwrap();
            say(&format!("started {n}"));
        }
        for n in 0..EXECUTIONS {
            runtime.wait(&execution(n)).await.unwrap();
        }
        say("waiting");
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}

#[test]
fn sigkill_with_pending_requests_loses_none_and_completes_each_once() {
    kill::after_each_kill(
        concat!(module_path!(), "::requests_child_process_entry"),
        CHILD_ENV,
        "requests.redb",
        &["started 0", "started 4", "waiting"],
        async |until, store| {
            let runtime = runtime(store.clone());
            runtime.recover().await.unwrap();
            // What the killed process had not started, this one starts (idempotent on the id).
            for n in 0..EXECUTIONS {
                runtime
                    .start("ship", &n, StartOptions::new(execution(n)))
                    .await
                    .unwrap();
            }
            for n in 0..EXECUTIONS {
                let state = runtime.wait(&execution(n)).await.unwrap();
                assert_eq!(
                    state.status(),
                    ExecutionStatus::Suspended,
                    "killed at '{until}'"
                );
            }
            // The partner: receives each request (again, after the crash) and answers once.
            let pending = runtime.pending_requests().await.unwrap();
            assert_eq!(pending.len(), EXECUTIONS, "killed at '{until}'");
            let mut received: BTreeMap<String, Value> = BTreeMap::new();
            for request in &pending {
                assert_eq!(request.event_type, "Shipped");
                assert_eq!(request.correlation_key, request.execution.as_str());
                received.insert(request.correlation_key.clone(), request.request.to_value());
            }
            for request in &pending {
                let n = received[&request.correlation_key]["ship"].as_u64().unwrap();
                let answer = json!(format!("TRK-{n}"));
                runtime
                    .resume(
                        &request.execution,
                        "Shipped",
                        &request.correlation_key,
                        answer.clone().into(),
                    )
                    .await
                    .unwrap();
                // The request resent and answered twice: refused, nothing recorded.
                let again = runtime
                    .resume(
                        &request.execution,
                        "Shipped",
                        &request.correlation_key,
                        answer.into(),
                    )
                    .await;
                assert!(again.is_err(), "killed at '{until}': {again:?}");
            }
            for n in 0..EXECUTIONS {
                let e = execution(n);
                let state = runtime.wait(&e).await.unwrap();
                assert_eq!(
                    state.status(),
                    ExecutionStatus::Completed,
                    "killed at '{until}'"
                );
                assert_eq!(
                    state.output().unwrap().to_value(),
                    json!({"order": n, "tracking": format!("TRK-{n}")})
                );
                let log = store.read_all(&e).await.unwrap();
                let count = |f: &dyn Fn(&Event) -> bool| log.iter().filter(|x| f(&x.event)).count();
                assert_eq!(
                    count(&|e| matches!(e, Event::DecisionRecorded(d) if d.kind == REQUEST_KIND)),
                    1,
                    "killed at '{until}': {e}: one request"
                );
                assert_eq!(count(&|e| matches!(e, Event::ExecutionSuspended(_))), 1);
                assert_eq!(count(&|e| matches!(e, Event::ExecutionResumed(_))), 1);
                assert_eq!(count(&|e| matches!(e, Event::ExecutionCompleted(_))), 1);
                runtime.replay_log(log).unwrap();
            }
            assert!(runtime.pending_requests().await.unwrap().is_empty());
            runtime.shutdown().await;
        },
    );
}
