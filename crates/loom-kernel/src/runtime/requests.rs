//! Durable gate requests (LD-018): finding the requests whose gates still wait.
//!
//! A flow records a request with its gate ([`crate::runtime::FlowCtx::suspend_with_request`]):
//! a `DECISION_RECORDED` of kind [`REQUEST_KIND`] under the step id `<gate id>:request`, in the
//! batch of the gate's `EXECUTION_SUSPENDED`. A request is *pending* while its gate is: the
//! fold knows the pending gates and where each decision is, so listing the pending requests of
//! an execution reads one event per pending requested gate, and listing them for a store goes
//! through the status index (suspended and in-doubt executions only: a running or ended
//! execution has no pending gate).
//!
//! What is listed is the true request: the application that sends it needs it. Anything shown
//! to an operator or written to a log goes through [`PendingRequest::masked`] (K10-R6).

use futures::TryStreamExt;

use crate::classify::DataClassification;
use crate::event::Event;
use crate::fold::{ExecutionState, ExecutionStatus};
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::Runtime;
use crate::store::{EventStore, EventStoreExt, FoldStoredError, ReadError, StatusFilter};

pub use crate::runtime::markers::{REQUEST_KIND, request_gate_id, request_step_id};

/// A request whose gate still waits: send `request` to whoever answers, who resumes the gate
/// with `event_type` and `correlation_key`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingRequest {
    /// The execution that asks.
    pub execution: ExecutionId,
    /// The gate waiting for the answer (`event_type#n`).
    pub gate_id: String,
    /// The event type a resume must name.
    pub event_type: String,
    /// The key a resume must carry: the same after every restart.
    pub correlation_key: String,
    /// The request, as recorded (true values: mask it before it is shown or logged).
    pub request: Payload,
    /// The seq of the request's decision.
    pub seq: u64,
}

impl PendingRequest {
    /// This request with the values at classified paths masked (K10-R6), for an operator's
    /// view, a log line or a trace.
    pub fn masked(&self, classification: &DataClassification) -> PendingRequest {
        let mut masked = self.clone();
        if !classification.is_empty() {
            masked.request =
                Payload::from_value(&classification.mask_message_value(&self.request.to_value()));
        }
        masked
    }
}

/// The pending requests of one execution whose folded state is `state`, in gate id order:
/// one read per pending gate that has a request.
pub async fn pending_requests_of<S: EventStore>(
    store: &S,
    execution: &ExecutionId,
    state: &ExecutionState,
) -> Result<Vec<PendingRequest>, ReadError> {
    let mut pending = Vec::new();
    for (gate_id, gate) in state.pending_gates() {
        let Some(seq) = state.decision(&request_step_id(gate_id)) else {
            continue;
        };
        let recorded = store.read(execution, seq, 1).await?;
        if let Some(Event::DecisionRecorded(decision)) = recorded.first().map(|e| &e.event)
            && decision.kind == REQUEST_KIND
        {
            pending.push(PendingRequest {
                execution: execution.clone(),
                gate_id: gate_id.clone(),
                event_type: gate.event_type.to_string(),
                correlation_key: gate.correlation_key.clone(),
                request: decision.value.clone(),
                seq,
            });
        }
    }
    Ok(pending)
}

/// Every pending request in `store`: the suspended and in-doubt executions (listed through
/// the status index), in execution id order, then gate id order.
pub async fn pending_requests<S: EventStore>(
    store: &S,
) -> Result<Vec<PendingRequest>, FoldStoredError> {
    let mut executions = Vec::new();
    for status in [ExecutionStatus::Suspended, ExecutionStatus::InDoubt] {
        let listed: Vec<_> = store
            .executions_by_status(StatusFilter::Status(status))
            .try_collect()
            .await?;
        executions.extend(listed.into_iter().map(|summary| summary.id));
    }
    executions.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    executions.dedup();
    let mut pending = Vec::new();
    for execution in executions {
        let state = store.fold(&execution).await?;
        pending.extend(pending_requests_of(store, &execution, &state).await?);
    }
    Ok(pending)
}

impl<S: EventStore> Runtime<S> {
    /// Every request whose gate still waits, in this runtime's store (LD-018): after a
    /// restart, send each again with its correlation key; the gate is resumed once, whoever
    /// answers first. Costs in proportion to the suspended and in-doubt executions.
    pub async fn pending_requests(&self) -> Result<Vec<PendingRequest>, FoldStoredError> {
        pending_requests(self.store()).await
    }

    /// The pending requests of one execution, in gate id order (none for an unknown or ended
    /// execution).
    pub async fn pending_requests_of(
        &self,
        execution: &ExecutionId,
    ) -> Result<Vec<PendingRequest>, FoldStoredError> {
        let state = self.store().fold(execution).await?;
        Ok(pending_requests_of(self.store(), execution, &state).await?)
    }
}
