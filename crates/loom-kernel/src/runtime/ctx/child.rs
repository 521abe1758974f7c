//! `ctx.child`: a flow starts another flow and awaits its end (ADR 0015). The flow side: the
//! command (a `loom.child` decision then a `loom.child` gate), its replay, and the resume the
//! runtime records when the child ends. The runtime side is `runtime/children.rs`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{FlowCtx, FlowState, PendingGate, StepError, StepName, canonical};
use crate::event::{DecisionRecorded, Event};
use crate::payload::Payload;
use crate::runtime::children::{
    CHILD_EVENT_TYPE, CHILD_KIND, ChildSpec, GATE_PREFIX, child_id, read_marker,
};
use crate::runtime::digest::input_digest;
use crate::runtime::history::{Attempted, NonDeterminism, Recorded};

/// A child to start once its gate is durable: its gate id and what to start.
pub(crate) type ChildStart = (String, ChildSpec);

impl FlowCtx {
    /// Starts flow `flow` with `input` as a child execution and waits for it to end: its
    /// output, or its failure as [`StepError::Failed`] with the child's code (a cancelled
    /// child: `loom.child_cancelled`).
    ///
    /// The child's id is `<this execution's id>/<flow>#<n>` (its gate here is
    /// `child:<flow>#<n>`, the n-th child of that flow in this execution): the same on every
    /// replay, never random. The child is started once the parent's record of it is durable,
    /// inherits the parent's capabilities and what is left of its budget, and is cancelled
    /// if the parent ends (is cancelled, or returns) before it. A crash anywhere in between
    /// loses nothing and starts no child twice (`Runtime::recover`). See `docs/CHILDREN.md`.
    pub fn child<I: Serialize + ?Sized>(&self, flow: &str, input: &I) -> ChildCall {
        let mut state = self.state();
        let slot = state.new_slot();
        let mut child = String::new();
        let outcome = (|| {
            let gate_id = state.step_id(StepName::Counted(format!("{GATE_PREFIX}{flow}")))?;
            let execution = child_id(&self.shared.execution_id, &gate_id).ok_or_else(|| {
                StepError::ChildId {
                    flow: flow.to_owned(),
                    detail: format!(
                        "'{}/{}' is not a valid execution id (a flow started as a child has no '/', ':' or control character in its name, and the id is at most {} bytes)",
                        self.shared.execution_id,
                        gate_id.strip_prefix(GATE_PREFIX).unwrap_or(&gate_id),
                        crate::id::MAX_EXECUTION_ID_LEN
                    ),
                }
            })?;
            child = execution.to_string();
            let input = canonical(input)?;
            let spec = ChildSpec {
                execution: execution.clone(),
                flow: flow.to_owned(),
                input,
                capabilities: (*state.env.capabilities).clone(),
                budget: state.env.budget.map(|budget| {
                    budget
                        .saturating_sub(state.budget_spent)
                        .saturating_sub(state.budget_held)
                }),
            };
            let spec = self.child_decision(&mut state, &gate_id, spec)?;
            let classification = &self.shared.classification;
            if let Some(payload) = state.open_gate(
                &gate_id,
                CHILD_EVENT_TYPE,
                execution.as_str(),
                classification,
            )? {
                return Ok(Some(payload));
            }
            state.gates.push(PendingGate {
                gate_id: gate_id.clone(),
                event_type: CHILD_EVENT_TYPE.to_owned(),
                correlation_key: execution.to_string(),
                slot,
                deadline: None,
                group: None,
            });
            state.child_starts.push((gate_id, spec));
            Ok(None)
        })();
        ChildCall {
            command: self.command(state, slot, outcome),
            child,
        }
    }

    /// [`FlowCtx::child`], with the child's output decoded.
    pub fn call_child<O: DeserializeOwned, I: Serialize + ?Sized>(
        &self,
        flow: &str,
        input: &I,
    ) -> impl Future<Output = Result<O, StepError>> + Send + 'static {
        let call = self.child(flow, input);
        async move {
            let step_id = call.child.clone();
            let output = call.await?;
            output.decode().map_err(|err| StepError::Decode {
                step_id,
                detail: err.to_string(),
            })
        }
    }

    /// The child's decision: replayed (and checked against what the flow asks now: same
    /// child, same input) or recorded. Returns the spec to start, as recorded.
    fn child_decision(
        &self,
        state: &mut FlowState,
        gate_id: &str,
        spec: ChildSpec,
    ) -> Result<ChildSpec, StepError> {
        let attempted = Attempted::Decision {
            step_id: gate_id,
            kind: CHILD_KIND,
        };
        if state.replay(attempted.clone(), &self.shared.classification) {
            let index = state.cursor - 1;
            let Some((seq, Recorded::Decision { value, .. })) = state.history.commands.get(index)
            else {
                return Err(StepError::Diverged);
            };
            let seq = *seq;
            let recorded = ChildSpec::from_value(&value.to_value());
            let same = recorded.as_ref().is_some_and(|r| {
                r.execution == spec.execution && r.flow == spec.flow && r.input == spec.input
            });
            if !same {
                let recorded_digest = recorded
                    .as_ref()
                    .map_or_else(|| "unreadable".to_owned(), |r| input_digest(&r.input));
                state.divergence = Some(NonDeterminism {
                    seq,
                    recorded: format!(
                        "DECISION_RECORDED '{gate_id}' ({CHILD_KIND}) with input digest {recorded_digest}"
                    ),
                    attempted: format!(
                        "starts child flow '{}' as '{gate_id}' with input digest {}",
                        spec.flow,
                        input_digest(&spec.input)
                    ),
                });
                return Err(StepError::Diverged);
            }
            return recorded.ok_or(StepError::Diverged);
        }
        if state.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        state.note_live(&attempted);
        state.out.push(Event::DecisionRecorded(DecisionRecorded {
            step_id: gate_id.to_owned(),
            kind: CHILD_KIND.to_owned(),
            value: Payload::from_value(&spec.to_value()),
        }));
        Ok(spec)
    }
}

/// The future of [`FlowCtx::child`]: the child's output, or its failure.
#[must_use = "a child's end reaches the flow only if its call is awaited"]
#[derive(Debug)]
pub struct ChildCall {
    command: super::Command,
    child: String,
}

impl ChildCall {
    /// The child's execution id (empty if the call was refused before an id was assigned).
    pub fn child_id(&self) -> &str {
        &self.child
    }
}

impl Future for ChildCall {
    type Output = Result<Payload, StepError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let child = self.child.clone();
        Pin::new(&mut self.command).poll(cx).map(|result| {
            result.and_then(|marker| read_marker(&child, &marker).map_err(StepError::Failed))
        })
    }
}
