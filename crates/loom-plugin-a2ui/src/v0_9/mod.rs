//! A2UI v0.9, for renderers that speak it (the web renderers `@a2ui/lit` 0.11 and its kin):
//! which version a renderer session speaks, the projection of the v1.0 messages the bridge
//! produces onto v0.9, and the v0.9 schemas every projected message is checked against.
//!
//! The bridge, the hub and the edge keep working in v1.0; a v0.9 session translates at its
//! boundary ([`VersionedSession`]). What v0.9 can carry: surfaces, components of its basic
//! catalog, data-model updates, deletion, and the renderer's actions and errors. What it
//! cannot (calls to renderer functions, answers to agent functions, components of catalogs
//! other than the basic one) is refused for that session with a [`ProjectionError`] and
//! never sent.

mod negotiate;
mod project;
mod schema;
mod session;

pub use negotiate::{NegotiationError, ProtocolVersion, SUBPROTOCOL_V0_9, SUBPROTOCOL_V1_0};
pub use project::{
    BASIC_CATALOG_V0_9_ID, ProjectionError, project_v0_9, renderer_message_from_v0_9,
};
pub use schema::V0_9Schema;
pub use session::{VersionedOutbound, VersionedSession};

/// The `version` every v0.9 message carries.
pub const PROTOCOL_VERSION_V0_9: &str = "v0.9";
