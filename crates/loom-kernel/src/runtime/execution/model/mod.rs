//! A model-based test of the whole execution machine ([`Execution`]), with its flow side and
//! a real flow, driven without tokio, a runtime or a store. A small synchronous harness plays
//! the driver: it polls the flow when asked, keeps the log, writes an append (or loses it in a
//! crash, or fails it), runs no effect but answers each dispatch with an outcome it picks, and
//! sends resumes, verdicts, cancels and deadlines. A crash drops the machine and the flow and
//! starts again from the durable log, replaying; a parked flow may also be kept and taken up
//! by a fresh machine, as the runtime does. A reference model of a sequential flow says, for
//! every input, what the log must hold, what each caller is answered and when, and which
//! effects may start:
//! - the log the machine writes is, append after append, the model's log (a quick
//!   idempotent step may leave out its `STEP_STARTED`, so those are not compared);
//! - a non-idempotent effect starts only once its `STEP_STARTED` is durable, and never twice
//!   for one attempt, across crashes too (K9): one found started without an outcome after a
//!   crash is recorded in doubt, not run again;
//! - every answer is the model's, and an `Ok` comes only once the events before it are
//!   durable (LD-003);
//! - the run exits (`Release`) only once the model's execution has ended and everything is
//!   durable, and parks only where the model waits for a message;
//! - driven to its end, the durable log folds to the model's status.
//!
//! The sequences come from a seeded generator, so a failure names the seed that reproduces
//! it. `LOOM_EXECUTION_MODEL_SEQUENCES` sets how many run (100,000 by default).

mod inputs;
mod reference;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::{Action, Execution, Input, Next, Polled, Ready};
use crate::classify::DataClassification;
use crate::envelope::EventEnvelope;
use crate::event::{ErrorInfo, Event, ExecutionStarted, Verdict};
use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::ctx::FlowCtx;
use crate::runtime::effect::{Effect, EffectCall, EffectOutcome};
use crate::runtime::errors::{CancelError, ResolveError, ResumeError};
use crate::runtime::flow::FlowError;
use crate::runtime::history::History;
use crate::runtime::mailbox::{DriverMsg, Reply, ResolveMsg, ResumeMsg};
use crate::runtime::markers::{CHILD_KIND, DEADLINE_KIND, is_timed_out_payload};
use crate::runtime::timers::ManualClock;
use crate::store::AppendError;

use reference::{Expect, Model, Wait};

const EVENT_TYPE: &str = "T";
/// Every timed gate's deadline (unix ms); the clock never reaches it: deadlines fire only when
/// the harness says so.
const DEADLINE_MS: u64 = 5_000;
/// The key of a child's gate in the model (a resume never names it).
const CHILD: u8 = u8::MAX;

/// One command of the flow's script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Step {
        idempotent: bool,
    },
    Gate {
        key: u8,
        timed: bool,
    },
    /// A child of flow `kid`; its end resumes the parent's gate.
    Child,
}

/// An effect the harness answers itself: it is never invoked.
struct Answered(bool);

impl Effect for Answered {
    fn idempotent(&self) -> bool {
        self.0
    }
    fn invoke(&self, _: EffectCall) -> BoxFuture<'static, EffectOutcome> {
        unreachable!("the harness answers every dispatch itself")
    }
}

fn effect_name(idempotent: bool) -> &'static str {
    if idempotent { "idem" } else { "once" }
}

/// The flow: the script's commands in order, each awaited; a step's failure is ignored.
fn flow(ctx: FlowCtx, script: Arc<[Op]>) -> BoxFuture<'static, Result<Payload, FlowError>> {
    Box::pin(async move {
        for op in script.iter() {
            match *op {
                Op::Step { idempotent } => {
                    let _ = ctx.execute(effect_name(idempotent), &0u8).await;
                }
                Op::Gate { key, timed: false } => {
                    let _ = ctx.suspend(EVENT_TYPE, &key.to_string()).await;
                }
                Op::Gate { key, timed: true } => {
                    let _ = ctx
                        .suspend_until(EVENT_TYPE, &key.to_string(), DEADLINE_MS)
                        .await;
                }
                Op::Child => {
                    let _ = ctx.child("kid", &0u8).await;
                }
            }
        }
        Ok(Payload::null())
    })
}

/// An event reduced to what the model checks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Start,
    Started(String),
    Completed(String),
    Failed(String),
    Doubt(String),
    Resolved(String, VerdictKind),
    /// A timed gate's deadline, recorded before it opens.
    Deadline(String),
    /// A child's start, recorded under its gate before the gate opens.
    ChildSpec(String),
    Suspended(String),
    Resumed(String, bool),
    Cancelled,
    Ended,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VerdictKind {
    Retry,
    Completed,
    Failed,
}

/// The entry the model compares, or `None` for an event it does not (an idempotent step's
/// `STEP_STARTED`, which a quick outcome may take the place of).
fn entry(event: &Event) -> Option<Entry> {
    Some(match event {
        Event::ExecutionStarted(_) => Entry::Start,
        Event::StepStarted(e) if e.step_id.starts_with("idem") => return None,
        Event::StepStarted(e) => Entry::Started(e.step_id.clone()),
        Event::StepCompleted(e) => Entry::Completed(e.step_id.clone()),
        Event::StepFailed(e) => Entry::Failed(e.step_id.clone()),
        Event::EffectInDoubt(e) => Entry::Doubt(e.step_id.clone()),
        Event::EffectResolved(e) => Entry::Resolved(
            e.step_id.clone(),
            match e.verdict {
                Verdict::Retry => VerdictKind::Retry,
                Verdict::Completed { .. } => VerdictKind::Completed,
                Verdict::Failed { .. } => VerdictKind::Failed,
            },
        ),
        Event::DecisionRecorded(d) if d.kind == DEADLINE_KIND => Entry::Deadline(d.step_id.clone()),
        Event::DecisionRecorded(d) if d.kind == CHILD_KIND => Entry::ChildSpec(d.step_id.clone()),
        Event::ExecutionSuspended(e) => Entry::Suspended(e.gate_id.clone()),
        Event::ExecutionResumed(e) => {
            Entry::Resumed(e.gate_id.clone(), is_timed_out_payload(&e.payload))
        }
        Event::ExecutionCancelled(_) => Entry::Cancelled,
        Event::ExecutionCompleted(_) => Entry::Ended,
        other => panic!("the model's flow issues no {}", other.type_name()),
    })
}

// ---------------------------------------------------------------------------------------
// The harness: a synchronous driver.

struct Woken(AtomicBool);

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// What a caller holds: the answer to come and what the model says it must be.
enum Waiting {
    Resume(oneshot::Receiver<Result<(), ResumeError>>, Expect),
    Resolve(oneshot::Receiver<Result<(), ResolveError>>, Expect),
    Cancel(oneshot::Receiver<Result<(), CancelError>>, Expect),
}

/// A small seeded generator (xorshift): the test needs no dependency for it.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

struct Harness {
    seed: u64,
    id: ExecutionId,
    started: ExecutionStarted,
    script: Arc<[Op]>,
    effects: Arc<BTreeMap<String, Arc<dyn Effect>>>,
    /// The durable log.
    log: Vec<Event>,
    exec: Option<Execution>,
    ctx: Option<FlowCtx>,
    flow: Option<BoxFuture<'static, Result<Payload, FlowError>>>,
    woken: Arc<Woken>,
    /// The append in flight.
    appending: Option<Vec<Event>>,
    /// Effects handed out and not answered: step id and attempt.
    running: Vec<(String, u32)>,
    /// Attempts of non-idempotent steps already handed out, over every run.
    ran_once: BTreeSet<(String, u32)>,
    armed: BTreeSet<(String, u64)>,
    /// Children handed out to start, by their gate.
    children: BTreeMap<String, ExecutionId>,
    waiting: Vec<Waiting>,
    /// A store with leases: every effect of a run on an existing log waits for the run's
    /// first durable append.
    leases: bool,
    /// The store claimed the new execution's id: its idempotent effects need not wait for
    /// its start to be durable.
    claimed: bool,
    /// This run is the execution's first (`Execution::new_execution`).
    first_run: bool,
    /// An append of this run is durable.
    run_appended: bool,
    /// How the last run ended, if it did.
    over: Option<&'static str>,
    model: Model,
}

impl Harness {
    fn new(seed: u64, rng: &mut Rng) -> Self {
        let ops = 1 + rng.below(5) as usize;
        let script: Arc<[Op]> = (0..ops)
            .map(|_| match rng.below(5) {
                0 | 1 => Op::Step {
                    idempotent: rng.chance(50),
                },
                2 => Op::Child,
                _ => Op::Gate {
                    key: rng.below(2) as u8,
                    timed: rng.chance(50),
                },
            })
            .collect();
        let started = ExecutionStarted {
            flow: "model".into(),
            flow_version: 1,
            input: Payload::null(),
            capabilities: ["once".to_owned(), "idem".to_owned()].into(),
            budget: None,
        };
        let effects: BTreeMap<String, Arc<dyn Effect>> = [
            (
                "once".to_owned(),
                Arc::new(Answered(false)) as Arc<dyn Effect>,
            ),
            (
                "idem".to_owned(),
                Arc::new(Answered(true)) as Arc<dyn Effect>,
            ),
        ]
        .into();
        let mut harness = Self {
            seed,
            id: ExecutionId::new("model").expect("a valid id"),
            started,
            script: Arc::clone(&script),
            effects: Arc::new(effects),
            log: Vec::new(),
            exec: None,
            ctx: None,
            flow: None,
            woken: Arc::new(Woken(AtomicBool::new(false))),
            appending: None,
            running: Vec::new(),
            ran_once: BTreeSet::new(),
            armed: BTreeSet::new(),
            children: BTreeMap::new(),
            waiting: Vec::new(),
            leases: rng.chance(30),
            claimed: rng.chance(50),
            first_run: true,
            run_appended: false,
            over: None,
            model: Model::new(script),
        };
        let ctx = harness.flow_ctx(History::default(), ExecutionState::new());
        let (reply, _answer) = oneshot::channel();
        let first = Event::ExecutionStarted(harness.started.clone());
        harness.exec = Some(Execution::new_execution(
            ctx.clone(),
            first,
            Reply::Start(reply),
            harness.claimed,
        ));
        harness.flow = Some(flow(ctx.clone(), Arc::clone(&harness.script)));
        harness.ctx = Some(ctx);
        harness.turn();
        harness
    }

    fn flow_ctx(&self, history: History, fold: ExecutionState) -> FlowCtx {
        FlowCtx::new(
            self.id.clone(),
            Arc::clone(&self.effects),
            Arc::new(DataClassification::default()),
            Arc::new(ManualClock::new(1_000)),
            &self.started,
            history,
            fold,
        )
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {}: {what}\nscript {:?}\nmodel log {:?} (durable {})\nlog {:?}",
            self.seed,
            self.script,
            self.model.log,
            self.model.durable,
            self.log.iter().map(Event::type_name).collect::<Vec<_>>()
        )
    }

    fn exec(&mut self) -> &mut Execution {
        self.exec.as_mut().expect("a run")
    }

    /// Feeds an input, then carries out what the machine wants until it waits.
    fn step(&mut self, input: Input) {
        self.exec().step(input);
        self.turn();
    }

    /// The driver's turn: the flow polled if the machine says so, then `ready`, carried out,
    /// until the machine waits or the run is over.
    fn turn(&mut self) {
        for _ in 0..1_000 {
            if self.exec().poll_now() {
                self.poll_flow();
            }
            let mut ready = self.exec().take_ready();
            let next = std::mem::take(&mut ready.next);
            self.carry_out(&mut ready);
            self.check_answers();
            match next {
                Next::Again => continue,
                Next::Wait => return,
                Next::MayPark => {
                    let woken = self.woken.0.swap(false, Ordering::AcqRel);
                    self.exec()
                        .step(if woken { Input::Woken } else { Input::Parking });
                }
                Next::Park { head } => {
                    if head != self.log.len() as u64 {
                        self.fail("parked with its head not the log's");
                    }
                    if !self.model_waits_for_a_message() {
                        self.fail("parked where the model does not wait for a message");
                    }
                    return self.end_run("parked");
                }
                Next::Release(released) => {
                    let orphans = released.orphans;
                    if !self.model.ended() || self.model.durable != self.model.log.len() {
                        self.fail("released before the model's execution ended and is durable");
                    }
                    let orphans: Vec<String> = orphans.into_iter().map(|(gate, _)| gate).collect();
                    if orphans != self.model.orphan.iter().cloned().collect::<Vec<_>>() {
                        self.fail(&format!("released with orphans {orphans:?}"));
                    }
                    return self.end_run("released");
                }
                Next::Fail(error) => {
                    if self.over != Some("append failed") {
                        self.fail(&format!("the run failed: {error}"));
                    }
                    return self.end_run("append failed");
                }
                Next::Unknown | Next::Moved | Next::Stopped { .. } | Next::Gone => {
                    self.fail("an exit the harness never asks for");
                }
            }
        }
        self.fail("the machine never waits");
    }

    fn model_waits_for_a_message(&self) -> bool {
        matches!(
            self.model.wait,
            Wait::Gate { done: false, .. } | Wait::Step { doubt: true, .. }
        )
    }

    fn end_run(&mut self, how: &'static str) {
        self.exec = None;
        self.over = Some(how);
        self.running.clear();
        self.appending = None;
    }

    fn carry_out(&mut self, ready: &mut Ready) {
        for dispatch in ready.run.drain(..) {
            let step = dispatch.call.step_id.clone();
            let attempt = dispatch.call.attempt;
            let runs = matches!(&self.model.wait, Wait::Step { id, runs: true, .. } if *id == step);
            if !runs {
                self.fail(&format!("{step} started where the model runs no effect"));
            }
            let early = if self.first_run {
                !self.claimed && self.log.is_empty()
            } else {
                self.leases && !self.run_appended
            };
            if early {
                self.fail("an effect started before this run may run any");
            }
            if dispatch.durable_before {
                let durable = self.log.iter().any(|e| matches!(e, Event::StepStarted(s) if s.step_id == step && s.attempt == attempt));
                if !durable {
                    self.fail(&format!(
                        "{step} started before its STEP_STARTED was durable"
                    ));
                }
                if !self.ran_once.insert((step.clone(), attempt)) {
                    self.fail(&format!("{step} attempt {attempt} started twice (K9)"));
                }
            }
            if let Wait::Step { runs, .. } = &mut self.model.wait {
                *runs = false;
            }
            self.running.push((step, attempt));
        }
        for action in ready.actions.drain(..) {
            match action {
                Action::Arm(deadline) => {
                    self.armed.insert(deadline);
                }
                Action::Disarm(deadline) => {
                    self.armed.remove(&deadline);
                }
                Action::Heard(child) => {
                    if !self.children.values().any(|c| *c == child) {
                        self.fail(&format!("heard of child {child}, never started"));
                    }
                }
                Action::StartChild((gate_id, spec)) => {
                    let durable = self
                        .log
                        .iter()
                        .any(|e| matches!(e, Event::ExecutionSuspended(s) if s.gate_id == gate_id));
                    if !durable {
                        self.fail(&format!(
                            "child of {gate_id} started before its gate was durable"
                        ));
                    }
                    self.children.insert(gate_id, spec.execution);
                }
                Action::Answer(answer) => answer.send(&self.id),
                Action::Resend(_) => self.fail("a message resent: the harness never moves the log"),
            }
        }
        if ready.drop_effects {
            self.running.clear();
        }
        if let Some(batch) = ready.append.take() {
            if self.appending.is_some() {
                self.fail("a second append while one is in flight");
            }
            if batch.expected != self.log.len() as u64 {
                self.fail("an append not at the durable head");
            }
            self.appending = Some(batch.events);
        }
    }

    fn poll_flow(&mut self) {
        let Some(flow) = self.flow.as_mut() else {
            return;
        };
        self.woken.0.store(false, Ordering::Release);
        let waker = Waker::from(Arc::clone(&self.woken));
        let polled = match Pin::new(flow).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(result) => {
                self.flow = None;
                Polled::Returned(result)
            }
            Poll::Pending => Polled::Pending,
        };
        self.model.poll();
        self.exec().step(Input::Polled(polled));
    }

    /// Answers that came: each as the model said, an `Ok` only once its events are durable.
    fn check_answers(&mut self) {
        let durable = self.model.durable;
        let mut still = Vec::new();
        let mut wrong = None;
        for waiting in std::mem::take(&mut self.waiting) {
            let (got, expect) = match waiting {
                Waiting::Resume(mut rx, expect) => match rx.try_recv() {
                    Err(oneshot::error::TryRecvError::Empty) => {
                        still.push(Waiting::Resume(rx, expect));
                        continue;
                    }
                    Err(_) => continue,
                    Ok(Ok(())) => (Ok(()), expect),
                    Ok(Err(e)) => (Err(resume_expect(&e)), expect),
                },
                Waiting::Resolve(mut rx, expect) => match rx.try_recv() {
                    Err(oneshot::error::TryRecvError::Empty) => {
                        still.push(Waiting::Resolve(rx, expect));
                        continue;
                    }
                    Err(_) => continue,
                    Ok(Ok(())) => (Ok(()), expect),
                    Ok(Err(e)) => (Err(resolve_expect(&e)), expect),
                },
                Waiting::Cancel(mut rx, expect) => match rx.try_recv() {
                    Err(oneshot::error::TryRecvError::Empty) => {
                        still.push(Waiting::Cancel(rx, expect));
                        continue;
                    }
                    Err(_) => continue,
                    Ok(Ok(())) => (Ok(()), expect),
                    Ok(Err(CancelError::Ended { .. })) => (Err(Some(Expect::CancelEnded)), expect),
                    Ok(Err(_)) => (Err(None), expect),
                },
            };
            match (got, &expect) {
                (Ok(()), Expect::Ok(at)) if durable >= *at => {}
                (Ok(()), Expect::Ok(at)) => {
                    wrong = Some(format!(
                        "answered Ok with {durable} of {at} entries durable"
                    ));
                }
                // A driver failure (an append failed): whatever was expected.
                (Err(None), _) if self.over == Some("append failed") => {}
                (Err(Some(got)), expect) if got == *expect => {}
                (got, expect) => {
                    wrong = Some(format!("answered {got:?}, the model says {expect:?}"))
                }
            }
        }
        self.waiting = still;
        if let Some(wrong) = wrong {
            self.fail(&wrong);
        }
    }
}

fn resume_expect(error: &ResumeError) -> Option<Expect> {
    match error {
        ResumeError::NoPendingGate { .. } => Some(Expect::NoPendingGate),
        ResumeError::TimedOut { .. } => Some(Expect::TimedOut),
        _ => None,
    }
}

fn resolve_expect(error: &ResolveError) -> Option<Expect> {
    match error {
        ResolveError::NotInDoubt { .. } => Some(Expect::NotInDoubt),
        ResolveError::InDoubtWhenEnded { .. } => Some(Expect::InDoubtWhenEnded),
        _ => None,
    }
}

fn sequences() -> u64 {
    std::env::var("LOOM_EXECUTION_MODEL_SEQUENCES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000)
}

#[test]
fn the_execution_machine_agrees_with_its_model_over_random_sequences_with_crashes() {
    let first = std::env::var("LOOM_EXECUTION_MODEL_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    for seed in first..first + sequences() {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut harness = Harness::new(seed, &mut rng);
        let actions = rng.below(24);
        for _ in 0..actions {
            harness.act(&mut rng);
        }
        harness.finish(&mut rng);
    }
}
