//! The flow's side of an execution that no process runs, read from its log alone: what an
//! operator's offline write (`loom resume`, `resolve`, `cancel` on a store the console holds)
//! steps, where the live side is built by the flow's commands as it replays.
//!
//! From the log: each pending gate's deadline (its `loom.deadline` decision) and `first_of`
//! group (its `loom.firstOf` note), the gates their deadline closed, and each step in flight or
//! in doubt. The log does not say whether a step's effect is idempotent, so each is taken as
//! not: a step found in flight is one whose process stopped (`loom.worker_stopped`), as
//! `recover` records a non-idempotent one.

use std::collections::BTreeMap;

use super::cancel::CutOff;
use super::state::{FlowState, GateSide, StepSide};
use crate::envelope::EventEnvelope;
use crate::event::Event;
use crate::fold::StepStatus;
use crate::hash::IdKey;
use crate::payload::Payload;
use crate::runtime::markers::{
    DEADLINE_KIND, FIRST_OF_KIND, first_of_gates, is_first_of_step_id, parse_deadline,
    timed_out_gates,
};

impl FlowState {
    /// Takes up the execution whose durable log is `log` (this state holds its fold and no
    /// history): its pending gates and its steps in flight or in doubt, as the flow's replay
    /// would have left them. Returns, for each pending gate opened in one batch with other
    /// pending gates by a build that did not record `first_of` groups, those others: whether
    /// they form a `first_of` only the flow knows.
    pub(crate) fn take_up_offline(
        &mut self,
        log: &[EventEnvelope],
    ) -> BTreeMap<String, Vec<String>> {
        let mut deadlines = BTreeMap::new();
        let mut groups: Vec<Vec<String>> = Vec::new();
        for envelope in log {
            match &envelope.event {
                Event::DecisionRecorded(d) if d.kind == DEADLINE_KIND => {
                    if let Some(at) = parse_deadline(&d.value) {
                        deadlines.insert(d.step_id.clone(), at);
                    }
                }
                Event::DecisionRecorded(d)
                    if d.kind == FIRST_OF_KIND && is_first_of_step_id(&d.step_id) =>
                {
                    groups.push(first_of_gates(&d.value));
                }
                _ => {}
            }
        }
        self.timed_out = timed_out_gates(log);
        let pending = self.fold.pending_gates().clone();
        let mut grouped = BTreeMap::new();
        for gates in groups {
            if !gates.iter().any(|gate| pending.contains_key(gate)) {
                continue;
            }
            let slot = self.new_slot();
            for (index, gate) in gates.into_iter().enumerate() {
                grouped.insert(gate, (slot, index));
            }
        }
        for gate_id in pending.keys() {
            let slot = self.new_slot();
            self.gates.insert(
                gate_id.clone(),
                GateSide {
                    slot,
                    deadline: deadlines.get(gate_id).copied(),
                    group: grouped.get(gate_id).copied(),
                },
            );
        }
        let steps: Vec<(String, String, u32)> = self
            .fold
            .steps()
            .into_iter()
            .filter_map(|(step_id, record)| match record.status {
                StepStatus::Started { attempt, .. } | StepStatus::InDoubt { attempt, .. } => {
                    Some((step_id.to_owned(), record.effect.to_string(), attempt))
                }
                _ => None,
            })
            .collect();
        for (step_id, effect, attempt) in steps {
            let slot = self.new_slot();
            self.steps.insert(
                IdKey::new(&step_id),
                StepSide {
                    effect,
                    attempt,
                    idempotent: false,
                    input_digest: String::new(),
                    input: Payload::null(),
                    slot,
                },
            );
        }
        // Gates opened in one batch by a build before the note: consecutive seqs, all pending,
        // none in a recorded group.
        let by_seq: BTreeMap<u64, &String> = pending
            .iter()
            .filter(|(gate_id, _)| !grouped.contains_key(*gate_id))
            .map(|(gate_id, gate)| (gate.seq, gate_id))
            .collect();
        let mut unknown = BTreeMap::new();
        for (seq, gate_id) in &by_seq {
            let mut others = Vec::new();
            let mut before = *seq;
            while let Some(previous) = before.checked_sub(1)
                && let Some(other) = by_seq.get(&previous)
            {
                others.push((*other).clone());
                before = previous;
            }
            let mut after = seq + 1;
            while let Some(other) = by_seq.get(&after) {
                others.push((*other).clone());
                after += 1;
            }
            if !others.is_empty() {
                others.sort();
                unknown.insert((*gate_id).clone(), others);
            }
        }
        unknown
    }

    /// The gate a resume of (`event_type`, `correlation_key`) reaches, and the deadline that
    /// closes it if that has passed by `now_ms` (a `first_of`'s is on its first gate).
    pub(crate) fn due_deadline(
        &self,
        event_type: &str,
        correlation_key: &str,
        now_ms: u64,
    ) -> Option<(String, u64)> {
        let gate_id = self.waiting_gate(event_type, correlation_key)?;
        let side = self.gates.get(gate_id)?;
        let (holder, deadline) = match side.group {
            Some((group, _)) => self
                .gates
                .iter()
                .find(|(_, g)| {
                    g.group.is_some_and(|(other, _)| other == group) && g.deadline.is_some()
                })
                .map(|(id, g)| (id.as_str(), g.deadline))?,
            None => (gate_id, side.deadline),
        };
        let deadline = deadline?;
        (deadline <= now_ms).then(|| (holder.to_owned(), deadline))
    }

    /// The gate a resume of (`event_type`, `correlation_key`) reaches.
    pub(crate) fn gate_for(&self, event_type: &str, correlation_key: &str) -> Option<String> {
        self.waiting_gate(event_type, correlation_key)
            .map(str::to_owned)
    }

    /// Steps in flight that no process runs (those `which` names) are recorded in doubt,
    /// as `recover` records a non-idempotent one: issued for the next append.
    pub(crate) fn stopped_in_doubt(&mut self, which: impl Fn(&str) -> bool) {
        let doubts = self.doubts_cut_off(CutOff::WorkerStopped, which);
        self.out.extend(doubts);
    }
}
