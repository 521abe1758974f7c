//! Composing a runtime: flows, effects, plugins, the resume authenticator, the clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::classify::DataClassification;
use crate::runtime::caller::{self, AsyncResumeAuthenticator, ResumeAuthenticator};
use crate::runtime::children;
use crate::runtime::driver;
use crate::runtime::effect::Effect;
use crate::runtime::errors::CompositionError;
use crate::runtime::flow::{Flow, FlowSet};
use crate::runtime::handle;
use crate::runtime::keep::{self, DEFAULT_MAX_PARKED_IN_MEMORY};
use crate::runtime::plugin::{self, Contributions, Plugin, Projection};
use crate::runtime::slots::{Inner, Slots};
use crate::runtime::stats::StepCounters;
#[cfg(doc)]
use crate::runtime::timers::ManualClock;
use crate::runtime::timers::{self, Clock, SystemClock};
use crate::store::EventStore;

/// Composes a runtime: flows, effects, plugins, the resume authenticator.
pub struct RuntimeBuilder<S> {
    store: S,
    flows: BTreeMap<(String, u32), Arc<dyn Flow>>,
    contributions: Contributions,
    pub(crate) authenticator: Option<Arc<dyn AsyncResumeAuthenticator>>,
    classification: DataClassification,
    clock: Arc<dyn Clock>,
    errors: Vec<CompositionError>,
    pub(crate) max_parked_in_memory: usize,
}

impl<S> std::fmt::Debug for RuntimeBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("flows", &self.flows.keys().collect::<Vec<_>>())
            .field("contributions", &self.contributions)
            .finish()
    }
}

impl<S: EventStore> RuntimeBuilder<S> {
    /// A builder with nothing composed yet (`Runtime::builder`).
    pub(crate) fn new(store: S) -> Self {
        Self {
            store,
            flows: BTreeMap::new(),
            contributions: Contributions::default(),
            authenticator: None,
            classification: DataClassification::default(),
            clock: Arc::new(SystemClock),
            errors: Vec::new(),
            max_parked_in_memory: DEFAULT_MAX_PARKED_IN_MEMORY,
        }
    }

    /// Registers a flow (a name and version may be registered once).
    pub fn flow(self, flow: impl Flow) -> Self {
        self.shared_flow(Arc::new(flow))
    }

    /// Registers every flow of a set (see [`FlowSet`]).
    pub fn flows(self, flows: &FlowSet) -> Self {
        flows
            .iter()
            .fold(self, |builder, flow| builder.shared_flow(Arc::clone(flow)))
    }

    fn shared_flow(mut self, flow: Arc<dyn Flow>) -> Self {
        let key = (flow.name().to_owned(), flow.version());
        match self.flows.entry(key) {
            std::collections::btree_map::Entry::Occupied(taken) => {
                let (name, version) = taken.key().clone();
                self.errors
                    .push(CompositionError::DuplicateFlow { name, version });
            }
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(flow);
            }
        }
        self
    }

    /// Registers an effect under `name`.
    pub fn effect(mut self, name: impl Into<String>, effect: impl Effect) -> Self {
        self.contributions.effect(name, Arc::new(effect));
        self
    }

    /// Adds a projection: it sees every event once it is durable.
    pub fn projection(mut self, projection: impl Projection) -> Self {
        self.contributions.projection(Arc::new(projection));
        self
    }

    /// Adds what a plugin contributes (ADR 0043), if its kernel ABI range fits this kernel.
    pub fn plugin(mut self, plugin: &dyn Plugin) -> Self {
        match plugin::check_abi(plugin) {
            Ok(()) => plugin.contribute(&mut self.contributions),
            Err(err) => self.errors.push(err),
        }
        self
    }

    /// Sets the resume authenticator (K12.2), consulted before any resume is recorded.
    pub fn resume_authenticator(mut self, authenticator: impl ResumeAuthenticator) -> Self {
        self.authenticator = Some(Arc::new(caller::Blocking(authenticator)));
        self
    }

    /// K10-R6: the data classification of this runtime. Every text the runtime lets out
    /// (errors such as a non-determinism's recorded and attempted commands, replay reports,
    /// tracing fields) shows classified values as [`crate::classify::MASK`]; the log and the
    /// fold keep true values. The default classifies nothing.
    pub fn classification(mut self, classification: DataClassification) -> Self {
        self.classification = classification;
        self
    }

    /// The clock flows read through `ctx.now()` and timers (`ctx.sleep`, gates with a
    /// timeout) are set and served by. The default is [`SystemClock`]; tests use a
    /// [`ManualClock`]. Replay never reads it: recorded values are served from the log.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Checks the composition and composes what the runtime shares with its drivers
    /// (`Runtime`'s `build` wraps it).
    pub(crate) fn compose(mut self) -> Result<Inner<S>, CompositionError> {
        if let Some(error) = self.errors.drain(..).next() {
            return Err(error);
        }
        let mut effects = BTreeMap::new();
        for (name, effect) in self.contributions.effects {
            if effects.insert(name.clone(), effect).is_some() {
                return Err(CompositionError::DuplicateEffect(name));
            }
        }
        handle::check_declared(&self.flows, &effects)?;
        let mut inbound = BTreeMap::new();
        for (name, handler) in self.contributions.inbound {
            if inbound.insert(name.clone(), handler).is_some() {
                return Err(CompositionError::DuplicateInbound(name));
            }
        }
        Ok(Inner {
            store: Arc::new(self.store),
            flows: self.flows,
            effects: Arc::new(effects),
            projections: self.contributions.projections,
            inbound,
            authenticator: self.authenticator,
            classification: Arc::new(self.classification),
            timers: Arc::new(timers::Timers::new(self.clock)),
            children: children::Children::default(),
            slots: Slots::default(),
            recent: Mutex::default(),
            stop: watch::channel(false).0,
            tasks: Mutex::new(tokio::task::JoinSet::new()),
            shutting: tokio::sync::Mutex::new(()),
            kept: keep::KeptFlows::new(self.max_parked_in_memory),
            launcher: driver::launcher(),
            steps: StepCounters::default(),
        })
    }
}
