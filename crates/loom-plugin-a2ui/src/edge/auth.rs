//! Who a renderer connection is, and what it may see and drive: the application decides, from
//! whatever the connection carries (a token, a cookie, a signed URL).

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use loom_kernel::{Caller, ExecutionId};

/// One surface of one execution: what a renderer session shows and drives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Binding {
    /// The execution.
    pub execution: ExecutionId,
    /// The surface's id, as the flow names it.
    pub surface_id: String,
}

impl Binding {
    /// The surface `surface_id` of `execution`.
    pub fn new(execution: ExecutionId, surface_id: impl Into<String>) -> Self {
        Self {
            execution,
            surface_id: surface_id.into(),
        }
    }
}

/// A renderer asking to open a session, as the application's transport received it.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// The execution the renderer asks for, as sent (not yet checked).
    pub execution: String,
    /// The surface it asks for, as sent.
    pub surface_id: String,
    /// What the connection carries that the authenticator reads: headers, query parameters,
    /// cookies, the peer's address (the application's names and choice).
    pub credentials: BTreeMap<String, String>,
    /// The address the connection came from, for [`Limits::max_sessions_per_peer`](crate::Limits::max_sessions_per_peer);
    /// `None`: not counted per peer.
    pub peer: Option<std::net::IpAddr>,
    /// The functions this renderer answers for grain B; all when `None`.
    pub answers: Option<Vec<String>>,
    /// The catalogs the renderer supports, from its capabilities (`supportedCatalogIds`,
    /// [`ProtocolVersion::supported_catalogs`](crate::ProtocolVersion::supported_catalogs)):
    /// a surface that needs another one is refused. `None` when it announced none: nothing
    /// is checked.
    pub supported_catalogs: Option<Vec<String>>,
    /// The renderer may still hold the surface from an earlier session (it reconnects with its
    /// state): the session starts with `deleteSurface`, then `createSurface`, since a surface
    /// id may not be created twice.
    pub reconnect: bool,
}

/// What the authenticator grants a connection: who it is, and the surfaces it may use.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The caller every message of the session is sent as (to the resume authenticator too).
    pub caller: Caller,
    /// The (execution, surface) pairs the caller may see and drive.
    pub bindings: Vec<Binding>,
}

/// The application's decision on a renderer connection (K12.2 for the A2UI edge).
///
/// # As a seam
/// - **Replay:** never called on replay; only when a session opens.
/// - **Task:** the connection's task, before anything is subscribed or kept.
/// - **Panic:** not contained: a panic ends the connection's task; refuse with `Err` instead.
/// - **Other processes:** it sees only the connection.
pub trait SessionAuthenticator: Send + Sync + 'static {
    /// The grant for `connection`, or `Err(reason)`; the session is refused then and nothing
    /// is kept for it.
    fn authenticate<'a>(
        &'a self,
        connection: &'a Connection,
    ) -> BoxFuture<'a, Result<Grant, String>>;
}
