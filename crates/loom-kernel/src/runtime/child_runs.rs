//! Child executions through the runtime (LD-015): starting a parent's child once its gate is
//! durable, delivering a child's end to the parent that waits, cancelling children whose
//! parent ended, and what `recover` does for parents and children. The in-process links and
//! the markers are `children.rs`'s.

use std::sync::Arc;

use crate::event::Event;
use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::children::{
    CHILD_EVENT_TYPE, CHILD_KIND, ChildSpec, end_marker, parent_of, refused_marker, waits_for,
};
use crate::runtime::codes;
use crate::runtime::errors::StartError;
use crate::runtime::mailbox::DriverMsg;
use crate::runtime::options::StartOptions;
use crate::runtime::slots::Inner;
use crate::store::{EventStore, EventStoreExt, ReadError};

/// Starts the child `spec` of `parent`'s gate `gate_id` if it does not exist (a durable
/// decision and gate say it must), and delivers its end to the parent if it has ended already.
/// Idempotent: run by the parent's driver once the gate is durable or replayed as pending, and
/// by `recover` for parked parents. An error that may pass (the store, a shutdown) is logged
/// and left for the next drive or `recover`.
pub(crate) async fn ensure<S: EventStore>(
    inner: Arc<Inner<S>>,
    parent: ExecutionId,
    gate_id: String,
    spec: ChildSpec,
) {
    let child = spec.execution.clone();
    if !inner.children.link(&child, &parent) {
        tracing::debug!(%parent, gate = %gate_id, %child, "nothing to start: the parent ended, or the child's end is on its way");
        return;
    }
    let mut options = StartOptions::new(child.clone());
    options.capabilities = spec.capabilities.clone();
    options.budget = spec.budget;
    match inner
        .start(&spec.flow, Ok(spec.input.clone()), options)
        .await
    {
        Ok(_) => {}
        Err(error @ (StartError::Conflict { .. } | StartError::AlreadyExists(_))) => {
            let marker = refused_marker(codes::CHILD_CONFLICT, error.to_string());
            deliver_taken(&inner, &child, marker);
            return;
        }
        Err(error @ (StartError::UnknownFlow(_) | StartError::UnknownFlowVersion { .. })) => {
            let marker = refused_marker(codes::CHILD_UNKNOWN_FLOW, error.to_string());
            deliver_taken(&inner, &child, marker);
            return;
        }
        Err(error @ StartError::Input { .. }) => {
            let marker = refused_marker(codes::CHILD_CONFLICT, error.to_string());
            deliver_taken(&inner, &child, marker);
            return;
        }
        Err(error) => {
            tracing::warn!(%parent, gate = %gate_id, %child, %error, "a child could not be started now; the parent's next drive or recover starts it");
            return;
        }
    }
    if inner.children.is_parent_ended(&child) {
        // The parent ended while its child started: its cancel found nothing to cancel.
        let _ = inner
            .cancel(&child, Some(format!("parent {parent} ended")))
            .await;
        return;
    }
    if !inner.children.knows(&child) {
        // The child ended and its parent handled the end while it was being started.
        return;
    }
    // A child that had ended already (a crash came between its end and its parent's resume,
    // or a short child ended before this look) is delivered now, once.
    match inner.store.fold(&child).await {
        Ok(state) => {
            if let Some(marker) = end_marker(&state) {
                deliver_taken(&inner, &child, marker);
            }
        }
        Err(error) => {
            tracing::warn!(%parent, %child, %error, "cannot read whether a child has ended")
        }
    }
}

/// Delivers `marker` to the parent linked to `child`, if the link still waits for it (claimed,
/// so that a child's end is sent once per process).
fn deliver_taken<S: EventStore>(inner: &Arc<Inner<S>>, child: &ExecutionId, marker: Payload) {
    if let Some(parent) = inner.children.claim(child) {
        send_end(inner, &parent, child, marker);
    }
}

fn send_end<S: EventStore>(
    inner: &Arc<Inner<S>>,
    parent: &ExecutionId,
    child: &ExecutionId,
    marker: Payload,
) {
    tracing::debug!(%parent, %child, "a child ended; its parent is resumed");
    inner.send(
        parent,
        DriverMsg::ChildEnded {
            child: child.clone(),
            payload: marker,
        },
    );
}

/// An execution's driver saw it end (`state`): if it is a child some parent waits for, that
/// parent's gate is resumed with its end. Without a link in this process (another process
/// started it, or this one restarted), the parent is found from the child's id and its log
/// must show the gate pending.
pub(crate) async fn ended<S: EventStore>(
    inner: &Arc<Inner<S>>,
    execution: &ExecutionId,
    state: &ExecutionState,
) {
    // Most executions are nobody's child: they are told apart before the marker is built.
    if inner.children.knows(execution) {
        if let Some(marker) = end_marker(state) {
            deliver_taken(inner, execution, marker);
        }
        return;
    }
    let Some((parent, gate_id)) = parent_of(execution) else {
        return;
    };
    let Some(marker) = end_marker(state) else {
        return;
    };
    match inner.store.fold(&parent).await {
        Ok(parent_state)
            if !parent_state.status().is_terminal()
                && waits_for(&parent_state, &gate_id, execution) =>
        {
            inner.children.delivering(execution, &parent);
            send_end(inner, &parent, execution, marker);
        }
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(%parent, child = %execution, %error, "cannot read the parent of an ended child; recover delivers its end")
        }
    }
}

/// A parent's machine handled the end of `child`: the child's link goes (the resume is
/// recorded now, or the gate no longer waits).
pub(crate) fn heard<S>(inner: &Inner<S>, child: &ExecutionId) {
    inner.children.forget(child);
}

/// A parent ended with these children still awaited (`(gate id, child id)`): each is cancelled
/// (it never starts, if its start has not happened yet).
pub(crate) fn cancel_orphans<S: EventStore>(
    inner: &Arc<Inner<S>>,
    parent: &ExecutionId,
    orphans: Vec<(String, ExecutionId)>,
) {
    if orphans.is_empty() {
        return;
    }
    for (_, child) in &orphans {
        inner.children.parent_ended(child, parent);
    }
    let inner_for_task = Arc::clone(inner);
    let parent = parent.clone();
    inner.spawn(async move {
        for (_, child) in orphans {
            match inner_for_task
                .cancel(&child, Some(format!("parent {parent} ended")))
                .await
            {
                Ok(()) => tracing::debug!(%parent, %child, "child cancelled with its parent"),
                Err(error) => {
                    tracing::debug!(%parent, %child, %error, "a child of an ended parent was not cancelled (ended, or not started)")
                }
            }
        }
    });
}

/// `recover`, for a parked parent: every child gate pending in its log gets its child ensured
/// (started if missing, its end delivered if it has ended). Returns how many.
pub(crate) async fn recover_parent<S: EventStore>(
    inner: &Arc<Inner<S>>,
    parent: &ExecutionId,
    state: &ExecutionState,
) -> Result<usize, ReadError> {
    let mut found = 0;
    for (gate_id, gate) in state.pending_gates() {
        if &*gate.event_type != CHILD_EVENT_TYPE {
            continue;
        }
        let Some(seq) = state.decision(gate_id) else {
            continue;
        };
        let recorded = inner.store.read(parent, seq, 1).await?;
        let spec = match recorded.first().map(|e| &e.event) {
            Some(Event::DecisionRecorded(d)) if d.kind == CHILD_KIND => {
                ChildSpec::from_value(&d.value.to_value())
            }
            _ => None,
        };
        let Some(spec) = spec else {
            tracing::warn!(%parent, gate = %gate_id, seq, "a child gate without a readable loom.child decision; not started");
            continue;
        };
        inner.spawn(ensure(
            Arc::clone(inner),
            parent.clone(),
            gate_id.clone(),
            spec,
        ));
        found += 1;
    }
    Ok(found)
}

/// `recover`, for an execution that has not ended: if it is a child whose parent ended while
/// waiting for it (a crash came between the parent's end and the cancel of its child), it is
/// cancelled now. Returns whether it was.
pub(crate) async fn recover_child<S: EventStore>(
    inner: &Arc<Inner<S>>,
    execution: &ExecutionId,
) -> bool {
    let Some((parent, gate_id)) = parent_of(execution) else {
        return false;
    };
    let Ok(parent_state) = inner.store.fold(&parent).await else {
        return false;
    };
    if !parent_state.status().is_terminal() || !waits_for(&parent_state, &gate_id, execution) {
        return false;
    }
    cancel_orphans(inner, &parent, vec![(gate_id, execution.clone())]);
    true
}
