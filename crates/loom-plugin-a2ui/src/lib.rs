//! Loom's A2UI v1.0 projection, as a composition-time plugin (ADR 0069, ADR 0070).
//!
//! # What it will own
//! - The A2UI v1.0 wire types, as the reference SDK `a2ui-core` 0.4.0 accepts them.
//! - `A2UISurfaceBridge`: `createSurface`, minimal `updateDataModel` per touched pointer,
//!   `deleteSurface`, K10-R6 masking on the way out, inbound actions.
//! - Function calls answered by the client: grain A (a gate) and grain B (the
//!   `a2ui.callFunction` effect, non-idempotent), with replies checked against the call issued.
//! - The transport trait; the plugin ships no transport.
//!
//! # What it must not depend on
//! Nothing depends on this crate among the Loom crates; it builds on `loom-kernel`,
//! `loom-agent-surface` and `loom-effect-runtime`. The kernel never learns A2UI's names.
