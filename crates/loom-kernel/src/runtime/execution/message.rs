//! A message to the execution (a resume, a verdict, a cancel, a deadline, a child's end):
//! refused once it has ended, deferred while the flow replays (the gate or step it names may
//! not be open yet; a cancel never waits), handled otherwise.

use super::Execution;
use crate::event::{Event, ExecutionCancelled};
use crate::runtime::errors::{ResolveError, ResumeError};
use crate::runtime::machine::{Admit, CutOff, GateMiss, VerdictMiss};
use crate::runtime::mailbox::{Answer, DriverMsg, Reply, ResolveMsg, ResumeMsg, ended_answer};

impl Execution {
    pub(super) fn message(&mut self, message: DriverMsg) {
        let cancel = matches!(message, DriverMsg::Cancel { .. });
        let replaying = self.ctx.state().replaying();
        match self.write.admit(cancel, replaying) {
            Admit::Refuse => self.refuse_as_ended(message),
            Admit::Defer => self.deferred.push(message),
            Admit::Handle => {
                self.apply(message);
                self.poll_flow = true;
            }
        }
    }

    /// Messages deferred during replay, once the replay has caught up (or the run ended).
    pub(super) fn handle_deferred(&mut self) {
        if self.deferred.is_empty() || (!self.write.ended() && self.ctx.state().replaying()) {
            return;
        }
        for message in std::mem::take(&mut self.deferred) {
            if self.write.ended() {
                self.refuse_as_ended(message);
            } else {
                self.apply(message);
            }
        }
        self.poll_flow = true;
    }

    /// A message for an execution that has ended: refused (a resume is told if its gate
    /// timed out first).
    fn refuse_as_ended(&mut self, message: DriverMsg) {
        if let DriverMsg::Deadline {
            gate_id,
            deadline_ms,
        } = &message
        {
            self.out.disarm((gate_id.clone(), *deadline_ms));
        }
        let state = self.ctx.state();
        let timed_out = state.timed_out_gates();
        let answer = ended_answer(&self.id, message, &timed_out, state.fold().steps_in_doubt());
        drop(state);
        self.out.answer_all(answer);
    }

    /// A message handled now.
    fn apply(&mut self, message: DriverMsg) {
        match message {
            DriverMsg::Resume(resume) => self.resume(resume),
            DriverMsg::Deadline {
                gate_id,
                deadline_ms,
            } => {
                if !self.ctx.state().expire_gate(&gate_id, deadline_ms) {
                    tracing::debug!(gate = %gate_id, deadline_ms, "a deadline whose gate no longer waits is ignored");
                }
                self.out.disarm((gate_id, deadline_ms));
            }
            DriverMsg::ChildEnded { child, payload } => {
                if !self.ctx.state().child_ended(&child, payload) {
                    tracing::debug!(%child, "the end of a child no gate waits for is ignored");
                }
                self.out.heard(child);
            }
            DriverMsg::Resolve(resolve) => {
                let ResolveMsg {
                    step_id,
                    verdict,
                    operator,
                    reply,
                } = resolve;
                let mut state = self.ctx.state();
                if self.offline {
                    // A step in flight that no process runs is in doubt first, as `recover`
                    // would record it.
                    state.stopped_in_doubt(|step| step == step_id);
                }
                let resolved = state.resolve(&step_id, verdict, operator);
                drop(state);
                match resolved {
                    Ok(()) => self.write.reply_when_durable(Reply::Resolve(reply)),
                    Err(VerdictMiss::NotInDoubt) => {
                        let error = ResolveError::NotInDoubt {
                            execution: self.id.clone(),
                            step_id,
                        };
                        self.out.answer(Answer::Resolve(reply, error));
                    }
                }
            }
            DriverMsg::Cancel { reason, reply } => {
                // The effects the cancel cuts off are recorded in doubt before the end (K9).
                // Offline, no process runs the steps in flight: it stopped.
                let why = if self.offline {
                    CutOff::WorkerStopped
                } else {
                    CutOff::Cancel
                };
                let write = &self.write;
                let mut state = self.ctx.state();
                let doubts = state.doubts_cut_off(why, |step_id| write.dispatched(step_id));
                let cancelled = Event::ExecutionCancelled(ExecutionCancelled { reason });
                state.fold_issued(&cancelled);
                drop(state);
                self.write
                    .cancelled(doubts, cancelled, Reply::Cancel(reply));
                self.drop_effects();
            }
        }
    }

    fn resume(&mut self, resume: ResumeMsg) {
        let ResumeMsg {
            event_type,
            correlation_key,
            payload,
            gate_id,
            reply,
        } = resume;
        let resumed = self.ctx.state().resume_gate(
            &event_type,
            &correlation_key,
            payload,
            gate_id.as_deref(),
        );
        let miss = match resumed {
            Ok(_) => return self.write.reply_when_durable(Reply::Resume(reply)),
            Err(miss) => miss,
        };
        let execution = self.id.clone();
        let error = match miss {
            GateMiss::NoPendingGate => ResumeError::NoPendingGate {
                execution,
                event_type,
                correlation_key,
            },
            GateMiss::TimedOut => ResumeError::TimedOut {
                execution,
                event_type,
                correlation_key,
            },
            GateMiss::Reserved => ResumeError::ReservedGate {
                execution,
                event_type,
            },
            GateMiss::ReservedPayload => ResumeError::ReservedPayload { execution },
        };
        self.out.answer(Answer::Resume(reply, error));
    }
}
