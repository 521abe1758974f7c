//! The quickstart's flows and the effects they call: a library, so that the demo binary, its
//! tests, and tools that check recorded executions against today's code (`replay-check`)
//! register the same flows.
//!
//! - `checkout` v1, input [`Order`]: reserves stock (`inventory.reserve`, idempotent), records
//!   the time, shows the order on the `checkout` surface, parks on the approval gate
//!   ([`APPROVAL_EVENT`], key [`approval_key`]), then charges (`payments.charge`, not
//!   idempotent), awaits its child `notify`, and returns a [`Receipt`].
//! - `notify` v1, input [`Order`], started by `checkout` as a child (`<checkout id>/notify#1`):
//!   waits [`NOTIFY_DELAY`] on a durable timer (`ctx.sleep`), then writes the customer's message
//!   (`text.upper`).
//! - `greet` v1, input a name: upper-cases it (`text.upper`, idempotent) and greets it with a
//!   greeting chosen by the hour of the day, recorded as a decision.
//!
//! The effects are in-process closures standing in for the world, defined with
//! `loom-effect-runtime` ([`effects`]): each names its capability (grant them with
//! [`start_options`]) and cost. Their output depends only on their input and idempotency key,
//! so a retried call gives the same answer.
//!
//! ```
//! use loom_kernel::Runtime;
//! use loom_kernel::{ExecutionId, ExecutionStatus, MemoryStore};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let rt = quickstart::compose(Runtime::builder(MemoryStore::new())).build()?;
//! let id = ExecutionId::new("greet-1")?;
//! rt.start("greet", "ada", quickstart::start_options(&id)).await?;
//! assert_eq!(rt.wait(&id).await?.status(), ExecutionStatus::Completed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]
#![warn(missing_docs, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loom_agent_surface::SurfaceExt;
use loom_effect_runtime::{EffectContext, EffectDef, EffectError, EffectRegistry};
use loom_kernel::{
    EffectHandle, FlowCtx, FlowError, FlowSet, RuntimeBuilder, StartOptions, flow_fn,
};
use loom_kernel::{EventStore, ExecutionId};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The event type that resumes a checkout's approval gate (an A2UI action, in a real UI).
pub const APPROVAL_EVENT: &str = "A2UIAction";

/// How long `notify` waits before it writes the message: a durable timer, so a crash while it
/// waits loses nothing.
pub const NOTIFY_DELAY: Duration = Duration::from_millis(200);

/// The correlation key of the approval gate of checkout `execution`.
pub fn approval_key(execution: &ExecutionId) -> String {
    format!("approve-{execution}")
}

/// The input of `checkout`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The article ordered.
    pub sku: String,
    /// How many.
    pub qty: u32,
}

/// The output of `checkout`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// The article ordered.
    pub sku: String,
    /// How many.
    pub qty: u32,
    /// The stock reservation's id, from the idempotent `reserve` effect.
    pub reservation: String,
    /// When the reservation was made (unix ms), a recorded decision: replay serves it.
    pub reserved_at_ms: u64,
    /// The payload the approval gate was resumed with.
    pub approval: Value,
    /// The amount the non-idempotent `charge` effect charged, in cents (money, not the
    /// execution's budget units).
    pub charged: u64,
    /// The idempotency key the charge was made with: the payment provider's dedup key.
    pub payment_key: String,
    /// What the child flow `notify` wrote to the customer.
    pub message: String,
}

/// How many times each effect has been invoked, for tests and demos. Clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    reserve: Arc<AtomicUsize>,
    charge: Arc<AtomicUsize>,
    upper: Arc<AtomicUsize>,
}

impl Counters {
    /// Invocations of `inventory.reserve`.
    pub fn reserve(&self) -> usize {
        self.reserve.load(Ordering::SeqCst)
    }

    /// Invocations of `payments.charge`.
    pub fn charge(&self) -> usize {
        self.charge.load(Ordering::SeqCst)
    }

    /// Invocations of `text.upper`.
    pub fn upper(&self) -> usize {
        self.upper.load(Ordering::SeqCst)
    }
}

/// `inventory.reserve`: reserves an order, answers the reservation's id.
const RESERVE: EffectHandle<Order, String> = EffectHandle::new("inventory.reserve");
/// `text.upper`: a text in capitals.
const UPPER: EffectHandle<String, String> = EffectHandle::new("text.upper");

/// The example's flows: `checkout` v1, its child `notify` v1, and `greet` v1.
pub fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("checkout", 1, checkout).uses(&[&RESERVE]))
        .with(flow_fn("notify", 1, notify).uses(&[&UPPER]))
        .with(flow_fn("greet", 1, greet).uses(&[&UPPER]))
}

/// The capabilities the example's effects need (K2): grant them when starting an execution,
/// as [`start_options`] does.
pub const CAPABILITIES: [&str; 3] = ["inventory", "payments", "text"];

/// Start options for execution `id` with every capability in [`CAPABILITIES`] granted.
pub fn start_options(id: &ExecutionId) -> StartOptions {
    CAPABILITIES
        .into_iter()
        .fold(StartOptions::new(id.clone()), StartOptions::grant)
}

/// Registers the example's flows and effects.
pub fn compose<S: EventStore>(builder: RuntimeBuilder<S>) -> RuntimeBuilder<S> {
    compose_with(builder, &Counters::default())
}

/// [`compose`], counting effect invocations in `counters`.
pub fn compose_with<S: EventStore>(
    builder: RuntimeBuilder<S>,
    counters: &Counters,
) -> RuntimeBuilder<S> {
    builder.flows(&flows()).plugin(&effects(counters))
}

/// The example's effects, defined once: idempotence, capability, cost and schemas.
pub fn effects(counters: &Counters) -> EffectRegistry {
    let (reserve, charge, upper) = (
        Arc::clone(&counters.reserve),
        Arc::clone(&counters.charge),
        Arc::clone(&counters.upper),
    );
    let order_schema = json!({
        "type": "object",
        "properties": {"sku": {"type": "string", "minLength": 1}, "qty": {"type": "integer", "minimum": 1}},
        "required": ["sku", "qty"]
    });
    let definitions = [
        EffectDef::for_handle(&RESERVE, move |ctx: EffectContext, _: Order| {
            reserve.fetch_add(1, Ordering::SeqCst);
            let id = format!("rsv-{:08x}", stable_hash(ctx.idempotency_key()));
            async move { Ok::<_, EffectError>(id) }
        })
        .idempotent()
        .capability("inventory")
        .cost(1)
        .input_schema(order_schema.clone()),
        // Not idempotent: its STEP_STARTED is durable before it runs, and a crash while it
        // runs parks it in doubt for an operator instead of charging twice.
        EffectDef::new(
            "payments.charge",
            move |ctx: EffectContext, order: Order| {
                charge.fetch_add(1, Ordering::SeqCst);
                let charged = u64::from(order.qty) * 1000;
                let key = ctx.idempotency_key().to_owned();
                async move { Ok::<_, EffectError>(json!({"charged": charged, "key": key})) }
            },
        )
        .capability("payments")
        .cost(2)
        .input_schema(order_schema)
        .output_schema(json!({
            "type": "object",
            "properties": {"charged": {"type": "integer"}, "key": {"type": "string"}},
            "required": ["charged", "key"]
        })),
        EffectDef::for_handle(&UPPER, move |_: EffectContext, text: String| {
            upper.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, EffectError>(text.to_uppercase()) }
        })
        .idempotent()
        .capability("text"),
    ];
    let mut registry = EffectRegistry::new();
    for definition in definitions {
        // The definitions above are fixed and valid; a mistake in them is a bug in the example.
        if let Err(error) = registry.register(definition) {
            panic!("the quickstart's effect definitions are invalid: {error}");
        }
    }
    registry
}

/// What `payments.charge` returns.
#[derive(Deserialize)]
struct Payment {
    charged: u64,
    key: String,
}

async fn checkout(ctx: FlowCtx, order: Order) -> Result<Receipt, FlowError> {
    let reservation = ctx.execute(&RESERVE, &order).await?;
    let reserved_at_ms = ctx.now()?;
    ctx.surface("checkout")
        .patch()
        // The surface never creates parents, so the order object comes first.
        .set("order", json!({"items": []}))
        .set("order.status", "reserved")
        .append("order.items", &order)
        .emit()?;
    let key = approval_key(ctx.execution_id());
    let approval = ctx.suspend(APPROVAL_EVENT, &key).await?.to_value();
    let payment: Payment = ctx.call("payments.charge", &order).await?;
    ctx.surface("checkout").set("order.status", "paid")?;
    // A child flow, awaited: its id is `<this id>/notify#1`, and it starts once, whatever crashes.
    let message: String = ctx.call_child("notify", &order).await?;
    Ok(Receipt {
        sku: order.sku,
        qty: order.qty,
        reservation,
        reserved_at_ms,
        approval,
        charged: payment.charged,
        payment_key: payment.key,
        message,
    })
}

async fn notify(ctx: FlowCtx, order: Order) -> Result<String, FlowError> {
    // A durable timer: its deadline is recorded, and it fires after a restart too.
    ctx.sleep(NOTIFY_DELAY).await?;
    let text = format!("paid: {} x {}", order.qty, order.sku);
    Ok(ctx.execute(&UPPER, &text).await?)
}

async fn greet(ctx: FlowCtx, name: String) -> Result<String, FlowError> {
    let shout = ctx.execute(&UPPER, &name).await?;
    // The clock is the world: read once and recorded, so a replay greets the same way.
    let greeting = ctx.decide("greeting", || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        match now.map_or(0, |d| d.as_secs() / 3600 % 24) {
            5..=11 => "Good morning".to_owned(),
            12..=17 => "Good afternoon".to_owned(),
            _ => "Good evening".to_owned(),
        }
    })?;
    Ok(format!("{greeting}, {shout}!"))
}

/// FNV-1a: std's hasher may change between releases, and a reservation id must not.
fn stable_hash(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}
