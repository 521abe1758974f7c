//! The application: catalogs, the checkout surface, the `checkout` flow, the composition.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use loom_agent_surface::SurfaceExt;
use loom_effect_runtime::EffectRegistry;
use loom_kernel::DataClassification;
use loom_kernel::{EventStore, Payload};
use loom_kernel::{FlowCtx, FlowError, FlowSet, GateOutcome, Runtime, RuntimeBuilder, flow_fn};
use loom_plugin_a2ui::{
    AllowedCallers, CALL_FUNCTION_EFFECT, CallFunctionInput, CallFunctionOptions, CatalogDef,
    Catalogs, LOOM_CATALOG_ID, SurfaceHub, Transport, call_and_wait, define_catalog,
    define_function, delete_surface, per_execution_wire_id, register_a2ui_call_function,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The flow's name.
pub const FLOW: &str = "checkout";
/// The surface the flow drives.
pub const SURFACE: &str = "checkout";
/// The catalog of the functions the renderer implements for this app.
pub const SHOP_CATALOG: &str = "urn:loom:example:shop:v1";
/// The gate the Approve button resumes (`A2UIAction`, keyed by the action's name).
pub const APPROVE_EVENT: &str = "A2UIAction";
/// The Approve button's action name.
pub const APPROVE: &str = "approve";
/// How long the flow waits for the Approve button.
pub const APPROVE_TIMEOUT: Duration = Duration::from_secs(600);
/// How long `submitOrder` may take before its step fails.
pub const SUBMIT_TIMEOUT: Duration = Duration::from_secs(30);
/// The card number of the demo order: it lives in the data model and never leaves (K10-R6).
pub const CARD_NUMBER: &str = "4111 1111 1111 1111";

/// The functions this app's renderer implements: a read and a side-effecting submit.
pub fn shop_catalog() -> CatalogDef {
    define_catalog(SHOP_CATALOG)
        .title("Checkout functions the renderer implements")
        .function(
            define_function("getLocale")
                .description("The user's locale, a BCP 47 tag (a read).")
                .returns("string", json!({"type": "string", "minLength": 2, "maxLength": 35}))
                .allowed_callers(AllowedCallers::AgentOnly)
                // A locale tag in a reply: every later createSurface of the execution carries
                // it, so a renderer may not make it weigh more.
                .max_reply_bytes(512),
        )
        .function(
            define_function("submitOrder")
                .description("Places the order with the shop (side-effecting, not idempotent: dedup on the call id).")
                .max_reply_bytes(4096)
                .args(json!({
                    "type": "object",
                    "properties": {
                        "orderId": {"type": "string"},
                        "total": {"type": "number"},
                        "locale": {"type": "string"}
                    },
                    "required": ["orderId", "total"],
                    "additionalProperties": false
                }))
                .returns("object", json!({
                    "type": "object",
                    "properties": {
                        "confirmation": {"type": "string"},
                        "placed": {"type": "boolean"}
                    },
                    "required": ["confirmation", "placed"]
                }))
                .allowed_callers(AllowedCallers::AgentOnly),
        )
}

/// The default catalogs (basic Text/Column/Row/List/Button, Loom's Badge) plus the shop's.
pub fn catalogs() -> Catalogs {
    static CATALOGS: OnceLock<Catalogs> = OnceLock::new();
    CATALOGS
        .get_or_init(|| {
            // The catalogs are constants of this program: they compile or the program is wrong.
            #[allow(clippy::expect_used)]
            Catalogs::default_with([shop_catalog()]).expect("the example's catalogs compile")
        })
        .clone()
}

/// The masked paths: the card number is replaced on the wire; the fold keeps it.
pub fn classification() -> DataClassification {
    #[allow(clippy::expect_used)]
    DataClassification::mask_paths(["payment.card"]).expect("the classified paths parse")
}

/// What leaves this program for people (the narration, the operator's views, the store's `.masks`
/// file the `loom` CLI reads): the surface's classified paths, and the card in the flow's input,
/// which the surface's classification (rooted at the data model) does not cover.
pub fn operator_classification() -> &'static DataClassification {
    static CLASSIFICATION: std::sync::OnceLock<DataClassification> = std::sync::OnceLock::new();
    CLASSIFICATION.get_or_init(|| {
        let mut paths = classification().paths().to_vec();
        paths.push("card".to_owned());
        // A constant of this program: it parses or the program is wrong.
        #[allow(clippy::expect_used)]
        DataClassification::mask_paths(paths).expect("the classified paths parse")
    })
}

/// The checkout surface: a Column with a title, the list of items, a status badge, the total and
/// an Approve button.
pub fn components() -> Vec<Value> {
    vec![
        json!({"id": "root", "component": "Column", "children": ["title", "items", "status", "total", "approve"]}),
        json!({"id": "title", "component": "Text", "text": {"@path": "/order/title"}}),
        json!({"id": "items", "component": "List", "children": {"componentId": "item", "path": "/order/items"}}),
        json!({"id": "item", "component": "Text", "text": {"@path": "label"}}),
        json!({"id": "status", "component": "Badge", "catalogId": LOOM_CATALOG_ID, "text": {"@path": "/order/status"}, "tone": "info"}),
        json!({"id": "total", "component": "Text", "text": {"@path": "/order/totalText"}}),
        json!({"id": "approve_label", "component": "Text", "text": "Approve"}),
        json!({"id": "approve", "component": "Button", "child": "approve_label", "variant": "primary",
               "action": {"event": {"name": APPROVE, "context": {"orderId": {"@path": "/order/id"}}}}}),
    ]
}

/// The hub that projects the flow's surface onto the A2UI wire, one surface id per execution
/// there (`checkout@checkout-1`): a renderer may show several executions' checkouts.
pub fn hub() -> SurfaceHub {
    SurfaceHub::one_surface(catalogs(), classification(), SURFACE, components())
        .with_wire_ids(per_execution_wire_id)
}

/// One line of an order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// The article's code.
    pub sku: String,
    /// What the surface shows for it.
    pub label: String,
    /// How many.
    pub qty: u32,
    /// The price of one.
    pub price: f64,
}

/// The flow's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    /// The order's id, which the execution's id is made from.
    pub id: String,
    /// Its lines.
    pub items: Vec<Item>,
    /// The card number: classified, masked in every text that leaves (K10-R6).
    pub card: String,
}

impl Order {
    /// The demo order.
    pub fn demo() -> Self {
        Self {
            id: "order-7".into(),
            items: vec![
                Item {
                    sku: "A1".into(),
                    label: "2 x Loom mug".into(),
                    qty: 2,
                    price: 12.5,
                },
                Item {
                    sku: "B2".into(),
                    label: "1 x Shuttle sticker pack".into(),
                    qty: 1,
                    price: 4.0,
                },
            ],
            card: CARD_NUMBER.into(),
        }
    }

    fn total(&self) -> f64 {
        self.items.iter().map(|i| f64::from(i.qty) * i.price).sum()
    }
}

/// How the wait for the Approve button ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Approval {
    /// The button was pressed; the action's payload.
    Approved(Payload),
    /// No press within [`APPROVE_TIMEOUT`].
    TimedOut,
}

/// Waits for the Approve button: a gate on `A2UIAction` keyed `approve` that closes itself after
/// [`APPROVE_TIMEOUT`] on the kernel's durable timer (the deadline is recorded, survives a
/// restart, and replay takes the same branch without reading the clock).
pub async fn wait_for_approval(ctx: &FlowCtx) -> Result<Approval, FlowError> {
    Ok(
        match ctx
            .suspend_with_timeout(APPROVE_EVENT, APPROVE, APPROVE_TIMEOUT)
            .await?
        {
            GateOutcome::Resumed(payload) => Approval::Approved(payload),
            GateOutcome::TimedOut => Approval::TimedOut,
        },
    )
}

/// The `checkout` flow: shows the order, reads the renderer's locale (grain A, a gate), waits
/// for Approve (with a timeout), submits the order (grain B, an effect, not idempotent), shows
/// the confirmation and deletes the surface.
pub async fn checkout(ctx: FlowCtx, order: Order) -> Result<Value, FlowError> {
    let ui = ctx.surface(SURFACE);
    let total = order.total();
    ui.patch()
        .set(
            "order",
            json!({
                "id": order.id,
                "title": format!("Checkout {}", order.id),
                "items": order.items,
                "total": total,
                "totalText": format!("Total {total:.2}"),
                "status": "reading locale",
            }),
        )
        .set("payment", json!({"card": order.card}))
        .emit()?;

    // Grain A: a read answered through a gate; the request is durable before it is sent.
    let locale = call_and_wait(
        &ctx,
        &catalogs(),
        SURFACE,
        Some(SHOP_CATALOG),
        "getLocale",
        Map::new(),
    )
    .await?;
    ui.patch()
        .set("order.locale", &locale)
        .set("order.status", "awaiting approval")
        .emit()?;

    if let Approval::TimedOut = wait_for_approval(&ctx).await? {
        ui.set("order.status", "expired")?;
        delete_surface(&ctx, SURFACE)?;
        return Ok(json!({"orderId": order.id, "status": "expired"}));
    }
    ui.set("order.status", "submitting")?;

    // Grain B: a side-effecting call as a step; call id = the step's idempotency key.
    let mut args = Map::new();
    args.insert("orderId".into(), json!(order.id));
    args.insert("total".into(), json!(total));
    args.insert("locale".into(), locale.clone());
    let receipt: Value = ctx
        .call(
            CALL_FUNCTION_EFFECT,
            &CallFunctionInput {
                surface_id: SURFACE.into(),
                catalog_id: Some(SHOP_CATALOG.into()),
                name: "submitOrder".into(),
                args,
            },
        )
        .await?;
    ui.patch()
        .set("order.status", "placed")
        .set("order.confirmation", &receipt["confirmation"])
        .emit()?;
    delete_surface(&ctx, SURFACE)?;
    Ok(json!({"orderId": order.id, "status": "placed", "locale": locale, "receipt": receipt}))
}

/// The example's flows, for the runtime and for replay-check.
pub fn flows() -> FlowSet {
    FlowSet::new().with(flow_fn(FLOW, 1, checkout))
}

/// Composes the runtime: the flows, the hub, the `a2ui.callFunction` effect over `transport`,
/// and `extra` plugins (a narrator).
pub fn compose<S: EventStore>(
    store: S,
    hub: &SurfaceHub,
    transport: Arc<dyn Transport>,
) -> anyhow::Result<RuntimeBuilder<S>> {
    let mut effects = EffectRegistry::new();
    register_a2ui_call_function(
        &mut effects,
        transport,
        CallFunctionOptions::new(catalogs()).request_timeout(SUBMIT_TIMEOUT),
    )?;
    // The registry is copied into the runtime's composition; it need not outlive the builder.
    Ok(Runtime::builder(store)
        .flows(&flows())
        .plugin(hub)
        .plugin(&effects))
}
