//! Effects and K9/K2/K3 as the kernel enforces them for every effect, raw or defined.

use std::sync::Arc;

use loom_kernel::kit::{Replayer, input_digest};
use loom_kernel::*;
use loom_kernel::{Event, StepStarted};
use loom_kernel::{EventStore, ExecutionStatus, MemoryStore};
use serde_json::{Value, json};

use crate::support;
use crate::support::{Calls, event_names, events_of, id, options};

async fn pay(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.execute("pay", &json!({"amount": 5})).await?.to_value())
}

/// Starts `pay` (execution `c`) whose effect, idempotent or not, starts and never answers; returns
/// once the effect runs.
async fn paying_forever(idempotent: bool) -> (Runtime<MemoryStore>, ExecutionId) {
    let started = Arc::new(tokio::sync::Notify::new());
    let signal = started.clone();
    let rt = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("pay", 1, pay))
        .effect(
            "pay",
            FnEffect::new(idempotent, move |_| {
                signal.notify_one();
                std::future::pending::<EffectOutcome>()
            }),
        )
        .build()
        .unwrap();
    let e = rt
        .start("pay", &json!(null), options("c", &["pay"]))
        .await
        .unwrap();
    started.notified().await;
    (rt, e)
}

#[tokio::test]
async fn cancel_while_a_non_idempotent_effect_runs_records_it_in_doubt() {
    let (rt, e) = paying_forever(false).await;
    rt.cancel(&e, Some("stop".into())).await.unwrap();
    let names = event_names(rt.store(), &e).await;
    assert_eq!(
        names,
        [
            "EXECUTION_STARTED",
            "STEP_STARTED",
            "EFFECT_INDOUBT",
            "EXECUTION_CANCELLED"
        ]
    );
    let state = rt.state(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Cancelled);
    assert!(state.steps_in_doubt().contains("pay#1"));
}

#[tokio::test]
async fn a_step_a_cancel_leaves_in_doubt_is_named_by_resolve_not_denied() {
    let (rt, e) = paying_forever(false).await;
    rt.cancel(&e, Some("stop".into())).await.unwrap();
    let refused = rt
        .resolve(
            &e,
            "pay#1",
            Verdict::Completed {
                output: json!(1).into(),
            },
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ResolveError::InDoubtWhenEnded { step_id, .. } if step_id == "pay#1"),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains(&format!("{e}:pay#1")),
        "{refused}"
    );
    let other = rt
        .resolve(&e, "nope#1", Verdict::Retry, None)
        .await
        .unwrap_err();
    assert!(
        matches!(other, ResolveError::NotInDoubt { .. }),
        "{other:?}"
    );
    // A fresh runtime (the driver loads the ended log) says the same.
    let fresh = Runtime::builder(rt.store().clone())
        .flow(flow_fn("pay", 1, pay))
        .build()
        .unwrap();
    let refused = fresh
        .resolve(&e, "pay#1", Verdict::Retry, None)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ResolveError::InDoubtWhenEnded { .. }),
        "{refused:?}"
    );
}

#[tokio::test]
async fn cancel_while_an_idempotent_effect_runs_records_no_doubt() {
    let (rt, e) = paying_forever(true).await;
    rt.cancel(&e, None).await.unwrap();
    let names = event_names(rt.store(), &e).await;
    assert!(!names.contains(&"EFFECT_INDOUBT"), "{names:?}");
    assert_eq!(names.last(), Some(&"EXECUTION_CANCELLED"));
}

#[tokio::test]
async fn a_raw_effect_runs_only_with_its_capability_granted() {
    let calls = Calls::default();
    let rt = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("pay", 1, pay))
        .effect("pay", support::echo(calls.clone()))
        .build()
        .unwrap();
    let e = rt
        .start("pay", &json!(null), options("k2", &[]))
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Failed);
    assert_eq!(calls.count(), 0, "an ungranted raw effect never runs");
    let log = events_of(rt.store(), &e).await;
    let Event::StepFailed(failed) = &log[1] else {
        panic!("{log:?}")
    };
    assert_eq!(failed.error.code, "loom.capability_denied");
    // Granted, it runs.
    let e = rt
        .start("pay", &json!(null), options("k2-granted", &["pay"]))
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    assert_eq!(calls.count(), 1);
}

struct Wire;

impl Effect for Wire {
    fn idempotent(&self) -> bool {
        true
    }
    fn capability(&self) -> Option<&str> {
        Some("payments")
    }
    fn invoke(&self, _: EffectCall) -> futures::future::BoxFuture<'static, EffectOutcome> {
        Box::pin(async { EffectOutcome::ok(json!("sent").into()) })
    }
}

#[tokio::test]
async fn a_raw_effect_may_name_its_capability() {
    let rt = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("pay", 1, pay))
        .effect("pay", Wire)
        .build()
        .unwrap();
    let denied = rt
        .start("pay", &json!(null), options("named", &["pay"]))
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&denied).await.unwrap().status(),
        ExecutionStatus::Failed
    );
    let granted = rt
        .start("pay", &json!(null), options("named-granted", &["payments"]))
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&granted).await.unwrap().status(),
        ExecutionStatus::Completed
    );
}

async fn typed_call(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let number: u64 = ctx.call("echo", &1).await?;
    Ok(json!(number))
}

#[tokio::test]
async fn a_call_whose_output_does_not_decode_names_its_step() {
    let rt = support::with_echo(
        MemoryStore::new(),
        FlowSet::new().with(flow_fn("typed", 1, typed_call)),
        Calls::default(),
    );
    let e = rt
        .start("typed", &json!(null), options("t", &["echo"]))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    let log = events_of(rt.store(), &e).await;
    let Some(Event::ExecutionFailed(failed)) = log.last() else {
        panic!("{log:?}")
    };
    assert!(
        failed.error.message.contains("'echo#1'"),
        "{}",
        failed.error.message
    );
}

/// Issue 41, hole 4 (K10-R6): a step's output that does not decode is described without its
/// value: the card number the receiver answered is not in the error the execution fails with,
/// which leaves the runtime (the log, traces, the console).
#[tokio::test]
async fn a_decode_error_names_the_kind_of_value_never_the_value() {
    #[derive(Debug, serde::Deserialize)]
    struct Charge {
        #[allow(dead_code)]
        card: u64,
    }
    async fn charge(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
        let charged: Charge = ctx.call("charge", &1).await?;
        Ok(json!(format!("{charged:?}")))
    }
    let rt = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("charge", 1, charge))
        .effect(
            "charge",
            FnEffect::new(true, |_: EffectCall| {
                std::future::ready(EffectOutcome::ok(
                    json!({"card": "4111 1111 1111 1111"}).into(),
                ))
            }),
        )
        .build()
        .unwrap();
    let e = rt
        .start("charge", &json!(null), options("card", &["charge"]))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    let log = events_of(rt.store(), &e).await;
    let Some(Event::ExecutionFailed(failed)) = log.last() else {
        panic!("{log:?}")
    };
    let message = &failed.error.message;
    assert!(!message.contains("4111"), "{message}");
    assert!(
        message.contains("invalid type: string, expected u64"),
        "{message}"
    );
    assert!(message.contains("'charge#1'"), "{message}");
}

async fn slow_echo(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.execute("echo", &1).await?.to_value())
}

#[tokio::test]
async fn an_idempotent_step_re_run_after_each_crash_gets_the_next_attempt() {
    let store = MemoryStore::new();
    let e = id("attempts");
    store
        .append(
            &e,
            0,
            &[
                loom_kernel::conformance::started("slow"),
                Event::StepStarted(StepStarted {
                    step_id: "echo#1".into(),
                    effect: "echo".into(),
                    input_digest: input_digest(&json!(1).into()),
                    attempt: 1,
                    max_cost: 0,
                }),
            ],
        )
        .await
        .unwrap();
    let mut attempts = Vec::new();
    for _ in 0..3 {
        // A worker that starts the step again and dies before its outcome.
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let rt = Runtime::builder(store.clone())
            .flow(flow_fn("slow", 1, slow_echo))
            .effect(
                "echo",
                FnEffect::new(true, move |call: EffectCall| {
                    record.lock().unwrap().push(call.attempt);
                    std::future::pending::<EffectOutcome>()
                }),
            )
            .build()
            .unwrap();
        rt.recover().await.unwrap();
        while seen.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        // The re-run's STEP_STARTED is durable before the worker dies.
        while store.head(&e).await.unwrap() < 3 + attempts.len() as u64 {
            tokio::task::yield_now().await;
        }
        attempts.extend(seen.lock().unwrap().iter().copied());
        drop(rt);
    }
    assert_eq!(attempts, [2, 3, 4], "one more on each re-run");
}

/// What docs/CONCEPTS.md says of a step's events (issue 41, hole 13): an idempotent step that
/// finishes before its STEP_STARTED is written has its outcome alone (whether it does depends
/// on when the writer runs: either form is a whole step); a non-idempotent one always has its
/// STEP_STARTED, durable before the effect runs.
#[tokio::test]
async fn a_quick_idempotent_step_may_be_its_outcome_alone_and_a_non_idempotent_one_has_its_start() {
    async fn one(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
        Ok(ctx.execute("fx", &1).await?.to_value())
    }
    for idempotent in [true, false] {
        let rt = Runtime::builder(MemoryStore::new())
            .flow(flow_fn("one", 1, one))
            .effect(
                "fx",
                FnEffect::new(idempotent, |_: EffectCall| {
                    std::future::ready(EffectOutcome::ok(json!(1).into()))
                }),
            )
            .build()
            .unwrap();
        let e = rt
            .start(
                "one",
                &json!(null),
                options(&format!("quick-{idempotent}"), &["fx"]),
            )
            .await
            .unwrap();
        rt.wait(&e).await.unwrap();
        let names = event_names(rt.store(), &e).await;
        let whole = [
            "EXECUTION_STARTED",
            "STEP_STARTED",
            "STEP_COMPLETED",
            "EXECUTION_COMPLETED",
        ];
        let outcome_alone = ["EXECUTION_STARTED", "STEP_COMPLETED", "EXECUTION_COMPLETED"];
        if idempotent {
            assert!(names == whole || names == outcome_alone, "{names:?}");
        } else {
            assert_eq!(names, whole);
        }
    }
}

/// Issue 41, hole 1 (K9): a flow that returns without awaiting a non-idempotent step whose
/// effect runs (a `select` its gate won) records the step in doubt before its end, as a cancel
/// does, so an operator learns that the effect may have happened; the log replays (the step in
/// doubt waits, so the gate wins again). An idempotent one is dropped with no word.
#[tokio::test]
async fn a_flow_that_returns_while_its_step_runs_records_the_step_in_doubt() {
    async fn pay_unless_stopped(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
        let pay = std::pin::pin!(ctx.execute("pay", &json!({"amount": 5})));
        let stop = std::pin::pin!(ctx.suspend("stop", "k"));
        Ok(match futures::future::select(pay, stop).await {
            futures::future::Either::Left((paid, _)) => paid?.to_value(),
            futures::future::Either::Right(_) => json!("stopped"),
        })
    }
    for idempotent in [false, true] {
        let running = Arc::new(tokio::sync::Notify::new());
        let signal = running.clone();
        let rt = Runtime::builder(MemoryStore::new())
            .flow(flow_fn("pay_unless_stopped", 1, pay_unless_stopped))
            .effect(
                "pay",
                FnEffect::new(idempotent, move |_: EffectCall| {
                    signal.notify_one();
                    std::future::pending::<EffectOutcome>()
                }),
            )
            .build()
            .unwrap();
        let e = rt
            .start(
                "pay_unless_stopped",
                &json!(null),
                options(&format!("returns-while-paying-{idempotent}"), &["pay"]),
            )
            .await
            .unwrap();
        running.notified().await;
        rt.resume(&e, "stop", "k", json!(null).into())
            .await
            .unwrap();
        let ended = rt.wait(&e).await.unwrap();
        assert_eq!(ended.status(), ExecutionStatus::Completed);
        assert_eq!(
            ended.output().map(Payload::to_value),
            Some(json!("stopped"))
        );
        let names = event_names(rt.store(), &e).await;
        if idempotent {
            assert!(ended.steps_in_doubt().is_empty());
            assert!(!names.contains(&"EFFECT_INDOUBT"), "{names:?}");
        } else {
            assert!(ended.steps_in_doubt().contains("pay#1"));
            assert_eq!(
                names,
                [
                    "EXECUTION_STARTED",
                    "STEP_STARTED",
                    "EXECUTION_SUSPENDED",
                    "EXECUTION_RESUMED",
                    "EFFECT_INDOUBT",
                    "EXECUTION_COMPLETED"
                ]
            );
            let events = events_of(rt.store(), &e).await;
            let Some(Event::EffectInDoubt(doubt)) = events.get(4) else {
                panic!("{events:?}");
            };
            let reason = doubt.reason.as_ref().unwrap();
            assert_eq!(reason.code, "loom.flow_returned_while_running");
        }
        let log = rt.store().read_all(&e).await.unwrap();
        let replayer = Replayer::new(
            &FlowSet::new().with(flow_fn("pay_unless_stopped", 1, pay_unless_stopped)),
            DataClassification::default(),
        )
        .unwrap();
        assert!(replayer.replay_log(log).unwrap().returned);
    }
}

/// A raw effect that declares `max_cost` 1 and reports what its caller says it cost.
struct Metered {
    calls: Calls,
}

impl Effect for Metered {
    fn idempotent(&self) -> bool {
        true
    }
    fn max_cost(&self) -> u64 {
        1
    }
    fn invoke(&self, call: EffectCall) -> futures::future::BoxFuture<'static, EffectOutcome> {
        self.calls.bump();
        let cost = call.input.to_value().as_u64().unwrap_or(0);
        Box::pin(async move { EffectOutcome::ok(json!("metered").into()).with_cost(cost) })
    }
}

/// Issue 41, hole 5 (K3): the kernel keeps the budget for every effect, raw ones included. A
/// step is admitted only if its `max_cost` fits in what may still be spent; a step that reported
/// more than it declared is charged what it reported, and the next step is refused
/// (`loom.budget_exceeded`, its effect never called).
#[tokio::test]
async fn the_kernel_refuses_a_raw_effect_s_step_over_the_budget() {
    async fn twice(ctx: FlowCtx, costs: Vec<u64>) -> Result<Value, FlowError> {
        let mut outcomes = Vec::new();
        for cost in costs {
            outcomes.push(match ctx.execute("metered", &cost).await {
                Ok(_) => json!("ok"),
                Err(StepError::Failed(error)) => json!(error.code),
                Err(other) => return Err(other.into()),
            });
        }
        Ok(json!(outcomes))
    }
    let calls = Calls::default();
    let rt = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("twice", 1, twice))
        .effect(
            "metered",
            Metered {
                calls: calls.clone(),
            },
        )
        .build()
        .unwrap();
    let e = rt
        .start(
            "twice",
            &vec![100u64, 1],
            options("over-budget", &["metered"]).budget(5),
        )
        .await
        .unwrap();
    let ended = rt.wait(&e).await.unwrap();
    assert_eq!(
        ended.output().map(Payload::to_value),
        Some(json!(["ok", "loom.budget_exceeded"]))
    );
    assert_eq!(calls.count(), 1, "the refused step's effect never ran");
    assert_eq!(ended.budget_spent(), 100, "charged what it reported, once");
}
