//! What a caller gives `start`: the execution's id, the flow version, its grants and budget.
//! A plain value, below everything that passes one on (plugins, children, `start.rs`).

use crate::id::ExecutionId;

/// How to start an execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartOptions {
    /// The execution's id, chosen by the caller: a start of an existing id returns it.
    pub execution_id: ExecutionId,
    /// The flow version; the newest registered when `None`.
    pub flow_version: Option<u32>,
    /// K2: capabilities granted to the execution's effects.
    pub capabilities: std::collections::BTreeSet<String>,
    /// K3: the most the execution may spend.
    pub budget: Option<u64>,
}

impl StartOptions {
    /// Options for `execution_id`: the newest flow version, no capability, no budget.
    pub fn new(execution_id: ExecutionId) -> Self {
        Self {
            execution_id,
            flow_version: None,
            capabilities: Default::default(),
            budget: None,
        }
    }

    /// K2: grants a capability to the execution's effects.
    pub fn grant(mut self, capability: impl Into<String>) -> Self {
        self.capabilities.insert(capability.into());
        self
    }

    /// K3: the most the execution may spend.
    pub fn budget(mut self, budget: u64) -> Self {
        self.budget = Some(budget);
        self
    }
}
