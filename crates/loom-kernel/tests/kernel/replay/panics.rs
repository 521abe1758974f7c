//! Panics in user code (flow, effect, projection, authenticator, inbound handler) are
//! contained: recorded as a typed failure where the event model allows, never unwinding into
//! the runtime's caller or killing a driver silently.

use std::sync::Arc;

use loom_kernel::Event;
use loom_kernel::*;
use loom_kernel::{EventEnvelope, ExecutionStatus, MemoryStore};
use serde_json::{Value, json};

use crate::support;
use crate::support::{Calls, event_names, events_of, options, start_parked, with_echo};

async fn panics_after_a_step(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.execute("echo", &1).await?;
    panic!("boom after a step");
}

async fn panics_after_a_gate(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.suspend("Approval", "k").await?;
    panic!("boom after a gate");
}

async fn one_step(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.execute("echo", &1).await?.to_value())
}

async fn waits(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.suspend("Approval", "k").await?.to_value())
}

fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("after_step", 1, panics_after_a_step))
        .with(flow_fn("after_gate", 1, panics_after_a_gate))
        .with(flow_fn("one", 1, one_step))
        .with(flow_fn("waits", 1, waits))
}

/// Waits for `e` to end and asserts it failed, its log ending with the flow's panic.
async fn assert_flow_panicked(rt: &Runtime<MemoryStore>, e: &ExecutionId) {
    let state = rt.wait(e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Failed);
    match events_of(rt.store(), e).await.last() {
        Some(Event::ExecutionFailed(failed)) => assert_eq!(failed.error.code, "loom.flow_panicked"),
        other => panic!("the log ends with {other:?}"),
    }
}

#[tokio::test]
async fn a_flow_panic_never_unwinds_into_start_and_is_recorded() {
    let calls = Calls::default();
    let rt = with_echo(MemoryStore::new(), flows(), calls.clone());
    let e = rt
        .start("after_step", &json!(null), options("p", &["echo"]))
        .await
        .unwrap();
    assert_flow_panicked(&rt, &e).await;
    assert_eq!(calls.count(), 1);
}

#[tokio::test]
async fn a_flow_panic_after_a_gate_ends_the_execution_instead_of_failing_every_resume() {
    let rt = with_echo(MemoryStore::new(), flows(), Calls::default());
    let e = start_parked(&rt, "after_gate", options("g", &[])).await;
    rt.resume(&e, "Approval", "k", json!("yes").into())
        .await
        .unwrap();
    assert_flow_panicked(&rt, &e).await;
    let again = rt
        .resume(&e, "Approval", "k", json!("yes").into())
        .await
        .unwrap_err();
    assert!(
        matches!(again, ResumeError::NoPendingGate { .. }),
        "{again}"
    );
}

async fn run_with_effect(effect: impl Effect, idempotent_name: &str) -> Vec<&'static str> {
    let rt = Runtime::builder(MemoryStore::new())
        .flows(&flows())
        .effect("echo", effect)
        .build()
        .unwrap();
    let e = rt
        .start("one", &json!(null), options(idempotent_name, &["echo"]))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    event_names(rt.store(), &e).await
}

#[tokio::test]
async fn a_panicking_idempotent_effect_fails_its_step() {
    let names = run_with_effect(
        FnEffect::new(true, |_: EffectCall| -> std::future::Ready<EffectOutcome> {
            panic!("effect boom")
        }),
        "i",
    )
    .await;
    assert!(names.contains(&"STEP_FAILED"), "{names:?}");
    assert_eq!(names.last(), Some(&"EXECUTION_FAILED"));
}

#[tokio::test]
async fn a_panicking_non_idempotent_effect_is_in_doubt() {
    let names = run_with_effect(
        FnEffect::new(false, |_: EffectCall| async {
            panic!("effect boom in its future")
        }),
        "n",
    )
    .await;
    assert_eq!(
        names,
        ["EXECUTION_STARTED", "STEP_STARTED", "EFFECT_INDOUBT"],
    );
}

struct PanickingAdmission;

impl Effect for PanickingAdmission {
    fn idempotent(&self) -> bool {
        true
    }
    fn admit(&self, _: &EffectCall) -> Result<(), loom_kernel::ErrorInfo> {
        panic!("admission boom")
    }
    fn invoke(&self, _: EffectCall) -> futures::future::BoxFuture<'static, EffectOutcome> {
        Box::pin(async { EffectOutcome::ok(json!(1).into()) })
    }
}

#[tokio::test]
async fn a_panicking_admission_refuses_the_step() {
    let names = run_with_effect(PanickingAdmission, "a").await;
    assert_eq!(
        names,
        ["EXECUTION_STARTED", "STEP_FAILED", "EXECUTION_FAILED"]
    );
}

/// An effect whose `max_cost` or `idempotent` panics (issue 41, hole 11).
struct PanickingDeclaration {
    in_max_cost: bool,
}

impl Effect for PanickingDeclaration {
    fn idempotent(&self) -> bool {
        if !self.in_max_cost {
            panic!("idempotent boom")
        }
        true
    }
    fn max_cost(&self) -> u64 {
        if self.in_max_cost {
            panic!("max_cost boom")
        }
        1
    }
    fn invoke(&self, _: EffectCall) -> futures::future::BoxFuture<'static, EffectOutcome> {
        Box::pin(async { EffectOutcome::ok(json!(1).into()) })
    }
}

/// A panic in what an effect declares of itself is contained as one in `admit` is: the step is
/// refused, its failure recorded, the flow ends, and the runtime goes on.
#[tokio::test]
async fn a_panic_in_max_cost_or_idempotent_refuses_the_step_as_one_in_admit_does() {
    for in_max_cost in [true, false] {
        let names = run_with_effect(PanickingDeclaration { in_max_cost }, "d").await;
        assert_eq!(
            names,
            ["EXECUTION_STARTED", "STEP_FAILED", "EXECUTION_FAILED"],
            "panic in max_cost: {in_max_cost}"
        );
    }
}

struct PanickingProjection;

impl Projection for PanickingProjection {
    fn apply(&self, _: &EventEnvelope) {
        panic!("projection boom")
    }
}

#[tokio::test]
async fn a_panicking_projection_does_not_stop_the_execution() {
    let rt = Runtime::builder(MemoryStore::new())
        .flows(&flows())
        .effect("echo", support::echo(Calls::default()))
        .projection(PanickingProjection)
        .build()
        .unwrap();
    let e = rt
        .start("one", &json!(null), options("pr", &["echo"]))
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
}

struct PanickingAuthenticator;

impl ResumeAuthenticator for PanickingAuthenticator {
    fn authorize(&self, _: &ResumeRequest<'_>) -> Result<(), String> {
        panic!("authenticator boom")
    }
}

#[tokio::test]
async fn a_panicking_authenticator_refuses_the_resume() {
    let rt = Runtime::builder(MemoryStore::new())
        .flows(&flows())
        .resume_authenticator(PanickingAuthenticator)
        .build()
        .unwrap();
    let e = rt
        .start("waits", &json!(null), options("au", &[]))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    let err = rt
        .resume(&e, "Approval", "k", json!(1).into())
        .await
        .unwrap_err();
    assert!(matches!(err, ResumeError::Unauthorized { .. }), "{err}");
    assert!(err.to_string().contains("panicked"), "{err}");
}

struct PanickingInbound;

impl InboundHandler for PanickingInbound {
    fn handle(&self, _: &Value) -> Result<Inbound, String> {
        panic!("inbound boom")
    }
}

struct InboundPlugin;

impl Plugin for InboundPlugin {
    fn name(&self) -> &str {
        "inbound"
    }
    fn kernel_abi(&self) -> AbiRange {
        AbiRange::caret(1, 0)
    }
    fn contribute(&self, contributions: &mut Contributions) {
        contributions.inbound("ui", Arc::new(PanickingInbound));
    }
}

#[tokio::test]
async fn a_panicking_inbound_handler_refuses_the_message() {
    let rt = Runtime::builder(MemoryStore::new())
        .flows(&flows())
        .plugin(&InboundPlugin)
        .build()
        .unwrap();
    let err = rt.inbound("ui", &json!({})).await.unwrap_err();
    assert!(err.to_string().contains("panicked"), "{err}");
}

/// Issue 41, hole 3: a panic inside a `decide` closure that the flow catches gives its decision
/// id back: the next decision of that kind is recorded as `d#1`, as replay will take it, and
/// the execution replays after a restart instead of stopping on a non-determinism.
#[tokio::test]
async fn a_caught_panic_in_a_decision_gives_its_id_back_and_the_execution_replays() {
    async fn decides(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
        let quiet = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ctx.decide("d", || -> u64 { panic!("decision boom") })
        }));
        let first = match quiet {
            Ok(value) => value?,
            Err(_) => ctx.decide("d", || 7u64)?,
        };
        let answer = ctx.suspend("Approval", "k").await?;
        Ok(json!({"first": first, "answer": answer.to_value()}))
    }
    let store = MemoryStore::new();
    let build = |store: MemoryStore| {
        Runtime::builder(store)
            .flow(flow_fn("decides", 1, decides))
            .build()
            .unwrap()
    };
    let rt = build(store.clone());
    let e = start_parked(&rt, "decides", StartOptions::new(support::id("decides-1"))).await;
    let decisions: Vec<String> = events_of(rt.store(), &e)
        .await
        .into_iter()
        .filter_map(|event| match event {
            Event::DecisionRecorded(d) if d.kind == "d" => Some(d.step_id),
            _ => None,
        })
        .collect();
    assert_eq!(decisions, ["d#1"]);
    rt.shutdown().await;

    // A new runtime replays the log to the gate, then the flow goes on.
    let rt = build(store);
    rt.recover().await.unwrap();
    rt.resume(&e, "Approval", "k", Payload::from(json!("yes")))
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed, "{state:?}");
    assert_eq!(
        state.output().map(Payload::to_value),
        Some(json!({"first": 7, "answer": "yes"}))
    );
}
