//! Commands that open gates: a gate (`suspend`), a gate with a deadline (a timer, a timeout),
//! the gates of a `first_of`, a gate with a request, a child's gate, and the decision each
//! records before its gate. Served from the
//! history while it lasts (a recorded resume answers at once), else queued live; the flow then
//! waits at the gate's slot.

use super::state::{FlowState, GateSide};
use super::vocabulary::ChildSpec;
use super::vocabulary::{StepError, StepName};
use crate::classify::DataClassification;
use crate::event::*;
use crate::payload::Payload;
use crate::runtime::digest::input_digest;
use crate::runtime::history::{Attempted, NonDeterminism, Recorded};
use crate::runtime::markers::{CHILD_EVENT_TYPE, CHILD_KIND, GATE_PREFIX, child_id};
use crate::runtime::markers::{
    DEADLINE_KIND, deadline_value, is_closed_payload, is_reserved_event_type, is_timed_out_payload,
    parse_deadline, timed_out_payload,
};
use crate::runtime::markers::{FIRST_OF_KIND, first_of_note, first_of_step_id};
use crate::runtime::markers::{
    PAYLOAD_SCHEMA_KIND, REQUEST_KIND, payload_schema_step_id, request_step_id,
};

impl FlowState {
    /// Opens the gate `gate_id`: `Some` with the recorded resume when the log holds one, `None`
    /// when the flow waits at `slot`.
    pub(crate) fn suspend(
        &mut self,
        slot: u64,
        gate_id: String,
        event_type: &str,
        correlation_key: &str,
        classification: &DataClassification,
    ) -> Result<Option<Payload>, StepError> {
        if is_reserved_event_type(event_type) {
            return Err(StepError::ReservedEventType(event_type.to_owned()));
        }
        self.refuse_duplicate_gate(event_type, correlation_key)?;
        self.wait_at_gate(slot, gate_id, event_type, correlation_key, classification)
    }

    /// Opens the gate `gate_id` with no deadline nor group (served from the history while it
    /// lasts); the flow waits at `slot` unless the log holds its resume.
    fn wait_at_gate(
        &mut self,
        slot: u64,
        gate_id: String,
        event_type: &str,
        correlation_key: &str,
        classification: &DataClassification,
    ) -> Result<Option<Payload>, StepError> {
        if let Some(payload) =
            self.open_gate(&gate_id, event_type, correlation_key, classification)?
        {
            return Ok(Some(payload));
        }
        self.gates.insert(
            gate_id,
            GateSide {
                slot,
                deadline: None,
                group: None,
            },
        );
        Ok(None)
    }

    /// A gate's deadline: the recorded one on replay, else `live()` (the caller reads its clock
    /// there, never on replay), recorded as a `loom.deadline` decision under the gate's id.
    pub(super) fn deadline(
        &mut self,
        gate_id: &str,
        live: impl FnOnce() -> u64,
        classification: &DataClassification,
    ) -> Result<u64, StepError> {
        let attempted = Attempted::Decision {
            step_id: gate_id,
            kind: DEADLINE_KIND,
        };
        if self.replay(attempted, classification) {
            let index = self.cursor - 1;
            let recorded = match self.history.commands.get(index) {
                Some((_, Recorded::Decision { value, .. })) => parse_deadline(value),
                _ => None,
            };
            return recorded.ok_or_else(|| StepError::Decode {
                step_id: gate_id.to_owned(),
                detail: "the recorded deadline is not {\"deadlineMs\": <unix ms>}".into(),
            });
        }
        if self.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        self.note_live(&attempted);
        let deadline_ms = live();
        self.issue(Event::DecisionRecorded(DecisionRecorded {
            step_id: gate_id.to_owned(),
            kind: DEADLINE_KIND.to_owned(),
            value: Payload::from_value(&deadline_value(deadline_ms)),
        }));
        Ok(deadline_ms)
    }

    /// A gate with a deadline: `DECISION_RECORDED` (kind `loom.deadline`, under the gate's id,
    /// value `{"deadlineMs": ..}`) then `EXECUTION_SUSPENDED`, queued together, and the deadline
    /// armed. `correlation_key` `None` is a timer: its key is its gate id, only the runtime
    /// resumes it, and it yields `null`.
    pub(crate) fn deadline_gate(
        &mut self,
        slot: u64,
        gate_id: String,
        event_type: &str,
        correlation_key: Option<&str>,
        live: impl FnOnce() -> u64,
        classification: &DataClassification,
    ) -> Result<Option<Payload>, StepError> {
        let timer = correlation_key.is_none();
        if !timer && is_reserved_event_type(event_type) {
            return Err(StepError::ReservedEventType(event_type.to_owned()));
        }
        let correlation_key = correlation_key.unwrap_or(&gate_id).to_owned();
        self.refuse_duplicate_gate(event_type, &correlation_key)?;
        // The deadline: recorded once, served from the log on replay (the clock is not read).
        let deadline_ms = self.deadline(&gate_id, live, classification)?;
        if let Some(payload) =
            self.open_gate(&gate_id, event_type, &correlation_key, classification)?
        {
            if timer {
                return Ok(Some(Payload::null()));
            }
            if is_timed_out_payload(&payload) {
                self.timed_out
                    .insert((event_type.to_owned(), correlation_key));
            }
            return Ok(Some(payload));
        }
        self.armed.push((gate_id.clone(), deadline_ms));
        self.gates.insert(
            gate_id,
            GateSide {
                slot,
                deadline: Some(deadline_ms),
                group: None,
            },
        );
        Ok(None)
    }

    /// The gates of a `first_of` (`(event_type, correlation_key)` each, ids `event_type#n`),
    /// with a deadline when `live` is given (recorded before the first gate). On replay of
    /// gates closed together, the winner's resume (its index goes in the slot), or the timeout
    /// marker.
    pub(crate) fn first_of(
        &mut self,
        slot: u64,
        gates: &[(&str, &str)],
        live: Option<impl FnOnce() -> u64>,
        classification: &DataClassification,
    ) -> Result<Option<Payload>, StepError> {
        if gates.is_empty() {
            return Err(StepError::NoGates);
        }
        let mut ids = Vec::with_capacity(gates.len());
        for (event_type, correlation_key) in gates {
            ids.push(self.step_id(StepName::Counted((*event_type).to_owned()))?);
            if is_reserved_event_type(event_type) {
                return Err(StepError::ReservedEventType((*event_type).to_owned()));
            }
            let twice = gates
                .iter()
                .filter(|(t, k)| t == event_type && k == correlation_key)
                .count()
                > 1;
            if twice {
                return Err(StepError::DuplicateGate {
                    event_type: (*event_type).to_owned(),
                    correlation_key: (*correlation_key).to_owned(),
                });
            }
            self.refuse_duplicate_gate(event_type, correlation_key)?;
        }
        // The group's note, for readers of the log alone (`markers.rs`, `FIRST_OF_KIND`; `machine/offline.rs`), written first: the
        // deadline's decision stays just before the first gate, where readers look for it.
        let recorded_live =
            self.divergence.is_none() && self.history.commands.get(self.cursor).is_none();
        if recorded_live {
            self.issue(Event::DecisionRecorded(DecisionRecorded {
                step_id: first_of_step_id(&ids[0]),
                kind: FIRST_OF_KIND.to_owned(),
                value: first_of_note(&ids),
            }));
        }
        let deadline_ms = match live {
            Some(live) => Some(self.deadline(&ids[0], live, classification)?),
            None => None,
        };
        let resumed_at: Vec<Option<u64>> =
            ids.iter().map(|id| self.history.resumed_at(id)).collect();
        let mut recorded = Vec::with_capacity(gates.len());
        for ((event_type, correlation_key), gate_id) in gates.iter().zip(&ids) {
            recorded.push(self.open_gate(gate_id, event_type, correlation_key, classification)?);
        }
        // The gates were closed together: the first resume in the log that is not a marker
        // is the winner (a log written outside the runtime may hold more than one); the
        // timeout marker on them says the deadline won.
        if recorded.iter().any(Option::is_some) {
            let winner = recorded
                .iter()
                .zip(&resumed_at)
                .enumerate()
                .filter(|(_, (payload, _))| {
                    payload
                        .as_ref()
                        .is_some_and(|p| !is_closed_payload(p) && !is_timed_out_payload(p))
                })
                .min_by_key(|(_, (_, seq))| seq.unwrap_or(u64::MAX))
                .map(|(index, _)| index);
            return Ok(Some(match winner {
                Some(index) => {
                    if let Some(slot) = self.slots.get_mut(&slot) {
                        slot.chosen = Some(index);
                    }
                    recorded.swap_remove(index).unwrap_or_else(Payload::null)
                }
                None => {
                    for (event_type, correlation_key) in gates {
                        self.timed_out
                            .insert(((*event_type).to_owned(), (*correlation_key).to_owned()));
                    }
                    timed_out_payload(deadline_ms.unwrap_or_default())
                }
            }));
        }
        if let Some(deadline_ms) = deadline_ms {
            self.armed.push((ids[0].clone(), deadline_ms));
        }
        for (index, gate_id) in ids.into_iter().enumerate() {
            self.gates.insert(
                gate_id,
                GateSide {
                    slot,
                    deadline: if index == 0 { deadline_ms } else { None },
                    group: Some((slot, index)),
                },
            );
        }
        Ok(None)
    }

    /// The id of a gate recorded with a note before it (a request, a payload schema), once the
    /// event type, then the note, are checked: before an id is taken or anything is queued.
    fn gate_with_note(
        &mut self,
        event_type: &str,
        correlation_key: &str,
        note: Result<Payload, StepError>,
    ) -> Result<(String, Payload), StepError> {
        if is_reserved_event_type(event_type) {
            return Err(StepError::ReservedEventType(event_type.to_owned()));
        }
        let note = note?;
        let gate_id = self.step_id(StepName::Counted(event_type.to_owned()))?;
        self.refuse_duplicate_gate(event_type, correlation_key)?;
        Ok((gate_id, note))
    }

    /// A gate with a request (LD-018): the request's decision under `<gate id>:request`,
    /// then the deadline if `live` is given, then the gate, in one batch.
    pub(crate) fn requested_gate(
        &mut self,
        slot: u64,
        event_type: &str,
        correlation_key: &str,
        request: Result<Payload, StepError>,
        live: Option<impl FnOnce() -> u64>,
        classification: &DataClassification,
    ) -> Result<Option<Payload>, StepError> {
        let (gate_id, request) = self.gate_with_note(event_type, correlation_key, request)?;
        self.record_request(&gate_id, request, classification)?;
        let timed = live.is_some();
        let deadline_ms = match live {
            Some(live) => Some(self.deadline(&gate_id, live, classification)?),
            None => None,
        };
        if let Some(payload) =
            self.open_gate(&gate_id, event_type, correlation_key, classification)?
        {
            if timed && is_timed_out_payload(&payload) {
                self.timed_out
                    .insert((event_type.to_owned(), correlation_key.to_owned()));
            }
            return Ok(Some(payload));
        }
        if let Some(deadline_ms) = deadline_ms {
            self.armed.push((gate_id.clone(), deadline_ms));
        }
        self.gates.insert(
            gate_id,
            GateSide {
                slot,
                deadline: deadline_ms,
                group: None,
            },
        );
        Ok(None)
    }

    /// A gate that declares the payload it expects (LD-031): the schema's decision under
    /// `<gate id>:payloadSchema`, recorded only when the gate opens live, then the gate.
    pub(crate) fn expecting_gate(
        &mut self,
        slot: u64,
        event_type: &str,
        correlation_key: &str,
        schema: Result<Payload, StepError>,
        classification: &DataClassification,
    ) -> Result<Option<Payload>, StepError> {
        let (gate_id, schema) = self.gate_with_note(event_type, correlation_key, schema)?;
        self.record_schema_if_live(&gate_id, schema);
        self.wait_at_gate(slot, gate_id, event_type, correlation_key, classification)
    }

    /// A gate with a request (LD-018) that also declares the payload it expects (LD-031):
    /// the request's decision, then the schema's (live only), then the gate, in one batch.
    /// The event type, the schema and the request are checked before an id is taken.
    pub(crate) fn requested_expecting_gate(
        &mut self,
        slot: u64,
        event_type: &str,
        correlation_key: &str,
        request: Result<Payload, StepError>,
        schema: Result<Payload, StepError>,
        classification: &DataClassification,
    ) -> Result<Option<Payload>, StepError> {
        if is_reserved_event_type(event_type) {
            return Err(StepError::ReservedEventType(event_type.to_owned()));
        }
        let schema = schema?;
        let (gate_id, request) = self.gate_with_note(event_type, correlation_key, request)?;
        self.record_request(&gate_id, request, classification)?;
        self.record_schema_if_live(&gate_id, schema);
        self.wait_at_gate(slot, gate_id, event_type, correlation_key, classification)
    }

    /// The payload schema's decision under `<gate id>:payloadSchema`. The schema is no command
    /// (history skips it): it is written where the gate is opened live, and a replayed gate
    /// (recorded with or without one) records nothing.
    fn record_schema_if_live(&mut self, gate_id: &str, schema: Payload) {
        let live = self.divergence.is_none() && self.history.commands.get(self.cursor).is_none();
        if live {
            self.issue(Event::DecisionRecorded(DecisionRecorded {
                step_id: payload_schema_step_id(gate_id),
                kind: PAYLOAD_SCHEMA_KIND.to_owned(),
                value: schema,
            }));
        }
    }

    /// The request's decision: matched on replay (kind and id), queued live.
    fn record_request(
        &mut self,
        gate_id: &str,
        request: Payload,
        classification: &DataClassification,
    ) -> Result<(), StepError> {
        let step_id = request_step_id(gate_id);
        let attempted = Attempted::Decision {
            step_id: &step_id,
            kind: REQUEST_KIND,
        };
        if self.replay(attempted, classification) {
            return Ok(());
        }
        if self.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        self.note_live(&attempted);
        self.issue(Event::DecisionRecorded(DecisionRecorded {
            step_id,
            kind: REQUEST_KIND.to_owned(),
            value: request,
        }));
        Ok(())
    }

    /// A child execution (LD-015): its id derived from the gate `child:<flow>#<n>`, its
    /// `loom.child` decision (what to start, checked on replay) and its gate; live, the child
    /// is queued for the driver to start once the gate is durable. `child` gets its id.
    pub(crate) fn child(
        &mut self,
        slot: u64,
        flow: &str,
        input: Result<Payload, StepError>,
        classification: &DataClassification,
        child: &mut String,
    ) -> Result<Option<Payload>, StepError> {
        let gate_id = self.step_id(StepName::Counted(format!("{GATE_PREFIX}{flow}")))?;
        let execution = child_id(&self.env.execution_id, &gate_id).ok_or_else(|| {
            StepError::ChildId {
                flow: flow.to_owned(),
                detail: format!(
                    "'{}/{}' is not a valid execution id (a flow started as a child has no '/', ':' or control character in its name, and the id is at most {} bytes)",
                    self.env.execution_id,
                    gate_id.strip_prefix(GATE_PREFIX).unwrap_or(&gate_id),
                    crate::id::MAX_EXECUTION_ID_LEN
                ),
            }
        })?;
        *child = execution.to_string();
        let input = input?;
        let spec = ChildSpec {
            execution: execution.clone(),
            flow: flow.to_owned(),
            input,
            capabilities: (*self.env.capabilities).clone(),
            budget: self.budget_remaining(),
        };
        let spec = self.child_decision(&gate_id, spec, classification)?;
        if let Some(payload) = self.open_gate(
            &gate_id,
            CHILD_EVENT_TYPE,
            execution.as_str(),
            classification,
        )? {
            return Ok(Some(payload));
        }
        self.gates.insert(
            gate_id.clone(),
            GateSide {
                slot,
                deadline: None,
                group: None,
            },
        );
        self.child_starts.push((gate_id, spec));
        Ok(None)
    }

    /// The child's decision: replayed (and checked against what the flow asks now: same
    /// child, same input) or recorded. Returns the spec to start, as recorded.
    fn child_decision(
        &mut self,
        gate_id: &str,
        spec: ChildSpec,
        classification: &DataClassification,
    ) -> Result<ChildSpec, StepError> {
        let attempted = Attempted::Decision {
            step_id: gate_id,
            kind: CHILD_KIND,
        };
        if self.replay(attempted, classification) {
            let index = self.cursor - 1;
            let Some((seq, Recorded::Decision { value, .. })) = self.history.commands.get(index)
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
                self.divergence = Some(NonDeterminism {
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
        if self.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        self.note_live(&attempted);
        self.issue(Event::DecisionRecorded(DecisionRecorded {
            step_id: gate_id.to_owned(),
            kind: CHILD_KIND.to_owned(),
            value: Payload::from_value(&spec.to_value()),
        }));
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    const NONE: Option<fn() -> u64> = None;

    #[test]
    fn a_gate_waits_live_and_a_second_gate_on_its_key_is_refused() {
        let mut s = flow_state();
        let none = DataClassification::default();
        let slot = s.new_slot();
        assert_eq!(s.suspend(slot, "Go#1".into(), "Go", "k", &none), Ok(None));
        assert!(matches!(s.out.as_slice(), [Event::ExecutionSuspended(_)]));
        let again = s.suspend(slot, "Go#2".into(), "Go", "k", &none);
        assert!(matches!(again, Err(StepError::DuplicateGate { .. })));
        let reserved = s.suspend(slot, "x#1".into(), "loom.timer", "k", &none);
        assert!(matches!(reserved, Err(StepError::ReservedEventType(_))));
        assert!(s.waits_for_messages());
    }

    #[test]
    fn a_deadline_is_read_live_once_recorded_before_its_gate_and_armed() {
        let mut s = flow_state();
        let none = DataClassification::default();
        let slot = s.new_slot();
        let waits = s.deadline_gate(slot, "Go#1".into(), "Go", Some("k"), || 70, &none);
        assert_eq!(waits, Ok(None));
        assert!(matches!(
            s.out.as_slice(),
            [Event::DecisionRecorded(d), Event::ExecutionSuspended(_)] if d.kind == DEADLINE_KIND
        ));
        assert_eq!(s.take_deadlines().0, vec![("Go#1".to_owned(), 70)]);
        // On replay the recorded deadline is served: the clock is not read.
        let recorded = std::mem::take(&mut s.out);
        let log = recorded
            .into_iter()
            .zip(1..)
            .map(|(event, seq)| (seq, event));
        let mut s = flow_state_with(crate::runtime::history::History::from_events(log));
        let never = || -> u64 { unreachable!("the clock is read on replay") };
        let waits = s.deadline_gate(slot, "Go#1".into(), "Go", Some("k"), never, &none);
        assert_eq!(waits, Ok(None));
        assert!(s.out.is_empty());
        assert_eq!(s.pending_deadlines(), vec![("Go#1".to_owned(), 70)]);
    }

    #[test]
    fn a_declared_schema_is_written_only_live_and_never_matched_on_replay() {
        let none = DataClassification::default();
        let schema = || Ok(Payload::from_value(&serde_json::json!({"type": "object"})));
        // Live: the schema's note, then the gate.
        let mut s = flow_state();
        let slot = s.new_slot();
        assert_eq!(s.expecting_gate(slot, "Go", "k", schema(), &none), Ok(None));
        assert!(matches!(
            s.out.as_slice(),
            [Event::DecisionRecorded(d), Event::ExecutionSuspended(g)]
                if d.kind == PAYLOAD_SCHEMA_KIND && d.step_id == "Go#1:payloadSchema" && g.gate_id == "Go#1"
        ));
        let with_schema = std::mem::take(&mut s.out);
        // Replaying that log, or one recorded without the note, against either kind of gate
        // records nothing and diverges nowhere.
        let without_schema: Vec<Event> = with_schema
            .iter()
            .filter(|e| matches!(e, Event::ExecutionSuspended(_)))
            .cloned()
            .collect();
        for log in [with_schema, without_schema] {
            let numbered = || log.clone().into_iter().zip(1..).map(|(e, seq)| (seq, e));
            let history = || crate::runtime::history::History::from_events(numbered());
            let mut declaring = flow_state_with(history());
            let slot = declaring.new_slot();
            let opened = declaring.expecting_gate(slot, "Go", "k", schema(), &none);
            assert_eq!(opened, Ok(None));
            assert!(declaring.out.is_empty() && declaring.divergence().is_none());
            let mut plain = flow_state_with(history());
            let slot = plain.new_slot();
            assert_eq!(
                plain.suspend(slot, "Go#1".into(), "Go", "k", &none),
                Ok(None)
            );
            assert!(plain.out.is_empty() && plain.divergence().is_none());
        }
    }

    #[test]
    fn a_requested_gate_that_declares_its_payload_records_request_schema_and_gate_and_replays() {
        let none = DataClassification::default();
        let schema = || Ok(Payload::from_value(&serde_json::json!({"type": "object"})));
        let request = || Ok(Payload::from_value(&serde_json::json!({"ask": "locale"})));
        let mut s = flow_state();
        let slot = s.new_slot();
        let opened = s.requested_expecting_gate(slot, "Go", "k", request(), schema(), &none);
        assert_eq!(opened, Ok(None));
        assert!(matches!(
            s.out.as_slice(),
            [Event::DecisionRecorded(r), Event::DecisionRecorded(d), Event::ExecutionSuspended(g)]
                if r.kind == REQUEST_KIND && r.step_id == "Go#1:request"
                    && d.kind == PAYLOAD_SCHEMA_KIND && d.step_id == "Go#1:payloadSchema"
                    && g.gate_id == "Go#1"
        ));
        // Replayed, the request is matched and nothing is written.
        let log = std::mem::take(&mut s.out);
        let numbered = log.into_iter().zip(1..).map(|(e, seq)| (seq, e));
        let mut replayed = flow_state_with(crate::runtime::history::History::from_events(numbered));
        let slot = replayed.new_slot();
        let opened = replayed.requested_expecting_gate(slot, "Go", "k", request(), schema(), &none);
        assert_eq!(opened, Ok(None));
        assert!(replayed.out.is_empty() && replayed.divergence().is_none());
        // A bad schema or a reserved event type is refused before an id is taken.
        let mut s = flow_state();
        let slot = s.new_slot();
        let bad = Err(StepError::InvalidSchema("too deep".into()));
        let refused = s.requested_expecting_gate(slot, "Go", "k", request(), bad, &none);
        assert!(matches!(refused, Err(StepError::InvalidSchema(_))));
        let reserved = s.requested_expecting_gate(slot, "loom.x", "k", request(), schema(), &none);
        assert!(matches!(reserved, Err(StepError::ReservedEventType(_))));
        assert!(s.out.is_empty());
        assert_eq!(
            s.requested_expecting_gate(slot, "Go", "k", request(), schema(), &none),
            Ok(None)
        );
        assert!(matches!(s.out.last(), Some(Event::ExecutionSuspended(g)) if g.gate_id == "Go#1"));
    }

    #[test]
    fn first_of_needs_gates_with_distinct_keys_and_opens_them_in_one_group() {
        let mut s = flow_state();
        let none = DataClassification::default();
        let slot = s.new_slot();
        assert_eq!(s.first_of(slot, &[], NONE, &none), Err(StepError::NoGates));
        let same = s.first_of(slot, &[("A", "k"), ("A", "k")], NONE, &none);
        assert!(matches!(same, Err(StepError::DuplicateGate { .. })));
        let mut s = flow_state();
        let opened = s.first_of(slot, &[("A", "k"), ("B", "k")], Some(|| 9), &none);
        assert_eq!(opened, Ok(None));
        assert_eq!(s.gates.len(), 2);
        assert!(
            s.gates
                .values()
                .all(|g| g.group.is_some_and(|(of, _)| of == slot))
        );
        assert_eq!(s.pending_deadlines(), vec![("A#1".to_owned(), 9)]);
    }
}
