//! The driver's loop (`drive`): one [`Run`] per driver task. Each turn polls the flow if the
//! execution's machine says so ([`Execution::poll_now`]), asks it what it wants done
//! ([`Execution::ready`]), carries that out (deadlines, effects, children, answers, an
//! append), says so ([`Execution::advance`]), and then does what its `next` says: come back, wait for the world
//! (an append, an effect, a message, the flow's waker, a shutdown) and report what came
//! ([`Execution::step`]), or exit. The decisions are the machine's (`runtime/execution/`);
//! this file does the I/O around them.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;

use super::{
    Append, DriveError, DriverReceiver, Exit, FlowWaker, NewExecution, Ran, Reply, durable_state,
    flow_panicked, invoke, kept, load, publish, start_child,
};
use crate::event::{Event, ExecutionStarted};
use crate::fold::ExecutionState;
use crate::hash::IdKey;
use crate::id::ExecutionId;
use crate::runtime::child_runs;
use crate::runtime::contain::contain;
use crate::runtime::ctx::FlowCtx;
use crate::runtime::deadlines;
use crate::runtime::execution::{Action, Execution, Input, Next, Polled, Released};
use crate::runtime::history::History;
use crate::runtime::keep;
use crate::runtime::machine::Batch;
use crate::runtime::slots::Inner;
use crate::store::{AppendError, EventStore, NewClaim};

/// Drives one execution until it ends, parks, or fails. Every message received is answered.
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
            run.exec.step(Input::Stop);
        } else if run.exec.poll_now() {
            run.poll_flow();
        }
        match run.carry_out() {
            Next::Again => {
                run.report_done_effects();
                continue;
            }
            Next::Wait => {}
            Next::Release(released) => {
                if run.inner.try_release(&run.execution, messages) {
                    return Ok(run.released(*released));
                }
            }
            Next::MayPark => {
                // Only a flow that waits at a gate or on a step in doubt may park. A wake may
                // be deferred to the end of this task's turn (tokio does that for yields), so
                // the turn ends once before parking is decided.
                tokio::task::yield_now().await;
                let input = if run.flow_waker.take_woken() {
                    Input::Woken
                } else {
                    Input::Parking
                };
                run.exec.step(input);
                continue;
            }
            Next::Park { head } => {
                if let Some(exit) = run.park(messages, head) {
                    return Ok(exit);
                }
            }
            Next::Fail(error) => return Err(*error),
            Next::Unknown => return Ok(Exit::Unknown),
            Next::Moved => return Ok(Exit::Moved),
            Next::Stopped { settled } => return Ok(run.stopped(settled).await),
            Next::Gone => return Ok(Exit::Parked(Box::new(run.exec.take_fold()))),
        }
        run.wait(messages, &mut stop).await;
    }
}

type Effects = FuturesUnordered<BoxFuture<'static, (IdKey, Ran)>>;

/// One driver's run of an execution: its machine, the flow's future, and what is in flight
/// (effects, the append).
struct Run<S> {
    inner: Arc<Inner<S>>,
    execution: ExecutionId,
    started: ExecutionStarted,
    /// The flow's handle (its commands go to the machine's flow side through it), kept with
    /// the flow when it parks.
    ctx: FlowCtx,
    exec: Execution,
    flow_future: Option<keep::FlowFuture>,
    flow_waker: Arc<FlowWaker>,
    waker: Waker,
    running: Effects,
    /// The append in flight; the machine keeps the replies that wait for it.
    appending: Option<Append>,
    /// The store's claim of a new execution's id, until its first append takes it.
    claim: Option<NewClaim>,
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
        let mut exec = match first {
            Some((event, reply)) => {
                Execution::new_execution(ctx.clone(), event, reply, claim.is_some())
            }
            // Several workers may open the same parked execution at once (each resuming its
            // gate, firing its deadline): the one whose append lands holds the lease and runs
            // the effects; the others run nothing.
            None => Execution::existing(ctx.clone(), inner.store.has_leases()),
        };
        let flow_future = match contain(|| keep::run_or_resume(&mut kept, &flow, &ctx, &started)) {
            Ok(running) => Some(running),
            Err(panic) => {
                exec.step(Input::Polled(Polled::Panicked(flow_panicked(&panic))));
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
            exec,
            flow_future,
            flow_waker,
            waker,
            running: FuturesUnordered::new(),
            appending: None,
            claim,
        }))
    }

    /// Carries out what the machine wants done ([`Execution::ready`]), says so
    /// ([`Execution::advance`]), and what next.
    fn carry_out(&mut self) -> Next {
        let ready = self.exec.ready();
        for dispatch in ready.run.drain(..) {
            self.running.push(invoke(&self.inner, dispatch, ready.head));
        }
        for action in ready.actions.drain(..) {
            match action {
                Action::Arm((gate_id, deadline_ms)) => {
                    deadlines::arm_deadline(&self.inner, &self.execution, &gate_id, deadline_ms);
                }
                Action::Disarm((gate_id, deadline_ms)) => {
                    self.inner
                        .timers
                        .disarm(&self.execution, &gate_id, deadline_ms);
                }
                Action::StartChild(start) => start_child(&self.inner, &self.execution, start),
                Action::Heard(child) => child_runs::heard(&self.inner, &child),
                Action::Answer(answer) => answer.send(&self.execution),
                Action::Resend(message) => self.inner.send(&self.execution, message),
            }
        }
        if ready.drop_effects {
            self.running = FuturesUnordered::new();
        }
        let append = ready.append.take();
        let next = std::mem::take(&mut ready.next);
        self.exec.advance();
        if let Some(batch) = append {
            self.start_append(batch);
        }
        next
    }

    /// Effects that are already done go back to the machine before anything is appended, so
    /// a quick effect and what the flow does next share one append.
    fn report_done_effects(&mut self) {
        while let Some(Some((step_id, ran))) = self.running.next().now_or_never() {
            self.exec.step(effect_input(step_id, ran));
        }
    }

    /// Polls the flow (the machine said to) and reports what came of it.
    fn poll_flow(&mut self) {
        let Some(running) = self.flow_future.as_mut() else {
            return;
        };
        self.flow_waker.take_woken();
        let waker = &self.waker;
        let polled = match contain(|| running.as_mut().poll(&mut Context::from_waker(waker))) {
            Ok(Poll::Ready(result)) => Polled::Returned(result),
            Ok(Poll::Pending) => Polled::Pending,
            Err(panic) => {
                tracing::warn!("the flow panicked; its execution fails");
                Polled::Panicked(flow_panicked(&panic))
            }
        };
        if !matches!(polled, Polled::Pending) {
            // Its commands' futures go with it; nothing polls it again.
            self.flow_future = None;
        }
        self.exec.step(Input::Polled(polled));
    }

    /// Hands an append to the store.
    fn start_append(&mut self, Batch { expected, events }: Batch) {
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
            Ok((expected, head, events))
        }));
    }

    /// The run stops at a shutdown, with the fold of what is durable.
    async fn stopped(&mut self, settled: bool) -> Exit {
        let state = if settled {
            self.exec.take_fold()
        } else {
            durable_state(&self.inner, &self.execution, &mut self.exec).await
        };
        Exit::Stopped(Box::new(state))
    }

    /// The execution ended and is released: its gates will never be resumed (their deadlines
    /// need not fire), nor its children's ends heard (they are cancelled, LD-015).
    fn released(&mut self, Released { deadlines, orphans }: Released) -> Exit {
        for (gate_id, deadline_ms) in deadlines {
            self.inner
                .timers
                .disarm(&self.execution, &gate_id, deadline_ms);
        }
        child_runs::cancel_orphans(&self.inner, &self.execution, orphans);
        Exit::Ended(Box::new(self.exec.take_fold()))
    }

    /// Parks the flow, kept in memory for the next driver (or handed to a caller that waits);
    /// `None` when a message came in the meantime.
    fn park(&mut self, messages: &mut DriverReceiver, head: u64) -> Option<Exit> {
        let mut moved = false;
        let mut copy = kept::copy_for_waiter(&self.inner, &self.execution, &self.exec);
        let mut waited_for = None;
        let exec = &self.exec;
        let ctx = &self.ctx;
        let flow_future = &mut self.flow_future;
        let keep = |waited: bool| {
            let flow = flow_future.take()?;
            moved = !waited;
            // The kept flow's state holds the fold; a caller that waits gets a copy.
            if waited {
                waited_for = Some(copy.take().unwrap_or_else(|| exec.fold()));
            }
            Some(keep::Kept {
                started: self.started.clone(),
                parked_at: head,
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
            let state = waited_for.unwrap_or_else(|| self.exec.take_fold());
            Exit::Parked(Box::new(state))
        })
    }

    /// Waits for the world (the append in flight, an effect, a message, the flow's waker or a
    /// shutdown) and reports what came to the machine.
    async fn wait(&mut self, messages: &mut DriverReceiver, stop: &mut watch::Receiver<bool>) {
        let idle = self.appending.is_none();
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
        let input = tokio::select! {
            result = appended => {
                self.appending = None;
                self.appended(result)
            }
            Some((step_id, ran)) = effect_done => effect_input(step_id, ran),
            message = messages.recv() => match message {
                Some(message) => Input::Message(*message),
                None => Input::Gone,
            },
            () = self.flow_waker.notify.notified() => Input::Woken,
            _ = stop.wait_for(|stopping| *stopping), if idle => return,
        };
        self.exec.step(input);
    }

    /// An append came back: durable events are shown to the projections.
    fn appended(&self, result: Result<(u64, u64, Vec<Event>), AppendError>) -> Input {
        match result {
            Ok((first, head, events)) => {
                self.inner.steps.durable(&events);
                publish(&self.inner, &self.execution, first, events);
                Input::Appended(head)
            }
            Err(error) => Input::AppendFailed(error),
        }
    }
}

/// What a dispatch that came back tells the machine.
fn effect_input(step_id: IdKey, ran: Ran) -> Input {
    match ran {
        Ran::Outcome(outcome) => Input::EffectDone(step_id, outcome),
        Ran::NotHeld(detail) => Input::NotHeld(step_id, detail),
    }
}
