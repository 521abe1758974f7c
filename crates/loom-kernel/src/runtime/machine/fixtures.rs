//! What the machine's tests share: an effect dispatch seen through [`Held`], events, and a
//! flow's state with gates and steps set up by hand.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::state::{PendingGate, RunningStep};
use super::*;
use crate::event::{ExecutionCancelled, StepCompleted, StepStarted};
use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::ctx::StepError;
use crate::runtime::history::History;

#[derive(Debug, PartialEq)]
pub(super) struct Fx(pub(super) &'static str, pub(super) bool);

impl Held for Fx {
    fn step_id(&self) -> &str {
        self.0
    }
    fn durable_before(&self) -> bool {
        self.1
    }
}

pub(super) type M = Machine<&'static str, Fx, &'static str>;

pub(super) fn started(step: &str) -> Event {
    Event::StepStarted(StepStarted {
        step_id: step.into(),
        effect: "e".into(),
        input_digest: "d".into(),
        attempt: 1,
        max_cost: 0,
    })
}

pub(super) fn completed(step: &str) -> Event {
    Event::StepCompleted(StepCompleted {
        step_id: step.into(),
        effect: "e".into(),
        input_digest: "d".into(),
        output: Payload::null(),
        cost: 0,
    })
}

pub(super) fn cancelled() -> Event {
    Event::ExecutionCancelled(ExecutionCancelled { reason: None })
}

/// A flow's state in an execution with no effect registered, a budget of 10, and `history`.
pub(super) fn flow_state_with(history: History) -> FlowState {
    let env = Env {
        execution_id: ExecutionId::new("x").expect("a valid id"),
        effects: Arc::new(BTreeMap::new()),
        capabilities: Arc::default(),
        budget: Some(10),
    };
    FlowState::new(env, history, &ExecutionState::new())
}

/// A flow's state with nothing recorded.
pub(super) fn flow_state() -> FlowState {
    flow_state_with(History::default())
}

/// A gate the flow waits at (in the group of a `first_of` when `group` is given); its slot.
pub(super) fn waiting_gate(
    state: &mut FlowState,
    gate_id: &str,
    event_type: &str,
    correlation_key: &str,
    deadline: Option<u64>,
    group: Option<(u64, usize)>,
) -> u64 {
    let slot = match group {
        Some((slot, _)) => slot,
        None => state.new_slot(),
    };
    state.gates.push(PendingGate {
        gate_id: gate_id.to_owned(),
        event_type: event_type.to_owned(),
        correlation_key: correlation_key.to_owned(),
        slot,
        deadline,
        group,
    });
    slot
}

/// A step whose effect runs, holding `held` against the budget; its slot.
pub(super) fn running(state: &mut FlowState, step_id: &str, idempotent: bool, held: u64) -> u64 {
    let slot = state.new_slot();
    state.budget_held += held;
    state.running.insert(
        step_id.to_owned(),
        RunningStep {
            effect: "e".into(),
            idempotent,
            input_digest: "d".into(),
            input: Payload::null(),
            attempt: 1,
            slot,
            held,
            charge: held,
        },
    );
    slot
}

/// What the command in `slot` resolved to, if anything yet.
pub(super) fn filled(state: &FlowState, slot: u64) -> Option<&Result<Payload, StepError>> {
    state.slots.get(&slot).and_then(|slot| slot.value.as_ref())
}
