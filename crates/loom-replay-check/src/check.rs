//! The check of one execution.

use loom_kernel::DataClassification;
use loom_kernel::FlowSet;
use loom_kernel::kit::StoredLog;
use loom_kernel::kit::{ReplayError, Replayer};
use loom_kernel::kit::{check_batch, decode_record, encode_record_into};
use loom_kernel::{Event, EventEnvelope, ExecutionState};

/// Checks logs against a set of flows. Effects are never run: replay serves every recorded
/// result from the log and drops whatever the flow would do past its end.
#[derive(Debug, Clone)]
pub struct Checker {
    replayer: Replayer,
    /// Whether values are classified: a finding then never prints a whole event.
    masks: bool,
}

/// What the check of one execution found.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The execution's id.
    pub execution: String,
    /// The flow's name and version, when the log names them.
    pub flow: Option<(String, u32)>,
    /// How many events its log holds.
    pub events: u64,
    /// What the check found.
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
        /// The seq where replay and log part.
        seq: u64,
        /// What the log recorded.
        recorded: String,
        /// What the flow attempted instead.
        attempted: String,
    },
    /// The check could not be made (unreadable, invalid or unsupported log, unknown flow).
    Error {
        /// Why the execution could not be checked.
        detail: String,
    },
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
    ///
    /// The effects the flows declare they use (`flow_fn(..).uses(..)`) are registered as
    /// stand-ins that are never run (replay serves every result from the log), so that the
    /// composition check of declared effects holds without the application's effects.
    pub fn new(flows: &FlowSet) -> Result<Self, loom_kernel::CompositionError> {
        Self::with_classification(flows, DataClassification::default())
    }

    /// A checker for `flows` whose findings mask the values at `classification`'s paths
    /// (K10-R6): a divergence names the recorded and the attempted command without showing a
    /// classified value.
    pub fn with_classification(
        flows: &FlowSet,
        classification: DataClassification,
    ) -> Result<Self, loom_kernel::CompositionError> {
        let masks = !classification.is_empty();
        let replayer = Replayer::new(flows, classification)?;
        Ok(Self { replayer, masks })
    }

    /// Checks one execution's log.
    pub fn check(&self, log: Vec<EventEnvelope>) -> Outcome {
        self.check_against(log, None)
    }

    /// Checks one execution's log as a store keeps it.
    pub fn check_stored(&self, stored: &StoredLog) -> Outcome {
        match stored.decode() {
            Ok(log) => self.check_decoded(log, stored),
            Err(error) => Outcome::unread(stored.execution_id().to_string(), &error),
        }
    }

    /// [`Self::check_stored`] for a log already decoded from `stored` (`stored.decode()`):
    /// the round-trip is checked against the records the events were read from.
    pub(crate) fn check_decoded(&self, log: Vec<EventEnvelope>, stored: &StoredLog) -> Outcome {
        self.check_against(log, Some(stored))
    }

    fn check_against(&self, log: Vec<EventEnvelope>, stored: Option<&StoredLog>) -> Outcome {
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
        let finding = self.find(log, stored);
        Outcome {
            execution,
            flow,
            events,
            finding,
        }
    }

    fn find(&self, log: Vec<EventEnvelope>, stored: Option<&StoredLog>) -> Finding {
        // A payload nested deeper than any reader parses (written before stores checked
        // depth, or a log from elsewhere) fails the flow's decoding on replay: that is a log
        // the check cannot read, not code that changed.
        for envelope in &log {
            let one = std::slice::from_ref(&envelope.event);
            if let Err(error) = check_batch(&envelope.execution_id, envelope.seq, one) {
                return Finding::Error {
                    detail: format!("unreadable log: {error}"),
                };
            }
        }
        let first = match ExecutionState::fold(&log) {
            Ok(state) => state,
            Err(error) => {
                return Finding::Error {
                    detail: format!("invalid log: {error}"),
                };
            }
        };
        if let Some(finding) = round_trip(&log, stored, self.masks) {
            return finding;
        }
        // Stable: folding the log a second time (which is also its round-tripped copy, equal
        // event by event) gives the same state, which the replay then goes on from.
        let second = match ExecutionState::fold(&log) {
            Ok(state) if state == first => state,
            Ok(_) => return unstable("a second fold gives another state".into()),
            Err(error) => {
                return unstable(format!("a second fold refuses the log: {error}"));
            }
        };
        match self.replayer.replay_folded_log(log, second) {
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

fn unstable(detail: String) -> Finding {
    Finding::Divergent {
        seq: 0,
        recorded: "a fold of the log".into(),
        attempted: detail,
    }
}

/// Whether every event survives a round-trip through the record form the stores persist (the
/// JSON form's is a property test of the kernel): `None` when it does.
///
/// An event read from a store record is re-encoded and compared with that record: equal bytes
/// decode to the event the record decoded to, so the round-trip holds without decoding again.
/// Otherwise (a log from elsewhere, a record in an older form) the re-encoded event is decoded
/// and compared with the original; a record that does not decode is reported before a changed
/// event, wherever it is in the log.
fn round_trip(log: &[EventEnvelope], stored: Option<&StoredLog>, masks: bool) -> Option<Finding> {
    let mut bytes = Vec::with_capacity(256);
    let mut changed = None;
    for (index, envelope) in log.iter().enumerate() {
        bytes.clear();
        encode_record_into(&mut bytes, &envelope.event, envelope.recorded_at_ms);
        if stored.and_then(|stored| stored.record(index)) == Some(bytes.as_slice()) {
            continue;
        }
        match decode_record(&envelope.execution_id, envelope.seq, &bytes) {
            Err(error) => return Some(unstable(format!("the log does not round-trip: {error}"))),
            Ok(copy) if changed.is_none() && copy != *envelope => {
                // The events in full would show classified values: with a classification,
                // only their types.
                let (recorded, copied) = if masks {
                    (
                        format!("a {} event", envelope.event.type_name()),
                        format!("a changed {} event", copy.event.type_name()),
                    )
                } else {
                    (format!("{:?}", envelope.event), format!("{:?}", copy.event))
                };
                changed = Some(Finding::Divergent {
                    seq: envelope.seq,
                    recorded,
                    attempted: format!("a round-trip through the record form gives {copied}"),
                });
            }
            Ok(_) => {}
        }
    }
    changed
}
