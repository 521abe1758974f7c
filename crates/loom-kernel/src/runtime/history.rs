//! What a recorded log says to a replaying flow: the commands it issued, in order, and the
//! results that came back.
//!
//! A *command* is what the flow itself did: a step's first event (`STEP_STARTED`, or its
//! outcome when it was refused before it started), a decision, a gate opened, a surface patch.
//! Everything else is an *input* the world sent back: step outcomes, doubts and verdicts,
//! resumes. On replay the k-th command the flow issues must match the k-th recorded command;
//! inputs are looked up by step or gate id, so concurrent steps may finish in any order.

use crate::classify::DataClassification;
use crate::hash::IdMap;
use std::fmt;

use crate::event::{ErrorInfo, Event, Verdict};
use crate::payload::Payload;
use crate::runtime::markers::{
    FIRST_OF_KIND, PAYLOAD_SCHEMA_KIND, is_first_of_step_id, schema_gate_id,
};

/// A command as recorded.
#[derive(Debug, Clone)]
pub(crate) enum Recorded {
    Step {
        step_id: String,
        effect: String,
        input_digest: String,
        first_event: &'static str,
        /// Where the step stands at the end of the log; taken when the command is replayed.
        state: Option<StepState>,
    },
    Decision {
        step_id: String,
        kind: String,
        value: Payload,
    },
    Suspend {
        gate_id: String,
        event_type: String,
        correlation_key: String,
    },
    Patch {
        step_id: String,
        surface_id: String,
        ops: Payload,
    },
}

/// A command as the flow issues it now, for matching and for error messages.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attempted<'a> {
    Step {
        step_id: &'a str,
        effect: &'a str,
        input_digest: &'a str,
    },
    Decision {
        step_id: &'a str,
        kind: &'a str,
    },
    Suspend {
        gate_id: &'a str,
        event_type: &'a str,
        correlation_key: &'a str,
    },
    Patch {
        step_id: &'a str,
        surface_id: &'a str,
        ops: &'a Payload,
    },
    /// The flow returned.
    Complete,
    /// The flow waits and issues nothing more.
    Wait,
}

impl fmt::Display for Recorded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Recorded::Step {
                step_id,
                effect,
                first_event,
                ..
            } => write!(f, "{first_event} step '{step_id}' (effect {effect})"),
            Recorded::Decision { step_id, kind, .. } => {
                write!(f, "DECISION_RECORDED '{step_id}' ({kind})")
            }
            Recorded::Suspend {
                gate_id,
                event_type,
                correlation_key,
            } => write!(
                f,
                "EXECUTION_SUSPENDED gate '{gate_id}' ({event_type}, key '{correlation_key}')"
            ),
            Recorded::Patch {
                step_id,
                surface_id,
                ..
            } => write!(f, "SURFACE_PATCH '{step_id}' on surface '{surface_id}'"),
        }
    }
}

impl fmt::Display for Attempted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attempted::Step {
                step_id, effect, ..
            } => write!(f, "calls effect '{effect}' as step '{step_id}'"),
            Attempted::Decision { step_id, kind } => {
                write!(f, "records decision '{step_id}' ({kind})")
            }
            Attempted::Suspend {
                gate_id,
                event_type,
                correlation_key,
            } => write!(
                f,
                "opens gate '{gate_id}' ({event_type}, key '{correlation_key}')"
            ),
            Attempted::Patch {
                step_id,
                surface_id,
                ..
            } => write!(f, "patches surface '{surface_id}' as '{step_id}'"),
            Attempted::Complete => f.write_str("returns"),
            Attempted::Wait => f.write_str("waits without issuing it"),
        }
    }
}

/// What two commands of the same kind and identity (step id and effect, surface, decision
/// kind, gate) carry beside it, to compare: a step's input digest, a patch's ops.
enum Inputs<'r, 'a> {
    Digest(&'r str, &'a str),
    Ops(&'r Payload, &'a Payload),
    /// A decision or a gate: nothing beside its identity is matched.
    Identity,
}

impl Recorded {
    /// Both sides of a mismatch, in words; when only the input changed, with the digests, or
    /// with the ops, masked by `classification` (K10-R6: this text leaves the runtime).
    pub(crate) fn describe_against(
        &self,
        attempted: &Attempted<'_>,
        classification: &DataClassification,
    ) -> (String, String) {
        match self.same_command(attempted) {
            Some(Inputs::Digest(recorded, digest)) => (
                format!("{self} with input digest {recorded}"),
                format!("{attempted} with input digest {digest}"),
            ),
            Some(Inputs::Ops(recorded, ops)) => (
                format!("{self} with ops {}", shown(recorded, classification)),
                format!("{attempted} with ops {}", shown(ops, classification)),
            ),
            _ => (self.to_string(), attempted.to_string()),
        }
    }

    /// Whether `attempted` is the same command. Differences in input show as a digest change.
    pub(crate) fn matches(&self, attempted: &Attempted<'_>) -> bool {
        match self.same_command(attempted) {
            Some(Inputs::Digest(recorded, digest)) => recorded == digest,
            Some(Inputs::Ops(recorded, ops)) => recorded == ops,
            Some(Inputs::Identity) => true,
            None => false,
        }
    }

    /// What the two carry beside their identity, if `attempted` is this command apart from it.
    fn same_command<'r, 'a>(&'r self, attempted: &Attempted<'a>) -> Option<Inputs<'r, 'a>> {
        match (self, *attempted) {
            (
                Recorded::Step {
                    step_id,
                    effect,
                    input_digest,
                    ..
                },
                Attempted::Step {
                    step_id: s,
                    effect: e,
                    input_digest: d,
                },
            ) if step_id == s && effect == e => Some(Inputs::Digest(input_digest, d)),
            (
                Recorded::Patch {
                    step_id,
                    surface_id,
                    ops,
                },
                Attempted::Patch {
                    step_id: s,
                    surface_id: i,
                    ops: o,
                },
            ) if step_id == s && surface_id == i => Some(Inputs::Ops(ops, o)),
            (
                Recorded::Decision { step_id, kind, .. },
                Attempted::Decision {
                    step_id: s,
                    kind: k,
                },
            ) if step_id == s && kind == k => Some(Inputs::Identity),
            (
                Recorded::Suspend {
                    gate_id,
                    event_type,
                    correlation_key,
                },
                Attempted::Suspend {
                    gate_id: g,
                    event_type: t,
                    correlation_key: k,
                },
            ) if gate_id == g && event_type == t && correlation_key == k => Some(Inputs::Identity),
            _ => None,
        }
    }
}

/// A payload as an error message shows it: masked, and shortened.
pub(crate) fn shown(payload: &Payload, classification: &DataClassification) -> String {
    if classification.is_empty() {
        return shorten(payload.as_json());
    }
    shorten(
        &classification
            .mask_message_value(&payload.to_value())
            .to_string(),
    )
}

/// At most 200 characters of `text`, for error messages.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

/// Where a recorded step stands.
#[derive(Debug, Clone)]
pub(crate) enum StepState {
    /// Started, no outcome: it was running when the last worker stopped.
    InFlight {
        attempt: u32,
    },
    /// Parked for an operator's verdict.
    InDoubt {
        attempt: u32,
    },
    Done(Result<Payload, ErrorInfo>),
}

/// The recorded history of one execution, ready for replay: a cursor's view of the log for
/// matching commands and serving inputs. What the log says of the execution as a whole (its
/// status, the budget spent, the pending gates) is the fold's (`ExecutionState`), not kept here.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub(crate) commands: Vec<(u64, Recorded)>,
    /// Steps recorded by a STEP_STARTED, by id: the only ones later events refer to (a step
    /// recorded by its outcome alone is done). Values index `commands`.
    started: IdMap<String, usize>,
    pub(crate) resumed: IdMap<String, Payload>,
    /// The seq of each gate's resume: of gates closed together, the first resumed in the log
    /// won, whatever their order in the group.
    resumed_at: IdMap<String, u64>,
}

impl History {
    /// The seq of `gate_id`'s recorded resume, if the log holds one.
    pub(crate) fn resumed_at(&self, gate_id: &str) -> Option<u64> {
        self.resumed_at.get(gate_id).copied()
    }

    /// Builds the history from a whole log (already validated by the fold), taking the
    /// events: payloads move into the history instead of being copied.
    pub(crate) fn from_events(events: impl IntoIterator<Item = (u64, Event)>) -> Self {
        let events = events.into_iter();
        let mut history = History::default();
        // At most one command per event: sized once rather than grown (growing a long log's
        // commands doubles them past their count and holds both copies while it moves them),
        // then the room other events left is given back.
        history.commands.reserve(events.size_hint().0);
        for (seq, event) in events {
            history.record(seq, event);
        }
        history.commands.shrink_to_fit();
        history
    }

    fn record(&mut self, seq: u64, event: Event) {
        match event {
            Event::StepStarted(e) => {
                let state = StepState::InFlight { attempt: e.attempt };
                match self.started.get(&e.step_id) {
                    Some(&index) => self.set_state(index, state),
                    None => {
                        let index = self.push_step(
                            seq,
                            e.step_id.clone(),
                            e.effect,
                            e.input_digest,
                            "STEP_STARTED",
                            state,
                        );
                        self.started.insert(e.step_id, index);
                    }
                }
            }
            Event::StepCompleted(e) => self.outcome(
                seq,
                e.step_id,
                e.effect,
                e.input_digest,
                "STEP_COMPLETED",
                StepState::Done(Ok(e.output)),
            ),
            Event::StepFailed(e) => self.outcome(
                seq,
                e.step_id,
                e.effect,
                e.input_digest,
                "STEP_FAILED",
                StepState::Done(Err(e.error)),
            ),
            Event::EffectInDoubt(e) => {
                if let Some(&index) = self.started.get(&e.step_id) {
                    self.set_state(index, StepState::InDoubt { attempt: e.attempt });
                }
            }
            Event::EffectResolved(e) => {
                if let Some(&index) = self.started.get(&e.step_id) {
                    let attempt = match self.commands.get(index) {
                        Some((
                            _,
                            Recorded::Step {
                                state: Some(StepState::InDoubt { attempt }),
                                ..
                            },
                        )) => *attempt,
                        _ => 1,
                    };
                    let state = match e.verdict {
                        Verdict::Retry => StepState::InFlight { attempt },
                        Verdict::Completed { output } => StepState::Done(Ok(output)),
                        Verdict::Failed { error } => StepState::Done(Err(error)),
                    };
                    self.set_state(index, state);
                }
            }
            // A gate's declared payload schema is a note on the gate, not a command (LD-031):
            // replay neither matches nor serves it.
            Event::DecisionRecorded(e)
                if e.kind == PAYLOAD_SCHEMA_KIND && schema_gate_id(&e.step_id).is_some() => {}
            // Nor is a `first_of`'s note of its gates (`markers.rs`, `FIRST_OF_KIND`).
            Event::DecisionRecorded(e)
                if e.kind == FIRST_OF_KIND && is_first_of_step_id(&e.step_id) => {}
            Event::DecisionRecorded(e) => self.commands.push((
                seq,
                Recorded::Decision {
                    step_id: e.step_id,
                    kind: e.kind,
                    value: e.value,
                },
            )),
            Event::ExecutionSuspended(e) => self.commands.push((
                seq,
                Recorded::Suspend {
                    gate_id: e.gate_id,
                    event_type: e.event_type,
                    correlation_key: e.correlation_key,
                },
            )),
            Event::ExecutionResumed(e) => {
                self.resumed_at.insert(e.gate_id.clone(), seq);
                self.resumed.insert(e.gate_id, e.payload);
            }
            Event::SurfacePatch(e) => self.commands.push((
                seq,
                Recorded::Patch {
                    step_id: e.step_id,
                    surface_id: e.surface_id,
                    ops: e.ops,
                },
            )),
            Event::ExecutionStarted(_)
            | Event::ExecutionCompleted(_)
            | Event::ExecutionFailed(_)
            | Event::ExecutionCancelled(_) => {}
        }
    }

    /// Records a step's first event as a command; returns its index.
    fn push_step(
        &mut self,
        seq: u64,
        step_id: String,
        effect: String,
        input_digest: String,
        first_event: &'static str,
        state: StepState,
    ) -> usize {
        self.commands.push((
            seq,
            Recorded::Step {
                step_id,
                effect,
                input_digest,
                first_event,
                state: Some(state),
            },
        ));
        self.commands.len() - 1
    }

    /// A step's outcome: its state, if the step's start is recorded; else its first event
    /// (a quick step is recorded by its outcome alone).
    fn outcome(
        &mut self,
        seq: u64,
        step_id: String,
        effect: String,
        input_digest: String,
        found: &'static str,
        state: StepState,
    ) {
        match self.started.get(&step_id) {
            Some(&index) => self.set_state(index, state),
            None => {
                self.push_step(seq, step_id, effect, input_digest, found, state);
            }
        }
    }

    fn set_state(&mut self, index: usize, new: StepState) {
        if let Some((_, Recorded::Step { state, .. })) = self.commands.get_mut(index) {
            *state = Some(new);
        }
    }

    /// The state of the step recorded as command `index`, taken (a command is replayed once).
    pub(crate) fn take_step_state(&mut self, index: usize) -> Option<StepState> {
        match self.commands.get_mut(index) {
            Some((_, Recorded::Step { state, .. })) => state.take(),
            _ => None,
        }
    }
}

/// A replayed flow issued something other than what the log recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at seq {seq}: recorded {recorded}; the flow now {attempted}")]
pub struct NonDeterminism {
    /// The seq of the recorded command that was not matched.
    pub seq: u64,
    /// The command the log recorded at that point.
    pub recorded: String,
    /// The command the flow made instead.
    pub attempted: String,
}
