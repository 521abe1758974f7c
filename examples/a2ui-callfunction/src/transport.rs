//! Grain B's transport: the plugin's [`RendererEdge::transport`](loom_plugin_a2ui::RendererEdge::transport) over the server's renderer
//! sessions, with the story's crash on the way back; and who may open a renderer session.
//!
//! A grain-B request goes to the oldest open session of its execution and surface that answers
//! the function (a renderer may name the functions it answers in its URL, `?answers=getLocale`;
//! it answers all of them otherwise); only the session it was sent to may answer it, and only
//! while the call is in flight. A session that closes with a request sent and unanswered makes
//! the request lost: the renderer may have run it, and the step is in doubt.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use loom_kernel::{Caller, ExecutionId};
use loom_plugin_a2ui::{AgentMessage, Binding, Connection, Grant, SessionAuthenticator};
use loom_plugin_a2ui::{CredentialKey, SignedCredentials, Transport, TransportError};
use tokio_util::sync::CancellationToken;

use crate::app::SURFACE;
use crate::narrate;

/// The connection credential the server sets once it has checked the admin token itself (the
/// playground's stream).
pub const OPERATOR_VERIFIED: &str = "operator-verified";

/// How long a renderer link the server hands out stays good.
pub const RENDERER_LINK_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Who may open a renderer session on this server: the holder of a renderer credential the
/// server minted ([`loom_plugin_a2ui::SignedCredentials`]: one execution's surface, until it
/// expires), whatever machine it connects from; and the playground's stream, once the server
/// has checked the admin token (the operator may open any execution of the store).
#[derive(Debug, Clone)]
pub struct RendererAccess {
    credentials: SignedCredentials,
}

impl RendererAccess {
    /// Sessions for holders of credentials minted with `key`.
    pub fn new(key: CredentialKey) -> Self {
        Self {
            credentials: SignedCredentials::new(key),
        }
    }

    /// A credential for `execution`'s surface, good for [`RENDERER_LINK_TTL`].
    pub fn mint(&self, execution: &ExecutionId) -> String {
        let expires_at = loom_plugin_a2ui::unix_now() + RENDERER_LINK_TTL.as_secs();
        self.credentials
            .key()
            .mint(&Binding::new(execution.clone(), SURFACE), expires_at)
    }
}

impl SessionAuthenticator for RendererAccess {
    fn authenticate<'a>(
        &'a self,
        connection: &'a Connection,
    ) -> BoxFuture<'a, Result<Grant, String>> {
        let operator = connection
            .credentials
            .get(OPERATOR_VERIFIED)
            .map(String::as_str)
            == Some("yes");
        if !operator {
            return self.credentials.authenticate(connection);
        }
        let grant = ExecutionId::new(connection.execution.clone())
            .map_err(|error| error.to_string())
            .and_then(|asked| {
                let caller = Caller::new("playground")
                    .and_then(|caller| caller.with_attribute("via", "a2ui"))
                    .map_err(|e| e.to_string())?;
                Ok(Grant {
                    caller,
                    bindings: vec![Binding::new(asked, SURFACE)],
                })
            });
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
