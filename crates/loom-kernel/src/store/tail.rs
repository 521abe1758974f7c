//! What a store keeps of each execution besides its events: the tail of its log, from which
//! it refuses appends that would make the log invalid and indexes the execution by status.
//!
//! [`ExecutionTail`] follows an execution's log event by event without keeping its history:
//! its status, the gates pending, the steps in flight and the steps in doubt (sets whose size
//! is the execution's *pending* work, not its length), and when it ended. A store reads it
//! before an append, applies the batch to it ([`ExecutionTail::apply`]), and writes it back in
//! the same atomic commit as the events, so the index never disagrees with the log.
//!
//! It checks only what makes a log unreadable as a whole: the first event is
//! `EXECUTION_STARTED`, it appears once, and nothing follows a terminal event. The finer
//! invariants (a step's outcome recorded once, a resume matching its gate...) stay the fold's
//! ([`crate::ExecutionState`]): checking them here would keep a second copy of every step.
//! For a log the fold accepts, [`ExecutionTail::status`] and [`ExecutionTail::needs_driving`]
//! equal the fold's.

use std::collections::BTreeSet;

use super::AppendError;
use crate::event::Event;
use crate::fold::{ExecutionStatus, Violation};
use crate::id::ExecutionId;

/// The part of an execution's state a store keeps to validate appends and index the
/// execution by status. See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionTail {
    status: ExecutionStatus,
    pending_gates: BTreeSet<String>,
    in_flight: BTreeSet<String>,
    in_doubt: BTreeSet<String>,
    ended_at_ms: Option<u64>,
}

impl Default for ExecutionTail {
    fn default() -> Self {
        Self::new()
    }
}

/// What an event changes in an [`ExecutionTail`], taken from the event so that the event
/// itself need not travel with it (ids of steps and gates only, never payloads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailChange {
    type_name: &'static str,
    kind: ChangeKind,
    /// What it changes in the execution's rows of the wake-up index (`wake.rs`).
    wake: Option<super::wake::WakeChange>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ChangeKind {
    /// With the flow's name, for the stores' listing indexes.
    Start(String),
    StepStarted(String),
    /// Its step id kept inline (most are): this runs for every step of every append.
    StepEnded(crate::hash::IdKey),
    InDoubt(String),
    Resolved {
        step: String,
        retry: bool,
    },
    Suspended(String),
    Resumed(String),
    End(ExecutionStatus),
    None,
}

impl TailChange {
    /// What `event` changes.
    pub fn of(event: &Event) -> Self {
        let kind = match event {
            Event::ExecutionStarted(e) => ChangeKind::Start(e.flow.clone()),
            Event::StepStarted(e) => ChangeKind::StepStarted(e.step_id.clone()),
            Event::StepCompleted(e) => ChangeKind::StepEnded(crate::hash::IdKey::new(&e.step_id)),
            Event::StepFailed(e) => ChangeKind::StepEnded(crate::hash::IdKey::new(&e.step_id)),
            Event::EffectInDoubt(e) => ChangeKind::InDoubt(e.step_id.clone()),
            Event::EffectResolved(e) => ChangeKind::Resolved {
                step: e.step_id.clone(),
                retry: matches!(e.verdict, crate::event::Verdict::Retry),
            },
            Event::ExecutionSuspended(e) => ChangeKind::Suspended(e.gate_id.clone()),
            Event::ExecutionResumed(e) => ChangeKind::Resumed(e.gate_id.clone()),
            Event::DecisionRecorded(_) | Event::SurfacePatch(_) => ChangeKind::None,
            Event::ExecutionCompleted(_) => ChangeKind::End(ExecutionStatus::Completed),
            Event::ExecutionFailed(_) => ChangeKind::End(ExecutionStatus::Failed),
            Event::ExecutionCancelled(_) => ChangeKind::End(ExecutionStatus::Cancelled),
        };
        Self {
            type_name: event.type_name(),
            kind,
            wake: super::wake::WakeChange::of(event),
        }
    }

    /// What it changes in the wake-up index, if anything.
    pub(crate) fn wake(&self) -> Option<&super::wake::WakeChange> {
        self.wake.as_ref()
    }
}

impl TailChange {
    /// The flow's name, when the event starts the execution.
    pub fn started_flow(&self) -> Option<&str> {
        match &self.kind {
            ChangeKind::Start(flow) => Some(flow),
            _ => None,
        }
    }
}

/// The event of a batch that [`ExecutionTail::apply_batch`] refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedEvent {
    /// Its index in the batch.
    pub index: usize,
    /// The invariant it breaks.
    pub violation: Box<Violation>,
}

impl RefusedEvent {
    /// The append error for this refusal in a batch appended to `execution` at
    /// `expected_seq`: [`AppendError::Invalid`] at the refused event's seq.
    pub fn into_append_error(self, execution: &ExecutionId, expected_seq: u64) -> AppendError {
        AppendError::Invalid {
            execution: execution.clone(),
            seq: expected_seq + self.index as u64,
            violation: self.violation,
        }
    }
}

/// The first byte of an encoded tail: the layout version.
const TAIL_LAYOUT: u8 = 1;

impl ExecutionTail {
    /// The tail of an empty log (status `New`).
    pub fn new() -> Self {
        Self {
            status: ExecutionStatus::New,
            pending_gates: BTreeSet::new(),
            in_flight: BTreeSet::new(),
            in_doubt: BTreeSet::new(),
            ended_at_ms: None,
        }
    }

    /// The execution's status, as the fold would report it.
    pub fn status(&self) -> ExecutionStatus {
        self.status
    }

    /// Whether a worker must drive the execution on, as
    /// [`crate::ExecutionState::needs_driving`] would say: it has not ended, and it is running
    /// or has a step in flight.
    pub fn needs_driving(&self) -> bool {
        self.status.needs_driving(!self.in_flight.is_empty())
    }

    /// When the store recorded the execution's terminal event (`recorded_at_ms` of that
    /// event), if it has ended and the store had a clock.
    pub fn ended_at_ms(&self) -> Option<u64> {
        self.ended_at_ms
    }

    /// Applies `events`, appended together at `recorded_at_ms`, all or nothing: on error the
    /// tail is unchanged and the error says which event of the batch breaks the log.
    pub fn apply_batch(
        &mut self,
        events: &[Event],
        recorded_at_ms: Option<u64>,
    ) -> Result<(), RefusedEvent> {
        self.apply_all(events.iter().map(TailChange::of), recorded_at_ms)
    }

    /// Applies one event. Refuses (leaving the tail unchanged) a first event that is not
    /// `EXECUTION_STARTED`, a second `EXECUTION_STARTED`, and any event after a terminal one.
    pub fn apply(&mut self, event: &Event, recorded_at_ms: Option<u64>) -> Result<(), Violation> {
        self.apply_change(&TailChange::of(event), recorded_at_ms)
    }

    /// [`ExecutionTail::apply_batch`] for changes taken from the events beforehand
    /// ([`TailChange::of`]): a store can hand them to another thread without the events.
    pub fn apply_changes(
        &mut self,
        changes: &[TailChange],
        recorded_at_ms: Option<u64>,
    ) -> Result<(), RefusedEvent> {
        self.apply_all(changes.iter(), recorded_at_ms)
    }

    /// Applies `changes` all or nothing (the two batch forms above).
    fn apply_all(
        &mut self,
        changes: impl Iterator<Item = impl std::borrow::Borrow<TailChange>>,
        recorded_at_ms: Option<u64>,
    ) -> Result<(), RefusedEvent> {
        let mut next = self.clone();
        for (index, change) in changes.enumerate() {
            next.apply_change(change.borrow(), recorded_at_ms)
                .map_err(|violation| RefusedEvent {
                    index,
                    violation: Box::new(violation),
                })?;
        }
        *self = next;
        Ok(())
    }

    /// [`ExecutionTail::apply`] for a change taken from the event beforehand.
    pub fn apply_change(
        &mut self,
        change: &TailChange,
        recorded_at_ms: Option<u64>,
    ) -> Result<(), Violation> {
        let found = change.type_name;
        if self.status == ExecutionStatus::New {
            if !matches!(change.kind, ChangeKind::Start(_)) {
                return Err(Violation::NotStarted { found });
            }
            self.status = ExecutionStatus::Running;
            return Ok(());
        }
        if self.status.is_terminal() {
            return Err(Violation::AfterTerminal {
                found,
                status: self.status,
            });
        }
        match &change.kind {
            ChangeKind::Start(_) => return Err(Violation::StartedTwice),
            ChangeKind::StepStarted(step) => {
                if !self.in_doubt.contains(step) {
                    self.in_flight.insert(step.clone());
                }
            }
            // A quick step's start was recorded in its outcome's place: nothing to remove.
            ChangeKind::StepEnded(step) if !self.in_flight.is_empty() => {
                self.in_flight.remove(step.as_str());
            }
            ChangeKind::StepEnded(_) => {}
            ChangeKind::InDoubt(step) => {
                if self.in_flight.remove(step) {
                    self.in_doubt.insert(step.clone());
                }
            }
            ChangeKind::Resolved { step, retry } => {
                if self.in_doubt.remove(step) && *retry {
                    self.in_flight.insert(step.clone());
                }
            }
            ChangeKind::Suspended(gate) => {
                self.pending_gates.insert(gate.clone());
            }
            ChangeKind::Resumed(gate) => {
                self.pending_gates.remove(gate);
            }
            ChangeKind::None => {}
            ChangeKind::End(status) => {
                self.status = *status;
                self.ended_at_ms = recorded_at_ms;
                self.pending_gates.clear();
                self.in_flight.clear();
                // The steps it ended with in doubt stay: their effects may have happened, and
                // the operator must still find them (`StatusFilter::StepsInDoubt`).
                return Ok(());
            }
        }
        self.status =
            ExecutionStatus::active(!self.in_doubt.is_empty(), !self.pending_gates.is_empty());
        Ok(())
    }

    /// The tail of a log the fold refuses, recorded before stores validated appends: filed as
    /// running and needing driving, so that recovery folds it and reports it.
    pub fn unreadable() -> Self {
        Self {
            status: ExecutionStatus::Running,
            ..Self::new()
        }
    }

    /// The tail as bytes, for a store to keep beside the log.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(16);
        self.encode_into(&mut bytes);
        bytes
    }

    /// [`ExecutionTail::encode`], appended to `bytes` (after a store's own framing).
    pub(crate) fn encode_into(&self, bytes: &mut Vec<u8>) {
        bytes.push(TAIL_LAYOUT);
        bytes.push(status_code(self.status));
        match self.ended_at_ms {
            Some(ms) => {
                bytes.push(1);
                bytes.extend_from_slice(&ms.to_le_bytes());
            }
            None => bytes.push(0),
        }
        for set in [&self.pending_gates, &self.in_flight, &self.in_doubt] {
            bytes.extend_from_slice(&u32::try_from(set.len()).unwrap_or(u32::MAX).to_le_bytes());
            for item in set {
                bytes.extend_from_slice(
                    &u32::try_from(item.len()).unwrap_or(u32::MAX).to_le_bytes(),
                );
                bytes.extend_from_slice(item.as_bytes());
            }
        }
    }

    /// Reads back what [`ExecutionTail::encode`] wrote; `None` for bytes it did not write.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut input = bytes;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, rest) = input.split_at_checked(n)?;
            input = rest;
            Some(head)
        };
        if take(1)?[0] != TAIL_LAYOUT {
            return None;
        }
        let status = status_from_code(take(1)?[0])?;
        let ended_at_ms = match take(1)?[0] {
            0 => None,
            1 => Some(u64::from_le_bytes(take(8)?.try_into().ok()?)),
            _ => return None,
        };
        let mut sets: [BTreeSet<String>; 3] = Default::default();
        for set in &mut sets {
            let count = u32::from_le_bytes(take(4)?.try_into().ok()?);
            for _ in 0..count {
                let len = u32::from_le_bytes(take(4)?.try_into().ok()?);
                let text = std::str::from_utf8(take(usize::try_from(len).ok()?)?).ok()?;
                set.insert(text.to_owned());
            }
        }
        if !input.is_empty() {
            return None;
        }
        let [pending_gates, in_flight, in_doubt] = sets;
        Some(Self {
            status,
            pending_gates,
            in_flight,
            in_doubt,
            ended_at_ms,
        })
    }
}

/// A stable one-byte code per status, for stores that index by status.
pub fn status_code(status: ExecutionStatus) -> u8 {
    match status {
        ExecutionStatus::New => 0,
        ExecutionStatus::Running => 1,
        ExecutionStatus::Suspended => 2,
        ExecutionStatus::InDoubt => 3,
        ExecutionStatus::Completed => 4,
        ExecutionStatus::Failed => 5,
        ExecutionStatus::Cancelled => 6,
    }
}

/// The status [`status_code`] gave `code`.
pub fn status_from_code(code: u8) -> Option<ExecutionStatus> {
    Some(match code {
        0 => ExecutionStatus::New,
        1 => ExecutionStatus::Running,
        2 => ExecutionStatus::Suspended,
        3 => ExecutionStatus::InDoubt,
        4 => ExecutionStatus::Completed,
        5 => ExecutionStatus::Failed,
        6 => ExecutionStatus::Cancelled,
        _ => return None,
    })
}

/// The index code of [`crate::store::StatusFilter::NeedsDriving`].
const NEEDS_DRIVING_CODE: u8 = 0x80;
/// The index code of [`crate::store::StatusFilter::StepsInDoubt`].
const STEPS_IN_DOUBT_CODE: u8 = 0x81;

/// The code under which a store files the executions `filter` lists: each execution is filed
/// under every code of [`ExecutionTail::index_codes`], so a listing is one range of the index.
pub fn filter_code(filter: crate::store::StatusFilter) -> u8 {
    match filter {
        crate::store::StatusFilter::Status(status) => status_code(status),
        crate::store::StatusFilter::NeedsDriving => NEEDS_DRIVING_CODE,
        crate::store::StatusFilter::StepsInDoubt => STEPS_IN_DOUBT_CODE,
    }
}

impl ExecutionTail {
    /// The index codes ([`filter_code`]) this execution is filed under: its status,
    /// `NeedsDriving` when it needs driving, and `StepsInDoubt` when it has a step in doubt.
    /// None for an execution with no events.
    pub fn index_codes(&self) -> impl Iterator<Item = u8> + use<> {
        let status = (self.status != ExecutionStatus::New).then(|| status_code(self.status));
        let driving = self.needs_driving().then_some(NEEDS_DRIVING_CODE);
        let doubts = self.has_steps_in_doubt().then_some(STEPS_IN_DOUBT_CODE);
        status.into_iter().chain(driving).chain(doubts)
    }

    /// Whether a step is in doubt, the execution ended or not, as
    /// [`crate::ExecutionState::steps_in_doubt`] would say.
    pub fn has_steps_in_doubt(&self) -> bool {
        !self.in_doubt.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{completed, in_doubt, started, step_started, suspended, tagged};

    #[test]
    fn a_tail_round_trips_through_its_bytes() {
        let mut tail = ExecutionTail::new();
        for event in [
            started("f"),
            step_started("a"),
            in_doubt("a"),
            suspended("g"),
        ] {
            tail.apply(&event, Some(3)).unwrap();
        }
        assert_eq!(ExecutionTail::decode(&tail.encode()), Some(tail.clone()));
        tail.apply(&completed(), Some(9)).unwrap();
        assert_eq!(tail.ended_at_ms(), Some(9));
        assert_eq!(ExecutionTail::decode(&tail.encode()), Some(tail.clone()));
        let bytes = tail.encode();
        for cut in 0..bytes.len() {
            assert_eq!(ExecutionTail::decode(&bytes[..cut]), None, "cut at {cut}");
        }
    }

    #[test]
    fn a_refused_batch_leaves_the_tail_as_it_was() {
        let mut tail = ExecutionTail::new();
        let before = tail.clone();
        let err = tail
            .apply_batch(
                &[started("f"), tagged(serde_json::json!(1)), started("f")],
                None,
            )
            .unwrap_err();
        assert_eq!(err.index, 2);
        assert_eq!(*err.violation, Violation::StartedTwice);
        assert_eq!(tail, before);
    }
}
