//! Flows, catalogs and helpers shared by the plugin's tests and the interop driver.
#![allow(dead_code)]

use std::sync::OnceLock;

use loom_agent_surface::SurfaceExt;
use loom_kernel::DataClassification;
use loom_kernel::MemoryStore;
use loom_kernel::{ExecutionId, FlowCtx, FlowError, Runtime, StartOptions, flow_fn};
use loom_plugin_a2ui::{
    AllowedCallers, CatalogDef, Catalogs, LOOM_CATALOG_ID, SurfaceHub, UpdateDataModel,
    call_and_wait, define_catalog, define_function,
};
use serde_json::{Map, Value, json};

/// The catalog of the functions the tests call.
pub const TEST_CATALOG: &str = "urn:loom:a2ui:catalog:test:v1";
/// The surface the checkout flow drives.
pub const SURFACE: &str = "checkout";

pub fn test_catalog() -> CatalogDef {
    define_catalog(TEST_CATALOG)
        .title("Functions the tests call")
        .function(
            define_function("getLocale")
                .returns("string", json!({"type": "string", "minLength": 2}))
                .max_reply_bytes(256)
                .allowed_callers(AllowedCallers::AgentOnly),
        )
        .function(
            define_function("confirm")
                .args(json!({"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"], "additionalProperties": false}))
                .returns("boolean", json!({"type": "boolean"}))
                .allowed_callers(AllowedCallers::RendererOrAgent),
        )
        .function(
            define_function("formatThing")
                .returns("string", json!({"type": "string"}))
                .allowed_callers(AllowedCallers::RendererOnly),
        )
}

pub fn catalogs() -> Catalogs {
    static CATALOGS: OnceLock<Catalogs> = OnceLock::new();
    CATALOGS
        .get_or_init(|| {
            Catalogs::default_with([test_catalog()]).expect("the test catalogs compile")
        })
        .clone()
}

pub fn classification() -> DataClassification {
    DataClassification::mask_paths(["customer.card", "order.items.*.secret"])
        .expect("the classified paths parse")
}

pub fn components() -> Vec<Value> {
    vec![
        json!({"id": "root", "component": "Column", "children": ["title", "status", "badge", "approve"]}),
        json!({"id": "title", "component": "Text", "text": {"@path": "/order/title"}}),
        json!({"id": "status", "component": "Text", "text": {"@path": "/order/status"}}),
        json!({"id": "badge", "component": "Badge", "catalogId": LOOM_CATALOG_ID, "text": {"@path": "/order/status"}, "tone": "info"}),
        json!({"id": "approve_label", "component": "Text", "text": "Approve"}),
        json!({"id": "approve", "component": "Button", "child": "approve_label", "action": {"event": {"name": "approve", "context": {"total": {"@path": "/order/total"}}}}}),
    ]
}

pub fn hub() -> SurfaceHub {
    SurfaceHub::one_surface(catalogs(), classification(), SURFACE, components())
}

/// Shows an order, asks the renderer for its locale (grain A), waits for the Approve button,
/// then marks the order placed.
pub async fn checkout(ctx: FlowCtx, order: Value) -> Result<Value, FlowError> {
    let ui = ctx.surface(SURFACE);
    ui.patch()
        .set("order", &order)
        .set(
            "customer",
            json!({"name": "Ada", "card": "4111 1111 1111 1111"}),
        )
        .emit()?;
    let locale = call_and_wait(
        &ctx,
        &catalogs(),
        SURFACE,
        Some(TEST_CATALOG),
        "getLocale",
        Map::new(),
    )
    .await?;
    ui.set("order.locale", &locale)?;
    let approved = ctx.suspend("A2UIAction", "approve").await?;
    ui.patch()
        .set("order.status", "placed")
        .increment("order.version", 1)
        .emit()?;
    Ok(json!({"locale": locale, "approved": approved.to_value()}))
}

pub fn order() -> Value {
    json!({"title": "Order 7", "status": "pending", "total": 42, "version": 0, "items": [{"sku": "A1", "secret": "s3"}]})
}

pub fn runtime(store: MemoryStore, hub: &SurfaceHub) -> Runtime<MemoryStore> {
    Runtime::builder(store)
        .flow(flow_fn("checkout", 1, checkout))
        .plugin(hub)
        .build()
        .expect("the runtime composes")
}

/// A `checkout` started as `execution` on a fresh memory store, once it waits on the renderer:
/// the store, the hub, the runtime and the execution.
pub async fn checkout_started(
    execution: &str,
) -> (MemoryStore, SurfaceHub, Runtime<MemoryStore>, ExecutionId) {
    let store = MemoryStore::new();
    let (hub, runtime, e) = checkout_started_on(store.clone(), execution).await;
    (store, hub, runtime, e)
}

/// A `checkout` started as `execution` on `store` by a new hub and runtime, once it waits on
/// the renderer: the hub, the runtime and the execution.
pub async fn checkout_started_on(
    store: MemoryStore,
    execution: &str,
) -> (SurfaceHub, Runtime<MemoryStore>, ExecutionId) {
    let hub = hub();
    let runtime = runtime(store, &hub);
    let e = ExecutionId::new(execution).expect("an execution id");
    runtime
        .start("checkout", &order(), StartOptions::new(e.clone()))
        .await
        .expect("the checkout starts");
    let _ = runtime.wait(&e).await;
    (hub, runtime, e)
}

/// What a renderer does with `updateDataModel` ([`UpdateDataModel::apply_to`]); the pointer's
/// parent must exist and hold the value.
pub fn apply_update(model: &mut Value, path: &str, value: Value) {
    let update = UpdateDataModel {
        surface_id: SURFACE.to_owned(),
        path: Some(path.to_owned()),
        value,
    };
    assert!(update.apply_to(model), "cannot write at {path}");
}
