//! One process holds, on the disk store, executions waiting on durable timers, parents waiting
//! for children that are themselves sleeping, and executions parked at a gate with a durable
//! request (what the flow asks the outside for); it is
//! killed with SIGKILL at varied moments (before anything fired, while timers fire and children
//! end). The next process recovers them all: it finds every pending request again, with the
//! same correlation key and payload, and answers it; every execution completes exactly as if
//! nothing had happened (same outputs), no child is started twice, no timer or child end is
//! delivered twice, and every log replays deterministically.
//!
//! The child process is this test binary run again with `LOOM_FAMILY_CHILD_STORE` set: it then
//! runs `family_child_process_entry`, which does nothing in an ordinary test run. Both
//! processes use a manual clock, so nothing waits for real time beyond a few milliseconds per
//! tick.

use crate::support::kill;

use std::time::Duration;

use loom_kernel::Event;
use loom_kernel::conformance::id;
use loom_kernel::*;
use loom_kernel::{DiskStore, EventStoreExt, ExecutionId, ExecutionStatus};
use serde_json::{Value, json};

const CHILD_ENV: &str = "LOOM_FAMILY_CHILD_STORE";
const T0: u64 = 1_800_000_000_000;
const SLEEPERS: usize = 4;
const PARENTS: usize = 4;
const GATES: usize = 3;

/// Sleeps one second twice.
async fn ticks(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.sleep(Duration::from_secs(1)).await?;
    ctx.sleep(Duration::from_secs(1)).await?;
    Ok(json!("slept"))
}

/// A child: sleeps, then squares its input through an idempotent effect.
async fn worker(ctx: FlowCtx, n: u64) -> Result<u64, FlowError> {
    ctx.sleep(Duration::from_secs(1)).await?;
    let squared: u64 = ctx.call("square", &n).await?;
    Ok(squared)
}

/// A parent: two children of `worker`, one after the other, and a sleep between them.
async fn family(ctx: FlowCtx, n: u64) -> Result<Value, FlowError> {
    let first: u64 = ctx.call_child("worker", &n).await?;
    ctx.sleep(Duration::from_millis(500)).await?;
    let second: u64 = ctx.call_child("worker", &(n + 1)).await?;
    Ok(json!([first, second]))
}

/// Parks at a gate, asking the outside for an approval.
async fn approval(ctx: FlowCtx, key: String) -> Result<Value, FlowError> {
    let request = json!({"approve": key});
    Ok(ctx
        .suspend_with_request("Approval", &key, &request)
        .await?
        .to_value())
}

fn runtime(store: DiskStore, clock: ManualClock) -> Runtime<DiskStore> {
    let square = FnEffect::new(true, |call: EffectCall| {
        let n: u64 = call.input.decode().unwrap_or_default();
        async move { EffectOutcome::ok(json!(n * n).into()) }
    });
    Runtime::builder(store)
        .flow(flow_fn("ticks", 1, ticks))
        .flow(flow_fn("worker", 1, worker))
        .flow(flow_fn("family", 1, family))
        .flow(flow_fn("approval", 1, approval))
        .effect("square", square)
        .clock(clock)
        .build()
        .unwrap()
}

fn sleepers() -> Vec<ExecutionId> {
    (0..SLEEPERS).map(|n| id(&format!("sleep-{n}"))).collect()
}

fn parents() -> Vec<(ExecutionId, u64)> {
    (0..PARENTS)
        .map(|n| (id(&format!("family-{n}")), n as u64 + 2))
        .collect()
}

fn gates() -> Vec<(ExecutionId, String)> {
    (0..GATES)
        .map(|n| (id(&format!("gate-{n}")), format!("key-{n}")))
        .collect()
}

#[test]
fn family_child_process_entry() {
    let ticks = (Duration::from_millis(250), Duration::from_millis(3));
    kill::ticking_child(CHILD_ENV, T0, ticks, runtime, async |runtime| {
        let grant = |e: &ExecutionId| StartOptions::new(e.clone()).grant("square");
        for e in sleepers() {
            runtime
                .start("ticks", &json!(null), grant(&e))
                .await
                .unwrap();
        }
        for (e, n) in parents() {
            runtime.start("family", &n, grant(&e)).await.unwrap();
        }
        for (e, key) in gates() {
            runtime.start("approval", &key, grant(&e)).await.unwrap();
        }
    });
}

#[test]
fn sigkill_with_timers_children_and_gate_requests_in_flight_loses_nothing() {
    kill::after_each_kill(
        concat!(module_path!(), "::family_child_process_entry"),
        CHILD_ENV,
        "family.redb",
        &["started", "tick 2", "tick 5", "tick 9", "tick 12"],
        async |until, store| {
            let clock = ManualClock::new(T0);
            let runtime = runtime(store.clone(), clock.clone());
            runtime.recover().await.unwrap();
            // The gates are answered by this process (they were pending when the first died,
            // or had not been resumed: no one resumed them there). Their requests are found
            // again from the log, as an application re-sends them after a restart.
            let pending = runtime.pending_requests().await.unwrap();
            for (e, key) in gates() {
                let found: Vec<_> = pending.iter().filter(|p| p.execution == e).collect();
                assert_eq!(
                    found.len(),
                    1,
                    "killed at '{until}': {e}'s request: {pending:?}"
                );
                assert_eq!(found[0].event_type, "Approval");
                assert_eq!(found[0].correlation_key, key);
                assert_eq!(found[0].request.to_value(), json!({"approve": key}));
            }
            assert_eq!(pending.len(), GATES, "only the gates ask: {pending:?}");
            for (e, key) in gates() {
                runtime
                    .resume(&e, "Approval", &key, json!({"by": key}).into())
                    .await
                    .unwrap_or_else(|err| panic!("killed at '{until}': {e}: {err}"));
            }
            let mut expected: Vec<(ExecutionId, Value)> = Vec::new();
            expected.extend(sleepers().into_iter().map(|e| (e, json!("slept"))));
            for (e, n) in parents() {
                expected.push((e, json!([n * n, (n + 1) * (n + 1)])));
            }
            for (e, key) in gates() {
                expected.push((e, json!({"by": key})));
            }
            let executions: Vec<ExecutionId> = expected.iter().map(|(e, _)| e.clone()).collect();
            let step = Duration::from_millis(250);
            let all_done =
                kill::advance_until_ended(&runtime, &clock, step, &executions, 4_000).await;
            assert!(all_done, "killed at '{until}': not every execution ended");
            for (e, output) in &expected {
                let state = runtime.wait(e).await.unwrap();
                assert_eq!(
                    state.status(),
                    ExecutionStatus::Completed,
                    "killed at '{until}': {e}"
                );
                assert_eq!(
                    state.output().map(|o| o.to_value()).as_ref(),
                    Some(output),
                    "killed at '{until}': {e}"
                );
            }
            // Exactly the children asked for, each started once and ended once.
            let all = store.list_all_executions().await.unwrap();
            assert_eq!(
                all.len(),
                SLEEPERS + PARENTS * 3 + GATES,
                "killed at '{until}': no child started twice"
            );
            for summary in &all {
                let log = store.read_all(&summary.id).await.unwrap();
                let mut resumed = std::collections::BTreeSet::new();
                for envelope in &log {
                    if let Event::ExecutionResumed(r) = &envelope.event {
                        assert!(
                            resumed.insert(r.gate_id.clone()),
                            "killed at '{until}': {}: gate {} resumed twice",
                            summary.id,
                            r.gate_id
                        );
                    }
                }
                let starts = log
                    .iter()
                    .filter(|e| matches!(e.event, Event::ExecutionStarted(_)))
                    .count();
                assert_eq!(starts, 1, "killed at '{until}': {}", summary.id);
                runtime
                    .replay_log(log)
                    .unwrap_or_else(|err| panic!("killed at '{until}': {}: {err}", summary.id));
            }
            for (parent, n) in parents() {
                for (k, input) in [(1, n), (2, n + 1)] {
                    let child = id(&format!("{parent}/worker#{k}"));
                    let state = runtime.state(&child).await.unwrap();
                    assert_eq!(
                        state.output().map(|o| o.to_value()),
                        Some(json!(input * input)),
                        "killed at '{until}': {child}"
                    );
                }
            }
            runtime.shutdown().await;
        },
    );
}
