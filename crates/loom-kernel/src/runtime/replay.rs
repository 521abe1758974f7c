//! Replay without effects or writes: runs a flow against its whole recorded log and reports
//! whether it issues exactly the recorded commands. The runtime's drivers replay the same way
//! before going live; this entry point is for checks (`cargo xtask replay-check`) and
//! benchmarks.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::envelope::EventEnvelope;
use crate::event::Event;
use crate::fold::ExecutionState;
use crate::runtime::Inner;
use crate::runtime::ctx::FlowCtx;
use crate::runtime::history::{Attempted, History, NonDeterminism};
use crate::store::EventStore;

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

/// Why a replay did not confirm the log.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    #[error("the log is empty")]
    Empty,
    #[error("the log is invalid: {0}")]
    Fold(#[from] crate::fold::FoldError),
    #[error("flow '{flow}' version {version} is not registered")]
    UnknownFlow { flow: String, version: u32 },
    #[error(transparent)]
    NonDeterminism(#[from] NonDeterminism),
    #[error("at seq {seq}: recorded output {recorded}; the replayed flow returns {replayed}")]
    OutputMismatch {
        seq: u64,
        recorded: String,
        replayed: String,
    },
}

/// Replays `log` against the registered flow. Runs no effect and writes nothing: commands the
/// flow issues past the end of the log are dropped. `folded` is the log's fold when the caller
/// has made it already; otherwise the log is folded here first, since replay assumes a valid
/// log.
pub(crate) fn replay_log<S: EventStore>(
    inner: &Arc<Inner<S>>,
    log: Vec<EventEnvelope>,
    folded: Option<&ExecutionState>,
) -> Result<ReplayReport, ReplayError> {
    let Some(first) = log.first() else {
        return Err(ReplayError::Empty);
    };
    if folded.is_none_or(|state| state.next_seq() != log.len() as u64) {
        ExecutionState::fold(&log)?;
    }
    let Event::ExecutionStarted(started) = &first.event else {
        return Err(ReplayError::Empty);
    };
    let started = started.clone();
    let execution_id = first.execution_id.clone();
    let events = log.len() as u64;
    // What the log ended with, kept before the events move into the history.
    let recorded_end = log.last().and_then(|last| match &last.event {
        Event::ExecutionCompleted(done) => Some((last.seq, done.output.clone())),
        _ => None,
    });
    let flow = inner
        .flows
        .get(&(started.flow.clone(), started.flow_version))
        .ok_or_else(|| ReplayError::UnknownFlow {
            flow: started.flow.clone(),
            version: started.flow_version,
        })?;
    let history = History::from_events(log.into_iter().map(|e| (e.seq, e.event)));
    let commands = history.commands.len();
    let ctx = FlowCtx::new(execution_id, Arc::clone(&inner.effects), &started, history);
    let mut running = flow.run(ctx.clone(), started.input.clone());
    // Every recorded result is served synchronously, so the flow runs as far as its log goes
    // in one poll; it is polled until it stops making progress.
    let waker = Waker::noop();
    let mut returned = None;
    for _ in 0..3 {
        if let Poll::Ready(result) = running.as_mut().poll(&mut Context::from_waker(waker)) {
            returned = Some(result);
            break;
        }
    }
    let mut state = ctx.state();
    state.check_end(if returned.is_some() {
        Attempted::Complete
    } else {
        Attempted::Wait
    });
    if let Some(divergence) = state.divergence() {
        return Err(divergence.clone().into());
    }
    drop(state);
    if let (Some(Ok(output)), Some((seq, recorded))) = (&returned, recorded_end)
        && recorded != *output
    {
        return Err(ReplayError::OutputMismatch {
            seq,
            recorded: recorded.to_string(),
            replayed: output.to_string(),
        });
    }
    Ok(ReplayReport {
        events,
        commands,
        returned: returned.is_some(),
    })
}
