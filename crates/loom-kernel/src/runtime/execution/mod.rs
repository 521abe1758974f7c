//! One execution's machine as its driver sees it (LD-022): everything that happens to the
//! execution goes in through [`Execution::step`], everything it wants done comes out of
//! [`Execution::ready`], and [`Execution::advance`] says it was carried out.
//!
//! It owns the flow's side ([`FlowState`], behind the flow's `FlowCtx` lock, which the flow's
//! commands also take), the write side ([`machine::Machine`]: the durable head, the append
//! queue, the replies and effects held for durability), the messages deferred while the flow
//! replays, the flow's result, and the run's exit decisions. The glue between the two halves
//! (a cancel's doubts before its event, the flow's end with the steps it left running, an
//! effect's outcome placed after what is already being written) is here and nowhere else.
//!
//! It does no I/O: it never awaits, spawns, reads a clock or touches the store. The driver
//! (`driver/`) polls the flow, runs effects, starts children, arms deadlines, writes appends
//! and sends answers, as the [`Ready`] says, and feeds back what came of them as [`Input`]s.

mod message;
#[cfg(test)]
mod model;
mod ready;

use crate::event::Event;
use crate::fold::ExecutionState;
use crate::hash::IdKey;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::ctx::{ChildStart, FlowCtx};
use crate::runtime::effect::EffectOutcome;
use crate::runtime::errors::{DriveError, SHUT_DOWN};
use crate::runtime::flow::FlowError;
use crate::runtime::history::Attempted;
use crate::runtime::machine::{self, CutOff, Dispatch, Held, QUEUED_DISPATCHES, QUEUED_EVENTS};
use crate::runtime::mailbox::{Answer, DriverMsg, Reply, failed_answer};
use crate::store::AppendError;

pub(crate) use ready::{Action, Next, Ready, Released};

/// The write side over the driver's replies, effects and children.
type Write = machine::Machine<Reply, Dispatch, ChildStart>;

impl Held for Dispatch {
    fn step_id(&self) -> &str {
        &self.call.step_id
    }
    fn durable_before(&self) -> bool {
        self.durable_before
    }
}

/// Everything that happens to an execution, as its driver reports it.
pub(crate) enum Input {
    /// The flow was polled: still pending, returned, or panicked (with the panic's text).
    Polled(Polled),
    /// The flow's waker fired.
    Woken,
    /// The flow stayed asleep through the end of the driver's turn, everything settled: it
    /// may park now.
    Parking,
    /// A message from the runtime: a resume, a verdict, a cancel, a deadline, a child's end.
    Message(DriverMsg),
    /// An effect came back with its outcome.
    EffectDone(IdKey, EffectOutcome),
    /// An effect was not run: this worker does not hold the execution's lease (or could not
    /// find out), with why.
    NotHeld(IdKey, String),
    /// The append in flight is durable; the log's head is now this.
    Appended(u64),
    /// The append in flight failed.
    AppendFailed(AppendError),
    /// The runtime shuts down and no append is in flight.
    Stop,
    /// The runtime is gone: nothing can be answered any more.
    Gone,
    /// The flow rests for good, not returned (a replay that reached the end of the log):
    /// recorded commands it did not issue again are a divergence.
    Rest,
}

/// What came of polling the flow.
pub(crate) enum Polled {
    Pending,
    Returned(Result<Payload, FlowError>),
    Panicked(FlowError),
}

/// One execution's machine: see the module's documentation.
pub(crate) struct Execution {
    id: ExecutionId,
    ctx: FlowCtx,
    write: Write,
    /// A whole-log replay (`runtime/replay.rs`): nothing is ever written, and the flow's end
    /// is compared with the log's by the replay, not recorded.
    replay: bool,
    /// Messages that arrived while the flow replayed its history: the gate or step they name
    /// may not be open yet. Handled once the replay has caught up.
    deferred: Vec<DriverMsg>,
    flow_result: Option<Result<Payload, FlowError>>,
    /// The flow has no future left to poll (it returned, panicked, or never started).
    flow_gone: bool,
    poll_flow: bool,
    /// Effects handed to the driver that have not come back.
    running: usize,
    /// The flow stayed asleep with everything settled (`Input::Parking`).
    parking: bool,
    /// How the run ends, once that is decided.
    end: Option<Next>,
    /// Kept for their capacity: the flow's events and effects are swapped out of its side
    /// each turn (`FlowState::swap_queued`).
    issued_events: Vec<Event>,
    issued_dispatches: Vec<Dispatch>,
    /// What the next [`Execution::ready`] hands out, filled as inputs come.
    out: Ready,
    /// No process runs the execution's flow or effects: an operator's offline write
    /// (`runtime/offline.rs`).
    offline: bool,
}

impl Execution {
    /// A new execution: `first` (its `EXECUTION_STARTED`) is its first event, and `reply` (the
    /// start's) waits for it; `claimed` when the store claimed its id for this run.
    pub(crate) fn new_execution(ctx: FlowCtx, first: Event, reply: Reply, claimed: bool) -> Self {
        ctx.state().fold_issued(&first);
        let write = Write::new_execution(first, reply, claimed);
        Self::with(ctx, write)
    }

    /// An execution whose log exists (the flow's side holds its fold); `hold_effects` on a
    /// store with leases, where the log may be another worker's until this run's first append.
    pub(crate) fn existing(ctx: FlowCtx, hold_effects: bool) -> Self {
        let mut write = Write::new(ctx.state().fold().next_seq());
        if hold_effects {
            write.hold_effects_until_appended();
        }
        Self::with(ctx, write)
    }

    fn with(ctx: FlowCtx, write: Write) -> Self {
        Self {
            id: ctx.execution_id().clone(),
            ctx,
            write,
            deferred: Vec::new(),
            flow_result: None,
            flow_gone: false,
            poll_flow: true,
            running: 0,
            parking: false,
            end: None,
            issued_events: Vec::with_capacity(QUEUED_EVENTS),
            issued_dispatches: Vec::with_capacity(QUEUED_DISPATCHES),
            out: Ready::default(),
            offline: false,
            replay: false,
        }
    }

    /// A whole-log replay of `ctx`'s history (`Replayer`): the flow is polled and stepped as a
    /// live run would, nothing it issues past the log's end is written, and its end is the
    /// replay's to compare.
    pub(crate) fn replaying(ctx: FlowCtx) -> Self {
        ctx.state().watch_live();
        let mut execution = Self::existing(ctx, false);
        execution.replay = true;
        execution
    }

    /// The first command the flow issued past the end of its history, in words (a replay).
    pub(crate) fn first_live(&mut self) -> Option<String> {
        self.ctx.state().first_live()
    }

    /// An execution no process runs, its flow's side taken up from its log
    /// (`FlowState::take_up_offline`): what an operator's offline write steps. There is no flow
    /// to poll and no effect runs; a step in flight is one whose process stopped.
    pub(crate) fn offline(ctx: FlowCtx) -> Self {
        let mut execution = Self::existing(ctx, false);
        execution.offline = true;
        execution.flow_gone = true;
        execution
    }

    /// Something happened to the execution.
    pub(crate) fn step(&mut self, input: Input) {
        match input {
            Input::Polled(polled) => self.polled(polled),
            Input::Woken => self.poll_flow = true,
            Input::Parking => self.parking = true,
            Input::Message(message) => self.message(message),
            Input::EffectDone(step_id, outcome) => self.effect_done(&step_id, outcome),
            Input::NotHeld(step_id, detail) => {
                self.running = self.running.saturating_sub(1);
                self.fail(DriveError::LeaseNotHeld {
                    execution: self.id.clone(),
                    step_id: step_id.as_str().to_owned(),
                    detail,
                });
            }
            Input::Appended(head) => self.appended(head),
            Input::AppendFailed(error) => self.append_failed(error),
            Input::Stop => self.stop(),
            Input::Gone => self.end_with(Next::Gone),
            Input::Rest => self.ctx.state().check_end(Attempted::Wait),
        }
    }

    /// The execution's state (the fold of the durable log and of every event issued since).
    pub(crate) fn fold(&self) -> ExecutionState {
        self.ctx.state().fold().clone()
    }

    /// The execution's state, taken out: the run is over.
    pub(crate) fn take_fold(&mut self) -> ExecutionState {
        self.ctx.state().take_fold()
    }

    fn polled(&mut self, polled: Polled) {
        match polled {
            Polled::Pending => {}
            Polled::Returned(result) => {
                self.ctx.state().check_end(Attempted::Complete);
                self.flow_result = Some(result);
                self.flow_gone = true;
            }
            Polled::Panicked(error) => {
                self.flow_result = Some(Err(error));
                self.flow_gone = true;
            }
        }
    }

    /// Whether the flow is to be polled now, before the next [`Execution::ready`] (then
    /// reported with `Input::Polled`). Asking says yes once.
    pub(crate) fn poll_now(&mut self) -> bool {
        let poll = self.wants_poll();
        if poll {
            self.poll_flow = false;
        }
        poll
    }

    fn wants_poll(&self) -> bool {
        self.poll_flow && !self.flow_gone && !self.write.ended()
    }

    fn effect_done(&mut self, step_id: &IdKey, outcome: EffectOutcome) {
        self.running = self.running.saturating_sub(1);
        if self.write.ended() {
            return;
        }
        // Its outcome may replace its STEP_STARTED only where that has not been handed to an
        // append yet.
        let unsent = self.write.unsent();
        self.ctx
            .state()
            .effect_done(step_id.as_str(), outcome, unsent);
        self.poll_flow = true;
    }

    /// The flow returned: the non-idempotent steps it left running are recorded in doubt
    /// (K9), then its terminal event; the effects still running are dropped.
    fn end_if_returned(&mut self) {
        if self.write.ended() || self.replay {
            return;
        }
        let Some(result) = self.flow_result.take() else {
            return;
        };
        let terminal = machine::terminal(result);
        let running = self.running > 0;
        let write = &self.write;
        let mut state = self.ctx.state();
        let doubts = state.doubts_cut_off(CutOff::FlowReturned, |step_id| {
            running && write.dispatched(step_id)
        });
        state.fold_issued(&terminal);
        drop(state);
        self.write.ended_with(doubts, terminal);
        self.drop_effects();
    }

    /// The execution ended: the effects still running are dropped (their outcomes would
    /// record nothing).
    fn drop_effects(&mut self) {
        if self.running > 0 {
            self.out.drop_effects = true;
            self.running = 0;
        }
    }

    /// The run fails: every reply waiting is failed, every deferred message refused (by
    /// [`Execution::ready`]).
    fn fail(&mut self, error: DriveError) {
        if self.end.is_none() {
            self.end = Some(Next::Fail(Box::new(error)));
        }
    }

    fn end_with(&mut self, next: Next) {
        if self.end.is_none() {
            self.end = Some(next);
        }
    }

    fn appended(&mut self, head: u64) {
        let durable = self.write.appended(head);
        self.out
            .answer_all(durable.replies.into_iter().map(Answer::Ok));
        self.running += durable.ready.run.len();
        self.out.run.extend(durable.ready.run);
        self.out.start_children(durable.ready.children);
    }

    fn append_failed(&mut self, error: AppendError) {
        match error {
            AppendError::Conflict { actual_seq, .. } if self.write.durable_head() == 0 => {
                // A new execution whose id is taken: the caller's mistake, not a failure of
                // the execution that owns the id.
                tracing::debug!(actual_seq, "start refused: the execution exists");
                let replies = self.write.take_all_replies();
                self.out.answer_all(replies.into_iter().map(Answer::Exists));
                self.end_with(Next::Unknown);
            }
            AppendError::Conflict { actual_seq, .. } => {
                // Another writer appended first: nothing of this batch is in the log, and the
                // log, not this run, says where the execution stands. The batch's callers are
                // told so; what this run had not handled yet goes to the next driver.
                tracing::info!(
                    actual_seq,
                    "the log moved under this run: another writer appended first"
                );
                let replies = self.write.take_all_replies();
                self.out
                    .answer_all(replies.into_iter().map(Answer::LogMoved));
                self.out.resend_all(self.deferred.drain(..));
                self.end_with(Next::Moved);
            }
            source => self.fail(DriveError::Append {
                execution: self.id.clone(),
                source,
            }),
        }
    }

    /// A shutdown: what is queued is not written (`recover` finds the log as after a crash);
    /// the append in flight, if any, has come back.
    fn stop(&mut self) {
        let replies = self.write.take_queued_replies();
        self.out.answer_all(
            replies
                .into_iter()
                .map(|reply| Answer::Failed(reply, SHUT_DOWN.into())),
        );
        self.refuse_deferred(SHUT_DOWN);
        let settled = self.write.settled();
        self.end_with(Next::Stopped { settled });
    }

    /// Refuses the messages deferred during replay: the run is over.
    fn refuse_deferred(&mut self, detail: &str) {
        for message in std::mem::take(&mut self.deferred) {
            if let DriverMsg::Deadline {
                gate_id,
                deadline_ms,
            } = &message
            {
                self.out.disarm((gate_id.clone(), *deadline_ms));
            }
            if let Some(answer) = failed_answer(&self.id, message, detail) {
                self.out.answer(answer);
            }
        }
    }
}
