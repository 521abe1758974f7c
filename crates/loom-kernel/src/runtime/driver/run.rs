//! The driver's loop (`drive`): one [`Run`] per driver task, each turn carrying out what the
//! machine and the flow's side decided (effects, children, deadlines, an append, replies),
//! then waiting for the world (an append, an effect, a message, the flow's waker, a shutdown).
//! The decisions are the machine's (`runtime/machine/`); this file does the I/O around them.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;

use super::{
    Append, DriveError, DriverMsg, DriverReceiver, Exit, FlowWaker, Machine, NewExecution, Ran,
    Reply, durable_state, flow_panicked, handle, invoke, kept, load, publish, refuse_ended,
    refuse_failed, start_child,
};
use crate::event::{Event, ExecutionStarted};
use crate::fold::ExecutionState;
use crate::hash::IdKey;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::child_runs;
use crate::runtime::contain::contain;
use crate::runtime::ctx::{ChildStart, FlowCtx};
use crate::runtime::deadlines;
use crate::runtime::effect::EffectOutcome;
use crate::runtime::errors::{SHUT_DOWN, StartError};
use crate::runtime::flow::FlowError;
use crate::runtime::history::{Attempted, History};
use crate::runtime::keep;
use crate::runtime::machine::{self, Admit, CutOff, Dispatch, QUEUED_DISPATCHES, QUEUED_EVENTS};
use crate::runtime::slots::Inner;
use crate::store::{AppendError, EventStore, NewClaim};

/// Drives one execution until it ends, parks, or fails. Every message received is answered.
/// The loop around the machine: each turn polls the flow, carries out what it and the machine
/// decided (deadlines, effects, children, an append, replies), then waits for the world.
pub(crate) async fn drive<S: EventStore>(
    inner: Arc<Inner<S>>,
    execution: ExecutionId,
    messages: &mut DriverReceiver,
    new: Option<NewExecution>,
) -> Result<Exit, DriveError> {
    let mut run = match Run::open(inner, execution, messages, new).await? {
        Ok(run) => run,
        Err(exit) => return Ok(exit),
    };
    let mut stop = run.inner.stop.subscribe();
    loop {
        // A shutdown: once no append is in flight, stop; what is not durable is left for
        // `recover`, as after a crash.
        if run.appending.is_none() && *stop.borrow_and_update() {
            return Ok(run.stopped().await);
        }
        run.poll_flow_once();
        run.carry_out_issued()?;
        run.handle_deferred();
        run.end_if_returned();
        if run.take_done_effects()? {
            continue;
        }
        run.start_append();
        if run.machine.settled() {
            match run.settled(messages).await? {
                Settled::Exit(exit) => return Ok(exit),
                Settled::Again => continue,
                Settled::Wait => {}
            }
        }
        if let Some(exit) = run.wait(messages, &mut stop).await? {
            return Ok(exit);
        }
    }
}

type Effects = FuturesUnordered<BoxFuture<'static, (IdKey, Ran)>>;

/// One driver's run of an execution: the flow, its side of the machine (in `ctx`), the write
/// side, and what is in flight (effects, the append, messages deferred during replay).
struct Run<S> {
    inner: Arc<Inner<S>>,
    execution: ExecutionId,
    started: ExecutionStarted,
    ctx: FlowCtx,
    machine: Machine,
    flow_future: Option<keep::FlowFuture>,
    flow_result: Option<Result<Payload, FlowError>>,
    flow_waker: Arc<FlowWaker>,
    waker: Waker,
    running: Effects,
    /// The flow's events and effects, swapped out of its side each turn and emptied (kept for
    /// their capacity: `FlowState::swap_queued`).
    issued_events: Vec<Event>,
    issued_dispatches: Vec<Dispatch>,
    /// The append in flight; the machine keeps the replies that wait for it.
    appending: Option<Append>,
    /// The store's claim of a new execution's id, until its first append takes it.
    claim: Option<NewClaim>,
    poll_flow: bool,
    /// Resumes and verdicts that arrived while the flow was still replaying its history: the
    /// gate or step they name may not be open yet. Handled once the replay has caught up.
    deferred: Vec<DriverMsg>,
}

/// What a turn does once the write side is settled.
enum Settled {
    /// The run is over.
    Exit(Exit),
    /// The flow woke while parking was decided: poll it again.
    Again,
    /// Wait for the world.
    Wait,
}

impl<S: EventStore> Run<S> {
    /// Sets up the run: a kept parked flow goes on from where it parked, a new execution starts
    /// from its `EXECUTION_STARTED`, an existing one from the replay of its log.
    async fn open(
        inner: Arc<Inner<S>>,
        execution: ExecutionId,
        messages: &mut DriverReceiver,
        new: Option<NewExecution>,
    ) -> Result<Result<Self, Exit>, DriveError> {
        let mut first: Option<(Event, Reply)> = None;
        // A flow its last driver kept parked in memory goes on from there, with no replay.
        let mut kept = match &new {
            None => kept::take(&inner, &execution).await,
            Some(_) => None,
        };
        // The fold of what is durable: the flow's side goes on from it (a kept flow's state
        // holds its own).
        let (started, history, folded) = match new {
            _ if let Some(kept) = kept.as_mut() => keep::resumed(kept),
            Some(NewExecution { started, reply }) => {
                first = Some((
                    Event::ExecutionStarted(started.clone()),
                    Reply::Start(reply),
                ));
                (started, History::default(), ExecutionState::new())
            }
            None => match load(&inner, &execution, messages).await? {
                Ok(loaded) => loaded,
                Err(exit) => return Ok(Err(exit)),
            },
        };
        let flow = inner
            .flows
            .get(&(started.flow.clone(), started.flow_version))
            .cloned()
            .ok_or_else(|| DriveError::UnknownFlow {
                execution: execution.clone(),
                flow: started.flow.clone(),
                version: started.flow_version,
            })?;
        // The flow's side keeps the execution's one state: the fold of the durable log and of
        // every event issued since, which `wait` gets once they are durable.
        let ctx = match kept.as_ref() {
            Some(kept) => kept.ctx.clone(),
            None => FlowCtx::new(
                execution.clone(),
                Arc::clone(&inner.effects),
                Arc::clone(&inner.classification),
                Arc::clone(&inner.timers.clock),
                &started,
                history,
                folded,
            ),
        };
        if let Some((event, _)) = &first {
            // A new execution's log is empty: its start, queued below, is its first event.
            ctx.state().fold_issued(event);
        }
        // A new execution's id, claimed in the store's memory, is this run's: its idempotent
        // effects need not wait for its start to be durable (a store that cannot claim, or an
        // id another start holds, leaves every effect held until then).
        let claim = match &first {
            Some(_) => inner
                .store
                .claim_new(&execution)
                .await
                .unwrap_or_else(|error| {
                    tracing::debug!(%error, "the store could not claim the new execution's id");
                    None
                }),
            None => None,
        };
        let machine = match first {
            Some((event, reply)) => Machine::new_execution(event, reply, claim.is_some()),
            None => {
                let mut machine = Machine::new(ctx.state().fold().next_seq());
                // Several workers may open the same parked execution at once (each resuming
                // its gate, firing its deadline): the one whose append lands holds the lease
                // and runs the effects; the others run nothing.
                if inner.store.has_leases() {
                    machine.hold_effects_until_appended();
                }
                machine
            }
        };
        let mut flow_result = None;
        let flow_future = match contain(|| keep::run_or_resume(&mut kept, &flow, &ctx, &started)) {
            Ok(running) => Some(running),
            Err(panic) => {
                flow_result = Some(Err(flow_panicked(&panic)));
                None
            }
        };
        let flow_waker = kept
            .take()
            .map_or_else(|| Arc::new(FlowWaker::new()), |kept| kept.waker);
        let waker = Waker::from(Arc::clone(&flow_waker));
        Ok(Ok(Self {
            inner,
            execution,
            started,
            ctx,
            machine,
            flow_future,
            flow_result,
            flow_waker,
            waker,
            running: FuturesUnordered::new(),
            issued_events: Vec::with_capacity(QUEUED_EVENTS),
            issued_dispatches: Vec::with_capacity(QUEUED_DISPATCHES),
            appending: None,
            claim,
            poll_flow: true,
            deferred: Vec::new(),
        }))
    }

    #[inline]
    /// Effects that are already done go back to the flow before anything is appended, so a
    /// quick effect and what the flow does next share one append; true when the flow is to be
    /// polled again first.
    fn take_done_effects(&mut self) -> Result<bool, DriveError> {
        if self.machine.ended() {
            return Ok(false);
        }
        while let Some(Some((step_id, ran))) = self.running.next().now_or_never() {
            self.effect_done(step_id, ran)?;
        }
        Ok(self.poll_flow)
    }

    fn fail_all(&self, replies: Vec<Reply>, detail: &str) {
        for reply in replies {
            reply.fail(&self.execution, detail);
        }
    }

    /// Refuses what waits for this run with `detail`: messages deferred during replay.
    fn refuse_deferred(&mut self, detail: &str) {
        for message in self.deferred.drain(..) {
            self.inner.timers.forget(&self.execution, &message);
            refuse_failed(&self.execution, message, detail);
        }
    }

    /// The run stops at a shutdown, with the fold of what is durable.
    async fn stopped(&mut self) -> Exit {
        let replies = self.machine.take_queued_replies();
        self.fail_all(replies, SHUT_DOWN);
        self.refuse_deferred(SHUT_DOWN);
        let state = if self.machine.settled() {
            self.ctx.state().take_fold()
        } else {
            durable_state(&self.inner, &self.execution, &self.ctx).await
        };
        Exit::Stopped(Box::new(state))
    }

    #[inline]
    /// Polls the flow if it woke (or was handed something) and has not returned.
    fn poll_flow_once(&mut self) {
        if !self.poll_flow || self.flow_result.is_some() || self.machine.ended() {
            return;
        }
        let Some(running) = self.flow_future.as_mut() else {
            return;
        };
        self.poll_flow = false;
        self.flow_waker.take_woken();
        let waker = &self.waker;
        match contain(|| running.as_mut().poll(&mut Context::from_waker(waker))) {
            Ok(Poll::Ready(result)) => {
                self.ctx.state().check_end(Attempted::Complete);
                self.flow_result = Some(result);
            }
            Ok(Poll::Pending) => {}
            Err(panic) => {
                tracing::warn!("the flow panicked; its execution fails");
                self.flow_result = Some(Err(flow_panicked(&panic)));
            }
        }
        if self.flow_result.is_some() {
            // Its commands' futures go with it; nothing polls it again.
            self.flow_future = None;
        }
    }

    #[inline]
    /// Takes what the flow issued and carries it out: deadlines armed and disarmed, events to
    /// the write side, effects and children it says may start. A divergence ends the run.
    fn carry_out_issued(&mut self) -> Result<(), DriveError> {
        let mut state = self.ctx.state();
        if let Some(divergence) = state.divergence().cloned() {
            drop(state);
            let error = DriveError::NonDeterminism {
                execution: self.execution.clone(),
                source: divergence,
            };
            let replies = self.machine.take_all_replies();
            self.fail_all(replies, &error.to_string());
            self.refuse_deferred(&error.to_string());
            return Err(error);
        }
        state.swap_queued(&mut self.issued_events, &mut self.issued_dispatches);
        let (arm, disarm) = state.take_deadlines();
        let child_starts = state.take_child_starts();
        drop(state);
        for (gate_id, deadline_ms) in arm {
            deadlines::arm_deadline(&self.inner, &self.execution, &gate_id, deadline_ms);
        }
        for (gate_id, deadline_ms) in disarm {
            self.inner
                .timers
                .disarm(&self.execution, &gate_id, deadline_ms);
        }
        // A held effect may start once everything queued so far is durable. Until the
        // execution's EXECUTION_STARTED is durable, or its id claimed in the store's memory,
        // every effect is held: a start whose id turns out to be taken (by another runtime on
        // the store) must run nothing.
        let children = self.machine.issued_in_place(
            &mut self.issued_events,
            &mut self.issued_dispatches,
            child_starts,
        );
        let head = self.machine.durable_head();
        for dispatch in self.issued_dispatches.drain(..) {
            self.running.push(invoke(&self.inner, dispatch, head));
        }
        for start in children {
            start_child(&self.inner, &self.execution, start);
        }
        Ok(())
    }

    #[inline]
    /// Starts the effects and children the machine handed out.
    fn start(&mut self, ready: machine::Ready<Dispatch, ChildStart>) {
        let head = self.machine.durable_head();
        for dispatch in ready.run {
            self.running.push(invoke(&self.inner, dispatch, head));
        }
        for start in ready.children {
            start_child(&self.inner, &self.execution, start);
        }
    }

    #[inline]
    /// Messages deferred during replay, once the replay has caught up (or the run ended).
    fn handle_deferred(&mut self) {
        if self.deferred.is_empty() || (!self.machine.ended() && self.ctx.state().replaying()) {
            return;
        }
        for message in std::mem::take(&mut self.deferred) {
            if self.machine.ended() {
                self.refuse_as_ended(message);
            } else {
                self.apply(message);
            }
        }
        self.poll_flow = true;
    }

    #[inline]
    /// The flow returned: the non-idempotent steps it left running are recorded in doubt
    /// (K9), its terminal event is issued, and its effects are dropped.
    fn end_if_returned(&mut self) {
        if self.machine.ended() {
            return;
        }
        if let Some(result) = self.flow_result.take() {
            let terminal = machine::terminal(result);
            let machine = &self.machine;
            let mut state = self.ctx.state();
            let doubts = state.doubts_cut_off(CutOff::FlowReturned, |step_id| {
                !self.running.is_empty() && machine.dispatched(step_id)
            });
            state.fold_issued(&terminal);
            drop(state);
            self.machine.ended_with(doubts, terminal);
            self.running = FuturesUnordered::new();
        }
    }

    #[inline]
    /// A dispatch came back: its outcome goes to the flow's side; a step this worker did not
    /// run for want of the lease ends the run, recording nothing.
    fn effect_done(&mut self, step_id: IdKey, ran: Ran) -> Result<(), DriveError> {
        let outcome: EffectOutcome = match ran {
            Ran::Outcome(outcome) => outcome,
            Ran::NotHeld(detail) => {
                let error = DriveError::LeaseNotHeld {
                    execution: self.execution.clone(),
                    step_id: step_id.as_str().to_owned(),
                    detail,
                };
                let replies = self.machine.take_all_replies();
                self.fail_all(replies, &error.to_string());
                self.refuse_deferred(&error.to_string());
                return Err(error);
            }
        };
        let unsent = self.machine.unsent();
        self.ctx
            .state()
            .effect_done(step_id.as_str(), outcome, unsent);
        self.poll_flow = true;
        Ok(())
    }

    #[inline]
    /// Hands what is queued to the store, unless an append is in flight.
    fn start_append(&mut self) {
        if let Some(machine::Batch { expected, events }) = self.machine.take_append() {
            let store = Arc::clone(&self.inner.store);
            let id = self.execution.clone();
            let claim = self.claim.take().filter(|_| expected == 0);
            self.appending = Some(Box::pin(async move {
                let head = match &claim {
                    Some(claim) => store.append_claimed(claim, &events).await?,
                    None => store.append(&id, expected, &events).await?,
                };
                // The claim is given back (if the store still holds it) once the append is over.
                drop(claim);
                Ok((head, events))
            }));
        }
    }

    /// Everything issued is durable: replies go out, and an ended execution exits, a flow
    /// that waits only for messages parks.
    async fn settled(&mut self, messages: &mut DriverReceiver) -> Result<Settled, DriveError> {
        for reply in self.machine.take_settled_replies() {
            reply.ok();
        }
        if self.machine.ended() {
            if self.inner.try_release(&self.execution, messages) {
                // Its gates will never be resumed: their deadlines need not fire.
                for (gate_id, deadline_ms) in self.ctx.state().pending_deadlines() {
                    self.inner
                        .timers
                        .disarm(&self.execution, &gate_id, deadline_ms);
                }
                // Nor will its children's ends: they are cancelled (LD-015).
                let orphans = self.ctx.state().pending_children();
                child_runs::cancel_orphans(&self.inner, &self.execution, orphans);
                return Ok(Settled::Exit(Exit::Ended(Box::new(
                    self.ctx.state().take_fold(),
                ))));
            }
            return Ok(Settled::Wait);
        }
        let ctx = &self.ctx;
        if !self.machine.may_park(!self.running.is_empty(), || {
            ctx.state().waits_for_messages()
        }) {
            return Ok(Settled::Wait);
        }
        // Only a flow that waits at a gate or on a step in doubt may park; one that awaits
        // anything else (a timer, a channel, a yield) is polled again when it wakes. A wake
        // may be deferred to the end of this task's turn (tokio does that for yields), so the
        // turn ends once before parking is decided.
        tokio::task::yield_now().await;
        if self.flow_waker.take_woken() {
            self.poll_flow = true;
            return Ok(Settled::Again);
        }
        // Parking with recorded commands left unmatched means the flow now waits where it
        // used to go on.
        let divergence = {
            let mut state = self.ctx.state();
            state.check_end(Attempted::Wait);
            state.divergence().cloned()
        };
        if let Some(divergence) = divergence {
            return Err(DriveError::NonDeterminism {
                execution: self.execution.clone(),
                source: divergence,
            });
        }
        Ok(self.park(messages).map_or(Settled::Wait, Settled::Exit))
    }

    /// Parks the flow, kept in memory for the next driver (or handed to a caller that waits);
    /// `None` when a message came in the meantime.
    fn park(&mut self, messages: &mut DriverReceiver) -> Option<Exit> {
        let mut moved = false;
        let mut copy = kept::copy_for_waiter(&self.inner, &self.execution, &self.ctx);
        let mut waited_for = None;
        let ctx = &self.ctx;
        let flow_future = &mut self.flow_future;
        let keep = |waited: bool| {
            let flow = flow_future.take()?;
            moved = !waited;
            // The kept flow's state holds the fold; a caller that waits gets a copy.
            if waited {
                waited_for = Some(copy.take().unwrap_or_else(|| ctx.state().fold().clone()));
            }
            Some(keep::Kept {
                started: self.started.clone(),
                ctx: ctx.clone(),
                flow: Some(flow),
                waker: Arc::clone(&self.flow_waker),
            })
        };
        if !kept::release(&self.inner, &self.execution, messages, keep) {
            return None;
        }
        Some(if moved {
            Exit::Kept
        } else {
            let state = waited_for.unwrap_or_else(|| self.ctx.state().take_fold());
            Exit::Parked(Box::new(state))
        })
    }

    /// Waits for the world: the append in flight, an effect, a message, the flow's waker or a
    /// shutdown; `Some` when the run is over.
    async fn wait(
        &mut self,
        messages: &mut DriverReceiver,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Option<Exit>, DriveError> {
        let idle = self.machine.idle();
        let appending = &mut self.appending;
        let running = &mut self.running;
        let appended = async {
            match appending.as_mut() {
                Some(append) => append.await,
                None => std::future::pending().await,
            }
        };
        let effect_done = async {
            if running.is_empty() {
                std::future::pending().await
            } else {
                running.next().await
            }
        };
        tokio::select! {
            result = appended => {
                self.appending = None;
                return self.appended(result);
            }
            Some((step_id, ran)) = effect_done => self.effect_done(step_id, ran)?,
            message = messages.recv() => {
                let Some(message) = message else {
                    // The runtime is gone; nothing can be answered any more.
                    return Ok(Some(Exit::Parked(Box::new(self.ctx.state().take_fold()))));
                };
                self.message(*message);
            }
            () = self.flow_waker.notify.notified() => self.poll_flow = true,
            _ = stop.wait_for(|stopping| *stopping), if idle => {}
        }
        Ok(None)
    }

    /// An append came back: durable (replies, effects and children it held go out) or failed.
    fn appended(
        &mut self,
        result: Result<(u64, Vec<Event>), AppendError>,
    ) -> Result<Option<Exit>, DriveError> {
        match result {
            Ok((head, events)) => {
                self.inner.steps.durable(&events);
                publish(
                    &self.inner,
                    &self.execution,
                    self.machine.durable_head(),
                    events,
                );
                let durable = self.machine.appended(head);
                for reply in durable.replies {
                    reply.ok();
                }
                self.start(durable.ready);
                Ok(None)
            }
            Err(AppendError::Conflict { actual_seq, .. }) if self.machine.durable_head() == 0 => {
                // A new execution whose id is taken: the caller's mistake, not a failure of the
                // execution that owns the id.
                for reply in self.machine.take_all_replies() {
                    match reply {
                        Reply::Start(reply) => {
                            drop(reply.send(Err(StartError::AlreadyExists(self.execution.clone()))))
                        }
                        other => other.fail(&self.execution, "the execution already exists"),
                    }
                }
                tracing::debug!(actual_seq, "start refused: the execution exists");
                Ok(Some(Exit::Unknown))
            }
            Err(AppendError::Conflict { actual_seq, .. }) => {
                // Another writer appended first: nothing of this batch is in the log, and the
                // log, not this run, says where the execution stands. The batch's callers are
                // told so; what this run had not handled yet goes to the next driver.
                for reply in self.machine.take_all_replies() {
                    reply.log_moved(&self.execution);
                }
                for message in std::mem::take(&mut self.deferred) {
                    self.inner.send(&self.execution, message);
                }
                tracing::info!(
                    actual_seq,
                    "the log moved under this run: another writer appended first"
                );
                Ok(Some(Exit::Moved))
            }
            Err(err) => {
                let error = DriveError::Append {
                    execution: self.execution.clone(),
                    source: err,
                };
                let replies = self.machine.take_all_replies();
                self.fail_all(replies, &error.to_string());
                Err(error)
            }
        }
    }

    /// A message: refused once the execution ended, deferred while the flow replays, handled
    /// otherwise.
    fn message(&mut self, message: DriverMsg) {
        let cancel = matches!(message, DriverMsg::Cancel { .. });
        // (The guard of the flow's state is dropped before the branches lock it.)
        let replaying = self.ctx.state().replaying();
        match self.machine.admit(cancel, replaying) {
            Admit::Refuse => {
                self.refuse_as_ended(message);
                return;
            }
            Admit::Defer => {
                self.deferred.push(message);
                return;
            }
            Admit::Handle => {}
        }
        self.apply(message);
        if self.machine.ended() {
            self.running = FuturesUnordered::new();
        }
        self.poll_flow = true;
    }

    /// A message for an execution that has ended: refused (a resume is told if its gate timed
    /// out first).
    fn refuse_as_ended(&self, message: DriverMsg) {
        self.inner.timers.forget(&self.execution, &message);
        let state = self.ctx.state();
        let timed_out = state.timed_out_gates();
        refuse_ended(
            &self.execution,
            message,
            &timed_out,
            state.fold().steps_in_doubt(),
        );
    }

    /// A message handled now: the flow's side and the machine take it.
    fn apply(&mut self, message: DriverMsg) {
        child_runs::handling(&self.inner, &message);
        handle(
            &self.ctx,
            &self.inner.timers,
            &self.execution,
            message,
            &mut self.machine,
        );
    }
}
