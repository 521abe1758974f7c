//! Folding one event: every invariant checked before the state changes, each map looked up
//! once (the hot path of recovery and replay).

use std::collections::{HashSet, btree_map, hash_map};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::{
    Ended, ExecutionState, ExecutionStatus, FoldError, PendingGate, StepRecord, StepStatus,
    Violation,
};
use crate::envelope::EventEnvelope;
use crate::event::{Event, Verdict};
use crate::hash::{IdHasher, IdKey};
use crate::id::ExecutionId;

impl ExecutionState {
    /// Folds one event. On error the state is unchanged: every branch checks before it
    /// writes, and looks each map up once (the fold is the hot path of recovery and replay).
    pub fn apply(&mut self, envelope: &EventEnvelope) -> Result<(), FoldError> {
        self.apply_at(&envelope.execution_id, envelope.seq, &envelope.event)
    }

    /// Folds an event a live execution issues, numbered as its log will number it: next,
    /// except the outcome of a step whose `STEP_STARTED`, at or after `unsent` (the first seq
    /// not yet handed to an append), is not written yet: the log records such a quick step by
    /// its outcome alone, in its start's place, and the state is the one that outcome alone
    /// gives. The same checks as [`ExecutionState::apply`], without an envelope.
    pub(crate) fn apply_issued(
        &mut self,
        execution_id: &ExecutionId,
        event: &Event,
        unsent: u64,
    ) -> Result<(), FoldError> {
        let in_place = match event {
            Event::StepCompleted(e) => {
                self.outcome_in_place(&e.step_id, &e.effect, e.cost, unsent, |seq| {
                    StepStatus::Completed { seq }
                })
            }
            Event::StepFailed(e) => {
                self.outcome_in_place(&e.step_id, &e.effect, e.cost, unsent, |seq| {
                    StepStatus::Failed { seq }
                })
            }
            _ => false,
        };
        if in_place {
            return Ok(());
        }
        self.apply_at(execution_id, self.next_seq, event)
    }

    /// The outcome of a step started at or after `unsent`, folded in its start's place (see
    /// [`ExecutionState::apply_issued`]); false, with nothing changed, for any other step (the
    /// outcome is then folded, or refused, as the next event).
    fn outcome_in_place(
        &mut self,
        step_id: &str,
        effect: &str,
        cost: u64,
        unsent: u64,
        status: impl FnOnce(u64) -> StepStatus,
    ) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        let Some(record) = self.steps.get_mut(&IdKey::new(step_id)) else {
            return false;
        };
        let StepStatus::Started { seq, .. } = record.status else {
            return false;
        };
        if seq < unsent || *record.effect != *effect {
            return false;
        }
        record.status = status(seq);
        self.in_flight -= 1;
        self.release(step_id);
        self.budget_spent = self.budget_spent.saturating_add(cost);
        self.status = self.active_status();
        true
    }

    fn apply_at(
        &mut self,
        execution_id: &ExecutionId,
        seq: u64,
        event: &Event,
    ) -> Result<(), FoldError> {
        self.apply_checked(execution_id, seq, event)
            .map_err(|violation| self.refuse(execution_id, seq, violation))?;
        self.next_seq = seq + 1;
        Ok(())
    }

    fn apply_checked(
        &mut self,
        execution_id: &ExecutionId,
        seq: u64,
        event: &Event,
    ) -> Result<(), Violation> {
        if seq != self.next_seq {
            return Err(Violation::SeqGap {
                expected: self.next_seq,
            });
        }
        if let Some(id) = &self.execution_id
            && id != execution_id
        {
            return Err(Violation::ForeignExecution {
                found: execution_id.to_string(),
            });
        }
        if self.status == ExecutionStatus::New {
            let Event::ExecutionStarted(e) = event else {
                return Err(Violation::NotStarted {
                    found: event.type_name(),
                });
            };
            self.execution_id = Some(execution_id.clone());
            self.flow = Some((e.flow.clone(), e.flow_version));
            self.capabilities = e.capabilities.clone();
            self.budget = e.budget;
            self.status = ExecutionStatus::Running;
            return Ok(());
        }
        if self.status.is_terminal() {
            return Err(Violation::AfterTerminal {
                found: event.type_name(),
                status: self.status,
            });
        }
        match event {
            Event::ExecutionStarted(_) => return Err(Violation::StartedTwice),
            Event::StepStarted(e) => {
                let status = StepStatus::Started {
                    attempt: e.attempt,
                    seq,
                };
                self.record_step(&e.step_id, &e.effect, status, "STEP_STARTED")?;
                // A step started again (a re-run, a retry) held its previous attempt's cost.
                let before = if e.max_cost == 0 {
                    self.held.remove(&e.step_id)
                } else {
                    self.held.insert(e.step_id.clone(), e.max_cost)
                };
                self.held_running = (self.held_running.saturating_sub(before.unwrap_or(0)))
                    .saturating_add(e.max_cost);
            }
            Event::StepCompleted(e) => {
                let status = StepStatus::Completed { seq };
                self.record_step(&e.step_id, &e.effect, status, "STEP_COMPLETED")?;
                self.release(&e.step_id);
                self.budget_spent = self.budget_spent.saturating_add(e.cost);
            }
            Event::StepFailed(e) => {
                let status = StepStatus::Failed { seq };
                self.record_step(&e.step_id, &e.effect, status, "STEP_FAILED")?;
                self.release(&e.step_id);
                self.budget_spent = self.budget_spent.saturating_add(e.cost);
            }
            Event::EffectInDoubt(e) => {
                match self.steps.get_mut(e.step_id.as_str()) {
                    Some(record) if matches!(record.status, StepStatus::Started { .. }) => {
                        record.status = StepStatus::InDoubt {
                            attempt: e.attempt,
                            seq,
                        };
                        self.in_flight -= 1;
                        // In doubt, a step holds nothing against what others may spend.
                        let held = self.held.get(&e.step_id).copied().unwrap_or(0);
                        self.held_running = self.held_running.saturating_sub(held);
                    }
                    _ => {
                        return Err(Violation::InDoubtWithoutStart {
                            step_id: e.step_id.clone(),
                        });
                    }
                }
                self.in_doubt.insert(e.step_id.clone());
                self.status = ExecutionStatus::InDoubt;
                return Ok(());
            }
            Event::EffectResolved(e) => {
                if !self.in_doubt.remove(&e.step_id) {
                    return Err(Violation::ResolvedNotInDoubt {
                        step_id: e.step_id.clone(),
                    });
                }
                if let Some(record) = self.steps.get_mut(e.step_id.as_str()) {
                    record.status = match (&e.verdict, record.status) {
                        (Verdict::Retry, StepStatus::InDoubt { attempt, .. }) => {
                            self.in_flight += 1;
                            let held = self.held.get(&e.step_id).copied().unwrap_or(0);
                            self.held_running = self.held_running.saturating_add(held);
                            StepStatus::Started { attempt, seq }
                        }
                        (Verdict::Retry, status) => status,
                        (Verdict::Completed { .. }, _) => StepStatus::Completed { seq },
                        (Verdict::Failed { .. }, _) => StepStatus::Failed { seq },
                    };
                }
                // K3 (LD-024): the effect ran, so the step is charged what its attempt held; a
                // `failed` verdict charges nothing, a `retry` waits for the next outcome.
                match e.verdict {
                    Verdict::Retry => {}
                    Verdict::Completed { .. } => {
                        let cost = self.held.remove(&e.step_id).unwrap_or(0);
                        self.budget_spent = self.budget_spent.saturating_add(cost);
                    }
                    Verdict::Failed { .. } => {
                        self.held.remove(&e.step_id);
                    }
                }
            }
            Event::DecisionRecorded(e) => match self.decisions.entry(IdKey::new(&e.step_id)) {
                hash_map::Entry::Occupied(first) => {
                    return Err(Violation::DuplicateDecision {
                        step_id: e.step_id.clone(),
                        first_seq: *first.get(),
                    });
                }
                hash_map::Entry::Vacant(slot) => {
                    slot.insert(seq);
                }
            },
            Event::ExecutionSuspended(e) => {
                match self.pending_gates.entry(e.gate_id.clone()) {
                    btree_map::Entry::Occupied(gate) => {
                        return Err(Violation::DuplicateGate {
                            gate_id: e.gate_id.clone(),
                            since: gate.get().seq,
                        });
                    }
                    btree_map::Entry::Vacant(slot) => {
                        let event_type = intern(&mut self.names, &e.event_type);
                        slot.insert(PendingGate {
                            event_type,
                            correlation_key: e.correlation_key.clone(),
                            seq,
                        });
                    }
                }
                self.status = self.active_status();
                return Ok(());
            }
            Event::ExecutionResumed(e) => {
                match self.pending_gates.get(&e.gate_id) {
                    None => {
                        return Err(Violation::ResumeWithoutGate {
                            gate_id: e.gate_id.clone(),
                            event_type: e.event_type.clone(),
                            correlation_key: e.correlation_key.clone(),
                        });
                    }
                    Some(gate)
                        if *gate.event_type != *e.event_type
                            || gate.correlation_key != e.correlation_key =>
                    {
                        return Err(Violation::ResumeMismatch {
                            gate_id: e.gate_id.clone(),
                            event_type: e.event_type.clone(),
                            correlation_key: e.correlation_key.clone(),
                            expected_event_type: gate.event_type.to_string(),
                            expected_correlation_key: gate.correlation_key.clone(),
                        });
                    }
                    Some(_) => {}
                }
                self.pending_gates.remove(&e.gate_id);
            }
            Event::SurfacePatch(_) => {}
            Event::ExecutionCompleted(e) => {
                self.status = ExecutionStatus::Completed;
                self.ended = Some(Ended::Completed(e.output.clone()));
                return Ok(());
            }
            Event::ExecutionFailed(e) => {
                self.status = ExecutionStatus::Failed;
                self.ended = Some(Ended::Failed(e.error.clone()));
                return Ok(());
            }
            Event::ExecutionCancelled(e) => {
                self.status = ExecutionStatus::Cancelled;
                self.ended = Some(Ended::Cancelled(e.reason.clone()));
                return Ok(());
            }
        }
        self.status = self.active_status();
        Ok(())
    }

    /// Records a step's start or outcome. A step may start or end only if it has no outcome,
    /// is not in doubt, and keeps its effect.
    fn record_step(
        &mut self,
        step_id: &str,
        effect: &str,
        status: StepStatus,
        found: &'static str,
    ) -> Result<(), Violation> {
        let starts = matches!(status, StepStatus::Started { .. });
        // One lookup by key (comparing keys compares bytes, with no UTF-8 check), which a new
        // step's record is inserted at.
        let record = match self.steps.entry(IdKey::new(step_id)) {
            hash_map::Entry::Occupied(record) => record.into_mut(),
            hash_map::Entry::Vacant(slot) => {
                let effect = intern(&mut self.names, effect);
                slot.insert(StepRecord { effect, status });
                self.in_flight += usize::from(starts);
                return Ok(());
            }
        };
        match record.status {
            StepStatus::Completed { seq } | StepStatus::Failed { seq } => {
                Err(Violation::DuplicateOutcome {
                    step_id: step_id.to_owned(),
                    outcome_seq: seq,
                })
            }
            StepStatus::InDoubt { .. } => Err(Violation::StepInDoubt {
                step_id: step_id.to_owned(),
                found,
            }),
            StepStatus::Started { .. } if *record.effect != *effect => {
                Err(Violation::EffectMismatch {
                    step_id: step_id.to_owned(),
                    recorded: record.effect.to_string(),
                    found: effect.to_owned(),
                })
            }
            StepStatus::Started { .. } => {
                record.status = status;
                // Started -> started again keeps the count; started -> outcome ends the flight.
                self.in_flight -= usize::from(!starts);
                Ok(())
            }
        }
    }

    /// A step's outcome is recorded: what it held is released (it was running: a step in
    /// doubt gets a verdict, not an outcome).
    fn release(&mut self, step_id: &str) {
        if let Some(held) = self.held.remove(step_id) {
            self.held_running = self.held_running.saturating_sub(held);
        }
    }

    /// The status of an execution that has not ended: in doubt while a step awaits a verdict,
    /// suspended while a gate is pending, running otherwise.
    fn active_status(&self) -> ExecutionStatus {
        ExecutionStatus::active(!self.in_doubt.is_empty(), !self.pending_gates.is_empty())
    }
}

/// The shared copy of `name`, made on first sight.
fn intern(names: &mut HashSet<Arc<str>, BuildHasherDefault<IdHasher>>, name: &str) -> Arc<str> {
    if let Some(shared) = names.get(name) {
        return Arc::clone(shared);
    }
    let shared: Arc<str> = Arc::from(name);
    names.insert(Arc::clone(&shared));
    shared
}
