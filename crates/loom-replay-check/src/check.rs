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
        // The fold must be valid, and stable: twice, and through a JSON round-trip.
        let first = match ExecutionState::fold(&log) {
            Ok(state) => state,
            Err(error) => {
                return Finding::Error {
                    detail: format!("invalid log: {error}"),
                };
            }
        };
        if ExecutionState::fold(&log).ok().as_ref() != Some(&first) {
            return Finding::Divergent {
                seq: 0,
                recorded: "a fold of the log".into(),
                attempted: "a second fold gives another state".into(),
            };
        }
        // Through the record form the stores persist (the JSON form is covered by the kernel's
        // property tests); a fold that changed here would change on the next read of the log.
        let round_trip: Result<Vec<EventEnvelope>, _> = log
            .iter()
            .map(|envelope| {
                let bytes = encode_record(&envelope.event, envelope.recorded_at_ms);
                decode_record(&envelope.execution_id, envelope.seq, &bytes)
            })
            .collect();
        match round_trip.map(|copy| ExecutionState::fold(&copy)) {
            Ok(Ok(state)) if state == first => {}
            other => {
                return Finding::Divergent {
                    seq: 0,
                    recorded: "a fold of the log".into(),
                    attempted: format!(
                        "the fold of its serialization round-trip differs: {}",
                        match other {
                            Ok(Ok(_)) => "another state".to_owned(),
                            Ok(Err(error)) => error.to_string(),
                            Err(error) => error.to_string(),
                        }
                    ),
                };
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
