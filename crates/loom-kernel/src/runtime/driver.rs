//! The driver: one task per active execution, the only writer of its log in this process.
//!
//! It replays the flow against the recorded history, then keeps polling it live:
//! 1. poll the flow; the commands it issued queue events and effects;
//! 2. start idempotent effects at once, and hold non-idempotent ones until their
//!    `STEP_STARTED` is durable (K9);
//! 3. append what is queued, one append in flight at a time, so everything that piles up while
//!    the disk is busy goes out in the next append;
//! 4. wait for an append, an effect, a message (resume, verdict, cancel) or the flow's waker.
//!
//! Idempotent effects may run before the events that led to them are durable: after a crash
//! they are simply run again with the same idempotency key. Anything a caller or an operator
//! can observe (a resume accepted, a verdict, the end of the execution, parking) waits until
//! the events behind it are durable. See `docs/adr/0003-durability-barriers.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::envelope::EventEnvelope;
use crate::event::*;
use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::children;
use crate::runtime::codes;
use crate::runtime::contain::{contain, contain_future};
use crate::runtime::ctx::{ChildStart, FlowCtx};
use crate::runtime::effect::EffectOutcome;
use crate::runtime::flow::FlowError;
use crate::runtime::history::{Attempted, History, NonDeterminism};
use crate::runtime::keep;
use crate::runtime::machine::{self, Admit, Dispatch, GateMiss, Held, VerdictMiss};
use crate::runtime::slots::Inner;
use crate::runtime::timers::{self, Timers, is_timed_out_payload};

/// Gates (event type, correlation key) that their deadline closed.
pub(crate) type TimedOutGates = std::collections::BTreeSet<(String, String)>;
use crate::runtime::errors::{
    CancelError, DriverFailure, ResolveError, ResumeError, SHUT_DOWN, StartError,
};
use crate::store::{AppendError, EventStore, EventStoreExt, FoldStoredError};

/// What the runtime asks of an execution's driver.
pub(crate) enum DriverMsg {
    Resume {
        event_type: String,
        correlation_key: String,
        payload: Payload,
        reply: oneshot::Sender<Result<(), ResumeError>>,
    },
    Resolve {
        step_id: String,
        verdict: Verdict,
        operator: Option<String>,
        reply: oneshot::Sender<Result<(), ResolveError>>,
    },
    Cancel {
        reason: Option<String>,
        reply: oneshot::Sender<Result<(), CancelError>>,
    },
    /// The timer task: the deadline of `gate_id` has passed. Unanswered: a deadline whose gate
    /// no longer waits for it is ignored.
    Deadline { gate_id: String, deadline_ms: u64 },
    /// A child this execution waits for has ended; `payload` is its marker (ADR 0015).
    /// Unanswered: an end whose gate no longer waits is ignored.
    ChildEnded {
        child: ExecutionId,
        payload: Payload,
    },
}

/// Why a driver stopped without finishing its work.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DriveError {
    /// The replayed flow asked for something else than its log recorded.
    #[error("non-determinism in execution {execution}: {source}")]
    NonDeterminism {
        /// The execution concerned.
        execution: ExecutionId,
        /// The first difference, recorded against attempted.
        #[source]
        source: NonDeterminism,
    },
    /// The log names a flow version this runtime does not have.
    #[error("execution {execution} runs flow '{flow}' version {version}, which is not registered")]
    UnknownFlow {
        /// The execution concerned.
        execution: ExecutionId,
        /// The flow's name.
        flow: String,
        /// The flow's version.
        version: u32,
    },
    /// The log could not be read or folded.
    #[error("cannot read or fold execution {execution}: {detail}")]
    Log {
        /// The execution concerned.
        execution: ExecutionId,
        /// What went wrong, in words.
        detail: String,
    },
    /// An append failed.
    #[error("cannot append to execution {execution}: {source}")]
    Append {
        /// The execution concerned.
        execution: ExecutionId,
        /// The store's error.
        #[source]
        source: AppendError,
    },
    /// The driver itself panicked (a kernel bug: user code's panics are contained where they
    /// happen). What it had not recorded is left for `recover`.
    #[error("the driver of execution {execution} panicked: {detail}")]
    Panicked {
        /// The execution concerned.
        execution: ExecutionId,
        /// What went wrong, in words.
        detail: String,
    },
}

/// How a driver ended, with the execution's state as it left it.
pub(crate) enum Exit {
    /// The execution has ended (now or before).
    Ended(Box<ExecutionState>),
    /// The flow waits for resumes or verdicts only.
    Parked(Box<ExecutionState>),
    /// The log does not exist.
    Unknown,
    /// The runtime is shutting down: the driver stopped once nothing was being appended.
    Stopped(Box<ExecutionState>),
    /// The flow parked and was kept in memory with its state (`keep.rs`); no caller was
    /// waiting for the state.
    Kept,
}

/// Wakes the driver when something the flow awaits (other than a command) is ready, and
/// remembers that it did, so the driver never parks a flow that asked to be polled again.
pub(crate) struct FlowWaker {
    notify: Notify,
    woken: AtomicBool,
}

impl FlowWaker {
    pub(crate) fn new() -> Self {
        Self {
            notify: Notify::new(),
            woken: AtomicBool::new(false),
        }
    }

    /// Whether the flow was woken since the last call, which clears it (call before a poll).
    pub(crate) fn take_woken(&self) -> bool {
        self.woken.swap(false, Ordering::AcqRel)
    }
}

impl Wake for FlowWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.notify.notify_one();
    }
}

/// The flow's failure when it panicked.
pub(crate) fn flow_panicked(detail: &str) -> FlowError {
    FlowError::new(codes::FLOW_PANICKED, format!("the flow panicked: {detail}"))
}

enum Reply {
    Start(oneshot::Sender<Result<(), StartError>>),
    Resume(oneshot::Sender<Result<(), ResumeError>>),
    Resolve(oneshot::Sender<Result<(), ResolveError>>),
    Cancel(oneshot::Sender<Result<(), CancelError>>),
}

impl Reply {
    fn ok(self) {
        match self {
            Reply::Start(reply) => drop(reply.send(Ok(()))),
            Reply::Resume(reply) => drop(reply.send(Ok(()))),
            Reply::Resolve(reply) => drop(reply.send(Ok(()))),
            Reply::Cancel(reply) => drop(reply.send(Ok(()))),
        }
    }

    fn fail(self, execution: &ExecutionId, detail: &str) {
        fn send<E: DriverFailure>(
            reply: oneshot::Sender<Result<(), E>>,
            execution: &ExecutionId,
            detail: &str,
        ) {
            drop(reply.send(Err(E::driver(execution.clone(), detail.to_owned()))));
        }
        match self {
            Reply::Start(reply) => send(reply, execution, detail),
            Reply::Resume(reply) => send(reply, execution, detail),
            Reply::Resolve(reply) => send(reply, execution, detail),
            Reply::Cancel(reply) => send(reply, execution, detail),
        }
    }
}

type Append = BoxFuture<'static, Result<(u64, Vec<Event>), AppendError>>;

/// The machine's write side (`machine/mod.rs`), over the driver's replies, effects, children.
type Machine = machine::Machine<Reply, Dispatch, ChildStart>;

impl Held for Dispatch {
    fn step_id(&self) -> &str {
        &self.call.step_id
    }
    fn durable_before(&self) -> bool {
        self.durable_before
    }
}

/// Drives one execution until it ends, parks, or fails. Every message received is answered.
/// A new execution handed to its first driver: `EXECUTION_STARTED` goes out in the same
/// append as the flow's first commands, and `start` returns once that append is durable.
pub(crate) struct NewExecution {
    pub(crate) started: ExecutionStarted,
    pub(crate) reply: oneshot::Sender<Result<(), StartError>>,
}

type Loaded = (ExecutionStarted, History, ExecutionState);

/// The recorded log of an execution that already exists, or how the driver should exit.
async fn load<S: EventStore>(
    inner: &Inner<S>,
    execution: &ExecutionId,
    messages: &mut mpsc::UnboundedReceiver<DriverMsg>,
) -> Result<Result<Loaded, Exit>, DriveError> {
    let log = inner
        .store
        .read_all(execution)
        .await
        .map_err(|err| DriveError::Log {
            execution: execution.clone(),
            detail: err.to_string(),
        })?;
    if log.is_empty() {
        return Ok(Err(Exit::Unknown));
    }
    let state = ExecutionState::fold(&log).map_err(|err| DriveError::Log {
        execution: execution.clone(),
        detail: FoldStoredError::from(err).to_string(),
    })?;
    if state.status().is_terminal() {
        // A resume waiting for this driver is told if its gate timed out.
        if !messages.is_empty() {
            let timed_out = timed_out_gates(&log);
            while let Ok(message) = messages.try_recv() {
                forget_deadline(&inner.timers, execution, &message);
                refuse_ended(execution, message, &timed_out);
            }
        }
        return Ok(Err(Exit::Ended(Box::new(state))));
    }
    let Some(Event::ExecutionStarted(started)) = log.first().map(|e| &e.event) else {
        return Err(DriveError::Log {
            execution: execution.clone(),
            detail: "the first event is not EXECUTION_STARTED".into(),
        });
    };
    let started = started.clone();
    let history = History::from_events(log.into_iter().map(|e| (e.seq, e.event)));
    Ok(Ok((started, history, state)))
}

/// Drives one execution until it ends, parks, or fails. Every message received is answered.
pub(crate) async fn drive<S: EventStore>(
    inner: Arc<Inner<S>>,
    execution: ExecutionId,
    messages: &mut mpsc::UnboundedReceiver<DriverMsg>,
    new: Option<NewExecution>,
) -> Result<Exit, DriveError> {
    let mut first: Option<(Event, Reply)> = None;
    // A flow its last driver kept parked in memory goes on from there, with no replay.
    let mut kept = match &new {
        None => keep::take(&inner, &execution).await,
        Some(_) => None,
    };
    // The fold of what is durable: the flow's side goes on from it (a kept flow's state holds
    // its own).
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
            Err(exit) => return Ok(exit),
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
    let mut machine = match first {
        Some((event, reply)) => Machine::new_execution(event, reply),
        None => Machine::new(ctx.state().fold().next_seq()),
    };
    let mut flow_result: Option<Result<Payload, FlowError>> = None;
    let mut flow_future = match contain(|| keep::run_or_resume(&mut kept, &flow, &ctx, &started)) {
        Ok(running) => Some(running),
        Err(panic) => {
            flow_result = Some(Err(flow_panicked(&panic)));
            None
        }
    };
    let flow_waker = Arc::new(FlowWaker::new());
    let flow_waker = kept.take().map_or(flow_waker, |kept| kept.waker);
    let waker = Waker::from(Arc::clone(&flow_waker));

    let mut running: FuturesUnordered<BoxFuture<'static, (String, EffectOutcome)>> =
        FuturesUnordered::new();
    // The append in flight; the machine keeps the replies that wait for it.
    let mut appending: Option<Append> = None;
    let mut poll_flow = true;
    // Resumes and verdicts that arrived while the flow was still replaying its history: the
    // gate or step they name may not be open yet. Handled once the replay has caught up.
    let mut deferred: Vec<DriverMsg> = Vec::new();

    let fail_all = |replies: Vec<Reply>, detail: &str| {
        for reply in replies {
            reply.fail(&execution, detail);
        }
    };
    let mut stop = inner.stop.subscribe();

    loop {
        // A shutdown: once no append is in flight, stop; what is not durable is left for
        // `recover`, as after a crash.
        if appending.is_none() && *stop.borrow_and_update() {
            fail_all(machine.take_queued_replies(), SHUT_DOWN);
            for message in deferred.drain(..) {
                forget_deadline(&inner.timers, &execution, &message);
                refuse_failed(&execution, message, SHUT_DOWN);
            }
            let state = if machine.settled() {
                ctx.state().take_fold()
            } else {
                durable_state(&inner, &execution, &ctx).await
            };
            return Ok(Exit::Stopped(Box::new(state)));
        }
        if poll_flow
            && flow_result.is_none()
            && !machine.ended()
            && let Some(running) = flow_future.as_mut()
        {
            poll_flow = false;
            flow_waker.take_woken();
            match contain(|| running.as_mut().poll(&mut Context::from_waker(&waker))) {
                Ok(Poll::Ready(result)) => {
                    ctx.state().check_end(Attempted::Complete);
                    flow_result = Some(result);
                }
                Ok(Poll::Pending) => {}
                Err(panic) => {
                    tracing::warn!("the flow panicked; its execution fails");
                    flow_result = Some(Err(flow_panicked(&panic)));
                }
            }
            if flow_result.is_some() {
                // Its commands' futures go with it; nothing polls it again.
                flow_future = None;
            }
        }

        // Take what the flow queued; stop at the first sign of divergence.
        {
            let mut state = ctx.state();
            if let Some(divergence) = state.divergence().cloned() {
                drop(state);
                let error = DriveError::NonDeterminism {
                    execution: execution.clone(),
                    source: divergence,
                };
                fail_all(machine.take_all_replies(), &error.to_string());
                for message in deferred.drain(..) {
                    forget_deadline(&inner.timers, &execution, &message);
                    refuse_failed(&execution, message, &error.to_string());
                }
                return Err(error);
            }
            let (events, dispatches) = state.take_queued();
            let (arm, disarm) = state.take_deadlines();
            let child_starts = state.take_child_starts();
            drop(state);
            for (gate_id, deadline_ms) in arm {
                timers::arm_deadline(&inner, &execution, &gate_id, deadline_ms);
            }
            for (gate_id, deadline_ms) in disarm {
                inner.timers.disarm(&execution, &gate_id, deadline_ms);
            }
            // A held effect may start once everything queued so far is durable. Until the
            // execution's EXECUTION_STARTED is durable, every effect is held: a start whose id
            // turns out to be taken (by another runtime on the store) must run nothing.
            let ready = machine.issued(events, dispatches, child_starts);
            for dispatch in ready.run {
                running.push(invoke(dispatch));
            }
            for start in ready.children {
                start_child(&inner, &execution, start);
            }
        }

        if !deferred.is_empty() && (machine.ended() || !ctx.state().replaying()) {
            for message in std::mem::take(&mut deferred) {
                if machine.ended() {
                    forget_deadline(&inner.timers, &execution, &message);
                    let timed_out = ctx.state().timed_out_gates();
                    refuse_ended(&execution, message, &timed_out);
                    continue;
                }
                children::handling(&inner, &message);
                handle(&ctx, &inner.timers, &execution, message, &mut machine);
            }
            poll_flow = true;
        }

        if let Some(result) = flow_result.take()
            && !machine.ended()
        {
            let terminal = machine::terminal(result);
            ctx.state().fold_issued(&terminal);
            machine.ended_with(terminal);
            running = FuturesUnordered::new();
        }

        // Effects that are already done go back to the flow before anything is appended, so
        // a quick effect and what the flow does next share one append.
        if !machine.ended() {
            while let Some(Some((step_id, outcome))) = running.next().now_or_never() {
                let unsent = machine.unsent();
                ctx.state().effect_done(&step_id, outcome, unsent);
                poll_flow = true;
            }
            if poll_flow {
                continue;
            }
        }

        if let Some(machine::Batch { expected, events }) = machine.take_append() {
            let store = Arc::clone(&inner.store);
            let id = execution.clone();
            let append: Append = Box::pin(async move {
                let head = store.append(&id, expected, &events).await?;
                Ok((head, events))
            });
            appending = Some(append);
        }

        if machine.settled() {
            for reply in machine.take_settled_replies() {
                reply.ok();
            }
            if machine.ended() {
                if inner.try_release(&execution, messages) {
                    // Its gates will never be resumed: their deadlines need not fire.
                    for (gate_id, deadline_ms) in ctx.state().pending_deadlines() {
                        inner.timers.disarm(&execution, &gate_id, deadline_ms);
                    }
                    // Nor will its children's ends: they are cancelled (ADR 0015).
                    let orphans = ctx.state().pending_children();
                    children::cancel_orphans(&inner, &execution, orphans);
                    return Ok(Exit::Ended(Box::new(ctx.state().take_fold())));
                }
            } else if machine.may_park(!running.is_empty(), || ctx.state().waits_for_messages()) {
                // Only a flow that waits at a gate or on a step in doubt may park; one that
                // awaits anything else (a timer, a channel, a yield) is polled again when it
                // wakes. A wake may be deferred to the end of this task's turn (tokio does
                // that for yields), so the turn ends once before parking is decided.
                tokio::task::yield_now().await;
                if flow_waker.take_woken() {
                    poll_flow = true;
                    continue;
                }
                // Parking with recorded commands left unmatched means the flow now waits
                // where it used to go on.
                let divergence = {
                    let mut state = ctx.state();
                    state.check_end(Attempted::Wait);
                    state.divergence().cloned()
                };
                if let Some(divergence) = divergence {
                    return Err(DriveError::NonDeterminism {
                        execution: execution.clone(),
                        source: divergence,
                    });
                }
                let mut moved = false;
                let mut copy = keep::copy_for_waiter(&inner, &execution, &ctx);
                let mut waited_for = None;
                let keep = |waited: bool| {
                    let flow = flow_future.take()?;
                    moved = !waited;
                    // The kept flow's state holds the fold; a caller that waits gets a copy.
                    if waited {
                        waited_for =
                            Some(copy.take().unwrap_or_else(|| ctx.state().fold().clone()));
                    }
                    Some(keep::Kept {
                        started: started.clone(),
                        ctx: ctx.clone(),
                        flow: Some(flow),
                        waker: Arc::clone(&flow_waker),
                    })
                };
                if keep::release(&inner, &execution, messages, keep) {
                    return Ok(if moved {
                        Exit::Kept
                    } else {
                        let state = waited_for.unwrap_or_else(|| ctx.state().take_fold());
                        Exit::Parked(Box::new(state))
                    });
                }
            }
        }

        let idle = machine.idle();
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
                appending = None;
                match result {
                    Ok((head, events)) => {
                        publish(&inner, &execution, machine.durable_head(), events);
                        let durable = machine.appended(head);
                        for reply in durable.replies {
                            reply.ok();
                        }
                        for dispatch in durable.ready.run {
                            running.push(invoke(dispatch));
                        }
                        for start in durable.ready.children {
                            start_child(&inner, &execution, start);
                        }
                    }
                    Err(AppendError::Conflict { actual_seq, .. }) if machine.durable_head() == 0 => {
                        // A new execution whose id is taken: the caller's mistake, not a
                        // failure of the execution that owns the id.
                        for reply in machine.take_all_replies() {
                            match reply {
                                Reply::Start(reply) => drop(
                                    reply.send(Err(StartError::AlreadyExists(execution.clone()))),
                                ),
                                other => other.fail(&execution, "the execution already exists"),
                            }
                        }
                        tracing::debug!(actual_seq, "start refused: the execution exists");
                        return Ok(Exit::Unknown);
                    }
                    Err(err) => {
                        let error = DriveError::Append {
                            execution: execution.clone(),
                            source: err,
                        };
                        fail_all(machine.take_all_replies(), &error.to_string());
                        return Err(error);
                    }
                }
            }
            Some((step_id, outcome)) = effect_done => {
                let unsent = machine.unsent();
                ctx.state().effect_done(&step_id, outcome, unsent);
                poll_flow = true;
            }
            message = messages.recv() => {
                let Some(message) = message else {
                    // The runtime is gone; nothing can be answered any more.
                    return Ok(Exit::Parked(Box::new(ctx.state().take_fold())));
                };
                let cancel = matches!(message, DriverMsg::Cancel { .. });
                // (The guard of the flow's state is dropped before the branches lock it.)
                let replaying = ctx.state().replaying();
                match machine.admit(cancel, replaying) {
                    Admit::Refuse => {
                        forget_deadline(&inner.timers, &execution, &message);
                        let timed_out = ctx.state().timed_out_gates();
                        refuse_ended(&execution, message, &timed_out);
                        continue;
                    }
                    Admit::Defer => {
                        deferred.push(message);
                        continue;
                    }
                    Admit::Handle => {}
                }
                children::handling(&inner, &message);
                handle(&ctx, &inner.timers, &execution, message, &mut machine);
                if machine.ended() {
                    running = FuturesUnordered::new();
                }
                poll_flow = true;
            }
            () = flow_waker.notify.notified() => {
                poll_flow = true;
            }
            _ = stop.wait_for(|stopping| *stopping), if idle => {}
        }
    }
}

fn invoke(dispatch: Dispatch) -> BoxFuture<'static, (String, EffectOutcome)> {
    let step_id = dispatch.call.step_id.clone();
    let effect = dispatch.call.effect.clone();
    let span = tracing::debug_span!(
        "step",
        step = %step_id,
        effect = %effect,
        attempt = dispatch.call.attempt
    );
    // Known when the step started; a non-idempotent effect's STEP_STARTED is durable here.
    let idempotent = !dispatch.durable_before;
    let handler = dispatch.effect;
    let call = dispatch.call;
    let running = contain(|| handler.invoke(call));
    Box::pin(tracing::Instrument::instrument(
        async move {
            let outcome = match running {
                Ok(running) => contain_future(running).await,
                Err(panic) => Err(panic),
            };
            let outcome =
                outcome.unwrap_or_else(|panic| effect_panicked(&effect, idempotent, &panic));
            (step_id, outcome)
        },
        span,
    ))
}

/// The outcome of an effect whose handler panicked: a failure if running it again is
/// harmless, in doubt if not (it may have done its work before panicking: K9).
fn effect_panicked(effect: &str, idempotent: bool, panic: &str) -> EffectOutcome {
    tracing::warn!(effect, "an effect panicked");
    let error = ErrorInfo::new(
        codes::EFFECT_PANICKED,
        format!("effect '{effect}' panicked: {panic}"),
    );
    if idempotent {
        EffectOutcome::failed(error)
    } else {
        EffectOutcome::in_doubt(error)
    }
}

/// The fold of what is durable, for a driver that stops with events not yet written: the log
/// read again (what `recover` will find), or, if it cannot be read, the fold of what was issued.
async fn durable_state<S: EventStore>(
    inner: &Inner<S>,
    execution: &ExecutionId,
    ctx: &FlowCtx,
) -> ExecutionState {
    let log = inner.store.read_all(execution).await;
    match log.ok().map(|log| ExecutionState::fold(&log)) {
        Some(Ok(state)) => state,
        _ => ctx.state().take_fold(),
    }
}

/// Shows durable events to the projections (the flow's side folded them when it issued them).
fn publish<S: EventStore>(
    inner: &Inner<S>,
    execution: &ExecutionId,
    first: u64,
    events: Vec<Event>,
) {
    for (seq, event) in (first..).zip(events) {
        let envelope = EventEnvelope::new(execution.clone(), seq, event);
        for projection in inner.projections.iter() {
            // A projection cannot refuse a durable event; its panic is its own failure.
            if contain(|| projection.apply(&envelope)).is_err() {
                tracing::error!(
                    seq,
                    "a projection panicked on an event; it missed that event"
                );
            }
        }
    }
}

fn handle(
    ctx: &FlowCtx,
    timers: &Timers,
    execution: &ExecutionId,
    message: DriverMsg,
    machine: &mut Machine,
) {
    match message {
        DriverMsg::Resume {
            event_type,
            correlation_key,
            payload,
            reply,
        } => match ctx
            .state()
            .resume_gate(&event_type, &correlation_key, payload)
        {
            Ok(_) => machine.reply_when_durable(Reply::Resume(reply)),
            Err(miss) => {
                let execution = execution.clone();
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
                let _ = reply.send(Err(error));
            }
        },
        DriverMsg::Deadline {
            gate_id,
            deadline_ms,
        } => {
            if !ctx.state().expire_gate(&gate_id, deadline_ms) {
                tracing::debug!(gate = %gate_id, deadline_ms, "a deadline whose gate no longer waits is ignored");
            }
            timers.disarm(execution, &gate_id, deadline_ms);
        }
        DriverMsg::ChildEnded { child, payload } => {
            if !ctx.state().child_ended(&child, payload) {
                tracing::debug!(%child, "the end of a child no gate waits for is ignored");
            }
        }
        DriverMsg::Resolve {
            step_id,
            verdict,
            operator,
            reply,
        } => match ctx.state().resolve(&step_id, verdict, operator) {
            Ok(()) => machine.reply_when_durable(Reply::Resolve(reply)),
            Err(VerdictMiss::NotInDoubt) => {
                let _ = reply.send(Err(ResolveError::NotInDoubt {
                    execution: execution.clone(),
                    step_id,
                }));
            }
        },
        DriverMsg::Cancel { reason, reply } => {
            // The effects the cancel cuts off are recorded in doubt before the end (K9).
            let mut state = ctx.state();
            let doubts = state.doubts_on_cancel(|step_id| machine.dispatched(step_id));
            let cancelled = Event::ExecutionCancelled(ExecutionCancelled { reason });
            state.fold_issued(&cancelled);
            drop(state);
            machine.cancelled(doubts, cancelled, Reply::Cancel(reply));
        }
    }
}

/// Starts a child whose gate is durable, on its own task (ADR 0015).
fn start_child<S: EventStore>(inner: &Arc<Inner<S>>, execution: &ExecutionId, start: ChildStart) {
    let (gate_id, spec) = start;
    inner.spawn(children::ensure(
        Arc::clone(inner),
        execution.clone(),
        gate_id,
        spec,
    ));
}

/// A deadline message that no driver will act on: the index forgets it.
pub(crate) fn forget_deadline(timers: &Timers, execution: &ExecutionId, message: &DriverMsg) {
    if let DriverMsg::Deadline {
        gate_id,
        deadline_ms,
    } = message
    {
        timers.disarm(execution, gate_id, *deadline_ms);
    }
}

/// The gates (event type, correlation key) of a log that their deadline closed.
fn timed_out_gates(log: &[EventEnvelope]) -> TimedOutGates {
    log.iter()
        .filter_map(|envelope| match &envelope.event {
            Event::ExecutionResumed(r) if is_timed_out_payload(&r.payload) => {
                Some((r.event_type.clone(), r.correlation_key.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Answers a message for an execution that has ended. A resume of a gate in `timed_out` is
/// told that its gate timed out.
pub(crate) fn refuse_ended(execution: &ExecutionId, message: DriverMsg, timed_out: &TimedOutGates) {
    let execution = execution.clone();
    match message {
        DriverMsg::Resume {
            event_type,
            correlation_key,
            reply,
            ..
        } => {
            let key = (event_type, correlation_key);
            let error = if timed_out.contains(&key) {
                ResumeError::TimedOut {
                    execution,
                    event_type: key.0,
                    correlation_key: key.1,
                }
            } else {
                ResumeError::NoPendingGate {
                    execution,
                    event_type: key.0,
                    correlation_key: key.1,
                }
            };
            drop(reply.send(Err(error)))
        }
        DriverMsg::Resolve { step_id, reply, .. } => {
            drop(reply.send(Err(ResolveError::NotInDoubt { execution, step_id })))
        }
        DriverMsg::Cancel { reply, .. } => drop(reply.send(Err(CancelError::Ended { execution }))),
        DriverMsg::Deadline { .. } | DriverMsg::ChildEnded { .. } => {}
    }
}

/// Answers a message for an execution whose log does not exist.
pub(crate) fn refuse_unknown(execution: &ExecutionId, message: DriverMsg) {
    let execution = execution.clone();
    match message {
        DriverMsg::Resume { reply, .. } => {
            drop(reply.send(Err(ResumeError::UnknownExecution { execution })))
        }
        DriverMsg::Resolve { reply, .. } => {
            drop(reply.send(Err(ResolveError::UnknownExecution { execution })))
        }
        DriverMsg::Cancel { reply, .. } => {
            drop(reply.send(Err(CancelError::UnknownExecution { execution })))
        }
        DriverMsg::Deadline { .. } | DriverMsg::ChildEnded { .. } => {}
    }
}

/// Answers a message after the driver failed.
pub(crate) fn refuse_failed(execution: &ExecutionId, message: DriverMsg, detail: &str) {
    let reply = match message {
        DriverMsg::Resume { reply, .. } => Reply::Resume(reply),
        DriverMsg::Resolve { reply, .. } => Reply::Resolve(reply),
        DriverMsg::Cancel { reply, .. } => Reply::Cancel(reply),
        DriverMsg::Deadline { gate_id, .. } => {
            tracing::warn!(%execution, gate = %gate_id, "a deadline passed for an execution whose driver failed");
            return;
        }
        DriverMsg::ChildEnded { child, .. } => {
            tracing::warn!(%execution, %child, "a child ended for an execution whose driver failed; recover delivers it");
            return;
        }
    };
    reply.fail(execution, detail);
}
