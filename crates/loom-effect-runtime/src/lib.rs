//! Loom's effect runtime: where flows touch the world.
//!
//! # What it will own
//! - Effect definitions (name, `idempotent`, capability, cost, typed input and output with
//!   optional JSON Schemas) and the registry the composition root fills; the registry
//!   implements the kernel's effect-dispatch trait.
//! - `EffectContext` for each invocation: the idempotency key `executionId:stepId` (identical on
//!   every retry and after every crash), the attempt number, a cancellation signal.
//! - Middleware: retry with backoff, per-attempt timeouts; K2 authorization and K3 metering.
//! - The K9 in-doubt guard: `STEP_STARTED` made durable before a non-idempotent effect runs,
//!   `EFFECT_INDOUBT` on recovery, and operator verdicts recorded as `EFFECT_RESOLVED`.
//!
//! # What it must not depend on
//! Of the Loom crates, only `loom-kernel` and `loom-agent-surface`; never `loom-plugin-a2ui`.
