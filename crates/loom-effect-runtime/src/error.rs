//! What a handler reports when an attempt does not succeed, and what building a definition or
//! a registry can refuse.

use loom_kernel::ErrorInfo;

/// How one attempt of an effect failed. The class decides what the middleware does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EffectError {
    /// The attempt did not happen in the world (connection refused, rate limited, a 503), so
    /// trying again is safe even for a non-idempotent effect. Retried while the policy allows;
    /// the last one is recorded as `STEP_FAILED`.
    #[error("retryable: {0:?}")]
    Retryable(ErrorInfo),
    /// Trying again will not help (bad request, refused by the receiver): recorded as
    /// `STEP_FAILED` at once.
    #[error("terminal: {0:?}")]
    Terminal(ErrorInfo),
    /// The handler cannot tell whether the world changed (the connection dropped after the
    /// request was sent). A non-idempotent effect parks at `EFFECT_INDOUBT` for an operator;
    /// an idempotent one is retried like [`EffectError::Retryable`].
    #[error("in doubt: {0:?}")]
    InDoubt(ErrorInfo),
}

impl EffectError {
    /// An attempt that did not happen (or is safe to repeat): it is retried by the policy.
    pub fn retryable(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Retryable(ErrorInfo::new(code, message))
    }

    /// A failure retrying cannot fix: the step fails with it.
    pub fn terminal(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Terminal(ErrorInfo::new(code, message))
    }

    /// The handler cannot tell whether the effect happened: the step is recorded in doubt (K9).
    pub fn in_doubt(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InDoubt(ErrorInfo::new(code, message))
    }

    /// The error's code and message.
    pub fn info(&self) -> &ErrorInfo {
        match self {
            Self::Retryable(info) | Self::Terminal(info) | Self::InDoubt(info) => info,
        }
    }
}

/// Why an effect definition cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DefinitionError {
    /// A JSON Schema of the definition does not compile.
    #[error("effect '{effect}': the {which} schema is not a valid JSON Schema: {detail}")]
    InvalidSchema {
        /// The effect's name.
        effect: String,
        /// Which schema: `input` or `output`.
        which: &'static str,
        /// What went wrong, in words.
        detail: String,
    },
    /// The retry policy or the timeout is out of range.
    #[error("effect '{effect}': {detail}")]
    InvalidPolicy {
        /// The effect's name.
        effect: String,
        /// What went wrong, in words.
        detail: String,
    },
    /// The effect's name is empty.
    #[error("an effect needs a name")]
    EmptyName,
}

/// Why a definition cannot join a registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two definitions have this name.
    #[error("an effect named '{0}' is already registered")]
    DuplicateEffect(String),
    /// A definition is not valid.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
}

/// The stable codes this crate records, so that flows and operators can match on them.
pub mod codes {
    /// K2: the execution was not granted the effect's capability (checked by the kernel for
    /// every effect).
    pub const CAPABILITY_DENIED: &str = loom_kernel::codes::CAPABILITY_DENIED;
    /// K3: the step's cost exceeds what the execution may still spend (checked by the
    /// kernel for every effect).
    pub const BUDGET_EXCEEDED: &str = loom_kernel::codes::BUDGET_EXCEEDED;
    /// The input does not match the effect's input schema or type.
    pub const INVALID_INPUT: &str = "loom.invalid_input";
    /// The handler's output does not match the effect's output schema or does not serialize.
    pub const INVALID_OUTPUT: &str = "loom.invalid_output";
    /// An attempt ran past its timeout.
    pub const TIMEOUT: &str = "loom.timeout";
    /// The handler panicked.
    pub const PANICKED: &str = loom_kernel::codes::EFFECT_PANICKED;
}
