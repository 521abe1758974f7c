//! Effect definitions: what an effect is (name, idempotence, capability, cost, schemas,
//! retry and timeout) and the typed handler that does it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use loom_kernel::EffectHandle;
use loom_kernel::{ErrorInfo, Payload};
use serde::Serialize;
use serde::de::DeserializeOwned;
#[cfg(feature = "schemas")]
use serde_json::Value;

use crate::context::EffectContext;
use crate::error::{DefinitionError, EffectError, codes};
use crate::retry::RetryPolicy;
use crate::schema::SchemaCheck;

/// One attempt of the handler with its input decoded: the typed handler behind a uniform face.
/// `Err` means the input did not decode, so nothing ran.
pub(crate) type Handler = Arc<
    dyn Fn(
            EffectContext,
            &Payload,
        ) -> Result<BoxFuture<'static, Result<Payload, EffectError>>, ErrorInfo>
        + Send
        + Sync,
>;

/// An admission check of the effect's own, on the step's input, before the step is recorded
/// as started ([`EffectDef::admit`]).
pub(crate) type AdmitCheck = Arc<dyn Fn(&Payload) -> Result<(), ErrorInfo> + Send + Sync>;

/// How long one attempt may run when a definition does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// An effect, defined once and registered in an [`EffectRegistry`](crate::EffectRegistry).
///
/// Defaults are the cautious ones: not idempotent (its `STEP_STARTED` is durable before it
/// runs, and a crash mid-run parks it in doubt), the capability is the effect's name, cost 0,
/// [`RetryPolicy::default`], a [`DEFAULT_TIMEOUT`] per attempt, no schemas.
pub struct EffectDef {
    pub(crate) name: String,
    pub(crate) idempotent: bool,
    pub(crate) capability: String,
    pub(crate) cost: u64,
    #[cfg(feature = "schemas")]
    input_schema: Option<Value>,
    #[cfg(feature = "schemas")]
    output_schema: Option<Value>,
    pub(crate) retry: RetryPolicy,
    pub(crate) timeout: Option<Duration>,
    pub(crate) handler: Handler,
    pub(crate) admit: Option<AdmitCheck>,
}

impl std::fmt::Debug for EffectDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EffectDef")
            .field("name", &self.name)
            .field("idempotent", &self.idempotent)
            .field("capability", &self.capability)
            .field("cost", &self.cost)
            .field("retry", &self.retry)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl EffectDef {
    /// An effect called `name` whose attempts run `handler` with the step's input decoded as
    /// `I`; its `O` is recorded as the step's output.
    pub fn new<I, O, F, Fut>(name: impl Into<String>, handler: F) -> Self
    where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(EffectContext, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, EffectError>> + Send + 'static,
    {
        let name = name.into();
        let effect = name.clone();
        let handler: Handler = Arc::new(move |ctx: EffectContext, input: &Payload| {
            let input: I = input.decode().map_err(|err| {
                ErrorInfo::new(
                    codes::INVALID_INPUT,
                    format!(
                        "the input of effect '{effect}' does not decode: {}",
                        Payload::describe_decode_error(&err)
                    ),
                )
            })?;
            let running = handler(ctx, input);
            Ok(running
                .map(|result| {
                    // Straight to JSON text: an output schema, if any, reads it back.
                    let output = result?;
                    Payload::encode(&output).map_err(|err| {
                        EffectError::terminal(
                            codes::INVALID_OUTPUT,
                            format!("the output does not serialize to JSON: {err}"),
                        )
                    })
                })
                .boxed())
        });
        Self {
            capability: name.clone(),
            name,
            idempotent: false,
            cost: 0,
            #[cfg(feature = "schemas")]
            input_schema: None,
            #[cfg(feature = "schemas")]
            output_schema: None,
            retry: RetryPolicy::default(),
            timeout: Some(DEFAULT_TIMEOUT),
            handler,
            admit: None,
        }
    }

    /// The effect a flow runs through `handle` (`ctx.execute(&CHARGE, &order)`): its name is
    /// the handle's, and `handler` takes the handle's input type and returns its output type,
    /// so that the flow and the effect cannot disagree on them.
    ///
    /// ```
    /// use loom_effect_runtime::{EffectContext, EffectDef, EffectError};
    /// use loom_kernel::EffectHandle;
    ///
    /// const DOUBLE: EffectHandle<u64, u64> = EffectHandle::new("math.double");
    ///
    /// async fn double(_ctx: EffectContext, n: u64) -> Result<u64, EffectError> {
    ///     Ok(n * 2)
    /// }
    /// let def = EffectDef::for_handle(&DOUBLE, double).idempotent();
    /// # let _ = def;
    /// ```
    pub fn for_handle<I, O, F, Fut>(handle: &EffectHandle<I, O>, handler: F) -> Self
    where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(EffectContext, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, EffectError>> + Send + 'static,
    {
        Self::new(handle.name(), handler)
    }

    /// Running it twice with the same idempotency key is harmless (K9): it may run before its
    /// `STEP_STARTED` is durable and is run again after a crash.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// K2: the capability an execution must be granted for this effect to run.
    pub fn capability(mut self, capability: impl Into<String>) -> Self {
        self.capability = capability.into();
        self
    }

    /// K3: what one step costs. A step that would exceed the execution's budget fails before
    /// it runs; a step that ran (succeeded or failed) records this cost once, whatever its
    /// retries.
    pub fn cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }

    /// A JSON Schema the input must satisfy; checked before the step is recorded as started.
    /// (Feature `schemas`, on by default.)
    #[cfg(feature = "schemas")]
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// A JSON Schema the output must satisfy; an output that does not is a terminal failure.
    /// (Feature `schemas`, on by default.)
    #[cfg(feature = "schemas")]
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// A check of the step's input of the effect's own (what a JSON Schema cannot say: a
    /// catalog lookup, a cross-field rule), run before the step is recorded as started, after
    /// K2, K3 and the input schema: a refusal is recorded as the step's failure with the
    /// [`ErrorInfo`] returned, the effect never runs and nothing is charged. It runs on the
    /// flow's task whenever the flow issues a new step of this effect, so keep it quick, with
    /// no I/O; it must not panic (a panic refuses the step).
    pub fn admit(
        mut self,
        check: impl Fn(&Payload) -> Result<(), ErrorInfo> + Send + Sync + 'static,
    ) -> Self {
        self.admit = Some(Arc::new(check));
        self
    }

    /// How failed attempts are retried (the default retries nothing).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// How long one attempt may run before it is cancelled. A timed-out attempt of an
    /// idempotent effect is retried; one of a non-idempotent effect may have done its work,
    /// so the step parks in doubt for an operator.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Attempts run as long as they take.
    pub fn without_timeout(mut self) -> Self {
        self.timeout = None;
        self
    }

    /// The effect's registered name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks the definition and compiles its schemas, once.
    pub(crate) fn compile(self) -> Result<CompiledDef, DefinitionError> {
        if self.name.is_empty() {
            return Err(DefinitionError::EmptyName);
        }
        if let Some(detail) = self.retry.problem() {
            return Err(DefinitionError::InvalidPolicy {
                effect: self.name,
                detail,
            });
        }
        if self.timeout == Some(Duration::ZERO) {
            return Err(DefinitionError::InvalidPolicy {
                effect: self.name,
                detail: "a timeout of zero lets no attempt run".into(),
            });
        }
        #[cfg(feature = "schemas")]
        let (input, output) = (
            self.input_schema
                .as_ref()
                .map(|schema| SchemaCheck::compile(&self.name, "input", schema))
                .transpose()?,
            self.output_schema
                .as_ref()
                .map(|schema| SchemaCheck::compile(&self.name, "output", schema))
                .transpose()?,
        );
        #[cfg(not(feature = "schemas"))]
        let (input, output) = (None, None);
        Ok(CompiledDef {
            input,
            output,
            def: self,
        })
    }
}

/// A definition with its schemas compiled.
#[derive(Debug)]
pub(crate) struct CompiledDef {
    pub(crate) def: EffectDef,
    pub(crate) input: Option<SchemaCheck>,
    pub(crate) output: Option<SchemaCheck>,
}
