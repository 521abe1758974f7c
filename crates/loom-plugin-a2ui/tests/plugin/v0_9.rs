//! A2UI v0.9 sessions: every message a v0.9 session emits validates against the published v0.9
//! schemas; its renderer's model equals the hub's masked fold; what v0.9 cannot carry
//! (function calls) is refused for the session and never sent, and nothing is lost; a v0.9
//! renderer's actions meet the same binding rules as a v1.0 one's.

use std::time::Duration;

use crate::edge::{World, world};
use crate::support::*;
use loom_agent_surface::SurfaceOp;
use loom_kernel::ExecutionStatus;
use loom_plugin_a2ui::{
    A2UISurfaceBridge, AgentMessage, BASIC_CATALOG_V0_9_ID, Connection, FrameError, Limits,
    ProjectionError, ProtocolVersion, Received, Refused, V0_9Schema, VersionedSession,
    project_v0_9,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn schema() -> &'static V0_9Schema {
    V0_9Schema::shared().expect("the v0.9 schemas compile")
}

fn assert_valid(frame: &Value) {
    let errors = schema().server_to_client_errors(frame);
    assert!(
        errors.is_empty(),
        "{frame} fails the v0.9 schema: {errors:?}"
    );
}

/// What a v0.9 renderer does with its messages: a model per surface (`value` omitted removes).
#[derive(Default)]
struct V09Renderer {
    model: Value,
    created: bool,
    deleted: bool,
    components: Vec<Value>,
}

impl V09Renderer {
    fn take(&mut self, frame: &Value) {
        assert_valid(frame);
        assert_eq!(frame["version"], json!("v0.9"));
        if let Some(create) = frame.get("createSurface") {
            assert!(!self.created, "createSurface twice");
            assert_eq!(create["catalogId"], json!(BASIC_CATALOG_V0_9_ID));
            self.created = true;
            self.model = json!({});
        } else if let Some(update) = frame.get("updateComponents") {
            assert!(self.created);
            self.components = update["components"].as_array().unwrap().clone();
        } else if let Some(update) = frame.get("updateDataModel") {
            assert!(self.created);
            let update = loom_plugin_a2ui::UpdateDataModel {
                surface_id: update["surfaceId"].as_str().unwrap().to_owned(),
                path: update["path"].as_str().map(str::to_owned),
                value: update.get("value").cloned().unwrap_or(Value::Null),
            };
            assert!(update.apply_to(&mut self.model));
        } else if frame.get("deleteSurface").is_some() {
            self.deleted = true;
        } else {
            panic!("not a v0.9 message: {frame}");
        }
    }
}

fn connection(user: &str, execution: &str) -> Connection {
    Connection {
        execution: execution.into(),
        surface_id: SURFACE.into(),
        credentials: [("user".to_owned(), user.to_owned())].into(),
        answers: None,
        ..Connection::default()
    }
}

async fn open(
    w: &World,
    user: &str,
    execution: &str,
    protocol: ProtocolVersion,
) -> VersionedSession {
    w.edge
        .open_versioned(&w.runtime, &connection(user, execution), protocol)
        .await
        .unwrap()
}

fn v09_action(component: &str, name: &str, context: Value) -> Vec<u8> {
    json!({"version": "v0.9", "action": {"name": name, "surfaceId": SURFACE, "sourceComponentId": component, "timestamp": "2026-12-01T00:00:00Z", "context": context}})
        .to_string()
        .into_bytes()
}

fn reply(call_id: &str, value: Value) -> Vec<u8> {
    json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call_id, "value": value}})
        .to_string()
        .into_bytes()
}

#[tokio::test]
async fn a_v0_9_session_draws_the_checkout_refuses_its_function_call_and_approves_through_the_binding()
 {
    let w = world(Limits::default());
    let a = w.start("checkout", "order-a").await;
    let mut lit = open(&w, "alice", "order-a", ProtocolVersion::V0_9).await;
    assert_eq!(lit.protocol(), ProtocolVersion::V0_9);
    let (frames, refused) = lit.take_initial();
    // createSurface, updateComponents, updateDataModel at `/`; the open getLocale refused.
    assert_eq!(frames.len(), 3, "{frames:?}");
    assert_eq!(
        refused,
        vec![ProjectionError::NoSuchMessage {
            kind: "callRendererFunction",
            call_id: Some(format!("{a}:getLocale#1")),
        }]
    );
    assert!(refused[0].to_string().contains("v0.9 cannot carry"));
    let mut renderer = V09Renderer::default();
    frames.iter().for_each(|f| renderer.take(f));
    assert_eq!(renderer.model, w.hub.model(&a, SURFACE).unwrap_masked());
    // The Badge is a caption Text on v0.9; bindings are `{"path"}`.
    let badge = renderer
        .components
        .iter()
        .find(|c| c["id"] == "badge")
        .unwrap();
    assert_eq!(badge["component"], json!("Text"));
    assert_eq!(badge["text"], json!({"path": "/order/status"}));

    // A v1.0 session of the same binding answers the call the v0.9 one cannot: nothing lost.
    let mut functions = open(&w, "alice", "order-a", ProtocolVersion::V1_0).await;
    let _ = functions.take_initial();
    functions
        .receive(
            &w.runtime,
            &reply(&format!("{a}:getLocale#1"), json!("fr-CH")),
        )
        .await
        .unwrap();
    let _ = w.runtime.wait(&a).await;
    // The locale reaches the v0.9 renderer as an update.
    let update = lit.next().await.unwrap();
    assert!(update.refused.is_none());
    update.frames.iter().for_each(|f| renderer.take(f));
    update.written();
    assert_eq!(renderer.model, w.hub.model(&a, SURFACE).unwrap_masked());

    // Forged and malformed v0.9 frames: refused, nothing recorded, the session stays open.
    let before = w.log_len(&a).await;
    let forged: Vec<(Vec<u8>, &str)> = vec![
        (v09_action("approve", "approve", json!({"total": 1})), "a forged context"),
        (v09_action("approve", "approve", json!({})), "a missing context"),
        (v09_action("nope", "approve", json!({"total": 42})), "an unknown component"),
        (v09_action("approve", "reject", json!({"total": 42})), "another action"),
        (
            json!({"version": "v0.9", "action": {"name": "approve", "surfaceId": "elsewhere", "sourceComponentId": "approve", "timestamp": "t", "context": {"total": 42}}}).to_string().into_bytes(),
            "another surface",
        ),
    ];
    for (frame, what) in forged {
        let refused = lit.receive(&w.runtime, &frame).await;
        assert!(
            matches!(refused, Err(Refused::Ingest(_))),
            "{what}: {refused:?}"
        );
    }
    let malformed: Vec<(Vec<u8>, &str)> = vec![
        (b"not json".to_vec(), "not JSON"),
        (v09_action("approve", "approve", json!({"total": 42})).iter().map(|b| if *b == b'9' { b'8' } else { *b }).collect(), "another version"),
        (json!({"version": "v1.0", "action": {}}).to_string().into_bytes(), "a v1.0 message"),
        (json!({"version": "v0.9", "rendererFunctionResponse": {"functionCallId": format!("{a}:getLocale#1"), "value": "xx"}}).to_string().into_bytes(), "a function reply"),
        (json!({"version": "v0.9", "callAgentFunction": {}}).to_string().into_bytes(), "an agent call"),
        (json!({"version": "v0.9"}).to_string().into_bytes(), "no message"),
        (json!({"version": "v0.9", "action": {"name": "approve"}, "error": {}}).to_string().into_bytes(), "two messages"),
        (json!({"version": "v0.9", "action": {"name": "approve", "surfaceId": SURFACE, "sourceComponentId": "approve", "timestamp": "t", "context": {"total": 42}, "admin": true}}).to_string().into_bytes(), "an extra field"),
        (json!(["v0.9"]).to_string().into_bytes(), "an array"),
    ];
    for (frame, what) in malformed {
        let refused = lit.receive(&w.runtime, &frame).await;
        match refused {
            Err(Refused::WireV0_9(error)) => {
                assert!(
                    Refused::WireV0_9(error.clone())
                        .to_string()
                        .starts_with("not an A2UI v0.9 renderer message"),
                    "{what}"
                );
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    assert_eq!(w.log_len(&a).await, before, "nothing recorded");

    // The click a v0.9 renderer computes resumes the gate, once.
    let accepted = lit
        .receive(
            &w.runtime,
            &v09_action("approve", "approve", json!({"total": 42})),
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
        ExecutionStatus::Completed
    );
    let twice = lit
        .receive(
            &w.runtime,
            &v09_action("approve", "approve", json!({"total": 42})),
        )
        .await;
    assert!(matches!(twice, Err(Refused::Ingest(_))), "{twice:?}");
    // One update per touched pointer (status, version).
    for _ in 0..2 {
        let update = lit.next().await.unwrap();
        update.frames.iter().for_each(|f| renderer.take(f));
    }
    assert_eq!(renderer.model["order"]["status"], json!("placed"));
    assert_eq!(renderer.model, w.hub.model(&a, SURFACE).unwrap_masked());
}

trait Masked {
    fn unwrap_masked(self) -> Value;
}

impl Masked for Option<Value> {
    /// The hub's model as a renderer sees it: the classified card masked.
    fn unwrap_masked(self) -> Value {
        let mut model = self.unwrap();
        if model.pointer("/customer/card").is_some() {
            model["customer"]["card"] = json!("***");
        }
        if let Some(items) = model
            .pointer_mut("/order/items")
            .and_then(Value::as_array_mut)
        {
            for item in items {
                if item.get("secret").is_some() {
                    item["secret"] = json!("***");
                }
            }
        }
        model
    }
}

#[tokio::test(start_paused = true)]
async fn a_grain_b_call_is_never_sent_to_a_v0_9_session_and_waits_for_one_that_can_answer() {
    let w = world(Limits::default());
    let e = w.start_confirm("ask").await;
    let mut lit = open(&w, "alice", "ask", ProtocolVersion::V0_9).await;
    let (frames, _) = lit.take_initial();
    frames.iter().for_each(assert_valid);
    // Whatever the v0.9 session receives before the deadline, it is never the call.
    let nothing = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(out) = lit.next().await {
            assert!(out.refused.is_none(), "{:?}", out.refused);
            out.frames.iter().for_each(assert_valid);
            out.written();
        }
    })
    .await;
    assert!(
        nothing.is_err(),
        "the v0.9 session stays open and gets no call"
    );
    // A v1.0 session opens in time: it gets the request and its answer completes the step.
    let mut functions = open(&w, "alice", "ask", ProtocolVersion::V1_0).await;
    let _ = functions.take_initial();
    let call = loop {
        let out = functions.next().await.unwrap();
        if let AgentMessage::CallRendererFunction(call) = out.message().clone() {
            assert_eq!(out.frames, vec![out.message().to_value()]);
            out.written();
            break call;
        }
    };
    functions
        .receive(&w.runtime, &reply(&call.function_call_id, json!(true)))
        .await
        .unwrap();
    let state = w.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_malformed_v0_9_frames_meets_the_same_rate_limit() {
    let w = world(Limits {
        messages_per_second: 2,
        burst: 3,
        ..Limits::default()
    });
    w.start("checkout", "order-a").await;
    let mut lit = open(&w, "alice", "order-a", ProtocolVersion::V0_9).await;
    let mut closed = None;
    for _ in 0..10 {
        let refused = lit.receive(&w.runtime, b"{\"version\":\"v0.9\"}").await;
        let Err(refused) = refused else {
            panic!("a message without a kind is refused");
        };
        if let Some(code) = refused.close_code() {
            assert!(matches!(
                refused,
                Refused::Frame(FrameError::RateExceeded { .. })
            ));
            closed = Some(code);
            break;
        }
    }
    assert_eq!(closed, Some(loom_plugin_a2ui::close_codes::POLICY));
    let huge = vec![b' '; Limits::default().max_frame_bytes + 1];
    let w = world(Limits::default());
    w.start("checkout", "order-a").await;
    let mut lit = open(&w, "alice", "order-a", ProtocolVersion::V0_9).await;
    let refused = lit.receive(&w.runtime, &huge).await;
    assert!(
        matches!(refused, Err(Refused::Frame(FrameError::TooLarge { .. }))),
        "{refused:?}"
    );
}

#[test]
fn components_of_other_catalogs_and_function_replies_are_refused_never_projected() {
    let mut bridge = A2UISurfaceBridge::new(SURFACE, catalogs(), classification());
    let create = bridge
        .create_surface(components(), json!({"order": order()}))
        .unwrap();
    project_v0_9(&create).unwrap().iter().for_each(assert_valid);
    let foreign = AgentMessage::UpdateComponents(loom_plugin_a2ui::UpdateComponents {
        surface_id: SURFACE.into(),
        components: vec![json!({"id": "map", "component": "Map", "catalogId": "urn:example:maps"})],
    });
    assert!(matches!(
        project_v0_9(&foreign),
        Err(ProjectionError::UnsupportedComponent { .. })
    ));
    let call = bridge
        .call_function(Some(TEST_CATALOG), "getLocale", Map::new(), "e:getLocale#1")
        .unwrap();
    assert!(matches!(
        project_v0_9(&call),
        Err(ProjectionError::NoSuchMessage { .. })
    ));
    project_v0_9(&bridge.delete_surface().unwrap())
        .unwrap()
        .iter()
        .for_each(assert_valid);
    // The schema does refuse: a component v0.9's basic catalog lacks.
    assert!(!schema()
        .server_to_client_errors(&json!({"version": "v0.9", "updateComponents": {"surfaceId": "s", "components": [{"id": "root", "component": "Badge", "text": "x"}]}}))
        .is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every v0.9 message projected from random op batches validates, and a v0.9 renderer's
    /// model follows the bridge's masked fold.
    #[test]
    fn v0_9_messages_from_random_ops_validate_and_follow_the_fold(batches in prop::collection::vec(prop::collection::vec(op_strategy(), 1..4), 1..12)) {
        let mut bridge = A2UISurfaceBridge::new(SURFACE, catalogs(), classification());
        let mut renderer = V09Renderer::default();
        for frame in project_v0_9(&bridge.create_surface(components(), json!({"a": {}})).unwrap()).unwrap() {
            renderer.take(&frame);
        }
        for batch in batches {
            let ops: Vec<SurfaceOp> = batch.iter().filter_map(|v| SurfaceOp::from_value(v).ok()).collect();
            if let Ok(messages) = bridge.apply_ops(&ops) {
                for message in &messages {
                    for frame in project_v0_9(message).unwrap() {
                        renderer.take(&frame);
                    }
                }
            }
        }
        let mut v1 = json!({});
        for message in [bridge.snapshot()] {
            if let AgentMessage::CreateSurface(create) = message {
                v1 = Value::Object(create.data_model.unwrap_or_default());
            }
        }
        prop_assert_eq!(renderer.model, v1);
    }
}

fn op_strategy() -> impl Strategy<Value = Value> {
    let path = prop::collection::vec(prop::sample::select(vec!["a", "b", "0", "card"]), 1..3)
        .prop_map(|k| k.join("."));
    let value = prop_oneof![
        any::<i32>().prop_map(Value::from),
        "[a-z]{0,4}".prop_map(Value::from),
        Just(json!({})),
        Just(json!([])),
    ];
    prop_oneof![
        (path.clone(), value.clone())
            .prop_map(|(p, v)| json!({"op": "set", "path": p, "value": v})),
        (path.clone(), value).prop_map(|(p, v)| json!({"op": "append", "path": p, "value": v})),
        path.clone()
            .prop_map(|p| json!({"op": "remove", "path": p})),
        path.prop_map(|p| json!({"op": "increment", "path": p, "by": 1})),
    ]
}
