//! Loom's A2UI v1.0 projection, as a composition-time plugin (ADR 0069, ADR 0070).
//!
//! # What it owns
//! - The A2UI v1.0 wire ([`AgentMessage`] out, [`RendererMessage`] in), as the reference SDK `a2ui-core` 0.4.0 accepts it: every
//!   message in both directions, parsed strictly with typed errors; what a renderer does with
//!   an `updateDataModel` ([`UpdateDataModel::apply_to`]).
//! - Catalogs ([`define_catalog`], [`define_function`], [`Catalogs::default_with`]): outgoing
//!   components are checked against them, function results against the declared return schema.
//! - [`A2UISurfaceBridge`]: `createSurface`, minimal `updateDataModel` per touched pointer,
//!   `deleteSurface`, K10-R6 masking on the way out, inbound actions, function calls and their
//!   replies checked against the call issued. No clock, no randomness.
//! - [`SurfaceHub`]: the kernel projection that feeds bridges from durable events only, serves
//!   late and reconnecting clients (`createSurface` with the current masked model, then live
//!   updates, no gap, no duplicate) and catches up from the store after a restart; it names
//!   surfaces on the wire by an application's scheme ([`per_execution_wire_id`]) while the
//!   log keeps the flow's names.
//! - Function calls answered by the client: grain A ([`call_and_wait`], a gate whose request is
//!   durable before it is sent, LD-008) and grain B ([`register_a2ui_call_function`], the
//!   `a2ui.callFunction` effect, not idempotent).
//! - [`update_components`]: a flow changes its surface's components, recorded; the hub sends
//!   `updateComponents` once that is durable.
//! - [`delete_surface`]: a flow deletes its surface; the hub sends `deleteSurface` once that is
//!   durable and ends the surface's subscriptions.
//! - [`RendererEdge`]: renderer sessions opened for a caller the application's
//!   [`SessionAuthenticator`] grants, bound to (execution, surface) pairs; every inbound
//!   message bounded ([`Limits`]), checked against the binding and sent through the kernel's
//!   inbound seam as that caller; the edge is also the resume authenticator for renderer
//!   sessions and the grain-B [`Transport`] over them. A function reply is taken only from a
//!   session that answers the function, and for grain B only from the session the call was
//!   sent to; replies, actions and open sessions are bounded.
//! - Per-execution renderer credentials ([`CredentialKey`], [`SignedCredentials`]): signed,
//!   bound to one (execution, surface) and an expiry.
//! - A2UI v0.9 for the renderers that speak it ([`ProtocolVersion`], chosen per session from
//!   what the renderer announces; [`VersionedSession`]): surfaces, components, data-model
//!   updates, deletion and actions projected and checked against the v0.9 schemas; what
//!   v0.9 cannot carry (function calls) refused for that session, never sent.
//! - The [`Transport`] trait; the plugin ships no network transport.
//!
//! # What it must not depend on
//! Nothing depends on this crate among the Loom library crates; it builds on `loom-kernel`,
//! `loom-agent-surface` and `loom-effect-runtime`. The kernel never learns A2UI's names.
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]

mod action_binding;
mod bridge;
mod catalog;
mod edge;
mod effect;
mod gate;
mod hub;
mod mask_args;
mod message_schema;
mod v0_9;
mod wire;

pub use bridge::{A2UISurfaceBridge, BridgeError, FunctionResult, InboundAction, IngestError};
pub use catalog::{
    AllowedCallers, BASIC_CATALOG_ID, CATALOG_PLACEHOLDER_ID, COMMON_TYPES_ID, CatalogDef,
    CatalogError, Catalogs, ComponentError, FunctionDef, LOOM_CATALOG_ID, RETURN_TYPES,
    basic_catalog, define_catalog, define_function, is_identifier, loom_catalog,
};
pub use edge::{
    Binding, CREDENTIAL, Connection, CredentialError, CredentialKey, FrameError, Grant,
    INBOUND_NAME, Limits, OpenError, Outbound, Received, Refused, RendererEdge, RendererSession,
    SESSION_ATTRIBUTE, SessionAuthenticator, SignedCredentials, TooMany, agent_function_codes,
    check_frame, close_codes, unix_now,
};
pub use effect::{
    CALL_FUNCTION_EFFECT, CallFunctionInput, CallFunctionOptions, RegisterError, Transport,
    TransportError, codes, register_a2ui_call_function,
};
pub use gate::{
    ARGS_CHECKED, COMPONENTS_DECISION, CallAndWaitError, ComponentsUpdate, ComponentsUpdateError,
    DELETE_DECISION, FUNCTION_RESULT_EVENT, FunctionRequest, KERNEL_REQUEST, REQUEST_DECISION,
    call_and_wait, delete_surface, function_result_schema, update_components,
};
pub use hub::{
    ENDED_RETENTION, HubError, SUBSCRIBER_BUFFER, SurfaceHub, SurfaceSpec, SurfaceSubscription,
    WireIds, per_execution_wire_id,
};
pub use message_schema::MessageSchema;
pub use v0_9::{
    BASIC_CATALOG_V0_9_ID, NegotiationError, PROTOCOL_VERSION_V0_9, ProjectionError,
    ProtocolVersion, SUBPROTOCOL_V0_9, SUBPROTOCOL_V1_0, V0_9Schema, VersionedOutbound,
    VersionedSession, project_v0_9, renderer_message_from_v0_9,
};
pub use wire::{
    Action, AgentMessage, CallAgentFunction, CallRendererFunction, CreateSurface, DeleteSurface,
    FunctionCall, FunctionError, FunctionOutcome, FunctionResponse, PROTOCOL_VERSION,
    RendererError, RendererMessage, UpdateComponents, UpdateDataModel, WireError,
};
