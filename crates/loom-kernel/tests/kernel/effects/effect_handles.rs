//! Typed effect handles (LD-023): declared once with their types, used as
//! `ctx.execute(&HANDLE, &input)`, recording exactly what a name records; a declared effect that
//! nothing registered refuses the composition.

use loom_kernel::*;
use loom_kernel::{ExecutionStatus, MemoryStore};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::*;

#[derive(Debug, Deserialize)]
struct Echoed {
    echo: Value,
    key: String,
}

const ECHO: EffectHandle<Value, Echoed> = EffectHandle::new("echo");
/// The same effect, with an output type its output is not.
const ECHO_AS_NUMBER: EffectHandle<Value, u64> = EffectHandle::new("echo");
const CHARGE: EffectHandle<Value, Value> = EffectHandle::new("payments.charge");

async fn by_handle(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let echoed: Echoed = ctx.execute(&ECHO, &input).await?;
    Ok(json!({"echo": echoed.echo, "key": echoed.key}))
}

async fn by_name(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let name = String::from("echo");
    let output = ctx.execute(&name, &input).await?;
    Ok(output.to_value())
}

async fn wrong_type(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    match ctx.execute(&ECHO_AS_NUMBER, &input).await {
        Err(StepError::Decode { step_id, .. }) => Ok(json!({"decode": step_id})),
        other => Err(FlowError::new("test", format!("unexpected: {other:?}"))),
    }
}

fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("by-handle", 1, by_handle).uses(&[&ECHO]))
        .with(flow_fn("by-name", 1, by_name))
        .with(flow_fn("wrong-type", 1, wrong_type))
}

#[tokio::test]
async fn a_handle_returns_the_output_decoded_to_its_type() {
    let calls = Calls::default();
    let loom = with_echo(MemoryStore::new(), flows(), calls.clone());
    loom.start("by-handle", &json!({"n": 1}), options("h-1", &["echo"]))
        .await
        .unwrap();
    let state = loom.wait(&id("h-1")).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(
        state.output().unwrap().to_value(),
        json!({"echo": {"n": 1}, "key": "h-1:echo#1"})
    );
    assert_eq!(calls.count(), 1);
}

#[tokio::test]
async fn a_handle_records_exactly_what_a_name_records() {
    let loom = with_echo(MemoryStore::new(), flows(), Calls::default());
    for (flow, execution) in [("by-handle", "same-1"), ("by-name", "same-2")] {
        loom.start(flow, &json!({"n": 2}), options(execution, &["echo"]))
            .await
            .unwrap();
        loom.wait(&id(execution)).await.unwrap();
    }
    let handle = events_of(loom.store(), &id("same-1")).await;
    let name = events_of(loom.store(), &id("same-2")).await;
    // Everything but the flow's name in EXECUTION_STARTED and the key in the output.
    assert_eq!(handle.len(), name.len());
    for (a, b) in handle.iter().zip(&name).skip(1) {
        assert_eq!(a.type_name(), b.type_name());
    }
    let started = |events: &[loom_kernel::Event]| {
        events.iter().find_map(|event| match event {
            loom_kernel::Event::StepStarted(started) => {
                Some((started.step_id.clone(), started.effect.clone()))
            }
            // A quick step is recorded by its outcome alone.
            loom_kernel::Event::StepCompleted(completed) => {
                Some((completed.step_id.clone(), completed.effect.clone()))
            }
            _ => None,
        })
    };
    assert_eq!(started(&handle), started(&name));
    assert_eq!(
        started(&handle),
        Some(("echo#1".to_owned(), "echo".to_owned()))
    );
}

#[tokio::test]
async fn an_output_that_does_not_decode_is_a_typed_error_naming_the_step() {
    let loom = with_echo(MemoryStore::new(), flows(), Calls::default());
    loom.start("wrong-type", &json!({"n": 3}), options("d-1", &["echo"]))
        .await
        .unwrap();
    let state = loom.wait(&id("d-1")).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(
        state.output().unwrap().to_value(),
        json!({"decode": "echo#1"})
    );
}

#[test]
fn build_refuses_a_declared_effect_that_nothing_registered() {
    let error = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("checkout", 3, by_handle).uses(&[&ECHO, &CHARGE]))
        .effect("echo", echo(Calls::default()))
        .build()
        .unwrap_err();
    assert_eq!(
        error,
        CompositionError::UnregisteredEffect {
            flow: "checkout".into(),
            version: 3,
            effect: "payments.charge".into(),
        }
    );
    let text = error.to_string();
    assert!(
        text.contains("checkout") && text.contains("payments.charge"),
        "{text}"
    );
}

#[test]
fn build_accepts_declared_effects_once_registered_and_undeclared_flows_as_before() {
    Runtime::builder(MemoryStore::new())
        .flow(
            flow_fn("checkout", 1, by_handle)
                .uses(&[&ECHO])
                .uses(&[&CHARGE]),
        )
        .flow(flow_fn("by-name", 1, by_name))
        .effect("echo", echo(Calls::default()))
        .effect(CHARGE.name(), echo(Calls::default()))
        .build()
        .unwrap();
}

#[test]
fn a_handle_is_a_name_and_two_types() {
    assert_eq!(ECHO.name(), "echo");
    assert_eq!(format!("{CHARGE:?}"), "EffectHandle(\"payments.charge\")");
    let flow = flow_fn("by-handle", 1, by_handle).uses(&[&ECHO, &CHARGE]);
    assert_eq!(flow.declared_effects(), ["echo", "payments.charge"]);
    assert_eq!(flow.name(), "by-handle");
}
