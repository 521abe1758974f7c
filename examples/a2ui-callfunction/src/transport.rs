//! Grain B's transport: the plugin's [`RendererEdge::transport`] over the server's renderer
//! sessions, with the story's crash on the way back; and who may open a renderer session.
//!
//! A grain-B request goes to the oldest open session of its execution and surface that answers
//! the function (a renderer may name the functions it answers in its URL, `?answers=getLocale`;
//! it answers all of them otherwise); only a session of that binding may answer it, and only
//! while the call is in flight. A session that closes with a request sent and unanswered makes
//! the request lost: the renderer may have run it, and the step is in doubt.

use std::net::SocketAddr;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use loom_console::constant_time_eq;
use loom_kernel::{Caller, ExecutionId};
use loom_plugin_a2ui::{AgentMessage, Binding, Connection, Grant, SessionAuthenticator};
use loom_plugin_a2ui::{Transport, TransportError};
use tokio_util::sync::CancellationToken;

use crate::app::SURFACE;
use crate::narrate;

/// The connection credential holding the peer's address, set by the server.
pub const PEER: &str = "peer";
/// The connection credential holding the token the renderer presented (`?token=` or
/// `Authorization: Bearer`), set by the server.
pub const TOKEN: &str = "token";
/// The connection credential the server sets once it has checked the admin token itself (the
/// playground's stream).
pub const OPERATOR_VERIFIED: &str = "operator-verified";

/// Who may open a renderer session on this server: the executions it serves (the one it was
/// started for, and those the playground started), their surface. A
/// renderer presents the renderer token when the server has one; without one, only a renderer
/// on the server's own machine (a loopback peer) is let in. The playground's stream is let in
/// once the server has checked the admin token.
#[derive(Debug, Clone)]
pub struct RendererAccess {
    served: Arc<std::sync::Mutex<std::collections::BTreeSet<ExecutionId>>>,
    renderer_token: Option<String>,
}

impl RendererAccess {
    /// Sessions on `execution`'s surface, for holders of `renderer_token` (loopback peers when
    /// `None`).
    pub fn new(execution: ExecutionId, renderer_token: Option<String>) -> Self {
        Self {
            served: Arc::new(std::sync::Mutex::new([execution].into())),
            renderer_token,
        }
    }

    /// Serves `execution` too (one the playground started).
    pub fn serve(&self, execution: ExecutionId) {
        self.served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(execution);
    }

    fn caller(&self, connection: &Connection) -> Result<Caller, String> {
        let credential = |name: &str| connection.credentials.get(name).map(String::as_str);
        let peer = credential(PEER).unwrap_or("an unknown peer");
        let subject = if credential(OPERATOR_VERIFIED) == Some("yes") {
            "playground".to_owned()
        } else if let Some(expected) = &self.renderer_token {
            let given = credential(TOKEN).ok_or("no renderer token")?;
            if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
                return Err("the renderer token does not match".into());
            }
            format!("renderer@{peer}")
        } else {
            let loopback = peer
                .parse::<SocketAddr>()
                .is_ok_and(|addr| addr.ip().is_loopback());
            if !loopback {
                return Err(format!(
                    "{peer} is not on this machine and the server has no renderer token"
                ));
            }
            format!("local-renderer@{peer}")
        };
        Caller::new(subject)
            .and_then(|caller| caller.with_attribute("via", "a2ui"))
            .map_err(|e| e.to_string())
    }
}

impl SessionAuthenticator for RendererAccess {
    fn authenticate<'a>(
        &'a self,
        connection: &'a Connection,
    ) -> BoxFuture<'a, Result<Grant, String>> {
        // The playground (the operator, who holds the admin token) may open any execution of
        // this server's store; a renderer, the executions served.
        let operator = connection
            .credentials
            .get(OPERATOR_VERIFIED)
            .map(String::as_str)
            == Some("yes");
        let bindings = match ExecutionId::new(connection.execution.clone()) {
            Ok(asked)
                if operator
                    || self
                        .served
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .contains(&asked) =>
            {
                vec![Binding::new(asked, SURFACE)]
            }
            _ => Vec::new(),
        };
        let grant = self
            .caller(connection)
            .map(|caller| Grant { caller, bindings });
        async move { grant }.boxed()
    }
}

/// The edge's transport, aborting the process when the reply to `submitOrder` arrives (before
/// Loom records it) when the story asks for a crash.
#[derive(Clone)]
pub struct CrashAfterSubmit {
    inner: Arc<dyn Transport>,
}

impl std::fmt::Debug for CrashAfterSubmit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CrashAfterSubmit")
    }
}

impl CrashAfterSubmit {
    /// `inner`, with the crash.
    pub fn new(inner: Arc<dyn Transport>) -> Self {
        Self { inner }
    }
}

impl Transport for CrashAfterSubmit {
    fn call(
        &self,
        request: AgentMessage,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Vec<u8>, TransportError>> {
        let (call_id, name) = match &request {
            AgentMessage::CallRendererFunction(call) => {
                (call.function_call_id.clone(), call.call.name.clone())
            }
            _ => (String::new(), String::new()),
        };
        let reply = self.inner.call(request, cancel);
        async move {
            let reply = reply.await?;
            if name == "submitOrder" {
                narrate::say(format!(
                    "CRASH: the reply to {call_id} arrived; aborting before Loom records it (std::process::abort, no cleanup)"
                ));
                std::process::abort();
            }
            Ok(reply)
        }
        .boxed()
    }
}

/// A transport with no renderer behind it, for operator commands run on the store file: any
/// call is refused as not delivered.
#[derive(Debug, Clone, Copy)]
pub struct NoRenderer;

impl Transport for NoRenderer {
    fn call(
        &self,
        _request: AgentMessage,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Vec<u8>, TransportError>> {
        async {
            Err(TransportError::NotDelivered(
                "no renderer is connected to an operator command".into(),
            ))
        }
        .boxed()
    }
}
