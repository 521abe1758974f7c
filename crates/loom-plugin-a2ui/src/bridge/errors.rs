//! What the bridge refuses: an outgoing message it will not produce, an inbound one it will
//! not accept.

use loom_agent_surface::PatchError;
use thiserror::Error;

use crate::catalog::ComponentError;
use crate::wire::WireError;

/// An outgoing message the bridge refuses to produce.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// A component does not fit its catalog.
    #[error("surface `{surface_id}`: {source}")]
    Component {
        /// The surface's id.
        surface_id: String,
        /// The underlying error.
        #[source]
        source: ComponentError,
    },
    /// The initial data model is not a JSON object.
    #[error("surface `{surface_id}`: the data model must be a JSON object")]
    ModelNotAnObject {
        /// The surface's id.
        surface_id: String,
    },
    /// `createSurface` was already sent for this surface.
    #[error("surface `{surface_id}` was already created")]
    AlreadyCreated {
        /// The surface's id.
        surface_id: String,
    },
    /// The surface was never created (or was deleted).
    #[error("surface `{surface_id}` is not created")]
    NotCreated {
        /// The surface's id.
        surface_id: String,
    },
    /// A patch does not apply; the model is unchanged.
    #[error("surface `{surface_id}`: {source}")]
    Patch {
        /// The surface's id.
        surface_id: String,
        /// The underlying error.
        #[source]
        source: Box<PatchError>,
    },
    /// A `SURFACE_PATCH` does not decode as surface ops.
    #[error("surface `{surface_id}`: a SURFACE_PATCH does not decode: {detail}")]
    Decode {
        /// The surface's id.
        surface_id: String,
        /// What went wrong, in words.
        detail: String,
    },
    /// The function is not in the surface's catalogs.
    #[error("catalog `{catalog_id}` has no function `{name}`")]
    UnknownFunction {
        /// The catalog's id.
        catalog_id: String,
        /// The name concerned.
        name: String,
    },
    /// The function may only be called by the renderer; nothing was sent.
    #[error(
        "function `{name}` of catalog `{catalog_id}` is rendererOnly: the agent may not call it"
    )]
    RendererOnly {
        /// The catalog's id.
        catalog_id: String,
        /// The name concerned.
        name: String,
    },
    /// The call's `args` fail the function's args schema; nothing was recorded or sent.
    #[error("the args of `{name}` (catalog `{catalog_id}`) fail its args schema: {detail}")]
    InvalidArgs {
        /// The catalog's id.
        catalog_id: String,
        /// The function's name.
        name: String,
        /// What went wrong, in words.
        detail: String,
    },
    /// The call id was already issued by this bridge.
    #[error("call id `{call_id}` was already issued")]
    DuplicateCallId {
        /// The function call's id.
        call_id: String,
    },
}

/// An inbound message refused; nothing was recorded and the bridge is unchanged.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum IngestError {
    /// Not a valid v1.0 renderer-to-agent message.
    #[error("not an A2UI v1.0 renderer message: {0}")]
    Wire(#[from] WireError),
    /// A valid message, but not the kind this ingest takes.
    #[error("expected {expected}, got a `{got}` message")]
    UnexpectedKind {
        /// The kind of message expected.
        expected: &'static str,
        /// The kind of message received.
        got: &'static str,
    },
    /// The message is about another surface.
    #[error("the message is for surface `{got}`, not `{expected}`")]
    WrongSurface {
        /// This bridge's surface.
        expected: String,
        /// The surface the message names.
        got: String,
    },
    /// The reply's call id is not the one expected.
    #[error("the reply answers call `{got}`, not the expected `{expected}`")]
    MismatchedCallId {
        /// The call id expected.
        expected: String,
        /// The call id the reply carries.
        got: String,
    },
    /// No call with this id was issued (here).
    #[error("no call `{call_id}` was issued on this surface")]
    UnknownCallId {
        /// The function call's id.
        call_id: String,
    },
    /// The call was already answered.
    #[error("call `{call_id}` was already answered")]
    AlreadyAnswered {
        /// The function call's id.
        call_id: String,
    },
    /// The action names a component the surface does not hold.
    #[error("the surface holds no component `{component_id}`")]
    UnknownComponent {
        /// The component the action names.
        component_id: String,
    },
    /// The component declares no event action of that name.
    #[error("component `{component_id}` has no action `{name}`")]
    NoSuchAction {
        /// The component the action names.
        component_id: String,
        /// The action's name.
        name: String,
    },
    /// No gate of this surface's execution waits for the action.
    #[error("no gate waits for action `{name}`")]
    NoGateWaiting {
        /// The action's name.
        name: String,
    },
    /// The action's context is not what the component binds over the current model.
    #[error("the context of action `{name}` does not match its component's bindings at `{key}`")]
    ContextMismatch {
        /// The action's name.
        name: String,
        /// The first context key that differs, is missing, or is not declared.
        key: String,
    },
    /// The result does not match the function's declared return schema.
    #[error("the result of call `{call_id}` ({name}) fails its return schema: {detail}")]
    InvalidResult {
        /// The function call's id.
        call_id: String,
        /// The function called.
        name: String,
        /// What went wrong, in words.
        detail: String,
    },
}
