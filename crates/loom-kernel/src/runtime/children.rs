//! Child executions, on the runtime's side (LD-015): the child's id, the recorded start, the
//! marker a parent's gate is resumed with when its child ends, and the in-process links from
//! children to the parents that wait for them.
//!
//! A parent's `ctx.child(flow, input)` records, in one batch, a `DECISION_RECORDED` of kind
//! [`CHILD_KIND`] under the gate's id (what to start: [`ChildSpec`]) and an
//! `EXECUTION_SUSPENDED` gate of the reserved type [`CHILD_EVENT_TYPE`] keyed by the child's
//! id. Once that batch is durable the runtime starts the child (`start` is idempotent on the
//! id). When the child ends, the runtime resumes the parent's gate with a marker
//! (`{"loom.child": {"completed": ..}}`, `{"failed": ..}` or `{"cancelled": ..}`). Nothing here
//! is durable: `recover` rebuilds it from the logs, as it does the timer index.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::event::{ErrorInfo, Event};
use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::codes;

pub(crate) use crate::runtime::machine::vocabulary::ChildSpec;
pub(crate) use crate::runtime::markers::parent_of;
pub use crate::runtime::markers::{CHILD_EVENT_TYPE, CHILD_KEY, CHILD_KIND};

/// The marker a parent's gate is resumed with for how its child ended, from the child's state
/// (`None` while it has not ended).
pub(crate) fn end_marker(state: &ExecutionState) -> Option<Payload> {
    let end = if let Some(output) = state.output() {
        json!({ "completed": output.to_value() })
    } else if let Some(error) = state.failure() {
        json!({ "failed": { "code": error.code, "message": error.message } })
    } else if let Some(reason) = state.cancel_reason() {
        json!({ "cancelled": reason })
    } else {
        return None;
    };
    Some(Payload::from_value(&json!({ CHILD_KEY: end })))
}

/// The parent a child id derives from (`<parent>/<flow>#<n>`), if it has the child form. A
/// user's id of that form parses too: [`child_end_resume`] checks the parent's log.
pub fn child_parent(child: &ExecutionId) -> Option<ExecutionId> {
    parent_of(child).map(|(parent, _)| parent)
}

/// What the parent's log records when its child `child` (folded to `child_state`) has ended:
/// the resume of the parent's child gate with the child's end marker, exactly as the runtime
/// records it. `None` when the child has not ended, or `parent_state` (the fold of the log of
/// [`child_parent`]`(child)`) has ended or does not wait for it. For writers without a
/// runtime (the console's offline cancel): a child that ends must reach its parent before
/// anything (retention) can delete it, or `recover` takes the parent's gate for a child never
/// started and starts it again.
pub fn child_end_resume(
    child: &ExecutionId,
    child_state: &ExecutionState,
    parent_state: &ExecutionState,
) -> Option<Event> {
    let marker = end_marker(child_state)?;
    let (_, gate_id) = parent_of(child)?;
    if parent_state.status().is_terminal() || !waits_for(parent_state, &gate_id, child) {
        return None;
    }
    Some(Event::ExecutionResumed(crate::event::ExecutionResumed {
        gate_id,
        event_type: CHILD_EVENT_TYPE.to_owned(),
        correlation_key: child.as_str().to_owned(),
        payload: marker,
    }))
}

/// The marker for a child that could not be started (its id is taken by another execution,
/// its flow is not registered): the parent sees a failure with `code`.
pub(crate) fn refused_marker(code: &str, message: String) -> Payload {
    Payload::from_value(&json!({ CHILD_KEY: { "failed": { "code": code, "message": message } } }))
}

/// What a child's marker says to the parent's flow: the child's output, or its failure.
pub(crate) fn read_marker(child: &str, payload: &Payload) -> Result<Payload, ErrorInfo> {
    let value = payload.to_value();
    let end = value.get(CHILD_KEY);
    if let Some(output) = end.and_then(|e| e.get("completed")) {
        return Ok(Payload::from_value(output));
    }
    if let Some(failed) = end.and_then(|e| e.get("failed")) {
        let code = failed.get("code").and_then(Value::as_str).unwrap_or("");
        let message = failed.get("message").and_then(Value::as_str).unwrap_or("");
        return Err(ErrorInfo::new(
            code,
            format!("child execution {child} failed: {message}"),
        ));
    }
    if let Some(reason) = end.and_then(|e| e.get("cancelled")) {
        let reason = reason.as_str().map_or(String::new(), |r| format!(": {r}"));
        return Err(ErrorInfo::new(
            codes::CHILD_CANCELLED,
            format!("child execution {child} was cancelled{reason}"),
        ));
    }
    Err(ErrorInfo::new(
        codes::CHILD_CANCELLED,
        format!("child execution {child} ended with an unreadable marker"),
    ))
}

/// Whether `state` has the child gate `gate_id` pending for `child`.
pub(crate) fn waits_for(state: &ExecutionState, gate_id: &str, child: &ExecutionId) -> bool {
    state.pending_gates().get(gate_id).is_some_and(|gate| {
        &*gate.event_type == CHILD_EVENT_TYPE && gate.correlation_key == child.as_str()
    })
}

/// A child's link to the parent gate that waits for it.
#[derive(Debug, Clone)]
struct Link {
    parent: ExecutionId,
    /// The parent ended while it waited: the child is cancelled, or never started.
    parent_ended: bool,
    /// The child's end has been sent to the parent: a replay of the parent (which the delivery
    /// itself may cause) does not send it again. The link goes once the parent has handled it.
    delivered: bool,
}

/// The children this process knows are awaited, by child id: how a child's end finds its
/// parent without reading the parent's log, and how a cancel of the parent and the start of
/// its child, racing, never leave the child running.
#[derive(Debug, Default)]
pub(crate) struct Children {
    links: Mutex<BTreeMap<ExecutionId, Link>>,
}

impl Children {
    fn links(&self) -> std::sync::MutexGuard<'_, BTreeMap<ExecutionId, Link>> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Links `child` to its parent's gate. False if there is nothing to do for it: the parent
    /// has ended (the child must not start; the link goes), or its end is on its way.
    pub(crate) fn link(&self, child: &ExecutionId, parent: &ExecutionId) -> bool {
        let mut links = self.links();
        let link = links.entry(child.clone()).or_insert_with(|| Link {
            parent: parent.clone(),
            parent_ended: false,
            delivered: false,
        });
        if link.parent_ended {
            links.remove(child);
            return false;
        }
        !link.delivered
    }

    /// Claims the delivery of `child`'s end: its parent, if a link waits for that end (then
    /// marked delivered, so that it is sent once). A link whose parent ended goes.
    pub(crate) fn claim(&self, child: &ExecutionId) -> Option<ExecutionId> {
        let mut links = self.links();
        let link = links.get_mut(child)?;
        if link.parent_ended {
            links.remove(child);
            return None;
        }
        if link.delivered {
            return None;
        }
        link.delivered = true;
        Some(link.parent.clone())
    }

    /// Whether this process knows of `child` at all.
    pub(crate) fn knows(&self, child: &ExecutionId) -> bool {
        self.links().contains_key(child)
    }

    /// Notes that `child`'s end is being sent to `parent`, found without a link.
    pub(crate) fn delivering(&self, child: &ExecutionId, parent: &ExecutionId) {
        self.links().insert(
            child.clone(),
            Link {
                parent: parent.clone(),
                parent_ended: false,
                delivered: true,
            },
        );
    }

    /// The parent's driver has handled `child`'s end: the link goes.
    pub(crate) fn forget(&self, child: &ExecutionId) {
        self.links().remove(child);
    }

    /// Marks `child`'s parent as ended.
    pub(crate) fn parent_ended(&self, child: &ExecutionId, parent: &ExecutionId) {
        let mut links = self.links();
        let link = links.entry(child.clone()).or_insert_with(|| Link {
            parent: parent.clone(),
            parent_ended: true,
            delivered: false,
        });
        link.parent_ended = true;
    }

    pub(crate) fn is_parent_ended(&self, child: &ExecutionId) -> bool {
        self.links()
            .get(child)
            .is_some_and(|link| link.parent_ended)
    }
}

/// `docs/CHILDREN.md`, whose code blocks run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../../docs/CHILDREN.md")]
struct ChildrenGuide;
