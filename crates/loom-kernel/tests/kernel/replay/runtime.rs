//! The runtime: flows run live, replay after crashes, refusals, effects in doubt, budgets (gates: `gates.rs`; plugins: `plugins.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::divergence::assert_resume_diverges;
use crate::support::{charge_then_mail, start_parked};
use loom_kernel::conformance::id;
use loom_kernel::kit::input_digest;
use loom_kernel::*;
use loom_kernel::{
    ErrorInfo, EventStore, EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore, Payload,
};
use loom_kernel::{Event, Verdict};
use serde_json::{Value, json};

fn echo_effect(counter: Arc<AtomicUsize>) -> impl Effect {
    FnEffect::new(true, move |call: EffectCall| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            EffectOutcome::ok(
                json!({"echo": call.input.to_value(), "key": call.idempotency_key()}).into(),
            )
            .with_cost(1)
        }
    })
}

/// Two steps, a decision, a surface patch, a gate, then the output.
async fn checkout(ctx: FlowCtx, order: Value) -> Result<Value, FlowError> {
    let charged = ctx
        .execute_as(StepName::Counted("charge".into()), "echo", &order)
        .await?;
    let pick: u64 = ctx.decide("pick", || 7)?;
    ctx.emit_surface_patch(
        "main",
        json!([{"op": "set", "path": "status", "value": "charged"}]).into(),
    )?;
    let approval = ctx.suspend("Approval", "approve").await?;
    let mailed = ctx.execute("echo", &json!({"mail": pick})).await?;
    Ok(
        json!({"charged": charged.to_value(), "approval": approval.to_value(), "mailed": mailed.to_value()}),
    )
}

fn runtime(store: MemoryStore, counter: Arc<AtomicUsize>) -> Runtime<MemoryStore> {
    Runtime::builder(store)
        .flow(flow_fn("checkout", 1, checkout))
        .effect("echo", echo_effect(counter))
        .build()
        .unwrap()
}

/// Start options granting every effect these tests register (K2 holds for raw effects too).
fn granted(execution: ExecutionId) -> StartOptions {
    ["echo", "payments.charge", "email.send", "pay", "gated"]
        .into_iter()
        .fold(StartOptions::new(execution), StartOptions::grant)
}

/// A log's events but its STEP_STARTED.
fn without_starts(log: &[loom_kernel::EventEnvelope]) -> Vec<Event> {
    events(log)
        .into_iter()
        .filter(|event| !matches!(event, Event::StepStarted(_)))
        .collect()
}

fn events(log: &[loom_kernel::EventEnvelope]) -> Vec<Event> {
    log.iter().map(|e| e.event.clone()).collect()
}

/// Runs checkout to its end, resuming its gate when it parks.
async fn run_to_end(rt: &Runtime<MemoryStore>, e: &ExecutionId) -> loom_kernel::ExecutionState {
    loop {
        let state = rt.wait(e).await.unwrap();
        match state.status() {
            ExecutionStatus::Suspended => rt
                .resume(e, "Approval", "approve", json!("yes").into())
                .await
                .unwrap(),
            _ => return state,
        }
    }
}

#[tokio::test]
async fn a_flow_runs_live_to_completion() {
    let counter = Arc::new(AtomicUsize::new(0));
    let rt = runtime(MemoryStore::new(), counter.clone());
    let e = rt
        .start("checkout", &json!({"sku": "A1"}), granted(id("order-1")))
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Suspended);
    rt.resume(&e, "Approval", "approve", json!("yes").into())
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(state.budget_spent(), 2);
    assert_eq!(counter.load(Ordering::SeqCst), 2);
    let log = rt.store().read_all(&e).await.unwrap();
    let names: Vec<_> = log.iter().map(|x| x.event.type_name()).collect();
    assert_eq!(
        names,
        [
            "EXECUTION_STARTED",
            // The store claimed the new execution's id, so its idempotent first step ran
            // before the start was written and is recorded by its outcome alone.
            "STEP_COMPLETED",
            "DECISION_RECORDED",
            "SURFACE_PATCH",
            "EXECUTION_SUSPENDED",
            "EXECUTION_RESUMED",
            // A step that finished before its STEP_STARTED was written is recorded by its
            // outcome alone, in the STEP_STARTED's place.
            "STEP_COMPLETED",
            "EXECUTION_COMPLETED"
        ]
    );
    let Event::ExecutionCompleted(done) = &log[7].event else {
        panic!()
    };
    assert_eq!(
        done.output.to_value()["charged"]["key"],
        json!("order-1:charge#1"),
        "the idempotency key is executionId:stepId"
    );
    assert_eq!(done.output.to_value()["approval"], json!("yes"));
}

/// Drop the runtime after any prefix of the log, recover on the same store: the final log is
/// the uninterrupted run's, but for where a step is recorded by its `STEP_STARTED` and its
/// outcome rather than its outcome alone.
#[tokio::test]
async fn a_crash_at_every_point_recovers_to_the_same_log() {
    let reference = {
        let rt = runtime(MemoryStore::new(), Arc::default());
        let e = rt
            .start("checkout", &json!({"sku": "A1"}), granted(id("order")))
            .await
            .unwrap();
        run_to_end(&rt, &e).await;
        rt.store().read_all(&e).await.unwrap()
    };
    for cut in 1..reference.len() {
        let store = MemoryStore::new();
        let e = id("order");
        store
            .append(&e, 0, &events(&reference[..cut]))
            .await
            .unwrap();
        let rt = runtime(store, Arc::default());
        rt.recover().await.unwrap();
        let state = run_to_end(&rt, &e).await;
        assert_eq!(state.status(), ExecutionStatus::Completed, "cut at {cut}");
        let recovered = rt.store().read_all(&e).await.unwrap();
        assert_eq!(
            without_starts(&recovered),
            without_starts(&reference),
            "cut at {cut}"
        );
    }
}

#[tokio::test]
async fn replay_runs_no_effect() {
    let counter = Arc::new(AtomicUsize::new(0));
    let store = MemoryStore::new();
    let rt = runtime(store.clone(), counter.clone());
    let e = rt
        .start("checkout", &json!({}), granted(id("o")))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    assert_eq!(counter.load(Ordering::SeqCst), 1);
    drop(rt);
    // A new runtime replays charge#1 from the log and runs only the step after the gate.
    let rt = runtime(store, counter.clone());
    rt.resume(&e, "Approval", "approve", json!(1).into())
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    assert_eq!(counter.load(Ordering::SeqCst), 2);
}

async fn mail_first(ctx: FlowCtx, _: Value) -> Result<(), FlowError> {
    ctx.execute_as(StepName::Counted("email".into()), "email.send", &1)
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_changed_flow_is_reported_at_the_right_seq() {
    let store = MemoryStore::new();
    let ok = |_: EffectCall| async { EffectOutcome::ok(Payload::null()) };
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("f", 1, charge_then_mail))
        .effect("payments.charge", FnEffect::new(true, ok))
        .build()
        .unwrap();
    let e = start_parked(&rt, "f", granted(id("nd"))).await;
    drop(rt);

    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("f", 1, mail_first))
        .effect("email.send", FnEffect::new(true, ok))
        .build()
        .unwrap();
    assert_resume_diverges(
        &rt,
        &e,
        1,
        "at seq 1: recorded STEP_COMPLETED step 'charge#1' (effect payments.charge); the flow now calls effect 'email.send' as step 'email#1'",
    )
    .await;
}

async fn duplicate_ids(ctx: FlowCtx, _: Value) -> Result<String, FlowError> {
    ctx.execute_as(StepName::Explicit("once".into()), "echo", &1)
        .await?;
    match ctx
        .execute_as(StepName::Explicit("once".into()), "echo", &2)
        .await
    {
        Err(StepError::DuplicateStepId(id)) => Ok(id),
        other => Err(FlowError::new("test", format!("{other:?}"))),
    }
}

#[tokio::test]
async fn a_duplicate_explicit_step_id_is_an_error() {
    let rt = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("dup", 1, duplicate_ids))
        .effect("echo", echo_effect(Arc::default()))
        .build()
        .unwrap();
    let e = rt
        .start("dup", &json!(null), granted(id("dup")))
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(
        rt.store().read_all(&e).await.unwrap().last().unwrap().event,
        Event::ExecutionCompleted(loom_kernel::ExecutionCompleted {
            output: json!("once").into()
        })
    );
}

async fn pay(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let receipt = ctx.execute("pay", &json!({"amount": 5})).await?;
    Ok(receipt.to_value())
}

#[tokio::test]
async fn a_non_idempotent_step_in_flight_parks_in_doubt_until_a_verdict() {
    let store = MemoryStore::new();
    let e = id("doubt");
    // A worker died after STEP_STARTED of a non-idempotent effect became durable.
    store
        .append(
            &e,
            0,
            &[
                loom_kernel::conformance::started("pay"),
                Event::StepStarted(loom_kernel::StepStarted {
                    step_id: "pay#1".into(),
                    effect: "pay".into(),
                    input_digest: input_digest(&json!({"amount": 5}).into()),
                    attempt: 1,
                    max_cost: 0,
                }),
            ],
        )
        .await
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("pay", 1, pay))
        .effect(
            "pay",
            FnEffect::new(false, move |_| {
                counter.fetch_add(1, Ordering::SeqCst);
                async { EffectOutcome::ok(json!("ran").into()) }
            }),
        )
        .build()
        .unwrap();
    assert_eq!(rt.recover().await.unwrap(), 1);
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::InDoubt);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "never re-run without a verdict"
    );
    let err = rt
        .resolve(&e, "other#1", Verdict::Retry, None)
        .await
        .unwrap_err();
    assert!(matches!(err, ResolveError::NotInDoubt { .. }));
    rt.resolve(
        &e,
        "pay#1",
        Verdict::Completed {
            output: json!("settled by ops").into(),
        },
        Some("ops@example.com".into()),
    )
    .await
    .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn unknown_flows_and_duplicate_starts_are_refused() {
    let rt = runtime(MemoryStore::new(), Arc::default());
    assert!(matches!(
        rt.start("nope", &1, granted(id("x"))).await,
        Err(StartError::UnknownFlow(_))
    ));
    rt.start("checkout", &1, granted(id("x"))).await.unwrap();
    // A start of an existing execution returns it when it is the same start, and is refused
    // otherwise (see tests/kernel/replay/start.rs).
    assert_eq!(
        rt.start("checkout", &1, granted(id("x"))).await.unwrap(),
        id("x")
    );
    assert!(matches!(
        rt.start("checkout", &2, granted(id("x"))).await,
        Err(StartError::Conflict { .. })
    ));
    let _ = BTreeMap::<u8, u8>::new();
    let _ = ErrorInfo::new("a", "b");
}

async fn ids_collide(ctx: FlowCtx, _: Value) -> Result<Vec<String>, FlowError> {
    let mut refused = Vec::new();
    ctx.execute("echo", &1).await?; // echo#1
    if let Err(StepError::DuplicateStepId(id)) = ctx
        .execute_as(StepName::Explicit("echo#1".into()), "echo", &2)
        .await
    {
        refused.push(id);
    }
    ctx.execute_as(StepName::Explicit("echo#2".into()), "echo", &3)
        .await?;
    if let Err(StepError::DuplicateStepId(id)) = ctx.execute("echo", &4).await {
        refused.push(id); // the counted echo#2 collides with the explicit one
    }
    Ok(refused)
}

#[tokio::test]
async fn explicit_and_counted_ids_never_collide() {
    let rt = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("ids", 1, ids_collide))
        .effect("echo", echo_effect(Arc::default()))
        .build()
        .unwrap();
    let e = rt
        .start("ids", &json!(null), granted(id("ids")))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    let log = rt.store().read_all(&e).await.unwrap();
    let Some(Event::ExecutionCompleted(done)) = log.last().map(|x| &x.event) else {
        panic!("not completed")
    };
    assert_eq!(done.output.to_value(), json!(["echo#1", "echo#2"]));
}

async fn decisions(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let now = ctx.now()?;
    let random = ctx.random()?;
    let uuid = ctx.uuid()?;
    let picked: String = ctx.decide("model", || "small".to_string())?;
    ctx.suspend("Go", "go").await?;
    Ok(json!([now, random, uuid, picked]))
}

#[tokio::test]
async fn decisions_are_recorded_once_and_replayed() {
    let store = MemoryStore::new();
    let build = || {
        Runtime::builder(store.clone())
            .flow(flow_fn("decide", 1, decisions))
            .build()
            .unwrap()
    };
    let rt = build();
    let e = rt
        .start("decide", &json!(null), granted(id("d")))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    let recorded: Vec<Value> = store
        .read_all(&e)
        .await
        .unwrap()
        .iter()
        .filter_map(|x| match &x.event {
            Event::DecisionRecorded(d) => Some(d.value.to_value()),
            _ => None,
        })
        .collect();
    assert_eq!(recorded.len(), 4);
    let uuid = recorded[2].as_str().unwrap();
    assert_eq!(uuid.len(), 36);
    assert_eq!(&uuid[14..15], "4", "a version 4 uuid");
    drop(rt);
    // Another runtime replays the decisions: the flow sees the recorded values.
    let rt = build();
    rt.resume(&e, "Go", "go", Payload::null()).await.unwrap();
    rt.wait(&e).await.unwrap();
    let log = store.read_all(&e).await.unwrap();
    let Some(Event::ExecutionCompleted(done)) = log.last().map(|x| &x.event) else {
        panic!("not completed")
    };
    assert_eq!(done.output.to_value(), Value::Array(recorded));
    let decisions = log
        .iter()
        .filter(|x| matches!(x.event, Event::DecisionRecorded(_)))
        .count();
    assert_eq!(decisions, 4, "replay records nothing again");
}

/// A decision whose closure calls the context: the nested calls are refused (they would be
/// missing on replay, where the closure does not run), and nothing waits on a lock.
async fn nested_decisions(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let inner = ctx.decide("outer", || {
        let now = ctx.now().map_err(|e| e.to_string());
        let patched = ctx.patched("change").map_err(|e| e.to_string());
        // A plain read of the execution is not a command: allowed.
        let id = ctx.execution_id().to_string();
        (now.err(), patched.err(), id)
    })?;
    // After the decision the context works as before.
    let after = ctx.now()?;
    ctx.suspend("Go", "go").await?;
    Ok(json!([inner, after > 0]))
}

#[tokio::test]
async fn a_decision_s_closure_that_calls_the_context_is_refused_not_deadlocked() {
    let store = MemoryStore::new();
    let build = || {
        Runtime::builder(store.clone())
            .flow(flow_fn("nested", 1, nested_decisions))
            .build()
            .unwrap()
    };
    let rt = build();
    let e = rt
        .start("nested", &json!(null), granted(id("nested")))
        .await
        .unwrap();
    let parked = tokio::time::timeout(std::time::Duration::from_secs(10), rt.wait(&e))
        .await
        .expect("the flow reaches its gate: nothing deadlocks");
    assert_eq!(parked.unwrap().status(), ExecutionStatus::Suspended);
    let kinds: Vec<String> = store
        .read_all(&e)
        .await
        .unwrap()
        .iter()
        .filter_map(|x| match &x.event {
            Event::DecisionRecorded(d) => Some(d.step_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        ["outer#1", "now#1"],
        "the nested calls recorded nothing"
    );
    drop(rt);
    // Replayed by another runtime: the closure does not run, the log matches.
    let rt = build();
    rt.resume(&e, "Go", "go", Payload::null()).await.unwrap();
    let done = rt.wait(&e).await.unwrap();
    assert_eq!(done.status(), ExecutionStatus::Completed);
    let log = store.read_all(&e).await.unwrap();
    let Some(Event::ExecutionCompleted(done)) = log.last().map(|x| &x.event) else {
        panic!("not completed")
    };
    let inner = &done.output.to_value()[0];
    let refusal = inner[0].as_str().expect("now was refused");
    assert!(
        refusal.contains("inside the closure of decision 'outer#1'"),
        "{refusal}"
    );
    assert!(
        inner[1]
            .as_str()
            .expect("patched was refused")
            .contains("outer#1")
    );
    assert_eq!(inner[2], json!("nested"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_idempotent_effect_starts_only_once_its_step_started_is_durable() {
    let store = MemoryStore::new();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let effect = {
        let (store, seen) = (store.clone(), seen.clone());
        FnEffect::new(false, move |call: EffectCall| {
            let (store, seen) = (store.clone(), seen.clone());
            async move {
                let log = store.read_all(&call.execution_id).await.unwrap();
                let durable = log.iter().any(
                    |x| matches!(&x.event, Event::StepStarted(s) if s.step_id == call.step_id),
                );
                seen.lock().unwrap().push((call.step_id.clone(), durable));
                EffectOutcome::ok(Payload::null())
            }
        })
    };
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("pay", 1, pay))
        .effect("pay", effect)
        .build()
        .unwrap();
    let e = rt
        .start("pay", &json!(null), granted(id("barrier")))
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    assert_eq!(*seen.lock().unwrap(), [("pay#1".to_string(), true)]);
    let names: Vec<_> = store
        .read_all(&e)
        .await
        .unwrap()
        .iter()
        .map(|x| x.event.type_name())
        .collect();
    assert_eq!(
        names,
        [
            "EXECUTION_STARTED",
            "STEP_STARTED",
            "STEP_COMPLETED",
            "EXECUTION_COMPLETED"
        ]
    );
}

/// An effect whose admission, cost hold and outcome the test sets.
struct Gated {
    idempotent: bool,
    max_cost: u64,
    refuse: Option<ErrorInfo>,
    outcome: EffectOutcome,
    seen_budget: Arc<std::sync::Mutex<Vec<Option<u64>>>>,
    runs: Arc<AtomicUsize>,
}

impl Gated {
    fn new(outcome: EffectOutcome) -> Self {
        Self {
            idempotent: true,
            max_cost: 0,
            refuse: None,
            outcome,
            seen_budget: Arc::default(),
            runs: Arc::default(),
        }
    }
}

impl Effect for Gated {
    fn idempotent(&self) -> bool {
        self.idempotent
    }
    fn admit(&self, call: &EffectCall) -> Result<(), ErrorInfo> {
        self.seen_budget.lock().unwrap().push(call.budget_remaining);
        self.refuse.clone().map_or(Ok(()), Err)
    }
    fn max_cost(&self) -> u64 {
        self.max_cost
    }
    fn invoke(&self, _: EffectCall) -> futures::future::BoxFuture<'static, EffectOutcome> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let outcome = self.outcome.clone();
        Box::pin(async move { outcome })
    }
}

async fn one_step(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    match ctx.execute("gated", &json!({})).await {
        Ok(output) => Ok(output.to_value()),
        Err(StepError::Failed(error)) => Ok(json!({"failed": error.code})),
        Err(other) => Err(other.into()),
    }
}

/// Runs `one_step` with `gated` as execution `name` until it stops moving.
async fn run_one_step(
    gated: Gated,
    name: &str,
) -> (
    MemoryStore,
    Runtime<MemoryStore>,
    ExecutionId,
    loom_kernel::ExecutionState,
) {
    let store = MemoryStore::new();
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("one", 1, one_step))
        .effect("gated", gated)
        .build()
        .unwrap();
    let e = id(name);
    rt.start("one", &json!(null), granted(e.clone()))
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    (store, rt, e, state)
}

#[tokio::test]
async fn a_refused_admission_is_recorded_and_the_effect_never_runs() {
    let mut gated = Gated::new(EffectOutcome::ok(json!("ran").into()));
    gated.refuse = Some(ErrorInfo::new("loom.capability_denied", "not granted"));
    let runs = gated.runs.clone();
    let (store, rt, e, state) = run_one_step(gated, "refused").await;
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let log = events(&store.read_all(&e).await.unwrap());
    assert!(
        matches!(&log[1], Event::StepFailed(f) if f.error.code == "loom.capability_denied" && f.cost == 0)
    );
    assert!(!log.iter().any(|e| matches!(e, Event::StepStarted(_))));
    // Replay serves the refusal: nothing is admitted again.
    let report = rt.replay_log(store.read_all(&e).await.unwrap()).unwrap();
    assert!(report.returned);
}

#[tokio::test]
async fn an_outcome_in_doubt_parks_the_step_for_a_verdict() {
    let mut gated = Gated::new(EffectOutcome::in_doubt(ErrorInfo::new(
        "loom.timeout",
        "attempt 1 timed out",
    )));
    gated.idempotent = false;
    let runs = gated.runs.clone();
    let (store, rt, e, state) = run_one_step(gated, "live-doubt").await;
    assert_eq!(state.status(), ExecutionStatus::InDoubt);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let log = events(&store.read_all(&e).await.unwrap());
    let Some(Event::EffectInDoubt(doubt)) = log.last() else {
        panic!("{log:?}")
    };
    assert_eq!(doubt.reason.as_ref().unwrap().code, "loom.timeout");
    rt.resolve(
        &e,
        "gated#1",
        Verdict::Failed {
            error: ErrorInfo::new("ops.not_charged", "the bank has no such charge"),
        },
        Some("ops".into()),
    )
    .await
    .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "a failed verdict runs nothing"
    );
    let log = store.read_all(&e).await.unwrap();
    let Some(Event::ExecutionCompleted(done)) = log.last().map(|e| &e.event) else {
        panic!()
    };
    assert_eq!(done.output.to_value(), json!({"failed": "ops.not_charged"}));
    assert!(rt.replay_log(log).unwrap().returned);
}

async fn two_at_once(ctx: FlowCtx, _: Value) -> Result<(), FlowError> {
    let (a, b) = futures::join!(
        ctx.execute("gated", &json!(1)),
        ctx.execute("gated", &json!(2))
    );
    a?;
    b?;
    Ok(())
}

#[tokio::test]
async fn running_steps_hold_their_max_cost_against_the_budget() {
    let mut gated = Gated::new(EffectOutcome::ok(json!("ok").into()).with_cost(3));
    gated.max_cost = 6;
    let seen = gated.seen_budget.clone();
    let store = MemoryStore::new();
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("two", 1, two_at_once))
        .effect("gated", gated)
        .build()
        .unwrap();
    let e = id("budget");
    rt.start("two", &json!(null), granted(e.clone()).budget(12))
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(state.budget_spent(), 6, "two outcomes of cost 3");
    // The second step was admitted while the first held its max cost of 6 (with a budget of
    // 10, the kernel would refuse it: 6 does not fit in the 4 left).
    assert_eq!(*seen.lock().unwrap(), vec![Some(12), Some(6)]);
}

async fn panics_in_a_decision(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let _: u64 = ctx.decide("boom", || panic!("the decision's closure panics"))?;
    Ok(json!("unreachable"))
}

/// A panic in a decision's closure (which runs outside the state's lock) fails the execution
/// as a panicking flow does, records no decision, and leaves nothing waiting on a lock.
#[tokio::test]
async fn a_panic_in_a_decision_s_closure_fails_the_execution_and_records_no_decision() {
    let store = MemoryStore::new();
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("boom", 1, panics_in_a_decision))
        .build()
        .unwrap();
    let e = rt
        .start("boom", &json!(null), granted(id("boom")))
        .await
        .unwrap();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), rt.wait(&e))
        .await
        .expect("nothing waits on a lock");
    assert_eq!(ended.unwrap().status(), ExecutionStatus::Failed);
    let log = store.read_all(&e).await.unwrap();
    assert!(
        !log.iter()
            .any(|x| matches!(x.event, Event::DecisionRecorded(_))),
        "{log:?}"
    );
    let Some(Event::ExecutionFailed(failed)) = log.last().map(|x| &x.event) else {
        panic!("not failed: {log:?}")
    };
    assert_eq!(failed.error.code, codes::FLOW_PANICKED);
}
