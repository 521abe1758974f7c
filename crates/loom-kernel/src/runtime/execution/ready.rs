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

/// Everything the execution wants done, for the driver to carry out before
/// [`Execution::advance`]. What a step needs on its way (effects to run, the append) has a
/// place of its own; the rest, rare, is one list of [`Action`]s in the order decided.
#[derive(Default)]
pub(crate) struct Ready {
    /// Effects to run, against the durable head `head` (a non-idempotent one checks the lease
    /// at it).
    pub(crate) run: Vec<Dispatch>,
    pub(crate) head: u64,
    /// Deadlines, children, answers, messages for the next driver.
    pub(crate) actions: Vec<Action>,
    /// Drop the effects still running: the execution ended.
    pub(crate) drop_effects: bool,
    /// The append to write; its result comes back as `Input::Appended` or
    /// `Input::AppendFailed`.
    pub(crate) append: Option<Batch>,
    /// What the driver does once the rest is carried out.
    pub(crate) next: Next,
}

/// One of the rarer things a [`Ready`] asks for.
pub(crate) enum Action {
    /// Arm a gate's deadline.
    Arm(GateDeadline),
    /// Disarm one (its gate closed, or its time came).
    Disarm(GateDeadline),
    /// Start a child (its gate is durable).
    StartChild(ChildStart),
    /// A child whose end is handled now: its link to this parent goes.
    Heard(ExecutionId),
    /// Answer a caller.
    Answer(Answer),
    /// A message for the next driver of this execution (this run is over).
    Resend(DriverMsg),
}

impl Ready {
    pub(super) fn answer(&mut self, answer: Answer) {
        self.actions.push(Action::Answer(answer));
    }
    pub(super) fn answer_all(&mut self, answers: impl IntoIterator<Item = Answer>) {
        self.actions.extend(answers.into_iter().map(Action::Answer));
    }
    pub(super) fn arm_all(&mut self, deadlines: Vec<GateDeadline>) {
        self.actions.extend(deadlines.into_iter().map(Action::Arm));
    }
    pub(super) fn disarm(&mut self, deadline: GateDeadline) {
        self.actions.push(Action::Disarm(deadline));
    }
    pub(super) fn disarm_all(&mut self, deadlines: Vec<GateDeadline>) {
        self.actions
            .extend(deadlines.into_iter().map(Action::Disarm));
    }
    pub(super) fn start_children(&mut self, children: Vec<ChildStart>) {
        self.actions
            .extend(children.into_iter().map(Action::StartChild));
    }
    pub(super) fn heard(&mut self, child: ExecutionId) {
        self.actions.push(Action::Heard(child));
    }
    pub(super) fn resend_all(&mut self, messages: impl IntoIterator<Item = DriverMsg>) {
        self.actions
            .extend(messages.into_iter().map(Action::Resend));
    }
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
    Release(Box<Released>),
    /// Everything is durable and the flow waits only for messages: end the turn, and if the
    /// flow did not wake meanwhile report `Input::Parking`.
    MayPark,
    /// Park the flow (kept in memory for the next driver, current while the log's head is
    /// `head`) and exit; if a message came meanwhile, wait.
    Park { head: u64 },
    /// The run failed; the callers waiting have their answers in this [`Ready`].
    Fail(Box<DriveError>),
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

/// What is left of an execution that ended, for the driver that releases it.
pub(crate) struct Released {
    /// Deadlines no gate waits for any more.
    pub(crate) deadlines: Vec<GateDeadline>,
    /// Children no one will hear of: `(gate id, child id)`.
    pub(crate) orphans: Vec<(String, ExecutionId)>,
}

impl Execution {
    /// What the execution wants done now, to carry out before [`Execution::advance`]. It is
    /// kept in the machine (its lists keep their room from turn to turn), not moved out.
    pub(crate) fn ready(&mut self) -> &mut Ready {
        self.prepare();
        self.out.head = self.write.durable_head();
        &mut self.out
    }

    /// The [`Ready`] was carried out: it is emptied for the next.
    pub(crate) fn advance(&mut self) {
        let done = &mut self.out;
        done.run.clear();
        done.actions.clear();
        done.drop_effects = false;
        done.append = None;
        done.next = Next::Wait;
    }

    /// [`Execution::ready`] taken out whole, then [`Execution::advance`] (for a caller that
    /// steps the machine while it carries the `Ready` out: the model test's harness, an
    /// offline write).
    pub(crate) fn take_ready(&mut self) -> Ready {
        self.prepare();
        self.out.head = self.write.durable_head();
        std::mem::take(&mut self.out)
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
        self.out.answer_all(replies.into_iter().map(Answer::Ok));
        self.out.next = if self.write.ended() {
            let state = self.ctx.state();
            Next::Release(Box::new(Released {
                deadlines: state.pending_deadlines(),
                orphans: state.pending_children(),
            }))
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
        self.out.arm_all(arm);
        self.out.disarm_all(disarm);
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
        self.out.start_children(children);
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
            self.out.answer_all(
                replies
                    .into_iter()
                    .map(|reply| Answer::Failed(reply, detail.clone())),
            );
            self.refuse_deferred(&detail);
        }
        self.out.next = end;
    }
}
