//! The live sessions, their bindings, and the grain-B calls in flight on them: the edge's only
//! state, released when a session closes and when a call ends (answered, timed out, dropped).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::edge::auth::Binding;
use crate::effect::{Transport, TransportError};
use crate::wire::AgentMessage;

/// A message for a session's renderer, with a signal for the transport once it is written.
#[derive(Debug)]
pub struct Outbound {
    /// What to send.
    pub message: AgentMessage,
    written: Option<oneshot::Sender<()>>,
}

impl Outbound {
    pub(crate) fn update(message: AgentMessage) -> Self {
        Self {
            message,
            written: None,
        }
    }

    /// Tells the edge the message is written to the renderer's connection: a grain-B request
    /// counts as delivered from then on (a later loss puts its step in doubt, not a retry).
    pub fn written(self) {
        if let Some(written) = self.written {
            // The call may have ended meanwhile; nobody to tell then.
            let _ = written.send(());
        }
    }
}

#[derive(Debug)]
struct Entry {
    binding: Binding,
    answers: Option<Vec<String>>,
    requests: mpsc::UnboundedSender<Outbound>,
}

#[derive(Debug)]
struct PendingCall {
    binding: Binding,
    session: u64,
    reply: oneshot::Sender<Vec<u8>>,
}

#[derive(Debug, Default)]
struct State {
    next_session: u64,
    sessions: BTreeMap<u64, Entry>,
    pending: BTreeMap<String, PendingCall>,
}

/// What happened to a reply offered to the grain-B calls in flight.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Handoff {
    /// Handed to its step.
    Delivered,
    /// In flight, but sent on another binding: refused.
    OtherBinding,
    /// No grain-B call in flight has this id.
    NotInFlight,
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    state: Mutex<State>,
    changed: Notify,
}

impl Registry {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a session of `binding`; its id and the receiver of grain-B requests for it.
    pub(crate) fn open(
        &self,
        binding: Binding,
        answers: Option<Vec<String>>,
    ) -> (u64, mpsc::UnboundedReceiver<Outbound>) {
        let (requests, receiver) = mpsc::unbounded_channel();
        let id = {
            let mut state = self.state();
            state.next_session += 1;
            let id = state.next_session;
            state.sessions.insert(
                id,
                Entry {
                    binding,
                    answers,
                    requests,
                },
            );
            id
        };
        self.changed.notify_waiters();
        (id, receiver)
    }

    /// Forgets the session; the grain-B calls sent on it and unanswered are lost.
    pub(crate) fn close(&self, id: u64) {
        let mut state = self.state();
        state.sessions.remove(&id);
        state.pending.retain(|_, call| call.session != id);
    }

    /// The binding of a live session.
    pub(crate) fn binding_of(&self, id: u64) -> Option<Binding> {
        self.state().sessions.get(&id).map(|e| e.binding.clone())
    }

    /// How many sessions are open.
    pub(crate) fn len(&self) -> usize {
        self.state().sessions.len()
    }

    /// How many grain-B calls are in flight.
    pub(crate) fn calls_in_flight(&self) -> usize {
        self.state().pending.len()
    }

    /// Whether a grain-B call `call_id` is in flight on `binding` (without taking it).
    pub(crate) fn check_reply(&self, binding: &Binding, call_id: &str) -> Handoff {
        match self.state().pending.get(call_id) {
            Some(call) if call.binding == *binding => Handoff::Delivered,
            Some(_) => Handoff::OtherBinding,
            None => Handoff::NotInFlight,
        }
    }

    /// Hands a reply that arrived on `binding` to the grain-B call it names.
    pub(crate) fn hand_off(&self, binding: &Binding, call_id: &str, reply: Vec<u8>) -> Handoff {
        let mut state = self.state();
        match state.pending.get(call_id) {
            Some(call) if call.binding == *binding => {}
            Some(_) => return Handoff::OtherBinding,
            None => return Handoff::NotInFlight,
        }
        match state.pending.remove(call_id) {
            Some(call) => {
                // The step may have given up this instant; the reply is dropped then.
                let _ = call.reply.send(reply);
                Handoff::Delivered
            }
            None => Handoff::NotInFlight,
        }
    }

    /// The oldest live session of the call's execution and surface that answers `function`.
    /// The call id is `executionId:stepId`: a session's execution is the one it starts with.
    fn pick(
        &self,
        call_id: &str,
        surface_id: &str,
        function: &str,
    ) -> Option<(u64, Binding, mpsc::UnboundedSender<Outbound>)> {
        let state = self.state();
        state
            .sessions
            .iter()
            .find(|(_, s)| {
                call_id
                    .strip_prefix(s.binding.execution.as_str())
                    .is_some_and(|rest| rest.starts_with(':'))
                    && s.binding.surface_id == surface_id
                    && s.answers
                        .as_ref()
                        .is_none_or(|names| names.iter().any(|n| n == function))
                    && !s.requests.is_closed()
            })
            .map(|(id, s)| (*id, s.binding.clone(), s.requests.clone()))
    }

    async fn call(
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
        let surface_id = call.surface_id.clone().unwrap_or_default();
        let (session, binding, requests) = loop {
            let changed = self.changed.notified();
            if let Some(found) = self.pick(&call_id, &surface_id, &call.call.name) {
                break found;
            }
            tokio::select! {
                () = changed => {}
                () = cancel.cancelled() => return Err(TransportError::NotDelivered(format!(
                    "no renderer showed surface `{surface_id}` before `{call_id}` was given up"
                ))),
            }
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        self.state().pending.insert(
            call_id.clone(),
            PendingCall {
                binding,
                session,
                reply: reply_tx,
            },
        );
        // Whatever ends this call (a reply, a timeout that drops this future, a cancellation),
        // its entry goes with it: a late reply then finds nothing to answer.
        let _in_flight = InFlight {
            registry: &self,
            call_id: &call_id,
        };
        let (written_tx, written_rx) = oneshot::channel();
        let queued = requests.send(Outbound {
            message: request.clone(),
            written: Some(written_tx),
        });
        if queued.is_err() || written_rx.await.is_err() {
            return Err(TransportError::NotDelivered(format!(
                "session #{session} closed before `{call_id}` was written"
            )));
        }
        tokio::select! {
            reply = reply_rx => reply.map_err(|_| TransportError::Lost(format!(
                "session #{session} closed after `{call_id}` was sent and before its reply"
            ))),
            () = cancel.cancelled() => Err(TransportError::Lost(format!(
                "`{call_id}` was given up after it was sent"
            ))),
        }
    }
}

/// Removes a grain-B call's entry when the call ends, however it ends.
struct InFlight<'a> {
    registry: &'a Registry,
    call_id: &'a str,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.registry.state().pending.remove(self.call_id);
    }
}

/// Grain B over the edge's sessions: a request goes to the oldest live session of its
/// execution and surface that answers the function, waiting for one to open until the call
/// is given up.
#[derive(Debug, Clone)]
pub(crate) struct SessionTransport(pub(crate) Arc<Registry>);

impl Transport for SessionTransport {
    fn call(
        &self,
        request: AgentMessage,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Vec<u8>, TransportError>> {
        self.0.clone().call(request, cancel).boxed()
    }
}
