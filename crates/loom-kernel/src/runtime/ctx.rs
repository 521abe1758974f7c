//! The flow context: every command a flow issues goes through it, is matched against the
//! recorded history while there is history, and is recorded once the flow goes live.
//!
//! Step ids are assigned when a command is *called*, not when its future is first polled, so
//! futures that are created and then joined get ids in call order (ADR 0061). Commands queue
//! their events in call order; the driver appends them after each poll of the flow.

mod child;
mod expecting;
mod patched;
mod target;

pub use crate::runtime::machine::vocabulary::{StepError, StepName};
pub use child::ChildCall;
pub(crate) use child::ChildStart;
pub use patched::PATCH_KIND;
pub use target::ExecuteTarget;
pub(crate) use target::sealed::Sealed;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::classify::DataClassification;
use crate::event::*;
use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::effect::Effect;
use crate::runtime::history::History;
use crate::runtime::machine::{DecisionStart, Env, FlowState, StepStart, decode_decision};
use crate::runtime::timers::{Clock, TIMER_EVENT_TYPE, is_timed_out_payload};

mod request;

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
    /// K10-R6: what texts that leave the runtime (errors, traces) must not show.
    classification: Arc<DataClassification>,
    /// Read only for values the flow records (`now`, a timer's deadline), never on replay.
    clock: Arc<dyn Clock>,
    state: Mutex<FlowState>,
}

/// How a step is named when it is issued: by an effect's name, counted (`name#n`), borrowed
/// so that the name is not copied for every step; or as the flow gave it.
pub(crate) enum Naming<'a> {
    Counted(&'a str),
    Given(StepName),
}

impl FlowCtx {
    pub(crate) fn new(
        execution_id: ExecutionId,
        effects: Arc<BTreeMap<String, Arc<dyn Effect>>>,
        classification: Arc<DataClassification>,
        clock: Arc<dyn Clock>,
        started: &ExecutionStarted,
        history: History,
        durable: ExecutionState,
    ) -> Self {
        let env = Env {
            execution_id: execution_id.clone(),
            effects,
            capabilities: Arc::new(started.capabilities.clone()),
        };
        Self {
            shared: Arc::new(Shared {
                execution_id,
                locals: Mutex::new(HashMap::new()),
                classification,
                clock,
                state: Mutex::new(FlowState::new(env, history, durable)),
            }),
        }
    }

    /// The execution this flow runs as.
    pub fn execution_id(&self) -> &ExecutionId {
        &self.shared.execution_id
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, FlowState> {
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
        self.issue_step(Naming::Given(name), effect, input, false).0
    }

    /// A step's command, and its id when `want_id` (or when the id could be assigned at all).
    pub(super) fn issue_step<I: Serialize + ?Sized>(
        &self,
        name: Naming<'_>,
        effect: &str,
        input: &I,
        want_id: bool,
    ) -> (Command, Option<String>) {
        let mut state = self.state();
        let slot = state.new_slot();
        let mut issued_id = None;
        let start = (|| {
            let step_id = match name {
                Naming::Counted(name) => state.counted_step_id(name),
                Naming::Given(name) => state.step_id(name),
            }?;
            if want_id {
                issued_id = Some(step_id.clone());
            }
            let input = canonical(input)?;
            state.step(slot, step_id, effect, input, &self.shared.classification)
        })();
        let outcome = match start {
            Ok(StepStart::Now(value)) => Ok(value),
            Err(err) => Err(err),
            Ok(StepStart::Admit(admission)) => {
                // The effect's admission checks are its own code: not under the lock.
                drop(state);
                let checked = admission.check();
                state = self.state();
                state.admitted(admission, checked)
            }
        };
        (self.command(state, slot, outcome), issued_id)
    }

    /// The future of the command in `slot`: ready at once when `outcome` already holds its
    /// result (a replayed or refused command), pending until the driver fills it otherwise.
    fn command(
        &self,
        mut state: MutexGuard<'_, FlowState>,
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
        let (command, step_id) = self.issue_step(Naming::Counted(effect), effect, input, true);
        async move {
            let output = command.await?;
            output.decode().map_err(|err| StepError::Decode {
                // Assigned whenever the command got this far: a step whose id could not be
                // assigned fails before it has an output.
                step_id: step_id.unwrap_or_default(),
                detail: crate::payload::Payload::describe_decode_error(&err),
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
        let classification = &self.shared.classification;
        let outcome = (|| {
            let gate_id = state.step_id(name)?;
            state.suspend(slot, gate_id, event_type, correlation_key, classification)
        })();
        self.command(state, slot, outcome)
    }

    /// A durable timer: waits `duration` from now (read from the runtime's clock once and
    /// recorded), then yields a `null` payload. The timer is the gate `timer#n`; it survives
    /// a crash (after `recover` it fires at its recorded deadline, or at once if that has
    /// passed), and while it waits the execution holds no task (LD-009).
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
        let live = timeout.map(|timeout| self.live_deadline(Deadline::After(timeout)));
        let outcome = state.first_of(slot, gates, live, &self.shared.classification);
        FirstOf {
            command: self.command(state, slot, outcome),
        }
    }

    /// A gate's deadline as it is computed live (from the clock for `After`); the machine
    /// calls it only when no deadline is recorded.
    fn live_deadline(&self, deadline: Deadline) -> impl FnOnce() -> u64 + '_ {
        move || match deadline {
            Deadline::At(at) => at,
            Deadline::After(after) => self
                .shared
                .clock
                .now_ms()
                .saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX)),
        }
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
        let mut state = self.state();
        let slot = state.new_slot();
        let classification = &self.shared.classification;
        let outcome = (|| {
            let gate_id = state.step_id(name)?;
            let live = self.live_deadline(deadline);
            state.deadline_gate(
                slot,
                gate_id,
                event_type,
                correlation_key,
                live,
                classification,
            )
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
        let begun = self
            .state()
            .begin_decision(kind, &self.shared.classification)?;
        match begun {
            DecisionStart::Recorded(value, step_id) => decode_decision(&value, step_id),
            DecisionStart::Live(step_id) => {
                // Flow code never runs under the state's lock: `make` may read the world in any
                // way it likes (a nested context call is refused, not deadlocked).
                let recorder = DecisionRecorder {
                    ctx: self,
                    step_id: Some(step_id),
                    kind,
                };
                let value = make();
                let payload =
                    Payload::encode(&value).map_err(|err| StepError::Encode(err.to_string()))?;
                recorder.record(payload);
                Ok(value)
            }
        }
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
        self.state()
            .patch(surface_id, ops, &self.shared.classification)
    }
}

fn canonical<I: Serialize + ?Sized>(input: &I) -> Result<Payload, StepError> {
    // Through a Value, whose maps are ordered, so the text (and its digest) does not depend
    // on the iteration order of whatever map the caller serialized.
    let value = serde_json::to_value(input).map_err(|err| StepError::Encode(err.to_string()))?;
    Ok(Payload::from_value(&value))
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // std seeds every RandomState from the OS; one hasher's output is a random word.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x9e37_79b9_7f4a_7c15);
    hasher.finish()
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
        match state.poll_slot(self.slot, cx.waker()) {
            Some((value, _)) => Poll::Ready(value),
            None => Poll::Pending,
        }
    }
}

/// A live decision between its start and its record: whatever way the flow's code leaves
/// (the value recorded, an encoding error, a panic), the state no longer refuses commands.
struct DecisionRecorder<'a> {
    ctx: &'a FlowCtx,
    step_id: Option<String>,
    kind: &'a str,
}

impl DecisionRecorder<'_> {
    fn record(mut self, value: Payload) {
        if let Some(step_id) = self.step_id.take() {
            self.ctx
                .state()
                .record_decision(step_id, self.kind, Some(value));
        }
    }
}

impl Drop for DecisionRecorder<'_> {
    fn drop(&mut self) {
        if let Some(step_id) = self.step_id.take() {
            self.ctx.state().record_decision(step_id, self.kind, None);
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
        match state.poll_slot(self.command.slot, cx.waker()) {
            Some((value, chosen)) => Poll::Ready(value.map(|payload| match chosen {
                Some(index) => Selected::Gate { index, payload },
                None => Selected::TimedOut,
            })),
            None => Poll::Pending,
        }
    }
}

impl Drop for Command {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        state.drop_slot(self.slot);
    }
}
