//! The flow context: every command a flow issues goes through it, is matched against the
//! recorded history while there is history, and is recorded once the flow goes live.
//!
//! Step ids are assigned when a command is *called*, not when its future is first polled, so
//! futures that are created and then joined get ids in call order (ADR 0061). Commands queue
//! their events in call order; the driver appends them after each poll of the flow.

mod child;
mod patched;

pub use child::ChildCall;
pub(crate) use child::ChildStart;
pub use patched::PATCH_KIND;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::classify::DataClassification;
use crate::event::*;
use crate::hash::IdMap;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::codes;
use crate::runtime::contain::contain;
use crate::runtime::digest::input_digest;
use crate::runtime::effect::{Effect, EffectCall, EffectOutcome, EffectResult};
use crate::runtime::handle::ExecuteTarget;
use crate::runtime::history::{Attempted, History, NonDeterminism, StepState};
use crate::runtime::timers::{
    Clock, DEADLINE_KIND, TIMER_EVENT_TYPE, closed_payload, deadline_value, is_closed_payload,
    is_reserved_event_type, is_reserved_payload, is_timed_out_payload, parse_deadline,
    timed_out_payload,
};

mod request;

/// Why a command did not give the flow a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// The effect failed (or an operator's verdict said so); this is recorded.
    #[error("step failed: {0:?}")]
    Failed(ErrorInfo),
    /// Two steps of the execution have this explicit id (ADR 0061).
    #[error("step id '{0}' is used twice in this execution")]
    DuplicateStepId(String),
    /// A gate with this event type and key is already pending.
    #[error("a gate for ({event_type}, key '{correlation_key}') is already pending")]
    DuplicateGate {
        /// The gate's event type.
        event_type: String,
        /// The gate's correlation key.
        correlation_key: String,
    },
    /// The input or value does not serialize to JSON.
    #[error("the input or value does not serialize to JSON: {0}")]
    Encode(String),
    /// The recorded value does not decode to the type asked for.
    #[error("the recorded value of '{step_id}' does not decode: {detail}")]
    Decode {
        /// The step's id (ADR 0061).
        step_id: String,
        /// What went wrong, in words.
        detail: String,
    },
    /// The replayed flow diverged from its log; the runtime stops the execution.
    #[error("the flow diverged from its recorded history")]
    Diverged,
    /// Gate event types starting with `loom.` belong to the runtime (`loom.timer` is a
    /// timer's); a flow cannot open such a gate.
    #[error("gate event type '{0}' is reserved for the runtime (it starts with 'loom.')")]
    ReservedEventType(String),
    /// `first_of` was given no gate.
    #[error("first_of needs at least one gate")]
    NoGates,
    /// A gate's request ([`FlowCtx::suspend_with_request`]) cannot be recorded; nothing was.
    #[error("the gate's request cannot be recorded: {0}")]
    InvalidRequest(String),
    /// `ctx.child` cannot derive a valid execution id for the child.
    #[error("cannot start flow '{flow}' as a child: {detail}")]
    ChildId {
        /// The flow asked for.
        flow: String,
        /// Why, in words.
        detail: String,
    },
}

/// Which of the gates of a [`FlowCtx::first_of`] came first, as the log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selected {
    /// The gate at `index` (in the order given) was resumed first, with `payload`; the others
    /// were closed.
    Gate {
        /// The gate's position in the list given to `first_of`.
        index: usize,
        /// What its resume carried.
        payload: Payload,
    },
    /// The deadline passed before any resume; every gate was closed.
    TimedOut,
}

/// How a gate with a deadline ended: whichever came first, as the log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateOutcome {
    /// A caller resumed the gate before its deadline, with this payload.
    Resumed(Payload),
    /// The deadline passed first; the runtime closed the gate.
    TimedOut,
}

/// How a step is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepName {
    /// `name#n`: the n-th call with this name in the execution.
    Counted(String),
    /// Exactly this id; using it twice is an error.
    Explicit(String),
}

/// A flow's handle on the world. Cheap to clone; clones share the execution.
#[derive(Clone)]
pub struct FlowCtx {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FlowCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowCtx")
            .field("execution_id", &self.shared.execution_id)
            .finish()
    }
}

pub(crate) struct Shared {
    pub(crate) execution_id: ExecutionId,
    /// Per-execution state of the crates that build on the context (e.g. the agent surface's
    /// models), by type. Rebuilt on every replay, since the flow issues the same commands.
    locals: Mutex<HashMap<std::any::TypeId, Box<dyn std::any::Any + Send>>>,
    effects: Arc<BTreeMap<String, Arc<dyn Effect>>>,
    capabilities: Arc<BTreeSet<String>>,
    budget: Option<u64>,
    /// K10-R6: what texts that leave the runtime (errors, traces) must not show.
    classification: Arc<DataClassification>,
    /// Read only for values the flow records (`now`, a timer's deadline), never on replay.
    clock: Arc<dyn Clock>,
    state: Mutex<CtxState>,
}

/// An effect to start once the events before it are durable (at once, for idempotent ones).
pub(crate) struct Dispatch {
    pub(crate) effect: Arc<dyn Effect>,
    pub(crate) call: EffectCall,
    /// Events to append before it may start: non-idempotent effects wait for their
    /// STEP_STARTED to be durable (K9).
    pub(crate) durable_before: bool,
}

struct Slot {
    value: Option<Result<Payload, StepError>>,
    /// For a `first_of`: which gate's resume `value` is.
    chosen: Option<usize>,
    waker: Option<Waker>,
}

struct RunningStep {
    effect: String,
    /// Whether the effect may run twice harmlessly: a non-idempotent one cut off by a cancel
    /// is recorded in doubt (K9).
    idempotent: bool,
    input_digest: String,
    input: Payload,
    attempt: u32,
    slot: u64,
    /// K3: what the step holds against the budget while it runs.
    held: u64,
    /// K3: the `max_cost` its `STEP_STARTED` recorded, what a `completed` verdict charges
    /// (ADR 0024).
    charge: u64,
}

struct PendingGate {
    gate_id: String,
    event_type: String,
    correlation_key: String,
    slot: u64,
    /// The recorded deadline (unix ms), for a timer or a gate with a timeout (in a `first_of`,
    /// on its first gate only).
    deadline: Option<u64>,
    /// For a gate of a `first_of`: the group (its command's slot) and its place in it.
    group: Option<(u64, usize)>,
}

#[derive(Default)]
pub(crate) struct CtxState {
    history: History,
    cursor: usize,
    counters: IdMap<String, u32>,
    explicit_ids: HashSet<String>,
    out: Vec<Event>,
    dispatch: Vec<Dispatch>,
    slots: IdMap<u64, Slot>,
    next_slot: u64,
    running: IdMap<String, RunningStep>,
    in_doubt: BTreeMap<String, RunningStep>,
    gates: Vec<PendingGate>,
    divergence: Option<NonDeterminism>,
    budget_spent: u64,
    /// K3: the sum of what running steps hold (their effects' `max_cost`).
    budget_held: u64,
    /// Set by whole-log replay: the first command issued past the end of the history, in
    /// words (a completed log followed by a new command is a divergence).
    pub(crate) watch_live: bool,
    pub(crate) first_live: Option<String>,
    /// Deadlines of gates opened (or replayed as pending) since the driver last looked, to arm.
    armed: Vec<GateDeadline>,
    /// Deadlines of gates resumed before them, to disarm.
    disarmed: Vec<GateDeadline>,
    /// Gates (event type, correlation key) that their deadline closed: a resume that comes
    /// later is told so.
    timed_out: BTreeSet<(String, String)>,
    /// Children whose gates were opened or replayed as pending, for the driver to start.
    child_starts: Vec<child::ChildStart>,
    /// `ctx.patched` answers of this run, by change id.
    patches: BTreeMap<String, bool>,
}

/// A gate's id and its deadline (unix ms).
pub(crate) type GateDeadline = (String, u64);

/// Why a resume could not be applied to the running flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GateMiss {
    NoPendingGate,
    /// The gate's deadline passed first.
    TimedOut,
    /// A `loom.` gate: only the runtime resumes it.
    Reserved,
    /// The payload is the runtime's timeout marker.
    ReservedPayload,
}

/// Why a verdict could not be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VerdictMiss {
    NotInDoubt,
}

impl FlowCtx {
    pub(crate) fn new(
        execution_id: ExecutionId,
        effects: Arc<BTreeMap<String, Arc<dyn Effect>>>,
        classification: Arc<DataClassification>,
        clock: Arc<dyn Clock>,
        started: &ExecutionStarted,
        history: History,
    ) -> Self {
        let budget_spent = history.budget_spent;
        Self {
            shared: Arc::new(Shared {
                execution_id,
                locals: Mutex::new(HashMap::new()),
                effects,
                capabilities: Arc::new(started.capabilities.clone()),
                budget: started.budget,
                classification,
                clock,
                state: Mutex::new(CtxState {
                    history,
                    budget_spent,
                    ..CtxState::default()
                }),
            }),
        }
    }

    /// The execution this flow runs as.
    pub fn execution_id(&self) -> &ExecutionId {
        &self.shared.execution_id
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, CtxState> {
        // Flow code never runs while the lock is held, so a poisoned lock only means a panic
        // in the kernel's own bookkeeping; its data is still consistent.
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on this execution's value of type `T` (created with `T::default()` on first
    /// use). Crates that extend the context keep their per-execution state here; it lives as
    /// long as the execution's driver and is rebuilt by replay, so it must be derived only from
    /// what the flow does through the context. All types share one lock, which is not
    /// re-entrant: do not call `with_local` (or anything that does) from inside `f`.
    pub fn with_local<T: Default + Send + 'static, R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut locals = self.shared.locals.lock().unwrap_or_else(|p| p.into_inner());
        let entry = locals
            .entry(std::any::TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()));
        match entry.downcast_mut::<T>() {
            Some(value) => f(value),
            // The map is keyed by the type id, so the downcast always succeeds.
            None => f(&mut T::default()),
        }
    }

    /// Runs `effect` with `input` as step `effect#n`. `effect` is a name (`"mail.send"`; the
    /// command resolves to the output as a [`Payload`]) or an
    /// [`EffectHandle`](crate::runtime::EffectHandle) (it resolves to the output decoded to the
    /// handle's type; one that does not decode is [`StepError::Decode`]). Both record the same
    /// events.
    pub fn execute<T: ExecuteTarget<I> + ?Sized, I: ?Sized>(
        &self,
        effect: &T,
        input: &I,
    ) -> T::Command {
        effect.issue(self, input)
    }

    /// Runs `effect` with `input` under the given step name.
    pub fn execute_as<I: Serialize + ?Sized>(
        &self,
        name: StepName,
        effect: &str,
        input: &I,
    ) -> Command {
        self.issue_step(name, effect, input, false).0
    }

    /// A step's command, and its id when `want_id` (or when the id could be assigned at all).
    pub(super) fn issue_step<I: Serialize + ?Sized>(
        &self,
        name: StepName,
        effect: &str,
        input: &I,
        want_id: bool,
    ) -> (Command, Option<String>) {
        let mut state = self.state();
        let slot = state.new_slot();
        let mut issued_id = None;
        let outcome = (|| {
            let step_id = state.step_id(name)?;
            if want_id {
                issued_id = Some(step_id.clone());
            }
            let input = canonical(input)?;
            let digest = input_digest(&input);
            let attempted = Attempted::Step {
                step_id: &step_id,
                effect,
                input_digest: &digest,
            };
            if state.replay(attempted.clone(), &self.shared.classification) {
                return Ok(state.replay_step(&self.shared, step_id, effect, digest, input, slot));
            }
            if state.divergence.is_some() {
                return Err(StepError::Diverged);
            }
            state.note_live(&attempted);
            let Some(handler) = self.shared.effects.get(effect) else {
                return Err(state.refuse_step(step_id, effect, digest, unknown_effect(effect)));
            };
            let handler = Arc::clone(handler);
            state.admit_step(&self.shared, handler, step_id, effect, digest, input, slot)
        })();
        (self.command(state, slot, outcome), issued_id)
    }

    /// The future of the command in `slot`: ready at once when `outcome` already holds its
    /// result (a replayed or refused command), pending until the driver fills it otherwise.
    fn command(
        &self,
        mut state: MutexGuard<'_, CtxState>,
        slot: u64,
        outcome: Result<Option<Payload>, StepError>,
    ) -> Command {
        match outcome {
            Ok(Some(value)) => state.fill(slot, Ok(value)),
            Ok(None) => {}
            Err(err) => state.fill(slot, Err(err)),
        }
        drop(state);
        Command {
            shared: Arc::clone(&self.shared),
            slot,
        }
    }

    /// Runs `effect` and decodes its output.
    pub fn call<O: DeserializeOwned, I: Serialize + ?Sized>(
        &self,
        effect: &str,
        input: &I,
    ) -> impl Future<Output = Result<O, StepError>> + Send + 'static {
        let (command, step_id) =
            self.issue_step(StepName::Counted(effect.to_owned()), effect, input, true);
        async move {
            let output = command.await?;
            output.decode().map_err(|err| StepError::Decode {
                // Assigned whenever the command got this far: a step whose id could not be
                // assigned fails before it has an output.
                step_id: step_id.unwrap_or_default(),
                detail: err.to_string(),
            })
        }
    }

    /// Opens a gate and waits for a resume with `event_type` and `correlation_key`; returns
    /// the resume's payload. The gate is `event_type#n`.
    pub fn suspend(&self, event_type: &str, correlation_key: &str) -> Command {
        self.suspend_as(
            StepName::Counted(event_type.to_owned()),
            event_type,
            correlation_key,
        )
    }

    /// Opens a gate under the given name.
    pub fn suspend_as(&self, name: StepName, event_type: &str, correlation_key: &str) -> Command {
        let mut state = self.state();
        let slot = state.new_slot();
        let outcome = (|| {
            let gate_id = state.step_id(name)?;
            if is_reserved_event_type(event_type) {
                return Err(StepError::ReservedEventType(event_type.to_owned()));
            }
            state.refuse_duplicate_gate(event_type, correlation_key)?;
            let classification = &self.shared.classification;
            if let Some(payload) =
                state.open_gate(&gate_id, event_type, correlation_key, classification)?
            {
                return Ok(Some(payload));
            }
            state.gates.push(PendingGate {
                gate_id,
                event_type: event_type.to_owned(),
                correlation_key: correlation_key.to_owned(),
                slot,
                deadline: None,
                group: None,
            });
            Ok(None)
        })();
        self.command(state, slot, outcome)
    }

    /// A durable timer: waits `duration` from now (read from the runtime's clock once and
    /// recorded), then yields a `null` payload. The timer is the gate `timer#n`; it survives
    /// a crash (after `recover` it fires at its recorded deadline, or at once if that has
    /// passed), and while it waits the execution holds no task (ADR 0009).
    pub fn sleep(&self, duration: std::time::Duration) -> Command {
        self.deadline_gate(
            StepName::Counted("timer".to_owned()),
            TIMER_EVENT_TYPE,
            None,
            Deadline::After(duration),
        )
    }

    /// A durable timer that fires at `deadline_unix_ms` (milliseconds since the Unix epoch,
    /// by the runtime's clock), or at once if that has passed; yields a `null` payload.
    pub fn sleep_until(&self, deadline_unix_ms: u64) -> Command {
        self.deadline_gate(
            StepName::Counted("timer".to_owned()),
            TIMER_EVENT_TYPE,
            None,
            Deadline::At(deadline_unix_ms),
        )
    }

    /// Opens a gate like [`FlowCtx::suspend`] that also closes itself when `timeout` has
    /// passed (measured from now, read once and recorded): whichever comes first, a resume or
    /// the deadline, is recorded, and replay takes the same branch. A resume that arrives
    /// after the deadline is refused ([`crate::runtime::ResumeError::TimedOut`]).
    ///
    /// ```ignore
    /// match ctx.suspend_with_timeout("Approval", "order-42", Duration::from_secs(86_400)).await? {
    ///     GateOutcome::Resumed(answer) => approve(answer),
    ///     GateOutcome::TimedOut => escalate(),
    /// }
    /// ```
    pub fn suspend_with_timeout(
        &self,
        event_type: &str,
        correlation_key: &str,
        timeout: std::time::Duration,
    ) -> TimedGate {
        self.timed_gate(event_type, correlation_key, Deadline::After(timeout))
    }

    /// [`FlowCtx::suspend_with_timeout`] with an absolute deadline (unix ms).
    pub fn suspend_until(
        &self,
        event_type: &str,
        correlation_key: &str,
        deadline_unix_ms: u64,
    ) -> TimedGate {
        self.timed_gate(event_type, correlation_key, Deadline::At(deadline_unix_ms))
    }

    fn timed_gate(&self, event_type: &str, correlation_key: &str, deadline: Deadline) -> TimedGate {
        TimedGate {
            command: self.deadline_gate(
                StepName::Counted(event_type.to_owned()),
                event_type,
                Some(correlation_key),
                deadline,
            ),
        }
    }

    /// Opens several gates, `(event_type, correlation_key)` each (gate ids `event_type#n`), and
    /// waits for the first of them to be resumed, or for `timeout` (measured from now, read
    /// once and recorded) if one is given. Whichever came first is recorded, and the runtime
    /// closes the other gates in the same batch (a resume with the payload
    /// `{"loom.closed": {"by": <gate id>}}`, or the timeout marker for all of them when the
    /// deadline won), so no gate stays open in the log and replay takes the same branch. A
    /// resume of a closed gate is refused.
    ///
    /// ```ignore
    /// match ctx.first_of(&[("Approval", "order-42"), ("Rejection", "order-42")], Some(day)).await? {
    ///     Selected::Gate { index: 0, payload } => approve(payload),
    ///     Selected::Gate { .. } => reject(),
    ///     Selected::TimedOut => escalate(),
    /// }
    /// ```
    pub fn first_of(
        &self,
        gates: &[(&str, &str)],
        timeout: Option<std::time::Duration>,
    ) -> FirstOf {
        let mut state = self.state();
        let slot = state.new_slot();
        let outcome = (|| {
            if gates.is_empty() {
                return Err(StepError::NoGates);
            }
            let mut ids = Vec::with_capacity(gates.len());
            for (event_type, correlation_key) in gates {
                ids.push(state.step_id(StepName::Counted((*event_type).to_owned()))?);
                if is_reserved_event_type(event_type) {
                    return Err(StepError::ReservedEventType((*event_type).to_owned()));
                }
                let twice = gates
                    .iter()
                    .filter(|(t, k)| t == event_type && k == correlation_key)
                    .count()
                    > 1;
                if twice {
                    return Err(StepError::DuplicateGate {
                        event_type: (*event_type).to_owned(),
                        correlation_key: (*correlation_key).to_owned(),
                    });
                }
                state.refuse_duplicate_gate(event_type, correlation_key)?;
            }
            let deadline_ms = match timeout {
                Some(timeout) => {
                    Some(self.deadline(&mut state, &ids[0], Deadline::After(timeout))?)
                }
                None => None,
            };
            let mut recorded = Vec::with_capacity(gates.len());
            for ((event_type, correlation_key), gate_id) in gates.iter().zip(&ids) {
                let classification = &self.shared.classification;
                recorded.push(state.open_gate(
                    gate_id,
                    event_type,
                    correlation_key,
                    classification,
                )?);
            }
            // The gates were closed together: one resume that is not a marker is the winner;
            // the timeout marker on them says the deadline won.
            if recorded.iter().any(Option::is_some) {
                let winner = recorded.iter().position(|payload| {
                    payload
                        .as_ref()
                        .is_some_and(|p| !is_closed_payload(p) && !is_timed_out_payload(p))
                });
                return Ok(Some(match winner {
                    Some(index) => {
                        if let Some(slot) = state.slots.get_mut(&slot) {
                            slot.chosen = Some(index);
                        }
                        recorded.swap_remove(index).unwrap_or_else(Payload::null)
                    }
                    None => {
                        for (event_type, correlation_key) in gates {
                            state
                                .timed_out
                                .insert(((*event_type).to_owned(), (*correlation_key).to_owned()));
                        }
                        timed_out_payload(deadline_ms.unwrap_or_default())
                    }
                }));
            }
            if let Some(deadline_ms) = deadline_ms {
                state.armed.push((ids[0].clone(), deadline_ms));
            }
            for (index, ((event_type, correlation_key), gate_id)) in
                gates.iter().zip(ids).enumerate()
            {
                state.gates.push(PendingGate {
                    gate_id,
                    event_type: (*event_type).to_owned(),
                    correlation_key: (*correlation_key).to_owned(),
                    slot,
                    deadline: if index == 0 { deadline_ms } else { None },
                    group: Some((slot, index)),
                });
            }
            Ok(None)
        })();
        FirstOf {
            command: self.command(state, slot, outcome),
        }
    }

    /// A gate's deadline: the recorded one on replay, else computed (from the clock for
    /// `After`) and recorded as a `loom.deadline` decision under the gate's id.
    fn deadline(
        &self,
        state: &mut CtxState,
        gate_id: &str,
        deadline: Deadline,
    ) -> Result<u64, StepError> {
        let attempted = Attempted::Decision {
            step_id: gate_id,
            kind: DEADLINE_KIND,
        };
        if state.replay(attempted.clone(), &self.shared.classification) {
            let index = state.cursor - 1;
            let recorded = match state.history.commands.get(index) {
                Some((_, crate::runtime::history::Recorded::Decision { value, .. })) => {
                    parse_deadline(value)
                }
                _ => None,
            };
            return recorded.ok_or_else(|| StepError::Decode {
                step_id: gate_id.to_owned(),
                detail: "the recorded deadline is not {\"deadlineMs\": <unix ms>}".into(),
            });
        }
        if state.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        state.note_live(&attempted);
        let deadline_ms = match deadline {
            Deadline::At(at) => at,
            Deadline::After(after) => self
                .shared
                .clock
                .now_ms()
                .saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX)),
        };
        state.out.push(Event::DecisionRecorded(DecisionRecorded {
            step_id: gate_id.to_owned(),
            kind: DEADLINE_KIND.to_owned(),
            value: Payload::from_value(&deadline_value(deadline_ms)),
        }));
        Ok(deadline_ms)
    }

    /// A gate with a deadline: `DECISION_RECORDED` (kind `loom.deadline`, under the gate's id,
    /// value `{"deadlineMs": ..}`) then `EXECUTION_SUSPENDED`, queued together. `correlation_key`
    /// `None` is a timer: its key is its gate id and only the runtime resumes it.
    fn deadline_gate(
        &self,
        name: StepName,
        event_type: &str,
        correlation_key: Option<&str>,
        deadline: Deadline,
    ) -> Command {
        let timer = correlation_key.is_none();
        let mut state = self.state();
        let slot = state.new_slot();
        let outcome = (|| {
            let gate_id = state.step_id(name)?;
            if !timer && is_reserved_event_type(event_type) {
                return Err(StepError::ReservedEventType(event_type.to_owned()));
            }
            let correlation_key = correlation_key.unwrap_or(&gate_id).to_owned();
            state.refuse_duplicate_gate(event_type, &correlation_key)?;
            // The deadline: recorded once, served from the log on replay (the clock is not read).
            let deadline_ms = self.deadline(&mut state, &gate_id, deadline)?;
            let classification = &self.shared.classification;
            if let Some(payload) =
                state.open_gate(&gate_id, event_type, &correlation_key, classification)?
            {
                if timer {
                    return Ok(Some(Payload::null()));
                }
                if is_timed_out_payload(&payload) {
                    state
                        .timed_out
                        .insert((event_type.to_owned(), correlation_key));
                }
                return Ok(Some(payload));
            }
            state.armed.push((gate_id.clone(), deadline_ms));
            state.gates.push(PendingGate {
                gate_id,
                event_type: event_type.to_owned(),
                correlation_key,
                slot,
                deadline: Some(deadline_ms),
                group: None,
            });
            Ok(None)
        })();
        self.command(state, slot, outcome)
    }

    /// Reads a value from the world once and records it (ADR 0016); replay serves the
    /// recorded value. The decision is `kind#n`.
    pub fn decide<T: Serialize + DeserializeOwned>(
        &self,
        kind: &str,
        make: impl FnOnce() -> T,
    ) -> Result<T, StepError> {
        let mut state = self.state();
        let step_id = state.step_id(StepName::Counted(kind.to_owned()))?;
        let attempted = Attempted::Decision {
            step_id: &step_id,
            kind,
        };
        if state.replay(attempted.clone(), &self.shared.classification) {
            let index = state.cursor - 1;
            if let Some((_, crate::runtime::history::Recorded::Decision { value, .. })) =
                state.history.commands.get(index)
            {
                return value.decode().map_err(|err| StepError::Decode {
                    step_id,
                    detail: err.to_string(),
                });
            }
        }
        if state.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        state.note_live(&attempted);
        let value = make();
        let payload = Payload::encode(&value).map_err(|err| StepError::Encode(err.to_string()))?;
        state.out.push(Event::DecisionRecorded(DecisionRecorded {
            step_id,
            kind: kind.to_owned(),
            value: payload,
        }));
        Ok(value)
    }

    /// Wall-clock milliseconds since the Unix epoch, recorded.
    /// (Read from the runtime's clock: [`crate::runtime::RuntimeBuilder::clock`].)
    pub fn now(&self) -> Result<u64, StepError> {
        let clock = Arc::clone(&self.shared.clock);
        self.decide("now", move || clock.now_ms())
    }

    /// A random `u64`, recorded.
    pub fn random(&self) -> Result<u64, StepError> {
        self.decide("random", random_u64)
    }

    /// A random UUID (version 4) string, recorded.
    pub fn uuid(&self) -> Result<String, StepError> {
        self.decide("uuid", || {
            let (hi, lo) = (random_u64(), random_u64());
            let hi = (hi & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000;
            let lo = (lo & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
            format!(
                "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                hi >> 32,
                (hi >> 16) & 0xffff,
                hi & 0xffff,
                lo >> 48,
                lo & 0xffff_ffff_ffff
            )
        })
    }

    /// Records a `SURFACE_PATCH` on `surface_id`; `ops` is opaque to the kernel. The patch is
    /// `surface:<surface_id>#n`.
    pub fn emit_surface_patch(&self, surface_id: &str, ops: Payload) -> Result<(), StepError> {
        let mut state = self.state();
        let step_id = state.step_id(StepName::Counted(format!("surface:{surface_id}")))?;
        let attempted = Attempted::Patch {
            step_id: &step_id,
            surface_id,
            ops: &ops,
        };
        if state.replay(attempted.clone(), &self.shared.classification) {
            return Ok(());
        }
        if state.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        state.note_live(&attempted);
        state.out.push(Event::SurfacePatch(SurfacePatch {
            step_id,
            surface_id: surface_id.to_owned(),
            ops,
        }));
        Ok(())
    }
}

fn canonical<I: Serialize + ?Sized>(input: &I) -> Result<Payload, StepError> {
    // Through a Value, whose maps are ordered, so the text (and its digest) does not depend
    // on the iteration order of whatever map the caller serialized.
    let value = serde_json::to_value(input).map_err(|err| StepError::Encode(err.to_string()))?;
    Ok(Payload::from_value(&value))
}

/// The recorded error of a step whose effect is not registered.
fn unknown_effect(effect: &str) -> ErrorInfo {
    ErrorInfo::new(
        codes::UNKNOWN_EFFECT,
        format!("no effect named '{effect}' is registered"),
    )
}

/// Why a step found started, without an outcome, on recovery is in doubt.
fn worker_stopped(attempt: u32) -> ErrorInfo {
    ErrorInfo::new(
        codes::WORKER_STOPPED,
        format!(
            "the worker stopped while attempt {attempt} was running; the effect may or may not have run"
        ),
    )
}

/// `name#n`, built without the formatting machinery (this runs for every command).
fn counted_id(name: &str, n: u32) -> String {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let mut id = String::with_capacity(name.len() + 1 + digits.len() - at);
    id.push_str(name);
    id.push('#');
    for &digit in &digits[at..] {
        id.push(char::from(digit));
    }
    id
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // std seeds every RandomState from the OS; one hasher's output is a random word.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x9e37_79b9_7f4a_7c15);
    hasher.finish()
}

impl CtxState {
    fn new_slot(&mut self) -> u64 {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.slots.insert(
            slot,
            Slot {
                value: None,
                chosen: None,
                waker: None,
            },
        );
        slot
    }

    fn fill(&mut self, slot: u64, value: Result<Payload, StepError>) {
        if let Some(slot) = self.slots.get_mut(&slot) {
            slot.value = Some(value);
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        }
    }

    /// The id of the next command called `name`. Counted ids (`name#n`) are unique among
    /// themselves by construction, so only explicit ids need remembering, and a counted id is
    /// checked against them.
    fn step_id(&mut self, name: StepName) -> Result<String, StepError> {
        match name {
            StepName::Counted(name) => {
                let id = match self.counters.entry(name) {
                    std::collections::hash_map::Entry::Occupied(mut seen) => {
                        *seen.get_mut() += 1;
                        counted_id(seen.key(), *seen.get())
                    }
                    std::collections::hash_map::Entry::Vacant(first) => {
                        let id = counted_id(first.key(), 1);
                        first.insert(1);
                        id
                    }
                };
                // Most flows name no step explicitly: skip hashing the id then.
                if !self.explicit_ids.is_empty() && self.explicit_ids.contains(&id) {
                    return Err(StepError::DuplicateStepId(id));
                }
                Ok(id)
            }
            StepName::Explicit(id) => {
                let counted_before = id.rsplit_once('#').is_some_and(|(name, n)| {
                    n.parse::<u32>()
                        .is_ok_and(|n| n >= 1 && self.counters.get(name).is_some_and(|c| *c >= n))
                });
                if counted_before || !self.explicit_ids.insert(id.clone()) {
                    return Err(StepError::DuplicateStepId(id));
                }
                Ok(id)
            }
        }
    }

    /// Refuses a gate on an `(event type, correlation key)` a pending gate already waits on:
    /// a resume could not tell the two apart.
    fn refuse_duplicate_gate(
        &self,
        event_type: &str,
        correlation_key: &str,
    ) -> Result<(), StepError> {
        if self
            .gates
            .iter()
            .any(|g| g.event_type == event_type && g.correlation_key == correlation_key)
        {
            return Err(StepError::DuplicateGate {
                event_type: event_type.to_owned(),
                correlation_key: correlation_key.to_owned(),
            });
        }
        Ok(())
    }

    /// Opens the gate `gate_id`: served from the history while it lasts (`Some` with the
    /// recorded resume when the log holds one), else queued live as `EXECUTION_SUSPENDED`.
    /// `None` means the gate waits.
    fn open_gate(
        &mut self,
        gate_id: &str,
        event_type: &str,
        correlation_key: &str,
        classification: &DataClassification,
    ) -> Result<Option<Payload>, StepError> {
        let attempted = Attempted::Suspend {
            gate_id,
            event_type,
            correlation_key,
        };
        if self.replay(attempted.clone(), classification) {
            return Ok(self.history.resumed.remove(gate_id));
        }
        if self.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        self.note_live(&attempted);
        self.out.push(Event::ExecutionSuspended(ExecutionSuspended {
            gate_id: gate_id.to_owned(),
            event_type: event_type.to_owned(),
            correlation_key: correlation_key.to_owned(),
        }));
        Ok(None)
    }

    /// Matches a command against the history. True when it replays a recorded command; false
    /// when the history is exhausted (the command is live) or the flow diverged (then
    /// `divergence` is set).
    fn replay(&mut self, attempted: Attempted<'_>, classification: &DataClassification) -> bool {
        if self.divergence.is_some() {
            return false;
        }
        let Some((seq, recorded)) = self.history.commands.get(self.cursor) else {
            return false;
        };
        if recorded.matches(&attempted) {
            self.cursor += 1;
            true
        } else {
            let (recorded, attempted) = recorded.describe_against(&attempted, classification);
            self.divergence = Some(NonDeterminism {
                seq: *seq,
                recorded,
                attempted,
            });
            false
        }
    }

    /// A replayed step: its recorded result, or, if it was running when the last worker
    /// stopped, run again (idempotent) or parked in doubt (not idempotent).
    fn replay_step(
        &mut self,
        shared: &Shared,
        step_id: String,
        effect: &str,
        digest: String,
        input: Payload,
        slot: u64,
    ) -> Option<Payload> {
        // The command just matched is the one before the cursor.
        let recorded = self.history.take_step_state(self.cursor.saturating_sub(1));
        match recorded {
            Some(StepState::Done(Ok(output))) => Some(output),
            Some(StepState::Done(Err(error))) => {
                self.fill(slot, Err(StepError::Failed(error)));
                None
            }
            Some(StepState::InDoubt { attempt }) => {
                self.park_in_doubt(step_id, effect, digest, input, attempt, slot);
                None
            }
            Some(StepState::InFlight { attempt: previous }) => {
                match shared.effects.get(effect) {
                    Some(handler) if handler.idempotent() => {
                        // Run again with the same key, as the next attempt: its STEP_STARTED is
                        // recorded again, so a step re-run after each of several crashes gets
                        // attempts 2, 3, 4... (a quick re-run is recorded by its outcome alone).
                        let handler = Arc::clone(handler);
                        let attempt = previous.saturating_add(1);
                        let call = self.effect_call(shared, step_id, effect, input, attempt);
                        self.start_step(handler, call, digest, slot);
                    }
                    _ => {
                        self.out.push(Event::EffectInDoubt(EffectInDoubt {
                            step_id: step_id.clone(),
                            effect: effect.to_owned(),
                            attempt: previous,
                            reason: Some(worker_stopped(previous)),
                        }));
                        self.park_in_doubt(step_id, effect, digest, input, previous, slot);
                    }
                }
                None
            }
            // A recorded command always has a step state; treat a missing one as never run.
            None => match shared.effects.get(effect) {
                Some(handler) => {
                    let handler = Arc::clone(handler);
                    if let Err(error) =
                        self.admit_step(shared, handler, step_id, effect, digest, input, slot)
                    {
                        self.fill(slot, Err(error));
                    }
                    None
                }
                None => {
                    self.fill(slot, Err(StepError::Failed(unknown_effect(effect))));
                    None
                }
            },
        }
    }

    /// Keeps a replayed step in doubt until a verdict; it holds nothing against the budget.
    fn park_in_doubt(
        &mut self,
        step_id: String,
        effect: &str,
        input_digest: String,
        input: Payload,
        attempt: u32,
        slot: u64,
    ) {
        let step = RunningStep {
            effect: effect.to_owned(),
            // In doubt, it runs again only on a `retry` verdict, which looks the effect up.
            idempotent: false,
            input_digest,
            input,
            attempt,
            slot,
            held: 0,
            charge: self.history.held(&step_id),
        };
        self.in_doubt.insert(step_id, step);
    }

    /// A new step: the effect's admission checks (K2, K3, input) first. A refusal is recorded
    /// as the step's failure, without a `STEP_STARTED`, and the effect never runs.
    #[allow(clippy::too_many_arguments)]
    fn admit_step(
        &mut self,
        shared: &Shared,
        handler: Arc<dyn Effect>,
        step_id: String,
        effect: &str,
        digest: String,
        input: Payload,
        slot: u64,
    ) -> Result<Option<Payload>, StepError> {
        let call = self.effect_call(shared, step_id, effect, input, 1);
        let admitted = contain(|| {
            authorize(handler.as_ref(), &call)?;
            handler.admit(&call)
        })
        .unwrap_or_else(|panic| {
            Err(ErrorInfo::new(
                codes::ADMISSION_PANICKED,
                format!("the admission check of effect '{effect}' panicked: {panic}"),
            ))
        });
        if let Err(error) = admitted {
            return Err(self.refuse_step(call.step_id, effect, digest, error));
        }
        self.start_step(handler, call, digest, slot);
        Ok(None)
    }

    /// Records a step that fails before it starts (no such effect, or not admitted): its
    /// failure alone, at no cost.
    fn refuse_step(
        &mut self,
        step_id: String,
        effect: &str,
        digest: String,
        error: ErrorInfo,
    ) -> StepError {
        tracing::debug!(step = %step_id, code = %error.code, "step refused before it started");
        self.out.push(Event::StepFailed(StepFailed {
            step_id,
            effect: effect.to_owned(),
            input_digest: digest,
            error: error.clone(),
            cost: 0,
        }));
        StepError::Failed(error)
    }

    /// The dispatch of a step, with what the execution may still spend now.
    fn effect_call(
        &self,
        shared: &Shared,
        step_id: String,
        effect: &str,
        input: Payload,
        attempt: u32,
    ) -> EffectCall {
        EffectCall {
            execution_id: shared.execution_id.clone(),
            step_id,
            effect: effect.to_owned(),
            input,
            attempt,
            capabilities: Arc::clone(&shared.capabilities),
            budget_remaining: shared.budget.map(|budget| {
                budget
                    .saturating_sub(self.budget_spent)
                    .saturating_sub(self.budget_held)
            }),
        }
    }

    /// Records a step's start and queues its effect.
    fn start_step(
        &mut self,
        handler: Arc<dyn Effect>,
        call: EffectCall,
        digest: String,
        slot: u64,
    ) {
        self.out.push(Event::StepStarted(StepStarted {
            step_id: call.step_id.clone(),
            effect: call.effect.clone(),
            input_digest: digest.clone(),
            attempt: call.attempt,
            max_cost: handler.max_cost(),
        }));
        let step_id = call.step_id.clone();
        let idempotent = handler.idempotent();
        let running = RunningStep {
            effect: call.effect.clone(),
            idempotent,
            input_digest: digest,
            input: call.input.clone(),
            attempt: call.attempt,
            slot,
            held: handler.max_cost(),
            charge: handler.max_cost(),
        };
        let held = running.held;
        self.budget_held = self.budget_held.saturating_add(held);
        let durable_before = !idempotent;
        self.dispatch.push(Dispatch {
            effect: handler,
            call,
            durable_before,
        });
        self.running.insert(step_id, running);
    }

    /// The events and effects queued since the last call.
    pub(crate) fn take_queued(&mut self) -> (Vec<Event>, Vec<Dispatch>) {
        (
            std::mem::take(&mut self.out),
            std::mem::take(&mut self.dispatch),
        )
    }

    /// An effect finished: record its outcome and hand it to the flow.
    pub(crate) fn complete_step(&mut self, step_id: &str, outcome: EffectOutcome) {
        let Some(mut step) = self.running.remove(step_id) else {
            return;
        };
        self.budget_held = self.budget_held.saturating_sub(step.held);
        step.held = 0;
        let cost = match outcome.result {
            EffectResult::InDoubt(_) => 0,
            _ => outcome.cost,
        };
        self.budget_spent = self.budget_spent.saturating_add(cost);
        let value = match outcome.result {
            EffectResult::InDoubt(reason) => {
                tracing::warn!(step = %step_id, code = %reason.code, "effect in doubt");
                self.out.push(Event::EffectInDoubt(EffectInDoubt {
                    step_id: step_id.to_owned(),
                    effect: step.effect.clone(),
                    attempt: step.attempt,
                    reason: Some(reason),
                }));
                self.in_doubt.insert(step_id.to_owned(), step);
                return;
            }
            EffectResult::Completed(output) => {
                self.out.push(Event::StepCompleted(StepCompleted {
                    step_id: step_id.to_owned(),
                    effect: step.effect,
                    input_digest: step.input_digest,
                    output: output.clone(),
                    cost,
                }));
                Ok(output)
            }
            EffectResult::Failed(error) => {
                self.out.push(Event::StepFailed(StepFailed {
                    step_id: step_id.to_owned(),
                    effect: step.effect,
                    input_digest: step.input_digest,
                    error: error.clone(),
                    cost,
                }));
                Err(StepError::Failed(error))
            }
        };
        self.fill(step.slot, value);
    }

    /// A resume arrived: record it against the first pending gate it matches.
    pub(crate) fn resume_gate(
        &mut self,
        event_type: &str,
        correlation_key: &str,
        payload: Payload,
    ) -> Result<String, GateMiss> {
        if is_reserved_event_type(event_type) {
            return Err(GateMiss::Reserved);
        }
        if is_reserved_payload(&payload) {
            return Err(GateMiss::ReservedPayload);
        }
        let Some(index) = self
            .gates
            .iter()
            .position(|g| g.event_type == event_type && g.correlation_key == correlation_key)
        else {
            let key = (event_type.to_owned(), correlation_key.to_owned());
            return Err(if self.timed_out.contains(&key) {
                GateMiss::TimedOut
            } else {
                GateMiss::NoPendingGate
            });
        };
        let gate = self.gates.remove(index);
        if let Some(deadline) = gate.deadline {
            self.disarmed.push((gate.gate_id.clone(), deadline));
        }
        if let Some((group, chosen)) = gate.group {
            // The first of a `first_of`: its resume, then the others closed, in one batch.
            self.out.push(Event::ExecutionResumed(ExecutionResumed {
                gate_id: gate.gate_id.clone(),
                event_type: gate.event_type,
                correlation_key: gate.correlation_key,
                payload: payload.clone(),
            }));
            let closed = closed_payload(&gate.gate_id);
            for other in self.take_group(group) {
                if let Some(deadline) = other.deadline {
                    self.disarmed.push((other.gate_id.clone(), deadline));
                }
                self.out.push(Event::ExecutionResumed(ExecutionResumed {
                    gate_id: other.gate_id,
                    event_type: other.event_type,
                    correlation_key: other.correlation_key,
                    payload: closed.clone(),
                }));
            }
            if let Some(slot) = self.slots.get_mut(&group) {
                slot.chosen = Some(chosen);
            }
            self.fill(group, Ok(payload));
            return Ok(gate.gate_id);
        }
        self.out.push(Event::ExecutionResumed(ExecutionResumed {
            gate_id: gate.gate_id.clone(),
            event_type: gate.event_type,
            correlation_key: gate.correlation_key,
            payload: payload.clone(),
        }));
        self.fill(gate.slot, Ok(payload));
        Ok(gate.gate_id)
    }

    /// The deadline of gate `gate_id` passed: close the gate, if it still waits for that
    /// deadline, with the timeout marker. False when it does not (it was resumed first, or the
    /// execution moved on): the late deadline is ignored and nothing is recorded.
    pub(crate) fn expire_gate(&mut self, gate_id: &str, deadline_ms: u64) -> bool {
        let Some(index) = self
            .gates
            .iter()
            .position(|g| g.gate_id == gate_id && g.deadline == Some(deadline_ms))
        else {
            return false;
        };
        let gate = self.gates.remove(index);
        let payload = timed_out_payload(deadline_ms);
        if let Some((group, _)) = gate.group {
            // Every gate of the `first_of` closes with the timeout marker, in order.
            let mut all = vec![gate];
            all.extend(self.take_group(group));
            all.sort_by_key(|g| g.group.map(|(_, index)| index));
            for gate in all {
                self.out.push(Event::ExecutionResumed(ExecutionResumed {
                    gate_id: gate.gate_id,
                    event_type: gate.event_type.clone(),
                    correlation_key: gate.correlation_key.clone(),
                    payload: payload.clone(),
                }));
                self.timed_out
                    .insert((gate.event_type, gate.correlation_key));
            }
            self.fill(group, Ok(payload));
            return true;
        }
        let timer = gate.event_type == TIMER_EVENT_TYPE;
        self.out.push(Event::ExecutionResumed(ExecutionResumed {
            gate_id: gate.gate_id,
            event_type: gate.event_type.clone(),
            correlation_key: gate.correlation_key.clone(),
            payload: payload.clone(),
        }));
        if timer {
            self.fill(gate.slot, Ok(Payload::null()));
        } else {
            self.timed_out
                .insert((gate.event_type, gate.correlation_key));
            self.fill(gate.slot, Ok(payload));
        }
        true
    }

    /// Removes and returns the pending gates of a `first_of` group, in their order.
    fn take_group(&mut self, group: u64) -> Vec<PendingGate> {
        let (taken, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.gates)
            .into_iter()
            .partition(|g| g.group.is_some_and(|(of, _)| of == group));
        self.gates = kept;
        taken
    }

    /// The gates their deadline closed, for resumes that come after the execution ended.
    pub(crate) fn timed_out_gates(&self) -> BTreeSet<(String, String)> {
        self.timed_out.clone()
    }

    /// Deadlines to arm and to disarm since the last call.
    pub(crate) fn take_deadlines(&mut self) -> (Vec<GateDeadline>, Vec<GateDeadline>) {
        (
            std::mem::take(&mut self.armed),
            std::mem::take(&mut self.disarmed),
        )
    }

    /// The deadlines of the gates still pending.
    pub(crate) fn pending_deadlines(&self) -> Vec<GateDeadline> {
        self.gates
            .iter()
            .filter_map(|g| g.deadline.map(|d| (g.gate_id.clone(), d)))
            .collect()
    }

    /// An operator's verdict on a step in doubt.
    pub(crate) fn resolve(
        &mut self,
        shared: &FlowCtx,
        step_id: &str,
        verdict: Verdict,
        operator: Option<String>,
    ) -> Result<(), VerdictMiss> {
        let step = self
            .in_doubt
            .remove(step_id)
            .ok_or(VerdictMiss::NotInDoubt)?;
        self.out.push(Event::EffectResolved(EffectResolved {
            step_id: step_id.to_owned(),
            verdict: verdict.clone(),
            operator,
        }));
        match verdict {
            Verdict::Completed { output } => {
                self.budget_spent = self.budget_spent.saturating_add(step.charge);
                self.fill(step.slot, Ok(output));
            }
            Verdict::Failed { error } => self.fill(step.slot, Err(StepError::Failed(error))),
            Verdict::Retry => match shared.shared.effects.get(&step.effect) {
                Some(handler) => {
                    let handler = Arc::clone(handler);
                    let call = self.effect_call(
                        &shared.shared,
                        step_id.to_owned(),
                        &step.effect,
                        step.input,
                        step.attempt.saturating_add(1),
                    );
                    self.start_step(handler, call, step.input_digest, step.slot);
                }
                None => self.fill(
                    step.slot,
                    Err(StepError::Failed(unknown_effect(&step.effect))),
                ),
            },
        }
        Ok(())
    }

    /// Called when the flow returns or waits: recorded commands it did not issue again are a
    /// divergence.
    pub(crate) fn check_end(&mut self, attempted: Attempted<'_>) {
        if self.divergence.is_some() {
            return;
        }
        if let Some((seq, recorded)) = self.history.commands.get(self.cursor) {
            self.divergence = Some(NonDeterminism {
                seq: *seq,
                recorded: recorded.to_string(),
                attempted: attempted.to_string(),
            });
        }
    }

    pub(crate) fn divergence(&self) -> Option<&NonDeterminism> {
        self.divergence.as_ref()
    }

    /// Whether recorded commands remain that the flow has not issued again yet.
    pub(crate) fn replaying(&self) -> bool {
        self.cursor < self.history.commands.len() && self.divergence.is_none()
    }

    /// How many recorded commands the flow has issued again.
    pub(crate) fn replayed(&self) -> usize {
        self.cursor
    }

    /// Notes a command issued past the end of the history, for whole-log replay.
    fn note_live(&mut self, attempted: &Attempted<'_>) {
        if self.watch_live && self.first_live.is_none() {
            self.first_live = Some(attempted.to_string());
        }
    }

    /// Whether the flow has something only a message can answer (a pending gate or a step in
    /// doubt): the only places a driver may park it.
    pub(crate) fn waits_for_messages(&self) -> bool {
        !self.gates.is_empty() || !self.in_doubt.is_empty()
    }

    /// The execution is cancelled: every non-idempotent step whose effect may be running
    /// (`dispatched` says which were handed to their effect) is recorded in doubt, so an
    /// operator learns that it may have happened (K9).
    pub(crate) fn doubts_on_cancel(&mut self, dispatched: impl Fn(&str) -> bool) -> Vec<Event> {
        let mut cut_off: Vec<(&String, &RunningStep)> = self
            .running
            .iter()
            .filter(|(step_id, step)| !step.idempotent && dispatched(step_id))
            .collect();
        // In step-id order, not the map's: the log never depends on hash order.
        cut_off.sort_by(|a, b| a.0.cmp(b.0));
        cut_off
            .into_iter()
            .map(|(step_id, step)| {
                Event::EffectInDoubt(EffectInDoubt {
                    step_id: step_id.clone(),
                    effect: step.effect.clone(),
                    attempt: step.attempt,
                    reason: Some(ErrorInfo::new(
                        codes::CANCELLED_WHILE_RUNNING,
                        format!(
                            "the execution was cancelled while attempt {} was running; the effect may or may not have run",
                            step.attempt
                        ),
                    )),
                })
            })
            .collect()
    }
}

/// K2 for every effect: its capability (by default the name it is registered as) must have
/// been granted to the execution.
fn authorize(handler: &dyn Effect, call: &EffectCall) -> Result<(), ErrorInfo> {
    let capability = handler.capability().unwrap_or(&call.effect);
    if call.capabilities.contains(capability) {
        return Ok(());
    }
    Err(ErrorInfo::new(
        codes::CAPABILITY_DENIED,
        format!(
            "effect '{}' needs capability '{capability}', which execution {} was not granted",
            call.effect, call.execution_id
        ),
    ))
}

/// The future of one command: resolves with the step's output or the gate's payload.
#[must_use = "a command does nothing for the flow unless awaited"]
pub struct Command {
    shared: Arc<Shared>,
    slot: u64,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Command").field("slot", &self.slot).finish()
    }
}

impl Future for Command {
    type Output = Result<Payload, StepError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(slot) = state.slots.get_mut(&self.slot) else {
            return Poll::Pending;
        };
        match slot.value.take() {
            Some(value) => {
                state.slots.remove(&self.slot);
                Poll::Ready(value)
            }
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// How a gate's deadline is given.
#[derive(Debug, Clone, Copy)]
enum Deadline {
    After(std::time::Duration),
    At(u64),
}

/// The future of a gate with a deadline ([`FlowCtx::suspend_with_timeout`]): resolves with
/// whichever came first, as recorded.
#[must_use = "a gate does nothing for the flow unless awaited"]
#[derive(Debug)]
pub struct TimedGate {
    command: Command,
}

impl Future for TimedGate {
    type Output = Result<GateOutcome, StepError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.command).poll(cx).map(|result| {
            result.map(|payload| {
                if is_timed_out_payload(&payload) {
                    GateOutcome::TimedOut
                } else {
                    GateOutcome::Resumed(payload)
                }
            })
        })
    }
}

/// The future of a [`FlowCtx::first_of`]: resolves with the gate that was resumed first, or
/// with the deadline, as recorded.
#[must_use = "gates do nothing for the flow unless awaited"]
#[derive(Debug)]
pub struct FirstOf {
    command: Command,
}

impl Future for FirstOf {
    type Output = Result<Selected, StepError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self
            .command
            .shared
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let Some(slot) = state.slots.get_mut(&self.command.slot) else {
            return Poll::Pending;
        };
        match slot.value.take() {
            Some(value) => {
                let chosen = slot.chosen;
                state.slots.remove(&self.command.slot);
                Poll::Ready(value.map(|payload| match chosen {
                    Some(index) => Selected::Gate { index, payload },
                    None => Selected::TimedOut,
                }))
            }
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for Command {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        state.slots.remove(&self.slot);
    }
}
