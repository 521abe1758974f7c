//! The check of one execution.

use loom_kernel::envelope::{decode_record, encode_record};
use loom_kernel::runtime::{FlowSet, ReplayError, Runtime};
use loom_kernel::{Event, EventEnvelope, ExecutionState, MemoryStore};

/// Checks logs against a set of flows. Effects are never run: replay serves every recorded
/// result from the log and drops whatever the flow would do past its end.
#[derive(Debug, Clone)]
pub struct Checker {
    runtime: Runtime<MemoryStore>,
}

/// What the check of one execution found.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub execution: String,
    pub flow: Option<(String, u32)>,
    pub events: u64,
    pub finding: Finding,
}

/// The verdict on one execution.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Finding {
    /// Replays exactly as recorded.
    Deterministic,
    /// Today's code does not do what the log says it did.
    Divergent {
        seq: u64,
        recorded: String,
        attempted: String,
    },
    /// The check could not be made (unreadable, invalid or unsupported log, unknown flow).
    Error { detail: String },
}

impl Outcome {
    /// The outcome for an execution whose log could not be read.
    pub fn unread(execution: String, error: &dyn std::error::Error) -> Self {
        Self {
            execution,
            flow: None,
            events: 0,
            finding: Finding::Error {
                detail: error.to_string(),
            },
        }
    }
}

impl Checker {
    /// A checker for `flows`. Fails if two flows share a name and version.
    pub fn new(flows: &FlowSet) -> Result<Self, loom_kernel::runtime::CompositionError> {
        let runtime = Runtime::builder(MemoryStore::new()).flows(flows).build()?;
        Ok(Self { runtime })
    }

    /// Checks one execution's log.
    pub fn check(&self, log: Vec<EventEnvelope>) -> Outcome {
        let execution = log
            .first()
            .map_or_else(String::new, |first| first.execution_id.to_string());
        let flow = match log.first().map(|first| &first.event) {
            Some(Event::ExecutionStarted(started)) => {
                Some((started.flow.clone(), started.flow_version))
            }
            _ => None,
        };
        let events = log.len() as u64;
        let finding = self.find(log);
        Outcome {
            execution,
            flow,
            events,
            finding,
        }
    }

    fn find(&self, log: Vec<EventEnvelope>) -> Finding {
        let first = match ExecutionState::fold(&log) {
            Ok(state) => state,
            Err(error) => {
                return Finding::Error {
                    detail: format!("invalid log: {error}"),
                };
            }
        };
        // Stable: the log survives a round-trip through the record form the stores persist
        // (the JSON form's is a property test of the kernel), and folding it a second time, the
        // round-tripped copy, gives the same state.
        let round_trip: Result<Vec<EventEnvelope>, _> = log
            .iter()
            .map(|envelope| {
                let bytes = encode_record(&envelope.event, envelope.recorded_at_ms);
                decode_record(&envelope.execution_id, envelope.seq, &bytes)
            })
            .collect();
        let unstable = |detail: String| Finding::Divergent {
            seq: 0,
            recorded: "a fold of the log".into(),
            attempted: detail,
        };
        match round_trip {
            Err(error) => return unstable(format!("the log does not round-trip: {error}")),
            Ok(copy) => {
                if let Some(changed) = copy
                    .iter()
                    .zip(&log)
                    .find(|(copy, original)| copy != original)
                {
                    return Finding::Divergent {
                        seq: changed.1.seq,
                        recorded: format!("{:?}", changed.1.event),
                        attempted: format!(
                            "a round-trip through the record form gives {:?}",
                            changed.0.event
                        ),
                    };
                }
                match ExecutionState::fold(&copy) {
                    Ok(state) if state == first => {}
                    Ok(_) => return unstable("a second fold gives another state".into()),
                    Err(error) => {
                        return unstable(format!("a second fold refuses the log: {error}"));
                    }
                }
            }
        }
        match self.runtime.replay_folded_log(log, &first) {
            Ok(_) => Finding::Deterministic,
            Err(ReplayError::NonDeterminism(divergence)) => Finding::Divergent {
                seq: divergence.seq,
                recorded: divergence.recorded,
                attempted: divergence.attempted,
            },
            Err(ReplayError::OutputMismatch {
                seq,
                recorded,
                replayed,
            }) => Finding::Divergent {
                seq,
                recorded: format!("EXECUTION_COMPLETED with output {recorded}"),
                attempted: format!("returns {replayed}"),
            },
            Err(error) => Finding::Error {
                detail: error.to_string(),
            },
        }
    }
}
