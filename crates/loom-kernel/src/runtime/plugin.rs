//! Composition-time plugins (ADR 0043): contributors of effects, projections and inbound
//! handlers, checked against the kernel ABI they were built for.

use std::fmt;
use std::sync::Arc;

use crate::envelope::EventEnvelope;
use crate::event::{AbiVersion, KERNEL_ABI};
use crate::payload::Payload;
use crate::runtime::effect::Effect;

/// The kernel ABI versions a plugin works with: `min` inclusive to `max` exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbiRange {
    /// The oldest version accepted.
    pub min: AbiVersion,
    /// The first version no longer accepted.
    pub max: AbiVersion,
}

impl AbiRange {
    /// Semver caret: `^major.minor` accepts `major.minor.0` up to the next major.
    pub const fn caret(major: u16, minor: u16) -> Self {
        Self {
            min: AbiVersion::new(major, minor, 0),
            max: AbiVersion::new(major + 1, 0, 0),
        }
    }

    /// Whether `version` is in the range.
    pub fn contains(&self, version: AbiVersion) -> bool {
        self.min <= version && version < self.max
    }
}

impl fmt::Display for AbiRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ">={}, <{}", self.min, self.max)
    }
}

/// Sees every event once it is durable, in log order per execution. Called on the driver's
/// task: keep it quick and do not block.
///
/// # As a seam
/// - **Replay:** not called for events read back from the log: it sees each event this runtime
///   appends, once, after the append is durable. A projection that must know older events (or
///   survive a restart) catches up from the store itself (`EventStore::read_feed`).
/// - **Task:** the driver task of the event's execution; projections of different executions
///   may run at once.
/// - **Panic:** contained and logged; the projection misses that event, the execution goes on.
/// - **Other processes:** events another process appends are not shown; read the store's feed.
pub trait Projection: Send + Sync + 'static {
    /// Sees one durable event.
    fn apply(&self, envelope: &EventEnvelope);
}

/// What an inbound handler asks the runtime to do with a message from outside.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Inbound {
    /// Nothing: the message was understood and needs no resume.
    Ignore,
    /// Resume a gate.
    Resume {
        /// The execution to resume.
        execution: crate::ExecutionId,
        /// The gate's event type.
        event_type: String,
        /// The gate's correlation key.
        correlation_key: String,
        /// What the resume carries.
        payload: Payload,
    },
    /// Start an execution, as [`crate::runtime::Runtime::start`] does (a second start of an
    /// existing id returns it, or is refused as a conflict), once the resume authenticator
    /// agrees ([`crate::runtime::AsyncResumeAuthenticator::authorize_start`]).
    Start {
        /// The flow to start.
        flow: String,
        /// Its input.
        input: Payload,
        /// The execution's id, flow version, capabilities and budget.
        options: crate::runtime::options::StartOptions,
    },
}

/// Turns messages from outside (a UI action, a webhook) into runtime requests.
///
/// # As a seam
/// - **Replay:** never called on replay; only by `Runtime::inbound` / `inbound_as`.
/// - **Task:** the caller's task, before the authenticator and before anything is recorded.
/// - **Panic:** contained: the message is refused (`InboundError::HandlerPanicked`), nothing is done.
/// - **Other processes:** it sees only the message; what it asks for goes through the store.
pub trait InboundHandler: Send + Sync + 'static {
    /// Reads a message; `Err(reason)` refuses it and nothing is done.
    fn handle(&self, message: &serde_json::Value) -> Result<Inbound, String>;

    /// Reads a message sent by `caller` (established by the application, LD-019). By
    /// default the caller does not matter: [`InboundHandler::handle`].
    fn handle_from(
        &self,
        caller: &crate::runtime::caller::Caller,
        message: &serde_json::Value,
    ) -> Result<Inbound, String> {
        let _ = caller;
        self.handle(message)
    }
}

/// A composition-time contributor.
///
/// # As a seam
/// Called once, by `RuntimeBuilder::plugin`, on the caller's thread, before the runtime exists:
/// never on replay and never per execution. Its ABI range is checked first. A panic in
/// `contribute` is not contained: it unwinds into the composition root, where it belongs (no
/// execution is running). What it contributes (effects, projections, inbound handlers) follows
/// those seams' rules.
pub trait Plugin {
    /// The plugin's name, for errors.
    fn name(&self) -> &str;
    /// The kernel ABIs this plugin was built for.
    fn kernel_abi(&self) -> AbiRange;
    /// Adds the plugin's effects, projections and inbound handlers.
    fn contribute(&self, contributions: &mut Contributions);
}

/// What plugins (and the application) add to a runtime.
#[derive(Default)]
pub struct Contributions {
    pub(crate) effects: Vec<(String, Arc<dyn Effect>)>,
    pub(crate) projections: Vec<Arc<dyn Projection>>,
    pub(crate) inbound: Vec<(String, Arc<dyn InboundHandler>)>,
}

impl fmt::Debug for Contributions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Contributions")
            .field(
                "effects",
                &self.effects.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("projections", &self.projections.len())
            .field(
                "inbound",
                &self.inbound.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Contributions {
    /// Contributes an effect under `name`.
    pub fn effect(&mut self, name: impl Into<String>, effect: Arc<dyn Effect>) -> &mut Self {
        self.effects.push((name.into(), effect));
        self
    }

    /// Contributes a projection.
    pub fn projection(&mut self, projection: Arc<dyn Projection>) -> &mut Self {
        self.projections.push(projection);
        self
    }

    /// Contributes an inbound handler under `name`.
    pub fn inbound(
        &mut self,
        name: impl Into<String>,
        handler: Arc<dyn InboundHandler>,
    ) -> &mut Self {
        self.inbound.push((name.into(), handler));
        self
    }
}

/// Checks a plugin's ABI range against this kernel.
pub(crate) fn check_abi(
    plugin: &dyn Plugin,
) -> Result<(), crate::runtime::errors::CompositionError> {
    let range = plugin.kernel_abi();
    if range.contains(KERNEL_ABI) {
        Ok(())
    } else {
        Err(crate::runtime::errors::CompositionError::AbiMismatch {
            plugin: plugin.name().to_owned(),
            requires: range.to_string(),
            kernel: KERNEL_ABI.to_string(),
        })
    }
}
