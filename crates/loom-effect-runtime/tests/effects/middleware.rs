//! The middleware through a real runtime (in-memory store): admission (K2, K3, schemas),
//! retries and timeouts under paused tokio time, the cancellation signal, panics, and what
//! each ends up recorded as.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loom_effect_runtime::*;
use loom_kernel::Event;
use loom_kernel::conformance::id;
use loom_kernel::{EventStoreExt, ExecutionStatus, MemoryStore};
use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, StepError, Verdict, flow_fn};
use serde_json::{Value, json};

/// Runs effect `x` once with the flow's input and returns its output, or `{"failed": code}`.
async fn call_x(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    match ctx.execute("x", &input).await {
        Ok(output) => Ok(output.to_value()),
        Err(StepError::Failed(error)) => Ok(json!({"failed": error.code})),
        Err(other) => Err(other.into()),
    }
}

struct Run {
    store: MemoryStore,
    runtime: Runtime<MemoryStore>,
}

impl Run {
    fn new(def: EffectDef) -> Self {
        let registry = EffectRegistry::new().with(def).unwrap();
        let store = MemoryStore::new();
        let runtime = Runtime::builder(store.clone())
            .flow(flow_fn("call_x", 1, call_x))
            .plugin(&registry)
            .build()
            .unwrap();
        Self { store, runtime }
    }

    /// Starts `call_x` granted `x` and returns how it stands once it stops moving.
    async fn go(
        &self,
        name: &str,
        input: Value,
        options: StartOptions,
    ) -> (ExecutionStatus, Value, Vec<Event>) {
        let e = options.execution_id.clone();
        self.runtime.start("call_x", &input, options).await.unwrap();
        let state = self.runtime.wait(&e).await.unwrap();
        let log: Vec<Event> = self
            .store
            .read_all(&e)
            .await
            .unwrap()
            .into_iter()
            .map(|envelope| envelope.event)
            .collect();
        let output = match log.last() {
            Some(Event::ExecutionCompleted(done)) => done.output.to_value(),
            _ => Value::Null,
        };
        let _ = name;
        (state.status(), output, log)
    }
}

fn granted(name: &str) -> StartOptions {
    StartOptions::new(id(name)).grant("x")
}

fn kinds(log: &[Event]) -> Vec<&'static str> {
    log.iter().map(Event::type_name).collect()
}

/// The log's `STEP_FAILED`.
fn step_failed(log: &[Event]) -> &loom_kernel::StepFailed {
    log.iter()
        .find_map(|e| match e {
            Event::StepFailed(f) => Some(f),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no STEP_FAILED in {log:?}"))
}

/// Why the step the log ends with is in doubt.
fn in_doubt_reason(log: &[Event]) -> &loom_kernel::ErrorInfo {
    match log.last() {
        Some(Event::EffectInDoubt(doubt)) => doubt.reason.as_ref().unwrap(),
        _ => panic!("{log:?}"),
    }
}

/// Effect `x`, whose attempts are counted: each runs `handler` with its number (from 1) and
/// the step's input. Returns the count and the definition.
fn counted<F, Fut, O>(handler: F) -> (Arc<AtomicU32>, EffectDef)
where
    F: Fn(u32, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, EffectError>> + Send + 'static,
    O: serde::Serialize + 'static,
{
    let attempts = Arc::new(AtomicU32::new(0));
    let counter = attempts.clone();
    let def = EffectDef::new("x", move |_: EffectContext, input: Value| {
        handler(counter.fetch_add(1, Ordering::SeqCst) + 1, input)
    });
    (attempts, def)
}

#[tokio::test(start_paused = true)]
async fn retryable_errors_are_retried_with_backoff_under_one_key() {
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = keys.clone();
    let def = EffectDef::new("x", move |ctx: EffectContext, _: Value| {
        seen.lock().unwrap().push((
            ctx.idempotency_key().to_owned(),
            ctx.attempt(),
            tokio::time::Instant::now(),
        ));
        let attempt = ctx.attempt();
        async move {
            if attempt < 3 {
                Err(EffectError::retryable("net.refused", "connection refused"))
            } else {
                Ok(json!({"charged": true}))
            }
        }
    })
    .retry(
        RetryPolicy::attempts(5)
            .with_backoff(Duration::from_millis(100), 2.0, Duration::from_secs(5))
            .with_jitter(0.0),
    );
    let run = Run::new(def);
    let (status, output, log) = run.go("retry", json!({}), granted("retry")).await;
    assert_eq!(status, ExecutionStatus::Completed);
    assert_eq!(output, json!({"charged": true}));
    let keys = keys.lock().unwrap();
    assert_eq!(keys.len(), 3);
    assert!(
        keys.iter().all(|(key, _, _)| key == "retry:x#1"),
        "{keys:?}"
    );
    assert_eq!(keys.iter().map(|k| k.1).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(keys[1].2 - keys[0].2, Duration::from_millis(100));
    assert_eq!(keys[2].2 - keys[1].2, Duration::from_millis(200));
    // Retries are not events: STEP_STARTED, then the outcome.
    assert_eq!(
        kinds(&log),
        [
            "EXECUTION_STARTED",
            "STEP_STARTED",
            "STEP_COMPLETED",
            "EXECUTION_COMPLETED"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_last_retryable_error_is_recorded_as_the_failure_and_nothing_is_charged() {
    let (attempts, def) = counted(|_, _| async {
        Err::<Value, _>(EffectError::retryable("net.refused", "connection refused"))
    });
    let run = Run::new(def.idempotent().cost(2).retry(RetryPolicy::attempts(4)));
    let (status, output, log) = run.go("exhausted", json!({}), granted("exhausted")).await;
    assert_eq!(status, ExecutionStatus::Completed);
    assert_eq!(output, json!({"failed": "net.refused"}));
    assert_eq!(attempts.load(Ordering::SeqCst), 4);
    assert_eq!(
        step_failed(&log).cost,
        0,
        "every attempt said it did not happen: K3 charges nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn terminal_errors_are_not_retried() {
    let (attempts, def) = counted(|_, _| async {
        Err::<Value, _>(EffectError::terminal("card.declined", "declined"))
    });
    let run = Run::new(def.retry(RetryPolicy::attempts(5)));
    let (_, output, _) = run.go("terminal", json!({}), granted("terminal")).await;
    assert_eq!(output, json!({"failed": "card.declined"}));
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_idempotent_attempt_is_cancelled_and_retried() {
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let seen = tokens.clone();
    let def = EffectDef::new("x", move |ctx: EffectContext, _: Value| {
        let mut tokens = seen.lock().unwrap();
        // By the time an attempt starts, the one before it has been cancelled.
        assert!(
            tokens
                .iter()
                .all(tokio_util::sync::CancellationToken::is_cancelled)
        );
        assert!(!ctx.is_cancelled());
        tokens.push(ctx.cancellation().clone());
        let n = tokens.len();
        async move {
            if n == 1 {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Ok(json!(n))
        }
    })
    .idempotent()
    .timeout(Duration::from_secs(5))
    .retry(RetryPolicy::attempts(3).with_jitter(0.0));
    let run = Run::new(def);
    let started = tokio::time::Instant::now();
    let (status, output, _) = run.go("timeout", json!({}), granted("timeout")).await;
    assert_eq!(status, ExecutionStatus::Completed);
    assert_eq!(output, json!(2));
    // 5 s of timeout, 100 ms of backoff.
    assert_eq!(started.elapsed(), Duration::from_millis(5_100));
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 2);
    assert!(
        tokens
            .iter()
            .all(tokio_util::sync::CancellationToken::is_cancelled),
        "once the dispatch is over, work it left behind is told to stop"
    );
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_non_idempotent_attempt_parks_in_doubt_and_is_not_retried() {
    let (attempts, def) = counted(|_, _| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(json!("late"))
    });
    let run = Run::new(
        def.timeout(Duration::from_secs(1))
            .retry(RetryPolicy::attempts(5)),
    );
    let (status, _, log) = run.go("doubt", json!({}), granted("doubt")).await;
    assert_eq!(status, ExecutionStatus::InDoubt);
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert_eq!(in_doubt_reason(&log).code, codes::TIMEOUT);
    let listed = steps_in_doubt(&run.store).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].step_id, "x#1");
    assert_eq!(listed[0].idempotency_key(), "doubt:x#1");
    assert_eq!(listed[0].reason.as_ref().unwrap().code, codes::TIMEOUT);
}

#[tokio::test(start_paused = true)]
async fn retryable_errors_of_a_non_idempotent_effect_are_retried_but_doubt_is_not() {
    let (attempts, def) = counted(|n, _| async move {
        match n {
            1 => Err(EffectError::retryable(
                "net.refused",
                "never reached the bank",
            )),
            _ => Err::<Value, _>(EffectError::in_doubt("net.reset", "reset after sending")),
        }
    });
    let run = Run::new(def.retry(RetryPolicy::attempts(5)));
    let (status, _, log) = run.go("mixed", json!({}), granted("mixed")).await;
    assert_eq!(status, ExecutionStatus::InDoubt);
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(in_doubt_reason(&log).code, "net.reset");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_fails_or_parks_and_the_runtime_survives() {
    for idempotent in [true, false] {
        let def = EffectDef::new("x", |_: EffectContext, _: Value| async {
            if true {
                panic!("bug in the handler");
            }
            Ok(json!(null))
        });
        let def = if idempotent { def.idempotent() } else { def };
        let run = Run::new(def);
        let name = format!("panic-{idempotent}");
        let (status, output, log) = run.go(&name, json!({}), granted(&name)).await;
        if idempotent {
            assert_eq!(status, ExecutionStatus::Completed);
            assert_eq!(output, json!({"failed": codes::PANICKED}));
        } else {
            assert_eq!(status, ExecutionStatus::InDoubt);
            let reason = in_doubt_reason(&log);
            assert_eq!(reason.code, codes::PANICKED);
            assert!(reason.message.contains("bug in the handler"));
        }
    }
}

#[tokio::test]
async fn an_ungranted_capability_fails_before_anything_runs() {
    let (attempts, def) = counted(|_, _| async { Ok(json!("ran")) });
    let run = Run::new(def.capability("payments.charge"));
    // Granted `x`, but the effect needs `payments.charge`.
    let (status, output, log) = run.go("denied", json!({}), granted("denied")).await;
    assert_eq!(status, ExecutionStatus::Completed);
    assert_eq!(output, json!({"failed": codes::CAPABILITY_DENIED}));
    assert_eq!(attempts.load(Ordering::SeqCst), 0);
    assert_eq!(
        kinds(&log),
        ["EXECUTION_STARTED", "STEP_FAILED", "EXECUTION_COMPLETED"]
    );
    let failed = step_failed(&log);
    assert!(
        failed.error.message.contains("payments.charge"),
        "{failed:?}"
    );

    let options = StartOptions::new(id("allowed")).grant("payments.charge");
    let (_, output, _) = run.go("allowed", json!({}), options).await;
    assert_eq!(output, json!("ran"));
}

async fn charge_three_times(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let mut codes = Vec::new();
    for n in 0..3 {
        match ctx.execute("x", &json!(n)).await {
            Ok(_) => codes.push(Value::from("ok")),
            Err(StepError::Failed(error)) => codes.push(Value::from(error.code)),
            Err(other) => return Err(other.into()),
        }
    }
    Ok(Value::Array(codes))
}

#[tokio::test]
async fn a_step_over_budget_fails_before_it_runs_and_the_fold_knows_the_spend() {
    let (attempts, def) = counted(|_, _| async { Ok(json!("ok")) });
    let registry = EffectRegistry::new()
        .with(def.idempotent().cost(4))
        .unwrap();
    let store = MemoryStore::new();
    let runtime = Runtime::builder(store.clone())
        .flow(flow_fn("three", 1, charge_three_times))
        .plugin(&registry)
        .build()
        .unwrap();
    let e = id("budget");
    runtime
        .start(
            "three",
            &json!(null),
            StartOptions::new(e.clone()).grant("x").budget(10),
        )
        .await
        .unwrap();
    let state = runtime.wait(&e).await.unwrap();
    assert_eq!(state.budget_spent(), 8);
    assert_eq!(state.budget(), Some(10));
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    let log = store.read_all(&e).await.unwrap();
    let Some(Event::ExecutionCompleted(done)) = log.last().map(|e| &e.event) else {
        panic!()
    };
    assert_eq!(
        done.output.to_value(),
        json!(["ok", "ok", codes::BUDGET_EXCEEDED])
    );
    // The refusal is recorded, so the fold agrees after a restart.
    assert_eq!(store.fold(&e).await.unwrap().budget_spent(), 8);
}

#[cfg(feature = "schemas")]
#[tokio::test]
async fn schemas_check_input_before_and_output_after() {
    let (attempts, def) =
        counted(|_, input: Value| async move { Ok(json!({"total": input["amount"]})) });
    let def = def
        .input_schema(json!({
            "type": "object",
            "properties": {"amount": {"type": "integer", "minimum": 1}},
            "required": ["amount"]
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {"total": {"type": "integer", "maximum": 100}},
            "required": ["total"]
        }));
    let run = Run::new(def);
    let (_, output, log) = run.go("good", json!({"amount": 5}), granted("good")).await;
    assert_eq!(output, json!({"total": 5}));
    assert!(kinds(&log).contains(&"STEP_STARTED"));

    let (_, output, log) = run
        .go("bad-in", json!({"amount": "five"}), granted("bad-in"))
        .await;
    assert_eq!(output, json!({"failed": codes::INVALID_INPUT}));
    assert!(
        !kinds(&log).contains(&"STEP_STARTED"),
        "refused before it started"
    );
    let message = &step_failed(&log).error.message;
    assert!(message.contains("/amount"), "{message}");

    let (_, output, _) = run
        .go("bad-out", json!({"amount": 500}), granted("bad-out"))
        .await;
    assert_eq!(output, json!({"failed": codes::INVALID_OUTPUT}));
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        2,
        "the bad input never ran"
    );
}

/// `EffectDef::admit`: the definition's own check refuses a step before it is recorded as
/// started (nothing runs, nothing is charged); a panic in it refuses the step too.
#[tokio::test]
async fn the_definition_s_own_admission_check_refuses_before_the_step_starts() {
    let (attempts, def) = counted(|_, input: Value| async move { Ok(input) });
    let def = def.cost(3).admit(|input| {
        let value = input.to_value();
        if value["panic"] == json!(true) {
            panic!("the check panics");
        }
        if value["sku"] == json!("gone") {
            return Err(loom_kernel::ErrorInfo::new(
                "shop.unknown_sku",
                "sku 'gone' is not sold",
            ));
        }
        Ok(())
    });
    let run = Run::new(def);
    let (_, output, log) = run.go("ok", json!({"sku": "kept"}), granted("ok")).await;
    assert_eq!(output, json!({"sku": "kept"}));
    assert!(kinds(&log).contains(&"STEP_STARTED"));

    let (_, output, log) = run
        .go("gone", json!({"sku": "gone"}), granted("gone"))
        .await;
    assert_eq!(output, json!({"failed": "shop.unknown_sku"}));
    assert!(
        !kinds(&log).contains(&"STEP_STARTED"),
        "refused before it started"
    );
    assert_eq!(step_failed(&log).cost, 0, "nothing ran, nothing is charged");

    let (_, output, log) = run
        .go("panics", json!({"panic": true}), granted("panics"))
        .await;
    assert_eq!(
        output,
        json!({"failed": loom_kernel::codes::ADMISSION_PANICKED})
    );
    assert!(!kinds(&log).contains(&"STEP_STARTED"));
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        1,
        "only the admitted step ran"
    );
}

#[tokio::test]
async fn an_input_of_the_wrong_type_is_a_failure_not_a_panic() {
    #[derive(serde::Deserialize)]
    struct Order {
        amount: u64,
    }
    let def = EffectDef::new("x", |_: EffectContext, order: Order| async move {
        Ok(order.amount)
    })
    .idempotent();
    let run = Run::new(def);
    let (_, output, _) = run
        .go("typed", json!({"amount": 3}), granted("typed"))
        .await;
    assert_eq!(output, json!(3));
    let (_, output, log) = run
        .go("mistyped", json!({"qty": 3}), granted("mistyped"))
        .await;
    assert_eq!(output, json!({"failed": codes::INVALID_INPUT}));
    assert_eq!(step_failed(&log).cost, 0, "nothing ran, nothing is charged");
}

#[test]
fn definitions_that_do_not_hold_together_are_refused() {
    let handler = |_: EffectContext, _: Value| async { Ok(json!(null)) };
    #[cfg(feature = "schemas")]
    {
        let err = EffectRegistry::new()
            .with(EffectDef::new("x", handler).input_schema(json!({"type": 12})))
            .unwrap_err();
        assert!(
            matches!(
                err,
                RegistryError::Definition(DefinitionError::InvalidSchema { which: "input", .. })
            ),
            "{err}"
        );
    }
    let err = EffectRegistry::new()
        .with(EffectDef::new("x", handler).retry(RetryPolicy::attempts(0)))
        .unwrap_err();
    assert!(err.to_string().contains("at least one attempt"), "{err}");
    let err = EffectRegistry::new()
        .with(EffectDef::new("x", handler))
        .unwrap()
        .with(EffectDef::new("x", handler))
        .unwrap_err();
    assert_eq!(err, RegistryError::DuplicateEffect("x".into()));
    let registry = EffectRegistry::new()
        .with(
            EffectDef::new("charge", handler)
                .cost(3)
                .capability("payments"),
        )
        .unwrap();
    let info: Vec<_> = registry.effects().collect();
    assert_eq!(
        (
            info[0].idempotent,
            info[0].capability.as_str(),
            info[0].cost
        ),
        (false, "payments", 3)
    );
}

/// Effect `x` (not idempotent, cost 3) reports every attempt in doubt; effect `y` costs 1 and
/// succeeds. The flow runs `x`, then `y`.
fn costly_in_doubt() -> (MemoryStore, Runtime<MemoryStore>) {
    let store = MemoryStore::new();
    (store.clone(), costly_in_doubt_on(store))
}

/// [`costly_in_doubt`]'s runtime on `store`.
fn costly_in_doubt_on(store: MemoryStore) -> Runtime<MemoryStore> {
    async fn x_then_y(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
        let x = ctx.execute("x", &input).await?.to_value();
        match ctx.execute("y", &input).await {
            Ok(y) => Ok(json!({"x": x, "y": y.to_value()})),
            Err(StepError::Failed(error)) => Ok(json!({"x": x, "y failed": error.code})),
            Err(other) => Err(other.into()),
        }
    }
    let registry = EffectRegistry::new()
        .with(
            EffectDef::new("x", |_: EffectContext, _: Value| async {
                Err::<Value, _>(EffectError::in_doubt("net.reset", "reset after sending"))
            })
            .cost(3),
        )
        .unwrap()
        .with(EffectDef::new("y", |_: EffectContext, _: Value| async { Ok(json!("y")) }).cost(1))
        .unwrap();
    Runtime::builder(store)
        .flow(flow_fn("x_then_y", 1, x_then_y))
        .plugin(&registry)
        .build()
        .unwrap()
}

/// Starts `x_then_y` as `name` on `runtime` (budget 3) and waits until it parks in doubt on `x`.
async fn parked_in_doubt(runtime: &Runtime<MemoryStore>, name: &str) -> loom_kernel::ExecutionId {
    let e = id(name);
    let options = StartOptions::new(e.clone()).grant("x").grant("y").budget(3);
    runtime
        .start("x_then_y", &json!({}), options)
        .await
        .unwrap();
    assert_eq!(
        runtime.wait(&e).await.unwrap().status(),
        ExecutionStatus::InDoubt
    );
    e
}

/// Resolves `x#1` of `e` with a `completed` verdict (`"sent"`) and waits for what follows.
async fn resolve_sent(
    runtime: &Runtime<MemoryStore>,
    e: &loom_kernel::ExecutionId,
) -> loom_kernel::ExecutionState {
    let verdict = Verdict::Completed {
        output: json!("sent").into(),
    };
    runtime.resolve(e, "x#1", verdict, None).await.unwrap();
    runtime.wait(e).await.unwrap()
}

/// Item 12: a `completed` verdict says the effect ran, so K3 charges the step its cost: in the
/// fold of the log, and in the live runtime, whose admission of the next step counts it.
#[tokio::test(start_paused = true)]
async fn a_completed_verdict_charges_the_step_s_cost() {
    let (store, runtime) = costly_in_doubt();
    let e = parked_in_doubt(&runtime, "verdict-completed").await;
    assert_eq!(
        store.fold(&e).await.unwrap().budget_spent(),
        0,
        "in doubt, not yet charged"
    );
    let state = resolve_sent(&runtime, &e).await;
    assert_eq!(state.status(), ExecutionStatus::Completed);
    // `y` (cost 1) no longer fits the budget of 3 once `x` is charged.
    assert_eq!(
        state.output().unwrap().to_value(),
        json!({"x": "sent", "y failed": "loom.budget_exceeded"})
    );
    assert_eq!(state.budget_spent(), 3);
    assert_eq!(store.fold(&e).await.unwrap().budget_spent(), 3);
}

/// Item 12: a `failed` verdict says the effect did not run (or failed): nothing is charged,
/// and the next step still fits the budget.
#[tokio::test(start_paused = true)]
async fn a_failed_verdict_charges_nothing() {
    let (store, runtime) = costly_in_doubt();
    let e = parked_in_doubt(&runtime, "verdict-failed").await;
    let error = loom_kernel::ErrorInfo::new("not.sent", "the provider has no record of it");
    runtime
        .resolve(&e, "x#1", Verdict::Failed { error }, None)
        .await
        .unwrap();
    let state = runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Failed);
    assert_eq!(state.budget_spent(), 0);
    assert_eq!(store.fold(&e).await.unwrap().budget_spent(), 0);
}

/// Item 12 across a restart: the step parked in doubt is replayed by a new runtime, which
/// charges a `completed` verdict the cost its `STEP_STARTED` recorded (LD-024).
#[tokio::test(start_paused = true)]
async fn a_completed_verdict_after_a_restart_charges_the_cost_recorded_at_start() {
    let (store, first) = costly_in_doubt();
    let e = parked_in_doubt(&first, "verdict-after-restart").await;
    first.shutdown().await;

    let second = costly_in_doubt_on(store.clone());
    second.recover().await.unwrap();
    let state = resolve_sent(&second, &e).await;
    assert_eq!(
        state.output().unwrap().to_value(),
        json!({"x": "sent", "y failed": "loom.budget_exceeded"})
    );
    assert_eq!(store.fold(&e).await.unwrap().budget_spent(), 3);
}
