//! Replay without effects or writes: runs a flow against its whole recorded log and reports
//! whether it issues exactly the recorded commands. The runtime's drivers replay the same way
//! before going live; this entry point is for checks (`cargo xtask replay-check`) and
//! benchmarks, through a [`Runtime`](crate::Runtime) or a [`Replayer`], which needs no
//! runtime, store or effect.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::classify::DataClassification;
use crate::envelope::EventEnvelope;
use crate::event::{ErrorInfo, Event};
use crate::fold::ExecutionState;
use crate::payload::Payload;
use crate::runtime::codes;
use crate::runtime::contain::contain;
use crate::runtime::ctx::FlowCtx;
use crate::runtime::effect::{Effect, EffectCall, EffectOutcome};
use crate::runtime::errors::{CompositionError, DriveError};
use crate::runtime::execution::{Execution, Input, Next, Polled};
use crate::runtime::flow::FlowError;
use crate::runtime::flow::{Flow, FlowSet};
use crate::runtime::history::{Attempted, History, NonDeterminism, shown};
use crate::runtime::mailbox::FlowWaker;
use crate::runtime::slots::Inner;

/// What a replay needs of a composition: the flows, the effects (looked up, never run) and the
/// data classification its texts are masked with.
pub(crate) struct ReplayParts<'a> {
    pub(crate) flows: &'a BTreeMap<(String, u32), Arc<dyn Flow>>,
    pub(crate) effects: &'a Arc<BTreeMap<String, Arc<dyn Effect>>>,
    pub(crate) classification: &'a Arc<DataClassification>,
}

impl<'a, S> From<&'a Inner<S>> for ReplayParts<'a> {
    fn from(inner: &'a Inner<S>) -> Self {
        Self {
            flows: &inner.flows,
            effects: &inner.effects,
            classification: &inner.classification,
        }
    }
}

/// Replays recorded logs against a set of flows with no runtime, store, clock or effect: what
/// a check of logs needs (`replay-check`). The effects the flows declare they use
/// (`flow_fn(..).uses(..)`) are stand-ins that are never run, since replay serves every
/// result from the log and drops whatever the flow would do past its end.
#[derive(Clone)]
pub struct Replayer {
    flows: Arc<BTreeMap<(String, u32), Arc<dyn Flow>>>,
    effects: Arc<BTreeMap<String, Arc<dyn Effect>>>,
    classification: Arc<DataClassification>,
}

impl std::fmt::Debug for Replayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer")
            .field("flows", &self.flows.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Replayer {
    /// A replayer for `flows`, whose findings mask the values at `classification`'s paths
    /// (K10-R6). Fails if two flows share a name and version.
    pub fn new(
        flows: &FlowSet,
        classification: DataClassification,
    ) -> Result<Self, CompositionError> {
        let mut registered = BTreeMap::new();
        let mut effects: BTreeMap<String, Arc<dyn Effect>> = BTreeMap::new();
        for flow in flows.iter() {
            let key = (flow.name().to_owned(), flow.version());
            if registered.insert(key.clone(), Arc::clone(flow)).is_some() {
                let (name, version) = key;
                return Err(CompositionError::DuplicateFlow { name, version });
            }
            for effect in flow.declared_effects() {
                effects
                    .entry((*effect).to_owned())
                    .or_insert_with(|| Arc::new(NeverRun));
            }
        }
        Ok(Self {
            flows: Arc::new(registered),
            effects: Arc::new(effects),
            classification: Arc::new(classification),
        })
    }

    /// Replays `log` against its flow; see [`crate::Runtime::replay_log`].
    pub fn replay_log(&self, log: Vec<EventEnvelope>) -> Result<ReplayReport, ReplayError> {
        replay_log(self.parts(), log, None)
    }

    /// [`Replayer::replay_log`] for a log the caller has folded already (`folded`); see
    /// [`crate::Runtime::replay_folded_log`].
    pub fn replay_folded_log(
        &self,
        log: Vec<EventEnvelope>,
        folded: ExecutionState,
    ) -> Result<ReplayReport, ReplayError> {
        replay_log(self.parts(), log, Some(folded))
    }

    fn parts(&self) -> ReplayParts<'_> {
        ReplayParts {
            flows: &self.flows,
            effects: &self.effects,
            classification: &self.classification,
        }
    }
}

/// The stand-in for a declared effect in a [`Replayer`]: replay never runs an effect, so it
/// is never called; if it were, it would fail rather than touch the world.
struct NeverRun;

impl Effect for NeverRun {
    fn idempotent(&self) -> bool {
        true
    }

    fn invoke(&self, _call: EffectCall) -> futures::future::BoxFuture<'static, EffectOutcome> {
        Box::pin(std::future::ready(EffectOutcome::failed(ErrorInfo::new(
            codes::REPLAY_RUNS_NO_EFFECT,
            "replay runs no effect",
        ))))
    }
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayReport {
    /// Events in the log.
    pub events: u64,
    /// Recorded commands the flow issued again.
    pub commands: usize,
    /// Whether the replayed flow returned (rather than waiting where the log ends).
    pub returned: bool,
}

/// Why a replay did not confirm the log. Texts that show recorded or replayed values are
/// masked by the runtime's data classification (K10-R6).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The log is empty.
    #[error("the log is empty")]
    Empty,
    /// The log does not fold.
    #[error("the log is invalid: {0}")]
    Fold(#[from] crate::fold::FoldError),
    /// The log's flow version is not registered.
    #[error("flow '{flow}' version {version} is not registered")]
    UnknownFlow {
        /// The flow's registered name.
        flow: String,
        /// The flow version concerned.
        version: u32,
    },
    /// The replayed flow asked for something else than the log recorded.
    #[error(transparent)]
    NonDeterminism(#[from] NonDeterminism),
    /// The replayed flow ended otherwise than the log recorded.
    #[error("at seq {seq}: recorded output {recorded}; the replayed flow returns {replayed}")]
    OutputMismatch {
        /// The seq of the recorded end.
        seq: u64,
        /// The recorded end (masked, K10-R6).
        recorded: String,
        /// The replayed end (masked, K10-R6).
        replayed: String,
    },
    /// The flow panicked while it was replayed (and the log does not say it panicked then).
    #[error("the flow panicked on replay, after {commands} recorded commands: {message}")]
    FlowPanicked {
        /// Recorded commands it had issued again before it panicked.
        commands: usize,
        /// The panic's message.
        message: String,
    },
}

/// How a recorded log ended.
enum RecordedEnd {
    Completed(u64, Payload),
    Failed(u64, ErrorInfo),
    /// Not ended, or cancelled (a cancel can cut a flow anywhere).
    Open,
}

/// At most this many polls of one replayed flow: one that keeps waking itself for longer is
/// reported as waiting where it stands.
const MAX_POLLS: usize = 1 << 20;

/// Replays `log` against the registered flow. Runs no effect and writes nothing: commands the
/// flow issues past the end of the log are dropped (and, if the log says the execution
/// completed or failed, are a divergence). `folded` is the log's fold when the caller has made
/// it already; otherwise the log is folded here first, since replay assumes a valid log. A
/// panic of the flow is returned as [`ReplayError::FlowPanicked`], never unwound.
pub(crate) fn replay_log(
    inner: ReplayParts<'_>,
    log: Vec<EventEnvelope>,
    folded: Option<ExecutionState>,
) -> Result<ReplayReport, ReplayError> {
    let Some(first) = log.first() else {
        return Err(ReplayError::Empty);
    };
    let folded = match folded {
        Some(state) if state.next_seq() == log.len() as u64 => state,
        _ => ExecutionState::fold(&log)?,
    };
    let Event::ExecutionStarted(started) = &first.event else {
        return Err(ReplayError::Empty);
    };
    let started = started.clone();
    let execution_id = first.execution_id.clone();
    let events = log.len() as u64;
    // What the log ended with, kept before the events move into the history.
    let recorded_end = match log.last().map(|last| (last.seq, &last.event)) {
        Some((seq, Event::ExecutionCompleted(done))) => {
            RecordedEnd::Completed(seq, done.output.clone())
        }
        Some((seq, Event::ExecutionFailed(failed))) => {
            RecordedEnd::Failed(seq, failed.error.clone())
        }
        _ => RecordedEnd::Open,
    };
    let flow = inner
        .flows
        .get(&(started.flow.clone(), started.flow_version))
        .ok_or_else(|| ReplayError::UnknownFlow {
            flow: started.flow.clone(),
            version: started.flow_version,
        })?;
    let history = History::from_events(log.into_iter().map(|e| (e.seq, e.event)));
    let commands = history.commands.len();
    let classification = Arc::clone(inner.classification);
    let ctx = FlowCtx::new(
        execution_id,
        Arc::clone(inner.effects),
        Arc::clone(&classification),
        Arc::new(crate::runtime::timers::ReplayClock),
        &started,
        history,
        folded,
    );
    let mut machine = Execution::replaying(ctx.clone());
    let rested = match run_to_rest(flow.as_ref(), &ctx, &started.input, &mut machine) {
        Ok(rested) => rested,
        Err(message) => {
            // A log that records this very panic replays to it.
            if let RecordedEnd::Failed(_, error) = &recorded_end
                && error.code == codes::FLOW_PANICKED
            {
                return Ok(ReplayReport {
                    events,
                    commands,
                    returned: true,
                });
            }
            return Err(ReplayError::FlowPanicked {
                commands: ctx.state().replayed(),
                message,
            });
        }
    };
    let returned = rested?;
    let first_live = machine.first_live();
    let diverged = |seq: u64, recorded: &str, attempted: String| {
        Err(ReplayError::NonDeterminism(NonDeterminism {
            seq,
            recorded: recorded.to_owned(),
            attempted,
        }))
    };
    match (&recorded_end, returned) {
        (RecordedEnd::Open, returned) => {
            return Ok(ReplayReport {
                events,
                commands,
                returned: returned.is_some(),
            });
        }
        (RecordedEnd::Completed(seq, _) | RecordedEnd::Failed(seq, _), _)
            if first_live.is_some() =>
        {
            let recorded = ended_as(&recorded_end);
            return diverged(*seq, recorded, first_live.unwrap_or_default());
        }
        (RecordedEnd::Completed(seq, recorded), Some(Ok(output))) => {
            if *recorded != output {
                return Err(ReplayError::OutputMismatch {
                    seq: *seq,
                    recorded: shown(recorded, &classification),
                    replayed: shown(&output, &classification),
                });
            }
        }
        (RecordedEnd::Completed(seq, _), Some(Err(error))) => {
            return diverged(
                *seq,
                "EXECUTION_COMPLETED",
                format!("fails with {}", error_text(&error)),
            );
        }
        (RecordedEnd::Failed(seq, recorded), Some(Err(error))) => {
            if recorded.code != error.code {
                return diverged(
                    *seq,
                    &format!("EXECUTION_FAILED with code {}", recorded.code),
                    format!("fails with {}", error_text(&error)),
                );
            }
        }
        (RecordedEnd::Failed(seq, _), Some(Ok(_))) => {
            return diverged(*seq, "EXECUTION_FAILED", "returns".to_owned());
        }
        (RecordedEnd::Completed(seq, _) | RecordedEnd::Failed(seq, _), None) => {
            let recorded = ended_as(&recorded_end);
            return diverged(*seq, recorded, Attempted::Wait.to_string());
        }
    }
    Ok(ReplayReport {
        events,
        commands,
        returned: true,
    })
}

fn ended_as(end: &RecordedEnd) -> &'static str {
    match end {
        RecordedEnd::Completed(..) => "EXECUTION_COMPLETED",
        RecordedEnd::Failed(..) => "EXECUTION_FAILED",
        RecordedEnd::Open => "no end",
    }
}

/// A flow error as a divergence shows it: its code and message (both chosen by the flow, as
/// recorded in `EXECUTION_FAILED`).
fn error_text(error: &FlowError) -> String {
    error.to_string()
}

/// Steps the execution's machine as a driver would, polling the flow as long as it makes
/// progress: every recorded result is served at once, so it stops only where it waits for
/// something the log does not hold (or has returned). A flow that yields wakes itself and is
/// polled again. What the machine would do past the log's end (run effects, start children,
/// append) is never done. `Err` is a panic's message; `Ok(Err(..))` the machine's divergence.
fn run_to_rest(
    flow: &dyn crate::runtime::flow::Flow,
    ctx: &FlowCtx,
    input: &Payload,
    machine: &mut Execution,
) -> Result<Result<Option<Result<Payload, FlowError>>, NonDeterminism>, String> {
    let mut running = contain(|| flow.run(ctx.clone(), input.clone()))?;
    let flow_waker = Arc::new(FlowWaker::new());
    let waker = Waker::from(Arc::clone(&flow_waker));
    let mut returned = None;
    let mut polls = 0;
    loop {
        if machine.poll_now() {
            polls += 1;
            flow_waker.take_woken();
            let polled = match contain(|| running.as_mut().poll(&mut Context::from_waker(&waker)))?
            {
                Poll::Ready(result) => {
                    returned = Some(result.clone());
                    Polled::Returned(result)
                }
                Poll::Pending => Polled::Pending,
            };
            machine.step(Input::Polled(polled));
        }
        let next = std::mem::take(&mut machine.ready().next);
        machine.advance();
        match next {
            Next::Again => continue,
            Next::Fail(error) => return Ok(Err(divergence_of(*error))),
            _ => {}
        }
        if returned.is_none() && polls < MAX_POLLS && flow_waker.take_woken() {
            machine.step(Input::Woken);
            continue;
        }
        break;
    }
    if returned.is_none() {
        machine.step(Input::Rest);
        if let Next::Fail(error) = std::mem::take(&mut machine.ready().next) {
            return Ok(Err(divergence_of(*error)));
        }
        machine.advance();
    }
    Ok(Ok(returned))
}

/// The divergence a replay's machine failed with (it fails with nothing else: nothing is
/// appended, no effect runs).
fn divergence_of(error: DriveError) -> NonDeterminism {
    match error {
        DriveError::NonDeterminism { source, .. } => source,
        other => NonDeterminism {
            seq: 0,
            recorded: "the log".into(),
            attempted: other.to_string(),
        },
    }
}
