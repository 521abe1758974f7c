//! The edge as an adversary meets it: sessions opened only for what the authenticator grants,
//! every message checked against its session's binding, refusals typed and recording nothing,
//! and a closed session costing nothing.

use std::time::Duration;

use crate::support::*;
use futures::FutureExt;
use futures::future::BoxFuture;
use loom_agent_surface::SurfaceExt;
use loom_effect_runtime::EffectRegistry;
use loom_kernel::{Caller, EventStoreExt, ExecutionId, MemoryStore, ResumeError, Runtime};
use loom_kernel::{FlowCtx, FlowError, StartOptions, flow_fn};
use loom_plugin_a2ui::{
    AgentMessage, Binding, CALL_FUNCTION_EFFECT, CallFunctionInput, CallFunctionOptions,
    Connection, FrameError, Grant, IngestError, Limits, MessageSchema, OpenError, Received,
    Refused, RendererEdge, RendererSession, SessionAuthenticator, register_a2ui_call_function,
};
use serde_json::{Map, Value, json};

/// Grants the subject named by the `user` credential the surface it asks for, of the
/// executions listed for it.
pub(crate) struct Users(pub(crate) Vec<(&'static str, &'static str)>);

impl SessionAuthenticator for Users {
    fn authenticate<'a>(
        &'a self,
        connection: &'a Connection,
    ) -> BoxFuture<'a, Result<Grant, String>> {
        async move {
            let user = connection
                .credentials
                .get("user")
                .ok_or("no user credential")?;
            let bindings = self
                .0
                .iter()
                .filter(|(u, _)| u == user)
                .map(|(_, e)| Binding::new(ExecutionId::new(*e).unwrap(), SURFACE))
                .collect();
            Ok(Grant {
                caller: Caller::new(user.clone()).map_err(|e| e.to_string())?,
                bindings,
            })
        }
        .boxed()
    }
}

/// `checkout` plus a flow that asks the renderer to `confirm` (grain B) within 5 s.
async fn confirm_flow(ctx: FlowCtx, _input: Value) -> Result<Value, FlowError> {
    ctx.surface(SURFACE).set("order", order())?;
    let mut args = Map::new();
    args.insert("question".into(), json!("Sure?"));
    let answer: Value = ctx
        .call(
            CALL_FUNCTION_EFFECT,
            &CallFunctionInput {
                surface_id: SURFACE.into(),
                catalog_id: Some(TEST_CATALOG.into()),
                name: "confirm".into(),
                args,
            },
        )
        .await?;
    Ok(answer)
}

pub(crate) struct World {
    pub(crate) store: MemoryStore,
    pub(crate) hub: loom_plugin_a2ui::SurfaceHub,
    pub(crate) edge: RendererEdge,
    pub(crate) runtime: Runtime<MemoryStore>,
}

pub(crate) fn world(limits: Limits) -> World {
    world_with(limits, hub())
}

fn world_with(limits: Limits, hub: loom_plugin_a2ui::SurfaceHub) -> World {
    world_for(
        limits,
        hub,
        Users(vec![
            ("alice", "order-a"),
            ("bob", "order-b"),
            ("alice", "ask"),
        ]),
    )
}

/// The checkout and `confirm` flows behind an edge whose sessions `authenticator` grants.
pub(crate) fn world_for(
    limits: Limits,
    hub: loom_plugin_a2ui::SurfaceHub,
    authenticator: impl SessionAuthenticator,
) -> World {
    let store = MemoryStore::new();
    let edge = RendererEdge::with_limits(hub.clone(), authenticator, limits);
    let mut effects = EffectRegistry::new();
    register_a2ui_call_function(
        &mut effects,
        edge.transport(),
        CallFunctionOptions::new(catalogs()).request_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let runtime = Runtime::builder(store.clone())
        .flow(flow_fn("checkout", 1, checkout))
        .flow(flow_fn("confirm", 1, confirm_flow))
        .plugin(&hub)
        .plugin(&edge)
        .plugin(&effects)
        .resume_authenticator(edge.clone())
        .build()
        .unwrap();
    World {
        store,
        hub,
        edge,
        runtime,
    }
}

impl World {
    pub(crate) async fn start(&self, flow: &str, execution: &str) -> ExecutionId {
        let e = ExecutionId::new(execution).unwrap();
        self.runtime
            .start(
                flow,
                &order(),
                StartOptions::new(e.clone()).grant(CALL_FUNCTION_EFFECT),
            )
            .await
            .unwrap();
        let _ = self.runtime.wait(&e).await;
        e
    }

    /// Starts the grain-B `confirm` flow as `execution`, without waiting for it (its call
    /// waits for a renderer).
    pub(crate) async fn start_confirm(&self, execution: &str) -> ExecutionId {
        let e = ExecutionId::new(execution).unwrap();
        self.runtime
            .start(
                "confirm",
                &json!({}),
                StartOptions::new(e.clone()).grant(CALL_FUNCTION_EFFECT),
            )
            .await
            .unwrap();
        e
    }

    pub(crate) async fn open(
        &self,
        user: &str,
        execution: &str,
    ) -> Result<RendererSession, OpenError> {
        let connection = Connection {
            execution: execution.into(),
            surface_id: SURFACE.into(),
            credentials: [("user".to_owned(), user.to_owned())].into(),
            answers: None,
            ..Connection::default()
        };
        self.edge.open(&self.runtime, &connection).await
    }

    pub(crate) async fn log_len(&self, e: &ExecutionId) -> usize {
        self.store.read_all(e).await.unwrap().len()
    }
}

pub(crate) fn reply(call_id: &str, value: Value) -> Vec<u8> {
    json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call_id, "value": value}})
        .to_string()
        .into_bytes()
}

fn action(component: &str, name: &str, context: Value) -> Vec<u8> {
    json!({"version": "v1.0", "action": {"name": name, "surfaceId": SURFACE, "sourceComponentId": component, "timestamp": "2026-12-01T00:00:00Z", "context": context}})
        .to_string()
        .into_bytes()
}

#[tokio::test]
async fn a_reply_from_a_session_of_another_execution_is_unknown_there_and_records_nothing() {
    let w = world(Limits::default());
    let a = w.start("checkout", "order-a").await;
    let b = w.start("checkout", "order-b").await;
    let mut bob = w.open("bob", "order-b").await.unwrap();
    let before = w.log_len(&a).await;
    let forged = bob
        .receive(
            &w.runtime,
            &reply(&format!("{a}:getLocale#1"), json!("xx-XX")),
        )
        .await;
    assert!(
        matches!(
            forged,
            Err(Refused::Ingest(IngestError::UnknownCallId { .. }))
        ),
        "{forged:?}"
    );
    assert_eq!(w.log_len(&a).await, before, "nothing recorded");
    // The session stays usable: its own reply resumes its own gate.
    let own = bob
        .receive(
            &w.runtime,
            &reply(&format!("{b}:getLocale#1"), json!("de-CH")),
        )
        .await
        .unwrap();
    assert!(matches!(own, Received::FunctionReply { .. }), "{own:?}");
    let _ = w.runtime.wait(&b).await;
    assert_eq!(
        w.hub.model(&b, SURFACE).unwrap()["order"]["locale"],
        json!("de-CH")
    );
    // And alice's execution still takes its own renderer's answer.
    let mut alice = w.open("alice", "order-a").await.unwrap();
    alice
        .receive(
            &w.runtime,
            &reply(&format!("{a}:getLocale#1"), json!("fr-CH")),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn an_action_the_surface_could_not_have_sent_is_refused_and_records_nothing() {
    let w = world(Limits::default());
    let a = w.start("checkout", "order-a").await;
    let mut alice = w.open("alice", "order-a").await.unwrap();
    // Before its gate opens, even the right click is refused.
    let early = alice
        .receive(
            &w.runtime,
            &action("approve", "approve", json!({"total": 42})),
        )
        .await;
    assert!(
        matches!(
            early,
            Err(Refused::Ingest(IngestError::NoGateWaiting { .. }))
        ),
        "{early:?}"
    );
    alice
        .receive(
            &w.runtime,
            &reply(&format!("{a}:getLocale#1"), json!("fr-CH")),
        )
        .await
        .unwrap();
    let _ = w.runtime.wait(&a).await;
    let before = w.log_len(&a).await;
    for (frame, what) in [
        (
            action("nope", "approve", json!({"total": 42})),
            "an unknown component",
        ),
        (
            action("title", "approve", json!({"total": 42})),
            "a component with no action",
        ),
        (
            action("approve", "reject", json!({"total": 42})),
            "another action name",
        ),
        (
            action("approve", "approve", json!({"total": 1})),
            "a forged context",
        ),
        (action("approve", "approve", json!({})), "a missing context"),
        (
            action("approve", "approve", json!({"total": 42, "admin": true})),
            "an extra key",
        ),
    ] {
        let refused = alice.receive(&w.runtime, &frame).await;
        assert!(
            matches!(refused, Err(Refused::Ingest(_))),
            "{what}: {refused:?}"
        );
    }
    let other_surface = json!({"version": "v1.0", "action": {"name": "approve", "surfaceId": "elsewhere", "sourceComponentId": "approve", "timestamp": "t", "context": {"total": 42}}});
    let refused = alice
        .receive(&w.runtime, other_surface.to_string().as_bytes())
        .await;
    assert!(matches!(
        refused,
        Err(Refused::Ingest(IngestError::WrongSurface { .. }))
    ));
    assert_eq!(w.log_len(&a).await, before, "nothing recorded");
    let accepted = alice
        .receive(
            &w.runtime,
            &action("approve", "approve", json!({"total": 42})),
        )
        .await
        .unwrap();
    assert_eq!(
        accepted,
        Received::Action {
            name: "approve".into()
        }
    );
    assert_eq!(
        w.runtime.wait(&a).await.unwrap().status(),
        loom_kernel::ExecutionStatus::Completed
    );
}

#[tokio::test]
async fn a_session_opens_only_for_what_is_granted_and_nothing_is_kept_for_a_refusal() {
    let w = world(Limits::default());
    w.start("checkout", "order-a").await;
    let anonymous = w
        .edge
        .open(
            &w.runtime,
            &Connection {
                execution: "order-a".into(),
                surface_id: SURFACE.into(),
                ..Connection::default()
            },
        )
        .await;
    assert!(matches!(anonymous, Err(OpenError::Unauthenticated { .. })));
    assert!(matches!(
        w.open("bob", "order-a").await,
        Err(OpenError::NotGranted { .. })
    ));
    assert!(matches!(
        w.open("alice", "ask").await,
        Err(OpenError::UnknownExecution { .. })
    ));
    assert!(matches!(
        w.open("alice", "").await,
        Err(OpenError::BadExecutionId { .. })
    ));
    let unknown_surface = w
        .edge
        .open(
            &w.runtime,
            &Connection {
                execution: "order-a".into(),
                surface_id: "elsewhere".into(),
                credentials: [("user".to_owned(), "alice".to_owned())].into(),
                answers: None,
                ..Connection::default()
            },
        )
        .await;
    assert!(matches!(
        unknown_surface,
        Err(OpenError::UnknownSurface { .. })
    ));
    assert_eq!(w.edge.session_count(), 0);
    assert_eq!(w.hub.subscriber_count(), 0);
    assert!(
        w.hub
            .model(&ExecutionId::new("ask").unwrap(), SURFACE)
            .is_none()
    );

    let session = w.open("alice", "order-a").await.unwrap();
    assert_eq!((w.edge.session_count(), w.hub.subscriber_count()), (1, 1));
    drop(session);
    assert_eq!((w.edge.session_count(), w.hub.subscriber_count()), (0, 0));
}

#[tokio::test]
async fn a_sessions_caller_may_resume_only_its_own_executions_a2ui_gates() {
    let w = world(Limits::default());
    let a = w.start("checkout", "order-a").await;
    let b = w.start("checkout", "order-b").await;
    let bob = w.open("bob", "order-b").await.unwrap();
    let payload = loom_kernel::Payload::from(json!({"value": "xx"}));
    let refused = w
        .runtime
        .resume_as(
            bob.caller(),
            &a,
            "A2UIFunctionResult",
            &format!("{a}:getLocale#1"),
            payload.clone(),
        )
        .await;
    assert!(
        matches!(refused, Err(ResumeError::Unauthorized { .. })),
        "{refused:?}"
    );
    let other_gate = w
        .runtime
        .resume_as(bob.caller(), &b, "SomethingElse", "k", payload.clone())
        .await;
    assert!(matches!(other_gate, Err(ResumeError::Unauthorized { .. })));
    let caller = bob.caller().clone();
    drop(bob);
    let closed = w
        .runtime
        .resume_as(
            &caller,
            &b,
            "A2UIFunctionResult",
            &format!("{b}:getLocale#1"),
            payload,
        )
        .await;
    assert!(
        matches!(closed, Err(ResumeError::Unauthorized { .. })),
        "a closed session"
    );
}

#[tokio::test]
async fn call_agent_function_is_answered_in_band_with_a_valid_agent_function_response() {
    let w = world(Limits::default());
    w.start("checkout", "order-a").await;
    let mut alice = w.open("alice", "order-a").await.unwrap();
    let schema = MessageSchema::new(&catalogs()).unwrap();
    for (name, surface, code) in [
        ("launchMissiles", SURFACE, "UNKNOWN_FUNCTION"),
        ("formatThing", SURFACE, "INVALID_FUNCTION_CALL"),
        ("getLocale", SURFACE, "INVALID_FUNCTION_CALL"),
        ("confirm", SURFACE, "UNKNOWN_FUNCTION"),
        ("confirm", "elsewhere", "INVALID_FUNCTION_CALL"),
    ] {
        let call = json!({"version": "v1.0", "callAgentFunction": {"surfaceId": surface, "functionCallId": "c-1", "callFunction": {"@call": name, "catalogId": TEST_CATALOG, "args": {}}}});
        let Received::Answered(answer) = alice
            .receive(&w.runtime, call.to_string().as_bytes())
            .await
            .unwrap()
        else {
            panic!("{name}: answered in band")
        };
        let value = answer.to_value();
        assert_eq!(
            value["agentFunctionResponse"]["error"]["code"],
            json!(code),
            "{name}"
        );
        assert_eq!(
            value["agentFunctionResponse"]["functionCallId"],
            json!("c-1")
        );
        assert!(
            schema.errors(&value).is_empty(),
            "{value}: {:?}",
            schema.errors(&value)
        );
    }
}

#[tokio::test]
async fn frames_over_a_limit_are_refused_before_parsing_with_their_close_codes() {
    let limits = Limits {
        max_frame_bytes: 1024,
        max_depth: 8,
        messages_per_second: 1,
        burst: 5,
        ..Limits::default()
    };
    let w = world(limits);
    let a = w.start("checkout", "order-a").await;
    let mut alice = w.open("alice", "order-a").await.unwrap();
    let before = w.log_len(&a).await;
    let big = alice
        .receive(&w.runtime, &vec![b' '; 2048])
        .await
        .unwrap_err();
    assert_eq!(big.close_code(), Some(1009));
    let invalid = alice
        .receive(&w.runtime, b"{\"a\": \"\xff\"}")
        .await
        .unwrap_err();
    assert!(matches!(invalid, Refused::Frame(FrameError::NotUtf8)));
    assert_eq!(invalid.close_code(), Some(1007));
    let deep = format!("{}{}", "[".repeat(9), "]".repeat(9));
    let deep = alice
        .receive(&w.runtime, deep.as_bytes())
        .await
        .unwrap_err();
    assert!(matches!(deep, Refused::Frame(FrameError::TooDeep { .. })));
    assert_eq!(deep.close_code(), None, "the session stays open");
    let _ = alice.receive(&w.runtime, b"{}").await;
    let _ = alice.receive(&w.runtime, b"{}").await;
    let flood = alice.receive(&w.runtime, b"{}").await.unwrap_err();
    assert!(matches!(
        flood,
        Refused::Frame(FrameError::RateExceeded { .. })
    ));
    assert_eq!(flood.close_code(), Some(1008));
    assert_eq!(w.log_len(&a).await, before);
}

#[tokio::test(start_paused = true)]
async fn a_grain_b_reply_after_its_timeout_finds_nothing_and_is_recorded_nowhere() {
    let w = world(Limits::default());
    let e = w.start_confirm("ask").await;
    let mut alice = w.open("alice", "ask").await.unwrap();
    let _ = alice.take_initial();
    let request = loop {
        let out = alice.next().await.unwrap();
        if let AgentMessage::CallRendererFunction(call) = &out.message {
            let call = call.clone();
            out.written();
            break call;
        }
    };
    assert_eq!(w.edge.calls_in_flight(), 1);
    // Nobody answers: the paused clock runs to the request timeout and the step fails.
    let state = w.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), loom_kernel::ExecutionStatus::Failed);
    assert_eq!(w.edge.calls_in_flight(), 0, "the call's entry ends with it");
    let before = w.log_len(&e).await;
    let late = alice
        .receive(&w.runtime, &reply(&request.function_call_id, json!(true)))
        .await;
    assert!(
        matches!(
            late,
            Err(Refused::Ingest(IngestError::UnknownCallId { .. }))
        ),
        "{late:?}"
    );
    assert_eq!(w.log_len(&e).await, before);
}

#[tokio::test]
async fn a_grain_b_reply_is_taken_only_from_a_session_of_the_calls_binding() {
    let w = world(Limits::default());
    w.start("checkout", "order-b").await;
    let e = w.start_confirm("ask").await;
    let mut alice = w.open("alice", "ask").await.unwrap();
    let mut bob = w.open("bob", "order-b").await.unwrap();
    let request = loop {
        let out = alice.next().await.unwrap();
        if let AgentMessage::CallRendererFunction(call) = &out.message {
            let call = call.clone();
            out.written();
            break call;
        }
    };
    let forged = bob
        .receive(&w.runtime, &reply(&request.function_call_id, json!(false)))
        .await;
    assert!(matches!(
        forged,
        Err(Refused::Ingest(IngestError::UnknownCallId { .. }))
    ));
    let taken = alice
        .receive(&w.runtime, &reply(&request.function_call_id, json!(true)))
        .await
        .unwrap();
    assert!(matches!(taken, Received::StepReply { .. }));
    let state = w.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), loom_kernel::ExecutionStatus::Completed);
}

/// Arbitrary bytes and A2UI-shaped JSON through a live session's whole inbound path (limits,
/// parse, binding, the kernel's inbound seam): never a panic, never a record, and the session
/// still answers after.
#[test]
fn arbitrary_frames_into_a_session_never_panic_nor_record() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let limits = Limits {
        messages_per_second: u32::MAX,
        burst: u32::MAX,
        ..Limits::default()
    };
    let w = world(limits);
    let (e, session) = tokio.block_on(async {
        let e = w.start("checkout", "order-a").await;
        (e, w.open("alice", "order-a").await.unwrap())
    });
    let before = tokio.block_on(w.log_len(&e));
    let session = std::cell::RefCell::new(session);
    let wraps = [
        None,
        Some("rendererFunctionResponse"),
        Some("action"),
        Some("callAgentFunction"),
        Some("error"),
    ];
    let frames = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        (
            crate::wire::arb_json(),
            prop::sample::select(wraps.to_vec())
        )
            .prop_map(|(value, wrap)| {
                let value = match wrap {
                    Some(key) => json!({"version": "v1.0", key: value}),
                    None => value,
                };
                value.to_string().into_bytes()
            }),
    ];
    let mut runner = TestRunner::new(Config::with_cases(512));
    runner
        .run(&frames, |frame| {
            let _ = tokio.block_on(session.borrow_mut().receive(&w.runtime, &frame));
            Ok(())
        })
        .unwrap();
    assert_eq!(tokio.block_on(w.log_len(&e)), before, "nothing recorded");
    let call = json!({"version": "v1.0", "callAgentFunction": {"surfaceId": SURFACE, "functionCallId": "after", "callFunction": {"@call": "x", "args": {}}}});
    let answer = tokio.block_on(
        session
            .borrow_mut()
            .receive(&w.runtime, call.to_string().as_bytes()),
    );
    assert!(matches!(answer, Ok(Received::Answered(_))), "{answer:?}");
}

/// The first `callRendererFunction` a session is asked to send, marked written.
pub(crate) async fn grain_b_request(
    session: &mut RendererSession,
) -> loom_plugin_a2ui::CallRendererFunction {
    loop {
        let out = session.next().await.unwrap();
        if let AgentMessage::CallRendererFunction(call) = &out.message {
            let call = call.clone();
            out.written();
            return call;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_grain_b_call_whose_session_closes_is_sent_again_to_the_next_session_of_its_binding() {
    let w = world(Limits::default());
    let e = w.start_confirm("ask").await;
    let mut first = w.open("alice", "ask").await.unwrap();
    let sent = grain_b_request(&mut first).await;
    drop(first);
    let mut second = w.open("alice", "ask").await.unwrap();
    let again = grain_b_request(&mut second).await;
    assert_eq!(
        again.function_call_id, sent.function_call_id,
        "the same call id"
    );
    let taken = second
        .receive(&w.runtime, &reply(&again.function_call_id, json!(true)))
        .await
        .unwrap();
    assert!(matches!(taken, Received::StepReply { .. }));
    let state = w.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), loom_kernel::ExecutionStatus::Completed);
}

#[tokio::test(start_paused = true)]
async fn a_grain_b_call_whose_renderer_does_not_come_back_within_the_grace_is_in_doubt() {
    let w = world(Limits {
        resend_grace: Duration::from_secs(1),
        ..Limits::default()
    });
    let e = w.start_confirm("ask").await;
    let mut first = w.open("alice", "ask").await.unwrap();
    let _ = grain_b_request(&mut first).await;
    drop(first);
    let state = w.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), loom_kernel::ExecutionStatus::InDoubt);
    assert_eq!(w.edge.calls_in_flight(), 0);
}

#[tokio::test]
async fn with_per_execution_wire_ids_renderers_see_one_surface_id_per_execution_and_the_log_keeps_the_flows()
 {
    let w = world_with(
        Limits::default(),
        hub().with_wire_ids(loom_plugin_a2ui::per_execution_wire_id),
    );
    let a = w.start("checkout", "order-a").await;
    let mut alice = w.open("alice", "order-a").await.unwrap();
    let initial = alice.take_initial();
    let AgentMessage::CreateSurface(create) = &initial[0] else {
        panic!("createSurface first")
    };
    assert_eq!(create.surface_id, "checkout@order-a");
    let AgentMessage::CallRendererFunction(call) = &initial[1] else {
        panic!("then the pending call")
    };
    assert_eq!(call.surface_id.as_deref(), Some("checkout@order-a"));
    alice
        .receive(&w.runtime, &reply(&call.function_call_id, json!("fr-CH")))
        .await
        .unwrap();
    let _ = w.runtime.wait(&a).await;
    // The flow's name is not the renderer's id for this surface any more.
    let flow_name = alice
        .receive(
            &w.runtime,
            &action("approve", "approve", json!({"total": 42})),
        )
        .await;
    assert!(matches!(
        flow_name,
        Err(Refused::Ingest(IngestError::WrongSurface { .. }))
    ));
    let on_the_wire = json!({"version": "v1.0", "action": {"name": "approve", "surfaceId": "checkout@order-a", "sourceComponentId": "approve", "timestamp": "t", "context": {"total": 42}}});
    alice
        .receive(&w.runtime, on_the_wire.to_string().as_bytes())
        .await
        .unwrap();
    let _ = w.runtime.wait(&a).await;
    let log = w.store.read_all(&a).await.unwrap();
    let resumed: Vec<Value> = log
        .iter()
        .filter_map(|env| match &env.event {
            loom_kernel::Event::ExecutionResumed(r) => Some(r.payload.to_value()),
            _ => None,
        })
        .collect();
    assert_eq!(resumed.len(), 2);
    assert!(
        resumed.iter().all(|p| p["surfaceId"] == json!(SURFACE)),
        "the log records the flow's surface id: {resumed:?}"
    );
}
