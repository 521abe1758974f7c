//! The quickstart's flows and the effects they call: a library, so that the demo binary, its
//! tests, and tools that check recorded executions against today's code (`replay-check`)
//! register the same flows.
//!
//! - `checkout` v1, input [`Order`]: reserves stock (`inventory.reserve`, idempotent), records
//!   the time, shows the order on the `checkout` surface, parks on the approval gate
//!   ([`APPROVAL_EVENT`], key [`approval_key`]), then charges (`payments.charge`, not
//!   idempotent) and returns a [`Receipt`].
//! - `greet` v1, input a name: upper-cases it (`text.upper`, idempotent) and greets it with a
//!   greeting chosen by the hour of the day, recorded as a decision.
//!
//! The effects are in-process closures standing in for the world. Their output depends only
//! on their input and idempotency key, so a retried call gives the same answer.
//!
//! ```
//! use loom_kernel::runtime::{Runtime, StartOptions};
//! use loom_kernel::{ExecutionId, ExecutionStatus, MemoryStore};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let rt = quickstart::compose(Runtime::builder(MemoryStore::new())).build()?;
//! let id = rt.start("greet", "ada", StartOptions::new(ExecutionId::new("greet-1")?)).await?;
//! assert_eq!(rt.wait(&id).await?.status(), ExecutionStatus::Completed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loom_agent_surface::SurfaceExt;
use loom_kernel::runtime::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FlowSet, FnEffect, RuntimeBuilder, flow_fn,
};
use loom_kernel::{ErrorInfo, EventStore, ExecutionId, Payload};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The event type that resumes a checkout's approval gate (an A2UI action, in a real UI).
pub const APPROVAL_EVENT: &str = "A2UIAction";

/// The correlation key of the approval gate of checkout `execution`.
pub fn approval_key(execution: &ExecutionId) -> String {
    format!("approve-{execution}")
}

/// The input of `checkout`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub sku: String,
    pub qty: u32,
}

/// The output of `checkout`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub sku: String,
    pub qty: u32,
    pub reservation: String,
    pub reserved_at_ms: u64,
    /// The payload the approval gate was resumed with.
    pub approval: Value,
    pub charged: u64,
    /// The idempotency key the charge was made with: the payment provider's dedup key.
    pub payment_key: String,
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

/// The example's flows: `checkout` v1 and `greet` v1.
pub fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("checkout", 1, checkout))
        .with(flow_fn("greet", 1, greet))
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
    let reserve = Arc::clone(&counters.reserve);
    let charge = Arc::clone(&counters.charge);
    let upper = Arc::clone(&counters.upper);
    builder
        .flows(&flows())
        .effect(
            "inventory.reserve",
            FnEffect::new(true, move |call: EffectCall| {
                reserve.fetch_add(1, Ordering::SeqCst);
                let outcome = input::<Order>(&call).map(|_| {
                    let id = format!("rsv-{:08x}", stable_hash(&call.idempotency_key()));
                    (json!(id), 1)
                });
                async move { finish(outcome) }
            }),
        )
        .effect(
            "payments.charge",
            FnEffect::new(false, move |call: EffectCall| {
                charge.fetch_add(1, Ordering::SeqCst);
                let outcome = input::<Order>(&call).map(|order| {
                    let charged = u64::from(order.qty) * 1000;
                    (
                        json!({"charged": charged, "key": call.idempotency_key()}),
                        2,
                    )
                });
                async move { finish(outcome) }
            }),
        )
        .effect(
            "text.upper",
            FnEffect::new(true, move |call: EffectCall| {
                upper.fetch_add(1, Ordering::SeqCst);
                let outcome = input::<String>(&call).map(|text| (json!(text.to_uppercase()), 0));
                async move { finish(outcome) }
            }),
        )
}

/// What `payments.charge` returns.
#[derive(Deserialize)]
struct Payment {
    charged: u64,
    key: String,
}

async fn checkout(ctx: FlowCtx, order: Order) -> Result<Receipt, FlowError> {
    let reservation: String = ctx.call("inventory.reserve", &order).await?;
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
    Ok(Receipt {
        sku: order.sku,
        qty: order.qty,
        reservation,
        reserved_at_ms,
        approval,
        charged: payment.charged,
        payment_key: payment.key,
    })
}

async fn greet(ctx: FlowCtx, name: String) -> Result<String, FlowError> {
    let shout: String = ctx.call("text.upper", &name).await?;
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

/// The call's input as `T`, or the failure that says why it is not one.
fn input<T: DeserializeOwned>(call: &EffectCall) -> Result<T, ErrorInfo> {
    call.input.decode().map_err(|err| {
        let message = format!(
            "{}: the input {} does not decode: {err}",
            call.effect, call.input
        );
        ErrorInfo::new("quickstart.bad_input", message)
    })
}

fn finish(outcome: Result<(Value, u64), ErrorInfo>) -> EffectOutcome {
    match outcome {
        Ok((output, cost)) => EffectOutcome::ok(Payload::from_value(&output)).with_cost(cost),
        Err(error) => EffectOutcome::failed(error),
    }
}

/// FNV-1a: std's hasher may change between releases, and a reservation id must not.
fn stable_hash(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}
