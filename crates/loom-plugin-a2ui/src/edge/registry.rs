//! The live sessions, their bindings, and the grain-B calls in flight on them: the edge's only
//! state, released when a session closes and when a call ends (answered, timed out, dropped).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::edge::auth::Binding;
use crate::edge::limits::{Limits, TooMany};
use crate::effect::{Transport, TransportError};
use crate::hub::SurfaceHub;
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
    /// Who the session speaks for and where it came from, for the per-caller and per-peer
    /// limits.
    caller: String,
    peer: Option<IpAddr>,
    /// The id the session's renderer knows the surface by.
    wire_id: String,
    answers: Option<Vec<String>>,
    requests: mpsc::UnboundedSender<Box<Outbound>>,
}

impl Entry {
    /// Whether the session answers `function`: all when it named none.
    fn answers(&self, function: &str) -> bool {
        self.answers
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == function))
    }
}

#[derive(Debug)]
struct PendingCall {
    /// The function called, for its reply's bound.
    function: String,
    /// The session it was sent to; `None` while it waits for another of its binding. Only
    /// that session may answer it.
    session: Option<u64>,
    reply: oneshot::Sender<Vec<u8>>,
    /// Told when its session closes within the grace period's reach.
    orphaned: Arc<Notify>,
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
    /// Handed to its step (or, for a check, it would be): the call's function.
    Delivered(String),
    /// In flight, but sent to another session: refused.
    OtherSession,
    /// No grain-B call in flight has this id.
    NotInFlight,
}

#[derive(Default)]
pub(crate) struct Registry {
    state: Mutex<State>,
    /// Masks a request's args for its binding before it leaves (K10-R6); none in unit tests.
    hub: Option<SurfaceHub>,
    changed: Notify,
    /// How long a grain-B call whose session closed waits for another session of its binding
    /// to send it to again; zero: it is lost at once.
    resend_grace: Duration,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("state", &self.state)
            .field("resend_grace", &self.resend_grace)
            .finish()
    }
}

impl Registry {
    pub(crate) fn new(resend_grace: Duration, hub: SurfaceHub) -> Self {
        Self {
            resend_grace,
            hub: Some(hub),
            ..Self::default()
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a session of `binding` for `caller` from `peer`, within `limits`; its id and
    /// the receiver of grain-B requests for it.
    pub(crate) fn open(
        &self,
        opening: Opening,
        limits: &Limits,
    ) -> Result<(u64, mpsc::UnboundedReceiver<Box<Outbound>>), TooMany> {
        let (requests, receiver) = mpsc::unbounded_channel();
        let id = {
            let mut state = self.state();
            let open =
                |keep: &dyn Fn(&Entry) -> bool| state.sessions.values().filter(|e| keep(e)).count();
            if state.sessions.len() >= limits.max_sessions {
                return Err(TooMany::Total {
                    limit: limits.max_sessions,
                });
            }
            if open(&|e| e.caller == opening.caller) >= limits.max_sessions_per_caller {
                return Err(TooMany::Caller {
                    limit: limits.max_sessions_per_caller,
                });
            }
            if opening.peer.is_some()
                && open(&|e| e.peer == opening.peer) >= limits.max_sessions_per_peer
            {
                return Err(TooMany::Peer {
                    limit: limits.max_sessions_per_peer,
                });
            }
            state.next_session += 1;
            let id = state.next_session;
            state.sessions.insert(
                id,
                Entry {
                    binding: opening.binding,
                    caller: opening.caller,
                    peer: opening.peer,
                    wire_id: opening.wire_id,
                    answers: opening.answers,
                    requests,
                },
            );
            id
        };
        self.changed.notify_waiters();
        Ok((id, receiver))
    }

    /// Forgets the session. The grain-B calls sent on it and unanswered wait for another
    /// session of their binding for the grace period, or are lost at once without one.
    pub(crate) fn close(&self, id: u64) {
        let mut state = self.state();
        state.sessions.remove(&id);
        if self.resend_grace.is_zero() {
            state.pending.retain(|_, call| call.session != Some(id));
            return;
        }
        for call in state.pending.values_mut() {
            if call.session == Some(id) {
                call.session = None;
                call.orphaned.notify_one();
            }
        }
    }

    /// The binding of a live session.
    pub(crate) fn binding_of(&self, id: u64) -> Option<Binding> {
        self.state().sessions.get(&id).map(|e| e.binding.clone())
    }

    /// Whether live session `id` answers `function` (a v0.9 session answers none).
    pub(crate) fn answers(&self, id: u64, function: &str) -> bool {
        self.state()
            .sessions
            .get(&id)
            .is_some_and(|e| e.answers(function))
    }

    /// How many sessions are open.
    pub(crate) fn len(&self) -> usize {
        self.state().sessions.len()
    }

    /// How many grain-B calls are in flight.
    pub(crate) fn calls_in_flight(&self) -> usize {
        self.state().pending.len()
    }

    /// Whether a grain-B call `call_id` is in flight and was sent to session `session`
    /// (without taking it).
    pub(crate) fn check_reply(&self, session: u64, call_id: &str) -> Handoff {
        match self.state().pending.get(call_id) {
            Some(call) if call.session == Some(session) => {
                Handoff::Delivered(call.function.clone())
            }
            Some(_) => Handoff::OtherSession,
            None => Handoff::NotInFlight,
        }
    }

    /// Hands a reply that arrived on session `session` to the grain-B call it names, if that
    /// call was sent (or re-sent) to that session.
    pub(crate) fn hand_off(&self, session: u64, call_id: &str, reply: Vec<u8>) -> Handoff {
        let mut state = self.state();
        match state.pending.get(call_id) {
            Some(call) if call.session == Some(session) => {}
            Some(_) => return Handoff::OtherSession,
            None => return Handoff::NotInFlight,
        }
        match state.pending.remove(call_id) {
            Some(call) => {
                // The step may have given up this instant; the reply is dropped then.
                let _ = call.reply.send(reply);
                Handoff::Delivered(call.function)
            }
            None => Handoff::NotInFlight,
        }
    }

    /// The oldest live session of the call's execution and surface that answers `function`.
    /// The call id is `executionId:stepId`: a session's execution is the one it starts with.
    fn pick(&self, call_id: &str, surface_id: &str, function: &str) -> Option<(u64, Sender)> {
        let state = self.state();
        state
            .sessions
            .iter()
            .find(|(_, s)| {
                call_id
                    .strip_prefix(s.binding.execution.as_str())
                    .is_some_and(|rest| rest.starts_with(':'))
                    && s.binding.surface_id == surface_id
                    && s.answers(function)
                    && !s.requests.is_closed()
            })
            .map(|(id, s)| {
                let sender = Sender {
                    requests: s.requests.clone(),
                    wire_id: s.wire_id.clone(),
                    binding: s.binding.clone(),
                    hub: self.hub.clone(),
                };
                (*id, sender)
            })
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
        let (session, requests) = loop {
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
        let (reply_tx, mut reply_rx) = oneshot::channel();
        let orphaned = Arc::new(Notify::new());
        self.state().pending.insert(
            call_id.clone(),
            PendingCall {
                function: call.call.name.clone(),
                session: Some(session),
                reply: reply_tx,
                orphaned: Arc::clone(&orphaned),
            },
        );
        // Whatever ends this call (a reply, a timeout that drops this future, a cancellation),
        // its entry goes with it: a late reply then finds nothing to answer.
        let _in_flight = InFlight {
            registry: &self,
            call_id: &call_id,
        };
        let mut session = session;
        if !send_request(&requests, &request).await {
            return Err(TransportError::NotDelivered(format!(
                "session #{session} closed before `{call_id}` was written"
            )));
        }
        loop {
            tokio::select! {
                reply = &mut reply_rx => return reply.map_err(|_| TransportError::Lost(format!(
                    "session #{session} closed after `{call_id}` was sent and before its reply"
                ))),
                () = orphaned.notified() => {
                    // Its session closed: the same request (same call id; the renderer
                    // dedups) goes to the next session of its binding within the grace period.
                    session = self
                        .resend(&request, &call_id, &surface_id, &call.call.name, &cancel)
                        .await?;
                }
                () = cancel.cancelled() => return Err(TransportError::Lost(format!(
                    "`{call_id}` was given up after it was sent"
                ))),
            }
        }
    }

    /// Sends `request` again, to the next session of its binding that opens within the grace
    /// period; the session it went to.
    async fn resend(
        &self,
        request: &AgentMessage,
        call_id: &str,
        surface_id: &str,
        function: &str,
        cancel: &CancellationToken,
    ) -> Result<u64, TransportError> {
        let grace = tokio::time::sleep(self.resend_grace);
        tokio::pin!(grace);
        loop {
            let changed = self.changed.notified();
            if let Some((session, requests)) = self.pick(call_id, surface_id, function) {
                if let Some(call) = self.state().pending.get_mut(call_id) {
                    call.session = Some(session);
                }
                if send_request(&requests, request).await {
                    return Ok(session);
                }
                // That one closed before the request was written: wait for the next.
                continue;
            }
            tokio::select! {
                () = changed => {}
                () = &mut grace => return Err(TransportError::Lost(format!(
                    "the session `{call_id}` was sent to closed, and no other renderer of its surface came within {:?}",
                    self.resend_grace
                ))),
                () = cancel.cancelled() => return Err(TransportError::Lost(format!(
                    "`{call_id}` was given up after it was sent"
                ))),
            }
        }
    }
}

/// What the registry keeps of a session it opens.
pub(crate) struct Opening {
    pub(crate) binding: Binding,
    pub(crate) wire_id: String,
    pub(crate) answers: Option<Vec<String>>,
    pub(crate) caller: String,
    pub(crate) peer: Option<IpAddr>,
}

/// Where a session's requests go, the surface id its renderer knows, and what masks them.
struct Sender {
    requests: mpsc::UnboundedSender<Box<Outbound>>,
    wire_id: String,
    binding: Binding,
    hub: Option<SurfaceHub>,
}

/// Queues `request` on a session, naming the surface as its renderer knows it, with its args
/// masked like the surface's model, and waits until it is written; `false` if the session
/// closed first.
async fn send_request(sender: &Sender, request: &AgentMessage) -> bool {
    let mut message = request.clone();
    if let AgentMessage::CallRendererFunction(call) = &mut message {
        call.surface_id = Some(sender.wire_id.clone());
        if let (Some(hub), Some(args)) = (&sender.hub, &call.call.args) {
            call.call.args = Some(hub.mask_call_args(
                &sender.binding.execution,
                &sender.binding.surface_id,
                args,
            ));
        }
    }
    let (written_tx, written_rx) = oneshot::channel();
    let queued = sender.requests.send(Box::new(Outbound {
        message,
        written: Some(written_tx),
    }));
    queued.is_ok() && written_rx.await.is_ok()
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
