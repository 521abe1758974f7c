//! What the execution wants done ([`Ready`]), in the order a driver's turn has always done it
//! (the flow polled first, when [`Execution::poll_now`] says so): take what it issued (deadlines, events, effects, children); handle messages
//! deferred during replay; end it if it returned; give quick effects a turn to come back
//! before the append goes out; then, once everything is durable, answer, and exit or park.

use super::Execution;
use crate::id::ExecutionId;
use crate::runtime::ctx::ChildStart;
use crate::runtime::errors::DriveError;
use crate::runtime::history::Attempted;
use crate::runtime::machine::{Batch, Dispatch, GateDeadline};
use crate::runtime::mailbox::{Answer, DriverMsg};

/// Everything the execution wants done, for the driver to carry out and hand back to
/// [`Execution::advance`].
#[derive(Default)]
pub(crate) struct Ready {
    /// Deadlines to arm and to disarm.
    pub(crate) arm: Vec<GateDeadline>,
    pub(crate) disarm: Vec<GateDeadline>,
    /// Effects to run, against the durable head `head` (a non-idempotent one checks the lease
    /// at it).
    pub(crate) run: Vec<Dispatch>,
    pub(crate) head: u64,
    /// Children to start (their gate is durable).
    pub(crate) children: Vec<ChildStart>,
    /// Children whose end is handled now (their link to this parent goes).
    pub(crate) heard: Vec<ExecutionId>,
    /// Answers to callers.
    pub(crate) answers: Vec<Answer>,
    /// Messages for the next driver of this execution (this run is over).
    pub(crate) resend: Vec<DriverMsg>,
    /// Drop the effects still running: the execution ended.
    pub(crate) drop_effects: bool,
    /// The append to write; its result comes back as `Input::Appended` or
    /// `Input::AppendFailed`.
    pub(crate) append: Option<Batch>,
    /// What the driver does once the rest is carried out.
    pub(crate) next: Next,
}

/// What the driver does after carrying out a [`Ready`].
#[derive(Default)]
pub(crate) enum Next {
    /// Come back for the next [`Ready`] at once (effects just handed out may already be
    /// done: report them first, so their outcomes share the next append).
    Again,
    /// Wait for the world: the append, an effect, a message, the flow's waker.
    #[default]
    Wait,
    /// Everything is durable and the execution has ended: release it, disarm these deadlines
    /// and cancel these children (no one will hear of them), and exit with its state. If a
    /// message came meanwhile, wait.
    Release {
        deadlines: Vec<GateDeadline>,
        orphans: Vec<(String, ExecutionId)>,
    },
    /// Everything is durable and the flow waits only for messages: end the turn, and if the
    /// flow did not wake meanwhile report `Input::Parking`.
    MayPark,
    /// Park the flow (kept in memory for the next driver, current while the log's head is
    /// `head`) and exit; if a message came meanwhile, wait.
    Park { head: u64 },
    /// The run failed; the callers waiting have their answers in this [`Ready`].
    Fail(DriveError),
    /// A new execution's id was taken: the run is over, nothing of it was written.
    Unknown,
    /// Another writer appended first: the run is over.
    Moved,
    /// The runtime shut down; `settled` when everything issued is durable (otherwise the
    /// log, not the flow's side, says what is).
    Stopped { settled: bool },
    /// The runtime is gone.
    Gone,
}

impl Execution {
    /// What the execution wants done now. Carried out, it goes back to
    /// [`Execution::advance`].
    pub(crate) fn ready(&mut self) -> Ready {
        self.prepare();
        self.out.head = self.write.durable_head();
        let spare = self.spare.take().unwrap_or_default();
        std::mem::replace(&mut self.out, spare)
    }

    /// A [`Ready`] carried out: its buffers are kept for the next.
    pub(crate) fn advance(&mut self, mut done: Ready) {
        done.arm.clear();
        done.disarm.clear();
        done.run.clear();
        done.children.clear();
        done.heard.clear();
        done.answers.clear();
        done.resend.clear();
        done.drop_effects = false;
        done.append = None;
        done.next = Next::Wait;
        self.spare = Some(done);
    }

    fn prepare(&mut self) {
        let parking = std::mem::take(&mut self.parking);
        if self.end.is_some() {
            return self.finish();
        }
        if self.wants_poll() {
            // The flow first: what it issues now shares this turn.
            self.out.next = Next::Again;
            return;
        }
        if !self.take_issued() {
            return self.finish();
        }
        self.handle_deferred();
        self.end_if_returned();
        if (!self.out.run.is_empty() && !self.write.ended()) || self.wants_poll() {
            self.out.next = Next::Again;
            return;
        }
        self.out.append = self.write.take_append();
        if !self.write.settled() {
            self.out.next = Next::Wait;
            return;
        }
        let replies = self.write.take_settled_replies();
        self.out.answers.extend(replies.into_iter().map(Answer::Ok));
        self.out.next = if self.write.ended() {
            let state = self.ctx.state();
            Next::Release {
                deadlines: state.pending_deadlines(),
                orphans: state.pending_children(),
            }
        } else if !self.may_park() {
            Next::Wait
        } else if !parking {
            Next::MayPark
        } else {
            // Parking with recorded commands left unmatched means the flow now waits where
            // it used to go on.
            let mut state = self.ctx.state();
            state.check_end(Attempted::Wait);
            if let Some(divergence) = state.divergence().cloned() {
                drop(state);
                self.fail(DriveError::NonDeterminism {
                    execution: self.id.clone(),
                    source: divergence,
                });
                return self.finish();
            }
            Next::Park {
                head: self.write.durable_head(),
            }
        };
    }

    /// Takes what the flow issued: deadlines, events for the write side, effects and children
    /// it says may start. False on a divergence (the run fails).
    fn take_issued(&mut self) -> bool {
        let mut state = self.ctx.state();
        if let Some(divergence) = state.divergence().cloned() {
            drop(state);
            self.fail(DriveError::NonDeterminism {
                execution: self.id.clone(),
                source: divergence,
            });
            return false;
        }
        state.swap_queued(&mut self.issued_events, &mut self.issued_dispatches);
        let (arm, disarm) = state.take_deadlines();
        let child_starts = state.take_child_starts();
        drop(state);
        self.out.arm.extend(arm);
        self.out.disarm.extend(disarm);
        // A held effect may start once everything queued so far is durable. Until the
        // execution's EXECUTION_STARTED is durable, or its id claimed in the store's memory,
        // every effect is held: a start whose id turns out to be taken (by another runtime on
        // the store) must run nothing.
        let children = self.write.issued_in_place(
            &mut self.issued_events,
            &mut self.issued_dispatches,
            child_starts,
        );
        self.running += self.issued_dispatches.len();
        self.out.run.append(&mut self.issued_dispatches);
        self.out.children.extend(children);
        true
    }

    /// Whether the flow may park: everything durable, the execution goes on, no effect runs
    /// or is held, and the flow waits only for messages.
    fn may_park(&self) -> bool {
        let ctx = &self.ctx;
        self.write
            .may_park(self.running > 0, || ctx.state().waits_for_messages())
    }

    /// The run is over as decided: a failure fails every reply still waiting and refuses the
    /// deferred messages.
    fn finish(&mut self) {
        let Some(end) = self.end.take() else {
            return;
        };
        if let Next::Fail(error) = &end {
            let detail = error.to_string();
            let replies = self.write.take_all_replies();
            self.out.answers.extend(
                replies
                    .into_iter()
                    .map(|reply| Answer::Failed(reply, detail.clone())),
            );
            self.refuse_deferred(&detail);
        }
        self.out.next = end;
    }
}
