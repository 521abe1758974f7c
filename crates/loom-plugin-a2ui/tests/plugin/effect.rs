//! Grain B: the `a2ui.callFunction` effect on a real runtime, with a scripted transport.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use futures::FutureExt;
use futures::future::BoxFuture;
use loom_effect_runtime::EffectRegistry;
use loom_kernel::conformance::id;
use loom_kernel::{Event, EventStoreExt, MemoryStore};
use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, flow_fn};
use loom_plugin_a2ui::AgentMessage;
use loom_plugin_a2ui::{
    CallFunctionInput, CallFunctionOptions, Transport, TransportError, codes,
    register_a2ui_call_function,
};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// What the scripted renderer does with a request.
#[derive(Clone, Copy)]
enum Script {
    Answer(fn(&str) -> Value),
    Never,
    /// Panics in `call` itself.
    PanicAtCall,
    /// Panics in the future `call` returns.
    PanicInFuture,
}

struct Scripted {
    script: Script,
    seen: Mutex<Vec<(AgentMessage, CancellationToken)>>,
}

impl Transport for Scripted {
    fn call(
        &self,
        request: AgentMessage,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Vec<u8>, TransportError>> {
        let call_id = match &request {
            AgentMessage::CallRendererFunction(c) => c.function_call_id.clone(),
            _ => String::new(),
        };
        self.seen.lock().unwrap().push((request, cancel));
        match self.script {
            Script::Answer(answer) => {
                let reply = answer(&call_id).to_string().into_bytes();
                async move { Ok(reply) }.boxed()
            }
            Script::Never => futures::future::pending().boxed(),
            Script::PanicAtCall => panic!("the transport broke at the call"),
            Script::PanicInFuture => async { panic!("the transport broke while waiting") }.boxed(),
        }
    }
}

async fn ask(ctx: FlowCtx, input: CallFunctionInput) -> Result<Value, FlowError> {
    Ok(ctx.call("a2ui.callFunction", &input).await?)
}

struct Run {
    store: MemoryStore,
    runtime: Runtime<MemoryStore>,
    transport: Arc<Scripted>,
}

fn run(script: Script) -> Run {
    let transport = Arc::new(Scripted {
        script,
        seen: Mutex::new(Vec::new()),
    });
    let mut effects = EffectRegistry::new();
    register_a2ui_call_function(
        &mut effects,
        transport.clone(),
        CallFunctionOptions::new(catalogs()).request_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let store = MemoryStore::new();
    let runtime = Runtime::builder(store.clone())
        .flow(flow_fn("ask", 1, ask))
        .plugin(&effects)
        .build()
        .unwrap();
    Run {
        store,
        runtime,
        transport,
    }
}

fn input(name: &str) -> CallFunctionInput {
    CallFunctionInput {
        surface_id: SURFACE.into(),
        catalog_id: Some(TEST_CATALOG.into()),
        name: name.into(),
        args: if name == "confirm" {
            Map::from_iter([("question".to_owned(), json!("ok?"))])
        } else {
            Map::new()
        },
    }
}

impl Run {
    async fn go(&self, name: &str, input: CallFunctionInput, grant: bool) -> Vec<Event> {
        let e = id(name);
        let mut options = StartOptions::new(e.clone());
        if grant {
            options = options.grant("a2ui.callFunction");
        }
        self.runtime.start("ask", &input, options).await.unwrap();
        let _ = self.runtime.wait(&e).await;
        self.store
            .read_all(&e)
            .await
            .unwrap()
            .into_iter()
            .map(|env| env.event)
            .collect()
    }
}

fn failure_code(log: &[Event]) -> Option<String> {
    log.iter().find_map(|e| match e {
        Event::StepFailed(f) => Some(f.error.code.clone()),
        _ => None,
    })
}

fn reply_value(call_id: &str) -> Value {
    json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call_id, "value": true}})
}

#[tokio::test]
async fn the_call_id_is_the_idempotency_key_and_the_value_becomes_the_output() {
    let run = run(Script::Answer(reply_value));
    let log = run.go("b-ok", input("confirm"), true).await;
    let completed = log
        .iter()
        .find_map(|e| match e {
            Event::StepCompleted(c) => Some(c.clone()),
            _ => None,
        })
        .expect("the step completes");
    assert_eq!(completed.output.to_value(), json!(true));
    let seen = run.transport.seen.lock().unwrap();
    let AgentMessage::CallRendererFunction(call) = &seen[0].0 else {
        panic!()
    };
    assert_eq!(call.function_call_id, format!("b-ok:{}", completed.step_id));
}

#[tokio::test]
async fn a_result_that_fails_the_return_schema_fails_the_step_and_is_not_recorded() {
    let run = run(Script::Answer(
        |id| json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": id, "value": "yes"}}),
    ));
    let log = run.go("b-invalid", input("confirm"), true).await;
    assert_eq!(failure_code(&log).as_deref(), Some(codes::INVALID_RESULT));
    assert!(!log.iter().any(|e| matches!(e, Event::StepCompleted(_))));
}

#[tokio::test]
async fn both_error_shapes_fail_the_step_with_the_renderers_code() {
    for answer in [
        (|id: &str| json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": id, "error": {"code": "DENIED", "message": "no"}}}))
            as fn(&str) -> Value,
        |id: &str| json!({"version": "v1.0", "error": {"code": "DENIED", "message": "no", "functionCallId": id}}),
    ] {
        let run = run(Script::Answer(answer));
        let log = run.go("b-error", input("confirm"), true).await;
        assert_eq!(failure_code(&log).as_deref(), Some(codes::FUNCTION_ERROR));
    }
}

#[tokio::test]
async fn a_reply_to_another_call_parks_the_step_in_doubt() {
    let run = run(Script::Answer(|_| reply_value("someone-else:step#1")));
    let log = run.go("b-mismatch", input("confirm"), true).await;
    assert!(
        log.iter().any(|e| matches!(e, Event::EffectInDoubt(_))),
        "{log:?}"
    );
    assert!(!log.iter().any(|e| matches!(e, Event::StepCompleted(_))));
}

#[tokio::test]
async fn a_transport_that_panics_parks_the_step_in_doubt_since_the_request_may_have_left() {
    for (name, script) in [
        ("b-panic-call", Script::PanicAtCall),
        ("b-panic-future", Script::PanicInFuture),
    ] {
        let run = run(script);
        let log = run.go(name, input("confirm"), true).await;
        assert!(
            log.iter().any(|e| matches!(e, Event::EffectInDoubt(_))),
            "{name}: {log:?}"
        );
        assert!(!log.iter().any(|e| matches!(e, Event::StepCompleted(_))));
        assert_eq!(
            run.transport.seen.lock().unwrap().len(),
            1,
            "{name}: called once"
        );
    }
}

#[tokio::test]
async fn a_renderer_only_function_is_refused_before_anything_is_sent() {
    let run = run(Script::Answer(reply_value));
    let log = run.go("b-renderer-only", input("formatThing"), true).await;
    assert_eq!(failure_code(&log).as_deref(), Some(codes::REFUSED));
    assert!(run.transport.seen.lock().unwrap().is_empty());
    assert!(!log.iter().any(|e| matches!(e, Event::StepStarted(_))));
}

#[tokio::test]
async fn without_the_capability_nothing_is_sent() {
    let run = run(Script::Answer(reply_value));
    let log = run.go("b-no-grant", input("confirm"), false).await;
    assert!(failure_code(&log).is_some());
    assert!(run.transport.seen.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn no_reply_within_the_request_timeout_fails_the_step_and_cancels_the_context() {
    let run = run(Script::Never);
    let log = run.go("b-timeout", input("confirm"), true).await;
    assert_eq!(failure_code(&log).as_deref(), Some(codes::REQUEST_TIMEOUT));
    let seen = run.transport.seen.lock().unwrap();
    assert!(
        seen[0].1.is_cancelled(),
        "the transport is told to stop waiting"
    );
}

#[tokio::test]
async fn args_that_fail_the_args_schema_fail_the_step_and_nothing_is_sent() {
    let run = run(Script::Answer(reply_value));
    let mut wrong = input("confirm");
    wrong.args = Map::from_iter([("question".to_owned(), json!(42))]);
    let log = run.go("b-args", wrong, true).await;
    assert_eq!(failure_code(&log).as_deref(), Some(codes::REFUSED));
    assert!(run.transport.seen.lock().unwrap().is_empty());
    assert!(
        !log.iter().any(|e| matches!(e, Event::StepStarted(_))),
        "refused before the step is recorded as started: it never may have run: {log:?}"
    );
}

#[tokio::test]
async fn a_value_of_another_return_type_fails_the_step() {
    // `getLocale` returns a string; a schema that allowed anything would not save a number.
    let run = run(Script::Answer(
        |id| json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": id, "value": 7}}),
    ));
    let log = run.go("b-type", input("getLocale"), true).await;
    assert_eq!(failure_code(&log).as_deref(), Some(codes::INVALID_RESULT));
}
