//! The plugin's [`Transport`] over the server's WebSocket sessions.
//!
//! A grain-B request goes to the oldest live session showing the request's surface and answering
//! the function (a renderer may name the functions it answers in its URL, `?answers=getLocale`;
//! it answers all of them otherwise), waiting for one to connect within the effect's request
//! timeout; the reply comes back on that socket and
//! is matched by its call id. A session that closes with a request sent and unanswered makes the
//! request [`TransportError::Lost`]: the renderer may have run it, and the step is in doubt.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::FutureExt;
use futures::future::BoxFuture;
use loom_plugin_a2ui::AgentMessage;
use loom_plugin_a2ui::{Transport, TransportError};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::narrate;

/// A message a session is asked to send, with a signal once it is written to the socket.
#[derive(Debug)]
pub struct Outgoing {
    /// What to send.
    pub message: AgentMessage,
    /// Fired once it is written to the socket.
    pub sent: oneshot::Sender<()>,
}

#[derive(Debug)]
struct Session {
    execution: String,
    surface: String,
    /// The functions this renderer answers (`?answers=a,b`); all when `None`.
    answers: Option<Vec<String>>,
    outbox: mpsc::UnboundedSender<Outgoing>,
}

#[derive(Debug)]
struct Pending {
    session: u64,
    reply: oneshot::Sender<Vec<u8>>,
}

#[derive(Debug, Default)]
struct State {
    next_session: u64,
    sessions: BTreeMap<u64, Session>,
    pending: BTreeMap<String, Pending>,
}

/// The server's live sessions, and the grain-B requests in flight on them.
#[derive(Debug, Default)]
pub struct Sessions {
    state: Mutex<State>,
    changed: Notify,
    /// Abort the process when the reply to `submitOrder` arrives, before it is recorded.
    crash_after_submit: bool,
}

impl Sessions {
    /// No sessions yet. With `crash_after_submit`, the process aborts on the first reply to
    /// `submitOrder`, after the renderer ran it and before Loom records it.
    pub fn new(crash_after_submit: bool) -> Arc<Self> {
        Arc::new(Self {
            crash_after_submit,
            ..Self::default()
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new session showing `surface` of `execution`, answering `answers` (all functions when
    /// `None`): its id and the messages to send on it.
    pub fn open(
        &self,
        execution: &str,
        surface: &str,
        answers: Option<Vec<String>>,
    ) -> (u64, mpsc::UnboundedReceiver<Outgoing>) {
        let (outbox, receiver) = mpsc::unbounded_channel();
        let id = {
            let mut state = self.state();
            state.next_session += 1;
            let id = state.next_session;
            state.sessions.insert(
                id,
                Session {
                    execution: execution.to_owned(),
                    surface: surface.to_owned(),
                    answers,
                    outbox,
                },
            );
            id
        };
        self.changed.notify_waiters();
        (id, receiver)
    }

    /// The session has closed: its unanswered requests are lost.
    pub fn close(&self, id: u64) {
        let mut state = self.state();
        state.sessions.remove(&id);
        state.pending.retain(|_, pending| pending.session != id);
    }

    /// Hands a reply to the request waiting for it; `false` if none waits (a grain-A reply).
    pub fn deliver(&self, call_id: &str, reply: Vec<u8>) -> bool {
        let pending = self.state().pending.remove(call_id);
        match pending {
            Some(pending) => {
                let _ = pending.reply.send(reply);
                true
            }
            None => false,
        }
    }

    /// How many sessions are open.
    pub fn len(&self) -> usize {
        self.state().sessions.len()
    }

    /// Whether no session is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn pick(
        &self,
        execution: &str,
        surface: &str,
        function: &str,
    ) -> Option<(u64, mpsc::UnboundedSender<Outgoing>)> {
        let state = self.state();
        state
            .sessions
            .iter()
            .find(|(_, s)| {
                s.execution == execution
                    && s.surface == surface
                    && s.answers
                        .as_ref()
                        .is_none_or(|names| names.iter().any(|n| n == function))
                    && !s.outbox.is_closed()
            })
            .map(|(id, s)| (*id, s.outbox.clone()))
    }

    async fn call_inner(
        self: Arc<Self>,
        request: AgentMessage,
        cancel: CancellationToken,
    ) -> Result<Vec<u8>, TransportError> {
        let AgentMessage::CallRendererFunction(call) = &request else {
            return Err(TransportError::NotDelivered(
                "only callRendererFunction is sent as a request".into(),
            ));
        };
        let call_id = call.function_call_id.clone();
        let name = call.call.name.clone();
        let surface = call.surface_id.clone().unwrap_or_default();
        // The call id is the step's idempotency key, `executionId:stepId`.
        let execution = call_id
            .rsplit_once(':')
            .map_or(call_id.as_str(), |(e, _)| e)
            .to_owned();
        let (session, outbox) = loop {
            let changed = self.changed.notified();
            if let Some(found) = self.pick(&execution, &surface, &name) {
                break found;
            }
            tokio::select! {
                () = changed => {}
                () = cancel.cancelled() => return Err(TransportError::NotDelivered(format!("no renderer showed surface `{surface}` before the call was given up"))),
            }
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        self.state().pending.insert(
            call_id.clone(),
            Pending {
                session,
                reply: reply_tx,
            },
        );
        let (sent_tx, sent_rx) = oneshot::channel();
        let queued = outbox.send(Outgoing {
            message: request.clone(),
            sent: sent_tx,
        });
        if queued.is_err() || sent_rx.await.is_err() {
            self.state().pending.remove(&call_id);
            return Err(TransportError::NotDelivered(format!(
                "session #{session} closed before `{call_id}` was written"
            )));
        }
        let reply = tokio::select! {
            reply = reply_rx => reply,
            () = cancel.cancelled() => {
                self.state().pending.remove(&call_id);
                return Err(TransportError::Lost(format!("`{call_id}` was given up after it was sent")));
            }
        };
        let Ok(reply) = reply else {
            return Err(TransportError::Lost(format!(
                "session #{session} closed after `{call_id}` was sent and before its reply"
            )));
        };
        if self.crash_after_submit && name == "submitOrder" {
            narrate::say(format!(
                "CRASH: the reply to {call_id} arrived; aborting before Loom records it (std::process::abort, no cleanup)"
            ));
            std::process::abort();
        }
        Ok(reply)
    }
}

/// The [`Transport`] the plugin's `a2ui.callFunction` effect sends through.
#[derive(Debug, Clone)]
pub struct WsTransport(pub Arc<Sessions>);

impl Transport for WsTransport {
    fn call(
        &self,
        request: AgentMessage,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Vec<u8>, TransportError>> {
        self.0.clone().call_inner(request, cancel).boxed()
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
