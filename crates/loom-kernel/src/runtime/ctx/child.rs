//! `ctx.child`: a flow starts another flow and awaits its end (LD-015). The flow side: the
//! command (a `loom.child` decision then a `loom.child` gate), its replay, and the resume the
//! runtime records when the child ends. The runtime side is `runtime/children.rs`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{FlowCtx, StepError, canonical};
use crate::payload::Payload;
use crate::runtime::children::read_marker;

pub(crate) use crate::runtime::machine::vocabulary::ChildStart;

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
        let input = canonical(input);
        let mut child = String::new();
        let classification = &self.shared.classification;
        let outcome = state.child(slot, flow, input, classification, &mut child);
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
                detail: crate::payload::Payload::describe_decode_error(&err),
            })
        }
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
