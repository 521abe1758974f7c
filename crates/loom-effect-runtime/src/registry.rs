//! The registry the composition root fills: every effect a runtime may dispatch, contributed
//! to the kernel as a plugin.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use loom_kernel::{AbiRange, Contributions, Plugin};

use crate::definition::EffectDef;
use crate::dispatch::RegisteredEffect;
use crate::error::RegistryError;
use crate::retry::RetryPolicy;

/// Effect definitions by name. Register each once, then hand the registry to
/// `Runtime::builder(..).plugin(&registry)`.
#[derive(Debug, Default, Clone)]
pub struct EffectRegistry {
    effects: BTreeMap<String, RegisteredEffect>,
}

/// What the registry knows of one effect, for tools and operators.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EffectInfo {
    /// The effect's registered name.
    pub name: String,
    /// Whether running it twice is harmless (K9).
    pub idempotent: bool,
    /// The capability an execution must be granted (K2).
    pub capability: String,
    /// What one invocation costs (K3).
    pub cost: u64,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// How long one attempt may take.
    pub timeout: Option<Duration>,
    /// Whether inputs are checked against a JSON Schema.
    pub has_input_schema: bool,
    /// Whether outputs are checked against a JSON Schema.
    pub has_output_schema: bool,
}

impl EffectRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Compiles and adds a definition; refuses a second effect of the same name and a
    /// definition that does not hold together (a bad schema or policy).
    pub fn register(&mut self, def: EffectDef) -> Result<&mut Self, RegistryError> {
        if self.effects.contains_key(def.name()) {
            return Err(RegistryError::DuplicateEffect(def.name().to_owned()));
        }
        let compiled = def.compile()?;
        self.effects.insert(
            compiled.def.name.clone(),
            RegisteredEffect {
                def: Arc::new(compiled),
            },
        );
        Ok(self)
    }

    /// [`EffectRegistry::register`] for a chain of definitions.
    pub fn with(mut self, def: EffectDef) -> Result<Self, RegistryError> {
        self.register(def)?;
        Ok(self)
    }

    /// How many effects are defined.
    pub fn len(&self) -> usize {
        self.effects.len()
    }

    /// Whether no effect is defined.
    pub fn is_empty(&self) -> bool {
        self.effects.is_empty()
    }

    /// The registered effects, by name.
    pub fn effects(&self) -> impl Iterator<Item = EffectInfo> + '_ {
        self.effects.values().map(|registered| {
            let compiled = &registered.def;
            let def = &compiled.def;
            EffectInfo {
                name: def.name.clone(),
                idempotent: def.idempotent,
                capability: def.capability.clone(),
                cost: def.cost,
                retry: def.retry.clone(),
                timeout: def.timeout,
                has_input_schema: compiled.input.is_some(),
                has_output_schema: compiled.output.is_some(),
            }
        })
    }
}

impl Plugin for EffectRegistry {
    fn name(&self) -> &str {
        "loom-effect-runtime"
    }

    fn kernel_abi(&self) -> AbiRange {
        AbiRange::caret(1, 1)
    }

    fn contribute(&self, contributions: &mut Contributions) {
        for (name, effect) in &self.effects {
            contributions.effect(name.clone(), Arc::new(effect.clone()));
        }
    }
}
