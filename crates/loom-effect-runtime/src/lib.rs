//! Loom's effect runtime: where flows touch the world.
//!
//! # What it owns
//! - Effect definitions ([`EffectDef`]): name, `idempotent`, capability (K2), cost (K3), a typed
//!   handler (serde input and output), optional JSON Schemas for both (compiled once; feature
//!   `schemas`, on by default: the largest part of this crate's dependencies), a
//!   [`RetryPolicy`] and a per-attempt timeout. Defaults are the cautious ones: not idempotent,
//!   the capability is the effect's name.
//! - The [`EffectRegistry`] the composition root fills. Each registered definition implements
//!   the kernel's effect-dispatch trait (`loom_kernel::Effect`); the registry is a
//!   kernel plugin that contributes them (`Runtime::builder(store).plugin(&registry)`).
//! - [`EffectContext`] for each attempt: the idempotency key `executionId:stepId` (identical on
//!   every retry and after every crash, never random), the attempt and dispatch numbers, a
//!   cancellation signal fired on timeout and on cancellation, a tracing span.
//! - The middleware (`dispatch`): K2 and K3 and the input schema checked before the step is
//!   recorded as started (a refusal is recorded as `STEP_FAILED` and nothing runs); retries
//!   with exponential backoff and jitter derived from the key; timeouts; errors classified as
//!   retryable, terminal or in doubt; a timed-out or panicked non-idempotent attempt recorded as
//!   `EFFECT_INDOUBT` instead of being run again.
//! - The operator's side of K9: [`steps_in_doubt`] lists every step in doubt across executions;
//!   verdicts go through `Runtime::resolve` and are recorded as `EFFECT_RESOLVED`.
//!
//! The kernel keeps the parts of K9 that must hold for any effect: `STEP_STARTED` durable before
//! a non-idempotent effect runs, and on recovery a step started without an outcome run again
//! (idempotent) or parked at `EFFECT_INDOUBT` (not idempotent). See `docs/EFFECTS.md`.
//!
//! # Invariants
//! - Nothing here reads a clock or a random source for anything recorded: backoff jitter is a
//!   hash of the idempotency key and the attempt.
//! - A non-idempotent effect's attempt is repeated only when its handler said it did not
//!   happen (`EffectError::Retryable`).
//!
//! # What it must not depend on
//! Of the Loom crates, only `loom-kernel` (and `loom-agent-surface`, which it has no need of
//! yet); never `loom-plugin-a2ui`.
//!
//! # Example
//! ```
//! use loom_effect_runtime::{EffectContext, EffectDef, EffectError, EffectRegistry, steps_in_doubt};
//! use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, flow_fn};
//! use loom_kernel::{ExecutionId, ExecutionStatus, MemoryStore};
//! use serde_json::{Value, json};
//!
//! async fn send(ctx: EffectContext, mail: Value) -> Result<Value, EffectError> {
//!     // The receiver drops a second request with the same key (K9.1).
//!     Ok(json!({"sent": mail, "key": ctx.idempotency_key()}))
//! }
//!
//! async fn notify(ctx: FlowCtx, mail: Value) -> Result<Value, FlowError> {
//!     Ok(ctx.execute("mail.send", &mail).await?.to_value())
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let effects = EffectRegistry::new()
//!     .with(EffectDef::new("mail.send", send).capability("mail").cost(1))?;
//! let loom = Runtime::builder(MemoryStore::new())
//!     .flow(flow_fn("notify", 1, notify))
//!     .plugin(&effects)
//!     .build()?;
//! let id = ExecutionId::new("notify-1")?;
//! let options = StartOptions::new(id.clone()).grant("mail").budget(5);
//! loom.start("notify", &json!({"to": "ada"}), options).await?;
//! let state = loom.wait(&id).await?;
//! assert_eq!(state.status(), ExecutionStatus::Completed);
//! assert_eq!(state.budget_spent(), 1);
//! assert_eq!(state.output().unwrap().to_value()["key"], "notify-1:mail.send#1");
//! assert!(steps_in_doubt(loom.store()).await?.is_empty());
//!
//! // Without the capability (K2), the step fails before the effect runs.
//! let id = ExecutionId::new("notify-2")?;
//! loom.start("notify", &json!({"to": "bob"}), StartOptions::new(id.clone())).await?;
//! assert_eq!(loom.wait(&id).await?.status(), ExecutionStatus::Failed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![warn(missing_docs, unreachable_pub)]

mod context;
mod definition;
mod dispatch;
mod error;
mod in_doubt;
mod registry;
mod retry;
mod schema;

pub use context::EffectContext;
pub use definition::{DEFAULT_TIMEOUT, EffectDef};
pub use error::{DefinitionError, EffectError, RegistryError, codes};
pub use in_doubt::{
    InDoubtReport, InDoubtStep, ListInDoubtError, in_execution as steps_in_doubt_of,
    steps_in_doubt, steps_in_doubt_report,
};
pub use registry::{EffectInfo, EffectRegistry};
pub use retry::RetryPolicy;

/// The README's examples, compiled as doctests so they stay true (here, the highest crate they
/// use).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;
