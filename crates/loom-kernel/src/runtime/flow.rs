//! Flows: async functions of a context and an input, registered by name and version.

use std::future::Future;
use std::marker::PhantomData;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::payload::Payload;
use crate::runtime::ctx::FlowCtx;
pub use crate::runtime::machine::vocabulary::FlowError;

/// A registered flow, with its input and output erased to JSON.
///
/// # As a seam
/// - **Replay:** `run` is called again from the start each time a driver takes the execution
///   up (after a restart, a resume or a verdict of a parked execution); recorded commands are
///   served from the log, so it must issue the same commands in the same order.
/// - **Task:** it runs on the execution's driver task (a new execution's first poll runs on the
///   caller of `start` until its first append is durable); the futures it awaits need not be
///   ctx commands.
/// - **Panic:** contained: recorded as the execution's failure (`EXECUTION_FAILED`, code
///   `loom.flow_panicked`), never unwound into the runtime's caller.
/// - **Other processes:** it sees only its own execution's log, as read when its driver
///   started; the store's expected-seq check fences another process driving it too.
pub trait Flow: Send + Sync + 'static {
    /// The name executions start it by.
    fn name(&self) -> &str;
    /// Its version: a changed flow that old logs must not replay against gets a new one.
    fn version(&self) -> u32;
    /// Runs the flow with its input (as JSON) to its output.
    fn run(&self, ctx: FlowCtx, input: Payload) -> BoxFuture<'static, Result<Payload, FlowError>>;
    /// The effects the flow declares it uses (see [`crate::runtime::EffectHandle`]):
    /// `RuntimeBuilder::build` refuses a runtime in which one is not registered. None by default.
    fn declared_effects(&self) -> &[&'static str] {
        &[]
    }
    /// The JSON Schema its input must fit, when the flow declares one: for callers that take
    /// input from people (the console's start form and `loom start`), which check it before
    /// they call `start`. The runtime itself never reads it. None by default.
    fn input_schema(&self) -> Option<&serde_json::Value> {
        None
    }
}

/// A set of flows, as a crate that defines flows exposes them (`pub fn flows() -> FlowSet`),
/// so that the application's runtime and tools such as `replay-check` register the same ones.
#[derive(Clone, Default)]
pub struct FlowSet {
    flows: Vec<std::sync::Arc<dyn Flow>>,
}

impl std::fmt::Debug for FlowSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.flows.iter().map(|flow| (flow.name(), flow.version())))
            .finish()
    }
}

impl FlowSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a flow.
    pub fn with(mut self, flow: impl Flow) -> Self {
        self.flows.push(std::sync::Arc::new(flow));
        self
    }

    /// Adds every flow of `other`.
    pub fn merge(mut self, other: FlowSet) -> Self {
        self.flows.extend(other.flows);
        self
    }

    /// Every flow, in name and version order.
    pub fn iter(&self) -> impl Iterator<Item = &std::sync::Arc<dyn Flow>> {
        self.flows.iter()
    }

    /// How many flows the set holds.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }
}

/// A [`Flow`] from an async function with typed input and output.
///
/// ```
/// use loom_kernel::{FlowCtx, FlowError, flow_fn};
///
/// async fn greet(_ctx: FlowCtx, name: String) -> Result<String, FlowError> {
///     Ok(format!("hello, {name}"))
/// }
/// let flow = flow_fn("greet", 1, greet);
/// # let _ = flow;
/// ```
pub fn flow_fn<I, O, F, Fut>(name: impl Into<String>, version: u32, run: F) -> FnFlow<I, O, F>
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
    F: Fn(FlowCtx, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, FlowError>> + Send + 'static,
{
    FnFlow {
        name: name.into(),
        version,
        run,
        input_schema: None,
        types: PhantomData,
    }
}

/// See [`flow_fn`].
pub struct FnFlow<I, O, F> {
    name: String,
    version: u32,
    run: F,
    input_schema: Option<serde_json::Value>,
    types: PhantomData<fn(I) -> O>,
}

impl<I, O, F> FnFlow<I, O, F> {
    /// This flow, declaring the JSON Schema its input must fit ([`Flow::input_schema`]).
    pub fn with_input_schema(mut self, schema: serde_json::Value) -> Self {
        self.input_schema = Some(schema);
        self
    }
}

impl<I, O, F> std::fmt::Debug for FnFlow<I, O, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnFlow")
            .field("name", &self.name)
            .field("version", &self.version)
            .finish()
    }
}

impl<I, O, F, Fut> Flow for FnFlow<I, O, F>
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
    F: Fn(FlowCtx, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, FlowError>> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn version(&self) -> u32 {
        self.version
    }

    fn input_schema(&self) -> Option<&serde_json::Value> {
        self.input_schema.as_ref()
    }

    fn run(&self, ctx: FlowCtx, input: Payload) -> BoxFuture<'static, Result<Payload, FlowError>> {
        let input = input.decode::<I>();
        let running = input.map(|input| (self.run)(ctx, input));
        Box::pin(async move {
            let output = running
                .map_err(|err| {
                    FlowError::new(
                        "loom.input",
                        format!(
                            "flow input does not decode: {}",
                            Payload::describe_decode_error(&err)
                        ),
                    )
                })?
                .await?;
            Ok(Payload::encode(&output)?)
        })
    }
}
