//! The A2UI edge: renderer sessions opened for a caller the application authenticates, bound
//! to the (execution, surface) pairs it may use, with every inbound message bounded, checked
//! against that binding and sent through the kernel's inbound seam as that caller.
//!
//! # Trust
//! A renderer is client-controlled (ADR 0070, "Security notes"). A session is opened only once
//! the application's [`SessionAuthenticator`] grants the binding it asks for, for an execution
//! the store holds and a surface the hub serves; nothing is kept for a refused one. Then:
//! - a function reply is accepted only for a call issued on the session's (execution,
//!   surface) (grain A: its gate is open; grain B: it was sent to a session of that binding
//!   and is in flight), not answered, not timed out;
//! - an action only from a component of the surface that declares it, with the context that
//!   component's bindings give over the masked model, while a gate of the execution waits;
//! - `callAgentFunction` is answered in band (`agentFunctionResponse`);
//! - frames, nesting and rate are bounded ([`Limits`]).
//!
//! Anything else is refused with a typed [`Refused`], nothing is recorded and the session
//! stays open, except for the limits that close it ([`FrameError::close_code`]). Accepted
//! messages go to [`Runtime::inbound_as`] with the session's caller: the edge's
//! [`InboundHandler`](loom_kernel::InboundHandler) decides again and the resume authenticator
//! ([`RendererEdge`] is one) sees who asks.

mod auth;
mod credential;
mod limits;
mod registry;
mod routing;

use std::sync::Arc;

use loom_kernel::{
    AbiRange, Caller, Contributions, EventStore, ExecutionId, InboundError, Plugin, ReadError,
    ResumeRequest, Runtime,
};
use serde_json::Value;
use thiserror::Error;
use tokio::sync::mpsc;

pub use auth::{Binding, Connection, Grant, SessionAuthenticator};
pub use credential::{CREDENTIAL, CredentialError, CredentialKey, SignedCredentials, unix_now};
pub use limits::{FrameError, Limits, TooMany, check_frame, close_codes};
pub use registry::Outbound;
pub use routing::agent_function_codes;

use crate::bridge::IngestError;
use crate::effect::Transport;
use crate::hub::{SurfaceHub, SurfaceSubscription};
use crate::wire::{AgentMessage, RendererMessage, WireError};
use limits::RateLimiter;
use registry::{Registry, SessionTransport};
use routing::{EdgeInbound, Route};

/// The name the edge's inbound handler is registered under.
pub const INBOUND_NAME: &str = "a2ui";

/// The caller attribute naming the renderer session a caller speaks for; set by the edge on
/// the caller the authenticator granted.
pub const SESSION_ATTRIBUTE: &str = "a2ui.session";

/// A session that could not be opened; nothing is kept for it.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The execution id is not a valid one.
    #[error("`{execution}` is not an execution id")]
    BadExecutionId {
        /// What was asked for.
        execution: String,
    },
    /// The hub serves no surface of that id.
    #[error("no surface `{surface_id}` is served here")]
    UnknownSurface {
        /// What was asked for.
        surface_id: String,
    },
    /// The authenticator refused the connection.
    #[error("the connection is not authenticated: {reason}")]
    Unauthenticated {
        /// The authenticator's reason.
        reason: String,
    },
    /// The caller may not use that surface of that execution.
    #[error("{caller} may not use surface `{surface_id}` of execution {execution}")]
    NotGranted {
        /// Who asked.
        caller: String,
        /// The execution asked for.
        execution: ExecutionId,
        /// The surface asked for.
        surface_id: String,
    },
    /// The renderer's capabilities list none of the catalogs the surface needs (A2UI has no
    /// agent-to-renderer error message outside a function response: this is the close
    /// reason, and no `createSurface` is sent).
    // What is missing comes first: a WebSocket close reason holds 123 bytes.
    #[error(
        "the renderer lacks the catalogs {missing:?} that surface `{surface_id}` needs (it supports {supported:?})"
    )]
    UnsupportedCatalogs {
        /// The surface asked for.
        surface_id: String,
        /// What the surface needs and the renderer lacks.
        missing: Vec<String>,
        /// What the renderer announced.
        supported: Vec<String>,
    },
    /// A limit on open sessions is reached ([`Limits::max_sessions`] and its kin).
    #[error(transparent)]
    TooMany(#[from] TooMany),
    /// The store holds no such execution.
    #[error("no execution {execution}")]
    UnknownExecution {
        /// What was asked for.
        execution: ExecutionId,
    },
    /// The caller cannot carry the session's id.
    #[error("the granted caller cannot carry a session: {0}")]
    Caller(#[from] loom_kernel::CallerError),
    /// Reading the store failed.
    #[error("reading the store failed: {0}")]
    Store(#[from] ReadError),
    /// The hub could not subscribe the session.
    #[error(transparent)]
    Hub(#[from] crate::hub::HubError),
}

impl OpenError {
    /// The WebSocket close code to refuse the connection with: 1011 when the server failed,
    /// 1008 (policy) otherwise.
    pub fn close_code(&self) -> u16 {
        match self {
            Self::Store(_) | Self::Hub(_) => 1011,
            Self::TooMany(too_many) => too_many.close_code(),
            _ => close_codes::POLICY,
        }
    }
}

/// An inbound message refused: nothing was recorded and the session is unchanged.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Refused {
    /// Over a limit, before parsing; [`FrameError::close_code`] says whether the session ends.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// Not an A2UI v1.0 renderer message.
    #[error("not an A2UI v1.0 renderer message: {0}")]
    Wire(#[from] WireError),
    /// Not an A2UI v0.9 renderer message (on a session that speaks v0.9).
    #[error("not an A2UI v0.9 renderer message: {0}")]
    WireV0_9(WireError),
    /// Refused by the binding rules.
    #[error(transparent)]
    Ingest(#[from] IngestError),
    /// A function reply or an action larger than its bound ([`Limits::max_reply_bytes`],
    /// or the function's own, [`FunctionDef::max_reply_bytes`](crate::FunctionDef::max_reply_bytes)).
    #[error("a {what} of {bytes} bytes is larger than its limit of {limit} bytes")]
    TooLarge {
        /// What was sent.
        what: String,
        /// Its size as sent.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// The hub could not take the message.
    #[error("{0}")]
    Hub(String),
    /// The runtime (its inbound handler, the resume authenticator, the gate) refused it.
    #[error(transparent)]
    Runtime(#[from] InboundError),
}

impl Refused {
    /// The close code the session ends with, or `None` when it stays open.
    pub fn close_code(&self) -> Option<u16> {
        match self {
            Self::Frame(error) => error.close_code(),
            _ => None,
        }
    }
}

/// An accepted inbound message.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Received {
    /// An action resumed its gate.
    Action {
        /// The action's name.
        name: String,
    },
    /// A reply resumed its grain-A gate.
    FunctionReply {
        /// The call answered.
        call_id: String,
        /// The function.
        name: String,
    },
    /// A reply was handed to the grain-B step waiting for it.
    StepReply {
        /// The call answered.
        call_id: String,
    },
    /// `callAgentFunction`, answered in band: send this `agentFunctionResponse`.
    Answered(AgentMessage),
    /// A renderer error about no call: nothing to do but tell it.
    RendererError {
        /// Its code.
        code: String,
        /// Its message.
        message: String,
    },
}

pub(crate) struct EdgeInner {
    hub: SurfaceHub,
    authenticator: Arc<dyn SessionAuthenticator>,
    limits: Limits,
    registry: Arc<Registry>,
}

/// Renderer sessions for a [`SurfaceHub`]: add it as a plugin (its inbound handler) and as
/// the resume authenticator, and give [`RendererEdge::transport`] to
/// [`register_a2ui_call_function`](crate::register_a2ui_call_function). Cheap to clone.
#[derive(Clone)]
pub struct RendererEdge {
    inner: Arc<EdgeInner>,
}

impl std::fmt::Debug for RendererEdge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RendererEdge")
            .field("limits", &self.inner.limits)
            .field("sessions", &self.inner.registry.len())
            .finish()
    }
}

impl RendererEdge {
    /// An edge for `hub`'s surfaces whose sessions `authenticator` grants, with the default
    /// [`Limits`].
    pub fn new(hub: SurfaceHub, authenticator: impl SessionAuthenticator) -> Self {
        Self::with_limits(hub, authenticator, Limits::default())
    }

    /// [`RendererEdge::new`] with `limits`.
    pub fn with_limits(
        hub: SurfaceHub,
        authenticator: impl SessionAuthenticator,
        limits: Limits,
    ) -> Self {
        Self {
            inner: Arc::new(EdgeInner {
                hub: hub.clone(),
                authenticator: Arc::new(authenticator),
                limits,
                registry: Arc::new(Registry::new(limits.resend_grace, hub.clone())),
            }),
        }
    }

    /// The limits every session has.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Grain B over this edge's sessions: a request goes to the oldest open session of its
    /// execution and surface that answers the function (waiting for one until the call is
    /// given up); only a session of that binding may answer it, and only while the call is
    /// in flight.
    pub fn transport(&self) -> Arc<dyn Transport> {
        Arc::new(SessionTransport(Arc::clone(&self.inner.registry)))
    }

    /// How many sessions are open.
    pub fn session_count(&self) -> usize {
        self.inner.registry.len()
    }

    /// How many grain-B calls are in flight.
    pub fn calls_in_flight(&self) -> usize {
        self.inner.registry.calls_in_flight()
    }

    /// The resume rule for renderer sessions, for an application that has its own resume
    /// authenticator and consults this one from it: a session's caller may resume only the
    /// A2UI gates of its execution while it is open; other callers pass.
    pub fn authorize_resume(&self, request: &ResumeRequest<'_>) -> Result<(), String> {
        routing::authorize(&self.inner, request)
    }

    /// Opens a session for `connection`: the authenticator must grant its binding, the
    /// execution must exist, the surface be served, and the renderer support its catalogs
    /// when it listed them ([`Connection::supported_catalogs`]). The session starts with
    /// `createSurface` and the open grain-A calls ([`RendererSession::take_initial`]).
    pub async fn open<S: EventStore>(
        &self,
        runtime: &Runtime<S>,
        connection: &Connection,
    ) -> Result<RendererSession, OpenError> {
        self.open_for(runtime, connection, crate::ProtocolVersion::V1_0)
            .await
    }

    /// [`RendererEdge::open`] for a renderer that draws in `protocol`: the catalogs its
    /// capabilities list are checked against what the surface needs in that version.
    pub(crate) async fn open_for<S: EventStore>(
        &self,
        runtime: &Runtime<S>,
        connection: &Connection,
        protocol: crate::ProtocolVersion,
    ) -> Result<RendererSession, OpenError> {
        let execution = ExecutionId::new(connection.execution.clone()).map_err(|_| {
            OpenError::BadExecutionId {
                execution: connection.execution.clone(),
            }
        })?;
        if !self.inner.hub.serves_surface(&connection.surface_id) {
            return Err(OpenError::UnknownSurface {
                surface_id: connection.surface_id.clone(),
            });
        }
        let grant = self
            .inner
            .authenticator
            .authenticate(connection)
            .await
            .map_err(|reason| OpenError::Unauthenticated { reason })?;
        let binding = Binding::new(execution, connection.surface_id.clone());
        if !grant.bindings.contains(&binding) {
            return Err(OpenError::NotGranted {
                caller: grant.caller.to_string(),
                execution: binding.execution,
                surface_id: binding.surface_id,
            });
        }
        // Checked after the grant, so that an unauthenticated peer learns nothing of which
        // executions exist.
        if runtime.store().head(&binding.execution).await? == 0 {
            return Err(OpenError::UnknownExecution {
                execution: binding.execution,
            });
        }
        if let Some(supported) = &connection.supported_catalogs {
            let needed = match protocol {
                crate::ProtocolVersion::V1_0 => self
                    .inner
                    .hub
                    .required_catalogs(&binding.execution, &binding.surface_id),
                // A v0.9 session draws everything with v0.9's basic catalog (LD-028).
                crate::ProtocolVersion::V0_9 => {
                    std::collections::BTreeSet::from([crate::BASIC_CATALOG_V0_9_ID.to_owned()])
                }
            };
            let missing: Vec<String> = needed
                .into_iter()
                .filter(|id| !supported.contains(id))
                .collect();
            if !missing.is_empty() {
                return Err(OpenError::UnsupportedCatalogs {
                    surface_id: binding.surface_id,
                    missing,
                    supported: supported.clone(),
                });
            }
        }
        let wire_id = self
            .inner
            .hub
            .wire_id(&binding.execution, &binding.surface_id);
        // The session's place is taken before the hub subscribes it: a refused one costs
        // nothing more.
        let (id, requests) = self.inner.registry.open(
            registry::Opening {
                binding: binding.clone(),
                wire_id: wire_id.clone(),
                answers: connection.answers.clone(),
                caller: grant.caller.to_string(),
                peer: connection.peer,
            },
            &self.inner.limits,
        )?;
        let subscribed = self
            .inner
            .hub
            .subscribe(runtime.store(), &binding.execution, &binding.surface_id)
            .await;
        let mut subscription = match subscribed {
            Ok(subscription) => subscription,
            Err(error) => {
                self.inner.registry.close(id);
                return Err(error.into());
            }
        };
        if connection.reconnect {
            // A surface id may not be created twice: the renderer drops what it may hold.
            subscription.initial.insert(
                0,
                AgentMessage::DeleteSurface(crate::wire::DeleteSurface {
                    surface_id: wire_id,
                }),
            );
        }
        let caller = match grant
            .caller
            .with_attribute(SESSION_ATTRIBUTE, id.to_string())
        {
            Ok(caller) => caller,
            Err(error) => {
                self.inner.registry.close(id);
                return Err(error.into());
            }
        };
        Ok(RendererSession {
            id,
            caller,
            binding,
            edge: Arc::clone(&self.inner),
            subscription,
            requests,
            rate: RateLimiter::new(&self.inner.limits),
        })
    }
}

impl Plugin for RendererEdge {
    fn name(&self) -> &str {
        "loom-plugin-a2ui-edge"
    }

    fn kernel_abi(&self) -> AbiRange {
        AbiRange::caret(1, 1)
    }

    fn contribute(&self, contributions: &mut Contributions) {
        contributions.inbound(INBOUND_NAME, Arc::new(EdgeInbound(Arc::clone(&self.inner))));
    }
}

/// One renderer's session on one binding. Dropping it releases everything the edge and the
/// hub keep for it; a grain-B call sent on it and unanswered is lost (its step in doubt).
pub struct RendererSession {
    id: u64,
    caller: Caller,
    binding: Binding,
    edge: Arc<EdgeInner>,
    subscription: SurfaceSubscription,
    requests: mpsc::UnboundedReceiver<Box<Outbound>>,
    rate: RateLimiter,
}

impl std::fmt::Debug for RendererSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RendererSession")
            .field("id", &self.id)
            .field("caller", &self.caller)
            .field("binding", &self.binding)
            .finish()
    }
}

impl RendererSession {
    /// The session's id, unique in this edge.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Who the session speaks for (the granted caller, with [`SESSION_ATTRIBUTE`]).
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The execution and surface it shows.
    pub fn binding(&self) -> &Binding {
        &self.binding
    }

    /// `createSurface` with the current masked model, then the open grain-A calls: what to
    /// send first (after `deleteSurface` when the connection said it reconnects,
    /// [`Connection::reconnect`]). Empty the second time.
    pub fn take_initial(&mut self) -> Vec<AgentMessage> {
        std::mem::take(&mut self.subscription.initial)
    }

    /// The next message to send: a live update, or a grain-B request (call
    /// [`Outbound::written`] once it is written). `None` once the surface is deleted or the
    /// renderer fell too far behind ([`RendererSession::lagged`]).
    pub async fn next(&mut self) -> Option<Outbound> {
        tokio::select! {
            update = self.subscription.next() => update.map(Outbound::update),
            Some(request) = self.requests.recv() => Some(*request),
        }
    }

    /// Whether the session ended because its renderer fell too far behind.
    pub fn lagged(&self) -> bool {
        self.subscription.lagged()
    }

    /// Takes one frame from the renderer: bounded, parsed, checked against the binding, then
    /// sent through the runtime's inbound seam as this session's caller.
    pub async fn receive<S: EventStore>(
        &mut self,
        runtime: &Runtime<S>,
        frame: &[u8],
    ) -> Result<Received, Refused> {
        self.admit(frame)?;
        let value: Value = serde_json::from_slice(frame).map_err(|error| WireError::Json {
            detail: error.to_string(),
        })?;
        self.receive_admitted(runtime, &value, frame).await
    }

    /// The limits every frame passes before it is parsed, whatever its protocol version.
    pub(crate) fn admit(&mut self, frame: &[u8]) -> Result<(), Refused> {
        self.rate.take()?;
        check_frame(frame, &self.edge.limits)?;
        Ok(())
    }

    /// An admitted frame read as the v1.0 value `value`: checked against the binding and sent
    /// through the inbound seam.
    pub(crate) async fn receive_admitted<S: EventStore>(
        &mut self,
        runtime: &Runtime<S>,
        value: &Value,
        frame: &[u8],
    ) -> Result<Received, Refused> {
        let message = RendererMessage::from_value(value)?;
        let received = match routing::route(&self.edge, self.id, &self.binding, message, frame)? {
            Route::Resume { received, .. } | Route::Nothing { received } => received,
            Route::StepReply { call_id } => Received::StepReply { call_id },
        };
        runtime
            .inbound_as(&self.caller, INBOUND_NAME, value)
            .await?;
        Ok(received)
    }
}

impl Drop for RendererSession {
    fn drop(&mut self) {
        self.edge.registry.close(self.id);
    }
}
