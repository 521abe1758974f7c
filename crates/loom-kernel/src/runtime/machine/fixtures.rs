//! What the machine's tests share: an effect dispatch seen through [`Held`], events, and a
//! flow's state with gates and steps set up by hand.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::state::{GateSide, StepSide};
use super::vocabulary::StepError;
use super::*;
use crate::event::{
    EffectInDoubt, ExecutionCancelled, ExecutionStarted, ExecutionSuspended, StepCompleted,
    StepStarted,
};
use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::payload::Payload;
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
    started_as(step, "e", 0)
}

/// The start of `step`, an attempt 1 of `effect` that holds `max_cost`.
pub(super) fn started_as(step: &str, effect: &str, max_cost: u64) -> Event {
    Event::StepStarted(StepStarted {
        step_id: step.into(),
        effect: effect.into(),
        input_digest: "d".into(),
        attempt: 1,
        max_cost,
    })
}

/// `step` of `effect` in doubt.
pub(super) fn in_doubt(step: &str, effect: &str) -> Event {
    Event::EffectInDoubt(EffectInDoubt {
        step_id: step.into(),
        effect: effect.into(),
        attempt: 1,
        reason: None,
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

/// A flow's state in an execution with no effect registered, a budget of 10, and `history`
/// (the fold knows only its start: what a test needs of the log is made durable by hand).
pub(super) fn flow_state_with(history: History) -> FlowState {
    let env = Env {
        execution_id: ExecutionId::new("x").expect("a valid id"),
        effects: Arc::new(BTreeMap::new()),
        capabilities: Arc::default(),
    };
    let start = Event::ExecutionStarted(ExecutionStarted {
        flow: "f".into(),
        flow_version: 1,
        input: Payload::null(),
        capabilities: Default::default(),
        budget: Some(10),
    });
    let mut state = FlowState::new(env, history, ExecutionState::new());
    durable(&mut state, start);
    state
}

/// Folds `event` as durable, as if the log held it when the flow's state was made.
pub(super) fn durable(state: &mut FlowState, event: Event) {
    state.fold_issued(&event);
    state.unsent = state.fold.next_seq();
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
    durable(
        state,
        Event::ExecutionSuspended(ExecutionSuspended {
            gate_id: gate_id.to_owned(),
            event_type: event_type.to_owned(),
            correlation_key: correlation_key.to_owned(),
        }),
    );
    state.gates.insert(
        gate_id.to_owned(),
        GateSide {
            slot,
            deadline,
            group,
        },
    );
    slot
}

/// A step whose effect runs, holding `held` against the budget; its slot.
pub(super) fn running(state: &mut FlowState, step_id: &str, idempotent: bool, held: u64) -> u64 {
    let slot = state.new_slot();
    durable(state, started_as(step_id, "e", held));
    state.steps.insert(
        crate::hash::IdKey::new(step_id),
        StepSide {
            effect: "e".into(),
            attempt: 1,
            idempotent,
            input_digest: "d".into(),
            input: Payload::null(),
            slot,
        },
    );
    slot
}

/// What the command in `slot` resolved to, if anything yet.
pub(super) fn filled(state: &FlowState, slot: u64) -> Option<&Result<Payload, StepError>> {
    state.slots.get(&slot).and_then(|slot| slot.value.as_ref())
}
