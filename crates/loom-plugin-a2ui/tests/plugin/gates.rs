//! Grain A end to end on a real runtime: the request goes out only once its gate is durable,
//! is sent again with the same call id after a restart, and the reply resumes the gate once.
//! Replies that do not answer an open call are refused and record nothing.

use crate::support;

use crate::support::*;
use loom_kernel::StartOptions;
use loom_kernel::WaitError;
use loom_kernel::conformance::id;
use loom_kernel::{Event, EventStoreExt, ExecutionId, ExecutionState, MemoryStore, Runtime};
use loom_plugin_a2ui::{AgentMessage, CallRendererFunction, SurfaceHub};
use loom_plugin_a2ui::{HubError, IngestError, KERNEL_REQUEST, REQUEST_DECISION};
use serde_json::{Value, json};

fn reply(call_id: &str, value: Value) -> Vec<u8> {
    json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call_id, "value": value}})
        .to_string()
        .into_bytes()
}

/// The checkout's model at `order.<field>`.
fn order_field(hub: &SurfaceHub, e: &ExecutionId, field: &str) -> Value {
    hub.model(e, SURFACE).unwrap()["order"][field].clone()
}

/// The id of the checkout's call to `getLocale`.
fn locale_call(e: &ExecutionId) -> String {
    format!("{}:getLocale#1", e.as_str())
}

/// A click on the surface's button `name` with `context`, delivered; then the execution's
/// wait.
async fn click(
    hub: &SurfaceHub,
    runtime: &Runtime<MemoryStore>,
    e: &ExecutionId,
    name: &str,
    context: Value,
) -> Result<ExecutionState, WaitError> {
    let action = json!({"version": "v1.0", "action": {"name": name, "surfaceId": SURFACE, "sourceComponentId": "approve", "timestamp": "2026-12-01T00:00:00Z", "context": context}});
    hub.deliver_action(runtime, e, SURFACE, action.to_string().as_bytes())
        .await
        .unwrap();
    runtime.wait(e).await
}

fn call_of(messages: &[AgentMessage]) -> Option<CallRendererFunction> {
    messages.iter().find_map(|m| match m {
        AgentMessage::CallRendererFunction(c) => Some(c.clone()),
        _ => None,
    })
}

#[tokio::test]
async fn request_and_gate_are_durable_in_one_batch_before_the_request_is_sent() {
    let (store, hub, _runtime, e) = checkout_started("gate-batch").await;
    let log = store.read_all(&e).await.unwrap();
    // The kernel's durable gate request (LD-018), after the change's marker.
    let decision = log
        .iter()
        .position(|env| {
            matches!(&env.event, Event::DecisionRecorded(d)
                if d.kind == loom_kernel::kit::REQUEST_KIND
                    && d.step_id == "A2UIFunctionResult#1:request")
        })
        .expect("the request is recorded");
    assert!(
        matches!(&log[decision - 1].event, Event::DecisionRecorded(d)
        if d.step_id == format!("patch:{KERNEL_REQUEST}"))
    );
    assert!(
        !log.iter().any(
            |env| matches!(&env.event, Event::DecisionRecorded(d) if d.kind == REQUEST_DECISION)
        ),
        "no decision of the plugin's own"
    );
    let gate = log.iter().position(|env| matches!(&env.event, Event::ExecutionSuspended(s) if s.event_type == "A2UIFunctionResult")).expect("the gate is recorded");
    // The request, then what the gate expects (LD-031), then the gate: one batch.
    assert_eq!(
        gate,
        decision + 2,
        "the request and the schema precede the gate"
    );
    let Event::DecisionRecorded(schema) = &log[decision + 1].event else {
        panic!(
            "the gate's payload schema follows the request: {:?}",
            log[decision + 1]
        );
    };
    assert_eq!(schema.kind, loom_kernel::kit::PAYLOAD_SCHEMA_KIND);
    assert_eq!(schema.step_id, "A2UIFunctionResult#1:payloadSchema");

    let sub = hub.subscribe(&store, &e, SURFACE).await.unwrap();
    let call = call_of(&sub.initial).expect("the pending call is sent to a new subscriber");
    assert_eq!(call.function_call_id, locale_call(&e));
    assert_eq!(call.surface_id.as_deref(), Some(SURFACE));
    // The kernel lists it beside its gate, for operators and for whoever sends it again.
    let state = _runtime.state(&e).await.unwrap();
    let pending = loom_kernel::kit::pending_requests_of(&store, &e, &state)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        pending[0].request.to_value()["callId"],
        json!(locale_call(&e))
    );
}

/// The log a build before [`KERNEL_REQUEST`] recorded for `log` (grain A's own decision
/// `a2ui.functionRequest#1` instead of the change's marker and the kernel's request).
fn as_recorded_before(log: &[loom_kernel::EventEnvelope]) -> Vec<Event> {
    log.iter()
        .filter_map(|env| match &env.event {
            Event::DecisionRecorded(d) if d.step_id == format!("patch:{KERNEL_REQUEST}") => None,
            Event::DecisionRecorded(d) if d.kind == loom_kernel::kit::REQUEST_KIND => {
                let mut old = d.clone();
                old.kind = REQUEST_DECISION.to_owned();
                old.step_id = format!("{REQUEST_DECISION}#1");
                Some(Event::DecisionRecorded(old))
            }
            other => Some(other.clone()),
        })
        .collect()
}

#[tokio::test]
async fn an_execution_recorded_with_the_plugins_own_request_replays_is_sent_its_call_and_completes()
{
    let (live_store, _hub, _runtime, e) = checkout_started("gate-before").await;
    let live = live_store.read_all(&e).await.unwrap();
    let old = as_recorded_before(&live);
    assert_eq!(old.len(), live.len() - 1);
    // A new process on a store that holds the old shape.
    let store = MemoryStore::new();
    loom_kernel::EventStore::append(&store, &e, 0, &old)
        .await
        .unwrap();
    let hub = hub();
    let runtime = runtime(store.clone(), &hub);
    let sub = hub.subscribe(&store, &e, SURFACE).await.unwrap();
    let call = call_of(&sub.initial).expect("the old request is sent again");
    assert_eq!(call.function_call_id, locale_call(&e));
    hub.deliver_function_response(
        &runtime,
        SURFACE,
        &reply(&call.function_call_id, json!("fr-CH")),
    )
    .await
    .unwrap();
    let state = click(&hub, &runtime, &e, "approve", json!({"total": 42}))
        .await
        .unwrap();
    assert_eq!(state.status(), loom_kernel::ExecutionStatus::Completed);
    let log = store.read_all(&e).await.unwrap();
    assert!(
        !log.iter()
            .any(|env| matches!(&env.event, Event::DecisionRecorded(d)
            if d.kind == loom_kernel::kit::REQUEST_KIND || d.step_id.starts_with("patch:"))),
        "the replay took the old branch and recorded nothing new of the change"
    );
    let report = runtime.replay_log(log).expect("the old shape replays");
    assert!(report.returned);
}

#[tokio::test]
async fn a_reply_resumes_the_gate_once_and_a_second_reply_is_refused() {
    let (_store, hub, runtime, e) = checkout_started("gate-once").await;
    let call_id = locale_call(&e);
    let result = hub
        .deliver_function_response(&runtime, SURFACE, &reply(&call_id, json!("fr-CH")))
        .await
        .unwrap();
    assert_eq!(result.name, "getLocale");
    let _ = runtime.wait(&e).await;
    let again = hub
        .deliver_function_response(&runtime, SURFACE, &reply(&call_id, json!("de-CH")))
        .await;
    assert!(
        matches!(
            again,
            Err(HubError::Ingest(IngestError::AlreadyAnswered { .. }))
        ),
        "{again:?}"
    );
    assert_eq!(order_field(&hub, &e, "locale"), json!("fr-CH"));

    // The Approve button resumes the action gate and the flow completes.
    let state = click(&hub, &runtime, &e, "approve", json!({"total": 42}))
        .await
        .unwrap();
    assert!(
        format!("{:?}", state.status()).contains("Completed"),
        "{:?}",
        state.status()
    );
    assert_eq!(
        hub.masked_model(&e, SURFACE).unwrap()["customer"]["card"],
        json!("***")
    );
    assert_eq!(order_field(&hub, &e, "status"), json!("placed"));
}

#[tokio::test]
async fn replies_that_answer_no_open_call_are_refused_and_record_nothing() {
    let (store, hub, _runtime, e) = checkout_started("gate-forged").await;
    let before = store.read_all(&e).await.unwrap().len();
    let call_id = locale_call(&e);

    let unknown = hub.ingest_function_response(SURFACE, &reply("someone:getLocale#9", json!("xx")));
    assert!(
        matches!(unknown, Err(IngestError::UnknownCallId { .. })),
        "{unknown:?}"
    );
    let wrong_surface = hub.ingest_function_response("elsewhere", &reply(&call_id, json!("fr-CH")));
    assert!(
        matches!(wrong_surface, Err(IngestError::WrongSurface { .. })),
        "{wrong_surface:?}"
    );
    let bad_value = hub.ingest_function_response(SURFACE, &reply(&call_id, json!(7)));
    assert!(
        matches!(bad_value, Err(IngestError::InvalidResult { .. })),
        "{bad_value:?}"
    );
    let not_json = hub.ingest_function_response(SURFACE, b"{\"version\":");
    assert!(
        matches!(not_json, Err(IngestError::Wire(_))),
        "{not_json:?}"
    );
    assert_eq!(
        store.read_all(&e).await.unwrap().len(),
        before,
        "nothing was recorded"
    );

    // The top-level error shape answers the call too.
    let error = json!({"version": "v1.0", "error": {"code": "DENIED", "message": "no", "functionCallId": call_id}});
    let (execution, result) = hub
        .ingest_function_response(SURFACE, error.to_string().as_bytes())
        .unwrap();
    assert_eq!(execution, e);
    assert!(matches!(
        result.outcome,
        loom_plugin_a2ui::FunctionOutcome::Error(_)
    ));
}

#[tokio::test]
async fn after_a_restart_the_pending_request_is_sent_again_with_the_same_call_id() {
    let store = MemoryStore::new();
    let e = id("gate-restart");
    let first_call = {
        let (hub, _runtime, _) = checkout_started_on(store.clone(), "gate-restart").await;
        let sub = hub.subscribe(&store, &e, SURFACE).await.unwrap();
        call_of(&sub.initial).expect("sent before the restart")
    };
    // A new process: a fresh hub and runtime over the same log.
    let hub = hub();
    let runtime = runtime(store.clone(), &hub);
    runtime.recover().await.unwrap();
    let sub = hub.subscribe(&store, &e, SURFACE).await.unwrap();
    let again = call_of(&sub.initial).expect("sent again after the restart");
    assert_eq!(again, first_call);
    assert_eq!(hub.pending_calls(&e).len(), 1);
    hub.deliver_function_response(
        &runtime,
        SURFACE,
        &reply(&again.function_call_id, json!("it-IT")),
    )
    .await
    .unwrap();
    let _ = runtime.wait(&e).await;
    assert!(hub.pending_calls(&e).is_empty());
    assert_eq!(order_field(&hub, &e, "locale"), json!("it-IT"));
}

#[tokio::test]
async fn a_late_subscriber_gets_the_current_model_then_every_update_once() {
    let (store, hub, runtime, e) = checkout_started("late-subscriber").await;
    let mut sub = hub.subscribe(&store, &e, SURFACE).await.unwrap();
    let AgentMessage::CreateSurface(create) = &sub.initial[0] else {
        panic!("createSurface first")
    };
    let mut model = Value::Object(create.data_model.clone().unwrap());
    assert_eq!(model["customer"]["card"], json!("***"));
    hub.deliver_function_response(&runtime, SURFACE, &reply(&locale_call(&e), json!("fr-CH")))
        .await
        .unwrap();
    let _ = click(&hub, &runtime, &e, "approve", json!({"total": 42})).await;
    let mut updates = 0;
    while let Some(message) = sub.try_next() {
        if let AgentMessage::UpdateDataModel(update) = message {
            apply_update(&mut model, &update.path.unwrap(), update.value);
            updates += 1;
        }
    }
    assert!(updates >= 3, "{updates}");
    assert_eq!(model, hub.masked_model(&e, SURFACE).unwrap());
}

#[tokio::test]
async fn events_are_applied_once_each_in_seq_order_whatever_order_they_arrive_in() {
    use loom_kernel::Projection;
    let store = MemoryStore::new();
    let e = id("hub-order");
    checkout_started_on(store.clone(), "hub-order").await;
    let log = store.read_all(&e).await.unwrap();
    let reference = hub();
    for envelope in &log {
        reference.apply(envelope);
    }
    // A hub in a new process sees the last events live, twice, before catching up.
    let hub = hub();
    for envelope in log.iter().rev().take(2) {
        hub.apply(envelope);
        hub.apply(envelope);
    }
    assert_eq!(
        hub.model(&e, SURFACE),
        None,
        "nothing applies ahead of a gap"
    );
    let sub = hub.subscribe(&store, &e, SURFACE).await.unwrap();
    assert_eq!(hub.model(&e, SURFACE), reference.model(&e, SURFACE));
    assert_eq!(hub.pending_calls(&e), reference.pending_calls(&e));
    let AgentMessage::CreateSurface(create) = &sub.initial[0] else {
        panic!()
    };
    assert_eq!(
        Some(Value::Object(create.data_model.clone().unwrap())),
        reference.masked_model(&e, SURFACE)
    );
    for envelope in &log {
        hub.apply(envelope);
    }
    assert_eq!(
        hub.model(&e, SURFACE),
        reference.model(&e, SURFACE),
        "duplicates change nothing"
    );
}

/// Shows a value, waits for a `done` action, then deletes the surface.
async fn show_then_delete(
    ctx: loom_kernel::FlowCtx,
    _: Value,
) -> Result<Value, loom_kernel::FlowError> {
    use loom_agent_surface::SurfaceExt;
    let ui = ctx.surface(SURFACE);
    ui.patch()
        .set("order", order())
        .set("customer", json!({"card": "4111"}))
        .emit()?;
    ctx.suspend("A2UIAction", "done").await?;
    loom_plugin_a2ui::delete_surface(&ctx, SURFACE)?;
    // Deleting twice sends nothing more.
    loom_plugin_a2ui::delete_surface(&ctx, SURFACE)?;
    Ok(json!("deleted"))
}

#[tokio::test]
async fn a_deleted_surface_ends_its_subscriptions_and_later_subscribers_get_nothing() {
    let store = MemoryStore::new();
    let hub = hub();
    let runtime = loom_kernel::Runtime::builder(store.clone())
        .flow(loom_kernel::flow_fn("show", 1, show_then_delete))
        .plugin(&hub)
        .build()
        .unwrap();
    let e = id("deleted-surface");
    runtime
        .start("show", &json!({}), StartOptions::new(e.clone()))
        .await
        .unwrap();
    let _ = runtime.wait(&e).await;
    let mut sub = hub.subscribe(&store, &e, SURFACE).await.unwrap();
    assert!(matches!(sub.initial[0], AgentMessage::CreateSurface(_)));
    // No component declares `done`: the application resumes the gate itself.
    runtime
        .resume(
            &e,
            "A2UIAction",
            "done",
            loom_kernel::Payload::from(json!({})),
        )
        .await
        .unwrap();
    let _ = runtime.wait(&e).await;
    let mut deletes = 0;
    while let Some(message) = sub.next().await {
        if matches!(message, AgentMessage::DeleteSurface(_)) {
            deletes += 1;
        }
    }
    assert_eq!(deletes, 1, "one deleteSurface, then the subscription ends");
    let mut late = hub.subscribe(&store, &e, SURFACE).await.unwrap();
    assert!(late.initial.is_empty(), "{:?}", late.initial);
    assert!(late.next().await.is_none());
    // The model is kept for the application.
    assert_eq!(
        hub.masked_model(&e, SURFACE).unwrap()["customer"]["card"],
        json!("***")
    );
    // A new process catching up from the log agrees.
    let fresh = support::hub();
    let mut again = fresh.subscribe(&store, &e, SURFACE).await.unwrap();
    assert!(again.initial.is_empty());
    assert!(again.next().await.is_none());
}

/// A flow that asks for `confirm` without its required `question`.
async fn ask_without_question(
    ctx: loom_kernel::FlowCtx,
    _input: Value,
) -> Result<Value, loom_kernel::FlowError> {
    let answer = loom_plugin_a2ui::call_and_wait(
        &ctx,
        &catalogs(),
        SURFACE,
        Some(TEST_CATALOG),
        "confirm",
        serde_json::Map::new(),
    )
    .await?;
    Ok(answer)
}

#[tokio::test]
async fn a_grain_a_call_whose_args_fail_the_schema_is_refused_before_anything_is_sent() {
    let store = MemoryStore::new();
    let hub = hub();
    let runtime = loom_kernel::Runtime::builder(store.clone())
        .flow(loom_kernel::flow_fn("ask", 1, ask_without_question))
        .plugin(&hub)
        .build()
        .unwrap();
    let e = id("bad-args");
    runtime
        .start("ask", &json!({}), StartOptions::new(e.clone()))
        .await
        .unwrap();
    let state = runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), loom_kernel::ExecutionStatus::Failed);
    let log = store.read_all(&e).await.unwrap();
    assert!(
        !log.iter()
            .any(|env| matches!(&env.event, Event::DecisionRecorded(d)
                if d.kind == REQUEST_DECISION || d.kind == loom_kernel::kit::REQUEST_KIND)),
        "no request recorded: {log:?}"
    );
    assert!(hub.pending_calls(&e).is_empty());
}

#[test]
fn a_catalog_with_an_unknown_return_type_does_not_compile() {
    let catalog = loom_plugin_a2ui::define_catalog("urn:test:bad:v1")
        .function(loom_plugin_a2ui::define_function("f").returns("text", json!({})));
    assert!(matches!(
        loom_plugin_a2ui::Catalogs::default_with([catalog]),
        Err(loom_plugin_a2ui::CatalogError::UnknownReturnType { .. })
    ));
}

#[tokio::test]
async fn the_function_result_gate_declares_a_schema_that_its_replies_fit_and_a_bare_value_does_not()
{
    let (store, hub, runtime, e) = checkout_started("gate-schema").await;
    let state = runtime.state(&e).await.unwrap();
    let schema = loom_kernel::kit::expected_payload(&store, &e, &state, "A2UIFunctionResult#1")
        .await
        .unwrap()
        .expect("the function-result gate declares its payload")
        .to_value();
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(&json!({"value": "de-CH"})));
    assert!(validator.is_valid(&json!({"error": {"code": "DENIED", "message": "no"}})));
    assert!(!validator.is_valid(&json!("de-CH")), "the trap of issue 26");
    assert!(
        !validator.is_valid(&json!({"value": 7})),
        "getLocale returns a string"
    );
    assert!(
        !validator.is_valid(&json!({"value": "x"})),
        "of at least 2 characters"
    );
    assert!(!validator.is_valid(&json!({})));

    // What the hub records for a renderer's reply fits it.
    let call_id = locale_call(&e);
    hub.deliver_function_response(&runtime, SURFACE, &reply(&call_id, json!("fr-CH")))
        .await
        .unwrap();
    let _ = runtime.wait(&e).await;
    let log = store.read_all(&e).await.unwrap();
    let resumed = log
        .iter()
        .find_map(|env| match &env.event {
            Event::ExecutionResumed(r) if r.event_type == "A2UIFunctionResult" => {
                Some(r.payload.to_value())
            }
            _ => None,
        })
        .unwrap();
    assert!(validator.is_valid(&resumed), "{resumed}");
}
