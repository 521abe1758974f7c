//! The protocol items a renderer relies on: a flow changes its components through the log
//! (`updateComponents`, v1.0 and v0.9), call args leave masked like the model, the renderer's
//! catalogs are read and a surface it cannot draw is refused before `createSurface`, and a
//! renderer that may still hold the surface gets `deleteSurface` first.

use std::time::Duration;

use crate::edge::Users;
use crate::support::*;
use loom_agent_surface::SurfaceExt;
use loom_effect_runtime::EffectRegistry;
use loom_kernel::{Event, EventStoreExt, ExecutionId, MemoryStore, Payload, Runtime};
use loom_kernel::{FlowCtx, FlowError, StartOptions, flow_fn};
use loom_plugin_a2ui::{
    AgentMessage, AllowedCallers, BASIC_CATALOG_ID, BASIC_CATALOG_V0_9_ID, CALL_FUNCTION_EFFECT,
    COMPONENTS_DECISION, CallFunctionInput, CallFunctionOptions, Catalogs, Connection,
    LOOM_CATALOG_ID, MessageSchema, OpenError, ProtocolVersion, RendererEdge, SurfaceHub,
    V0_9Schema, call_and_wait, define_catalog, define_function, project_v0_9,
    register_a2ui_call_function, update_components,
};
use serde_json::{Map, Value, json};

const CARD: &str = "4111 1111 1111 1111";
const NOTES: &str = "urn:loom:a2ui:catalog:notes:v1";

fn notes_catalogs() -> Catalogs {
    Catalogs::default_with([define_catalog(NOTES).function(
        define_function("remember")
            .args(json!({"type": "object"}))
            .returns("boolean", json!({"type": "boolean"}))
            .allowed_callers(AllowedCallers::AgentOnly),
    )])
    .unwrap()
}

fn changed_components() -> Vec<Value> {
    vec![
        json!({"id": "title", "component": "Text", "text": "Changed"}),
        json!({"id": "extra", "component": "Text", "text": {"@path": "/customer/name"}}),
        json!({"id": "root", "component": "Column", "children": ["title", "status", "badge", "approve", "extra"]}),
    ]
}

/// Shows a customer, waits for `proceed`, changes its components, then asks the renderer to
/// `remember` the card: grain A, then grain B.
async fn evolve(ctx: FlowCtx, _input: Value) -> Result<Value, FlowError> {
    let ui = ctx.surface(SURFACE);
    ui.patch()
        .set("order", order())
        .set("customer", json!({"name": "Ada", "card": CARD}))
        .emit()?;
    ctx.suspend("proceed", "go").await?;
    update_components(&ctx, &notes_catalogs(), SURFACE, changed_components())?;
    let mut args = Map::new();
    args.insert("card".into(), json!(CARD));
    args.insert("customer".into(), json!({"card": CARD, "name": "Ada"}));
    args.insert("note".into(), json!("keep"));
    call_and_wait(
        &ctx,
        &notes_catalogs(),
        SURFACE,
        Some(NOTES),
        "remember",
        args.clone(),
    )
    .await?;
    let again: Value = ctx
        .call(
            CALL_FUNCTION_EFFECT,
            &CallFunctionInput {
                surface_id: SURFACE.into(),
                catalog_id: Some(NOTES.into()),
                name: "remember".into(),
                args,
            },
        )
        .await?;
    Ok(again)
}

/// Tries to show a component no catalog defines: refused, nothing recorded.
async fn unknown_component(ctx: FlowCtx, _input: Value) -> Result<Value, FlowError> {
    let refused = update_components(
        &ctx,
        &notes_catalogs(),
        SURFACE,
        vec![json!({"id": "title", "component": "Marquee", "text": "x"})],
    );
    Ok(json!(refused.err().map(|e| e.to_string())))
}

struct World {
    store: MemoryStore,
    hub: SurfaceHub,
    edge: RendererEdge,
    runtime: Runtime<MemoryStore>,
}

fn world() -> World {
    let store = MemoryStore::new();
    let hub = SurfaceHub::one_surface(notes_catalogs(), classification(), SURFACE, components());
    let edge = RendererEdge::new(
        hub.clone(),
        Users(vec![("alice", "evolve-1"), ("alice", "bad-1")]),
    );
    let mut effects = EffectRegistry::new();
    register_a2ui_call_function(
        &mut effects,
        edge.transport(),
        CallFunctionOptions::new(notes_catalogs()).request_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let runtime = Runtime::builder(store.clone())
        .flow(flow_fn("evolve", 1, evolve))
        .flow(flow_fn("bad", 1, unknown_component))
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
    async fn start(&self, flow: &str, execution: &str) -> ExecutionId {
        let e = ExecutionId::new(execution).unwrap();
        self.runtime
            .start(
                flow,
                &json!({}),
                StartOptions::new(e.clone()).grant(CALL_FUNCTION_EFFECT),
            )
            .await
            .unwrap();
        // Until it waits (a gate) or ends.
        let _ = self.runtime.wait(&e).await;
        e
    }

    fn connection(&self, execution: &str) -> Connection {
        Connection {
            execution: execution.into(),
            surface_id: SURFACE.into(),
            credentials: [("user".to_owned(), "alice".to_owned())].into(),
            ..Connection::default()
        }
    }

    async fn decisions(&self, e: &ExecutionId, kind: &str) -> Vec<Value> {
        self.store
            .read_all(e)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|envelope| match envelope.event {
                Event::DecisionRecorded(d) if d.kind == kind => Some(d.value.to_value()),
                _ => None,
            })
            .collect()
    }
}

fn reply(call_id: &str, value: Value) -> Vec<u8> {
    json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call_id, "value": value}})
        .to_string()
        .into_bytes()
}

fn component_ids(components: &[Value]) -> Vec<&str> {
    components.iter().filter_map(|c| c["id"].as_str()).collect()
}

#[tokio::test]
async fn a_flow_changes_its_components_through_the_log_and_call_args_leave_masked() {
    let w = world();
    let e = w.start("evolve", "evolve-1").await;
    let mut session = w
        .edge
        .open(&w.runtime, &w.connection("evolve-1"))
        .await
        .unwrap();
    let initial = session.take_initial();
    let AgentMessage::CreateSurface(create) = &initial[0] else {
        panic!("{initial:?}")
    };
    assert_eq!(
        create.data_model.as_ref().unwrap()["customer"]["card"],
        json!("***")
    );
    w.runtime
        .resume(&e, "proceed", "go", Payload::from(json!(null)))
        .await
        .unwrap();
    let schema = MessageSchema::new(&notes_catalogs()).unwrap();

    // The change arrives as `updateComponents`, valid v1.0 and projected to valid v0.9.
    let update = session.next().await.unwrap();
    let AgentMessage::UpdateComponents(changed) = &update.message else {
        panic!("{:?}", update.message)
    };
    assert_eq!(
        component_ids(&changed.components),
        ["title", "extra", "root"]
    );
    let value = update.message.to_value();
    assert_eq!(schema.errors(&value), Vec::<String>::new());
    let v0_9 = project_v0_9(&update.message).unwrap();
    let v0_9_schema = V0_9Schema::shared().unwrap();
    for frame in &v0_9 {
        assert_eq!(
            v0_9_schema.server_to_client_errors(frame),
            Vec::<String>::new()
        );
    }
    assert_eq!(
        v0_9[0]["updateComponents"]["components"][1]["text"],
        json!({"path": "/customer/name"})
    );

    // Grain A: the request leaves masked; the log keeps the card.
    let request = session.next().await.unwrap();
    let AgentMessage::CallRendererFunction(call) = &request.message else {
        panic!("{:?}", request.message)
    };
    let sent = call.call.args.clone().unwrap();
    assert_eq!(sent["card"], json!("***"));
    assert_eq!(sent["customer"], json!({"card": "***", "name": "Ada"}));
    assert_eq!(sent["note"], json!("keep"));
    assert_eq!(
        schema.errors(&request.message.to_value()),
        Vec::<String>::new()
    );
    let recorded = w.decisions(&e, loom_kernel::kit::REQUEST_KIND).await;
    assert_eq!(recorded[0]["args"]["card"], json!(CARD));
    let call_id = call.function_call_id.clone();
    session
        .receive(&w.runtime, &reply(&call_id, json!(true)))
        .await
        .unwrap();

    // Grain B through the edge's transport: masked too.
    let request = session.next().await.unwrap();
    let AgentMessage::CallRendererFunction(call) = &request.message else {
        panic!("{:?}", request.message)
    };
    let call_id = call.function_call_id.clone();
    assert_eq!(call.call.args.as_ref().unwrap()["card"], json!("***"));
    assert_eq!(
        call.call.args.as_ref().unwrap()["customer"]["card"],
        json!("***")
    );
    request.written();
    session
        .receive(&w.runtime, &reply(&call_id, json!(true)))
        .await
        .unwrap();
    let done = w.runtime.wait(&e).await.unwrap();
    assert_eq!(done.status(), loom_kernel::ExecutionStatus::Completed);

    // A later renderer gets the changed tree whole; so does a hub rebuilt from the log.
    let late = w.hub.subscribe(&w.store, &e, SURFACE).await.unwrap();
    let AgentMessage::CreateSurface(create) = &late.initial[0] else {
        panic!("{:?}", late.initial)
    };
    let tree = create.components.clone().unwrap();
    assert!(tree.contains(&json!({"id": "title", "component": "Text", "text": "Changed"})));
    assert!(component_ids(&tree).contains(&"extra"));
    let rebuilt =
        SurfaceHub::one_surface(notes_catalogs(), classification(), SURFACE, components());
    let replayed = rebuilt.subscribe(&w.store, &e, SURFACE).await.unwrap();
    assert_eq!(replayed.initial[0], late.initial[0]);
    assert_eq!(w.decisions(&e, COMPONENTS_DECISION).await.len(), 1);
}

#[tokio::test]
async fn components_no_catalog_defines_are_refused_and_record_nothing() {
    let w = world();
    let e = w.start("bad", "bad-1").await;
    let output = w
        .runtime
        .wait(&e)
        .await
        .unwrap()
        .output()
        .unwrap()
        .to_value();
    assert!(
        output.as_str().unwrap().contains("Marquee"),
        "the refusal names the component: {output}"
    );
    assert!(w.decisions(&e, COMPONENTS_DECISION).await.is_empty());
}

#[tokio::test]
async fn a_renderer_that_lacks_a_catalog_of_the_surface_is_refused_before_create_surface() {
    let w = world();
    let e = w.start("evolve", "evolve-1").await;
    let before = w.store.read_all(&e).await.unwrap().len();
    let mut connection = w.connection("evolve-1");
    // The surface shows Loom's Badge: the basic catalog alone cannot draw it.
    connection.supported_catalogs = Some(vec![BASIC_CATALOG_ID.to_owned()]);
    for protocol in [ProtocolVersion::V1_0] {
        let refused = w
            .edge
            .open_versioned(&w.runtime, &connection, protocol)
            .await;
        let Err(error) = refused else {
            panic!("opened without the catalog")
        };
        assert!(
            matches!(&error, OpenError::UnsupportedCatalogs { missing, .. } if missing == &vec![LOOM_CATALOG_ID.to_owned()]),
            "{error:?}"
        );
        assert_eq!(error.close_code(), 1008);
        assert!(error.to_string().contains(LOOM_CATALOG_ID));
    }
    // A v0.9 renderer needs v0.9's basic catalog, whatever else it lists.
    connection.supported_catalogs = Some(vec![
        BASIC_CATALOG_ID.to_owned(),
        LOOM_CATALOG_ID.to_owned(),
    ]);
    assert!(matches!(
        w.edge
            .open_versioned(&w.runtime, &connection, ProtocolVersion::V0_9)
            .await,
        Err(OpenError::UnsupportedCatalogs { .. })
    ));
    // An empty list, as a capabilities document may carry, supports nothing.
    connection.supported_catalogs = Some(Vec::new());
    assert!(w.edge.open(&w.runtime, &connection).await.is_err());
    assert_eq!(
        w.edge.session_count(),
        0,
        "nothing kept for a refused renderer"
    );
    assert_eq!(w.hub.subscriber_count(), 0);
    assert_eq!(w.store.read_all(&e).await.unwrap().len(), before);

    // The renderer that lists them is served, in either version.
    connection.supported_catalogs = Some(vec![
        BASIC_CATALOG_ID.to_owned(),
        LOOM_CATALOG_ID.to_owned(),
    ]);
    let mut v1 = w.edge.open(&w.runtime, &connection).await.unwrap();
    assert!(matches!(
        v1.take_initial()[0],
        AgentMessage::CreateSurface(_)
    ));
    connection.supported_catalogs = Some(vec![BASIC_CATALOG_V0_9_ID.to_owned()]);
    let mut v0_9 = w
        .edge
        .open_versioned(&w.runtime, &connection, ProtocolVersion::V0_9)
        .await
        .unwrap();
    assert!(v0_9.take_initial().0[0].get("createSurface").is_some());
    // What a capabilities document lists is what is read.
    let capabilities = json!({"v1.0": {"supportedCatalogIds": [BASIC_CATALOG_ID]}});
    assert_eq!(
        ProtocolVersion::V1_0.supported_catalogs(&capabilities),
        Some(vec![BASIC_CATALOG_ID.to_owned()])
    );
}

#[tokio::test]
async fn a_renderer_that_may_still_hold_the_surface_gets_delete_surface_first() {
    let w = world();
    let e = w.start("evolve", "evolve-1").await;
    let wire_id = w.hub.wire_id(&e, SURFACE);
    let mut first = w
        .edge
        .open(&w.runtime, &w.connection("evolve-1"))
        .await
        .unwrap();
    let initial = first.take_initial();
    assert!(
        matches!(initial[0], AgentMessage::CreateSurface(_)),
        "a new renderer holds nothing"
    );
    drop(first);
    let mut connection = w.connection("evolve-1");
    connection.reconnect = true;
    let mut again = w.edge.open(&w.runtime, &connection).await.unwrap();
    let initial = again.take_initial();
    assert_eq!(
        initial[0],
        AgentMessage::DeleteSurface(loom_plugin_a2ui::DeleteSurface {
            surface_id: wire_id.clone()
        })
    );
    assert!(matches!(&initial[1], AgentMessage::CreateSurface(c) if c.surface_id == wire_id));
    let schema = MessageSchema::new(&notes_catalogs()).unwrap();
    for message in &initial {
        assert_eq!(schema.errors(&message.to_value()), Vec::<String>::new());
    }
    drop(again);
    // On v0.9 too.
    let mut v0_9 = w
        .edge
        .open_versioned(&w.runtime, &connection, ProtocolVersion::V0_9)
        .await
        .unwrap();
    let (frames, refused) = v0_9.take_initial();
    assert!(refused.is_empty());
    assert_eq!(frames[0]["deleteSurface"]["surfaceId"], json!(wire_id));
    assert!(frames[1].get("createSurface").is_some());
}
