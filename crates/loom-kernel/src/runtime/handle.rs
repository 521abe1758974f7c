//! Typed effect handles: an effect declared once with its input and output types, used as
//! `ctx.execute(&CHARGE, &order).await?` (LD-023).
//!
//! A handle is a name and two types and nothing else: what is recorded is exactly what
//! `ctx.execute("charge", &order)` records (the same step id `charge#n`, the same input, the
//! same events), so a flow can move from names to handles without a new version. The output is
//! decoded when the step's result reaches the flow; a result that does not decode is a
//! [`StepError::Decode`] naming the step, never a panic.
//!
//! A flow that declares the handles it uses ([`FnFlow::uses`], or [`Flow::declared_effects`]
//! for a flow written by hand) is checked at composition: [`RuntimeBuilder::build`] refuses a
//! declared effect that nothing registered with [`CompositionError::UnregisteredEffect`].
//!
//! [`RuntimeBuilder::build`]: crate::runtime::RuntimeBuilder::build
//! [`CompositionError::UnregisteredEffect`]: crate::runtime::CompositionError::UnregisteredEffect

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::payload::Payload;
use crate::runtime::ctx::{Command, ExecuteTarget, FlowCtx, Naming, Sealed, StepError};
use crate::runtime::effect::Effect;
use crate::runtime::errors::CompositionError;
use crate::runtime::flow::{Flow, FlowError, FnFlow};

/// An effect's name with the types of its input `I` and output `O`, declared once:
///
/// ```
/// use loom_kernel::{EffectHandle, FlowCtx, FlowError};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize)]
/// struct Order { sku: String, cents: u64 }
/// #[derive(Deserialize)]
/// struct Receipt { id: String }
///
/// const CHARGE: EffectHandle<Order, Receipt> = EffectHandle::new("payments.charge");
///
/// async fn checkout(ctx: FlowCtx, order: Order) -> Result<String, FlowError> {
///     let receipt: Receipt = ctx.execute(&CHARGE, &order).await?;
///     Ok(receipt.id)
/// }
/// # let _ = checkout;
/// ```
pub struct EffectHandle<I: ?Sized, O> {
    name: &'static str,
    types: PhantomData<fn(&I) -> O>,
}

impl<I: ?Sized, O> EffectHandle<I, O> {
    /// The handle of the effect registered under `name`.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            types: PhantomData,
        }
    }

    /// The effect's name, as registered and recorded.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<I: ?Sized, O> Clone for EffectHandle<I, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I: ?Sized, O> Copy for EffectHandle<I, O> {}

impl<I: ?Sized, O> std::fmt::Debug for EffectHandle<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("EffectHandle").field(&self.name).finish()
    }
}

impl<I: ?Sized, O> Sealed for EffectHandle<I, O> {}

impl<I, O> ExecuteTarget<I> for EffectHandle<I, O>
where
    I: Serialize + ?Sized,
    O: DeserializeOwned + 'static,
{
    type Command = TypedCommand<O>;

    fn issue(&self, ctx: &FlowCtx, input: &I) -> TypedCommand<O> {
        let (command, step_id) = ctx.issue_step(Naming::Counted(self.name), self.name, input, true);
        TypedCommand {
            command,
            step_id,
            output: PhantomData,
        }
    }
}

/// The future of a step run through an [`EffectHandle`]: resolves with its output decoded, or
/// [`StepError::Decode`] naming the step when the recorded output is not an `O`.
#[must_use = "a command does nothing for the flow unless awaited"]
pub struct TypedCommand<O> {
    command: Command,
    step_id: Option<String>,
    output: PhantomData<fn() -> O>,
}

impl<O> std::fmt::Debug for TypedCommand<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedCommand")
            .field("command", &self.command)
            .field("step_id", &self.step_id)
            .finish()
    }
}

impl<O: DeserializeOwned> Future for TypedCommand<O> {
    type Output = Result<O, StepError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let output = match Pin::new(&mut this.command).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(output) => output?,
        };
        Poll::Ready(decode(&output, this.step_id.as_deref()))
    }
}

/// `output` decoded to `O`, or the typed error naming the step.
fn decode<O: DeserializeOwned>(output: &Payload, step_id: Option<&str>) -> Result<O, StepError> {
    output.decode().map_err(|err| StepError::Decode {
        // Assigned whenever the command got this far: a step whose id could not be assigned
        // fails before it has an output.
        step_id: step_id.unwrap_or_default().to_owned(),
        detail: crate::payload::Payload::describe_decode_error(&err),
    })
}

/// An effect a flow declares it uses: any [`EffectHandle`], whatever its types.
pub trait DeclaredEffect: Send + Sync {
    /// The effect's name.
    fn effect_name(&self) -> &'static str;
}

impl<I: ?Sized, O> DeclaredEffect for EffectHandle<I, O> {
    fn effect_name(&self) -> &'static str {
        self.name
    }
}

/// A flow with the effects it declares it uses ([`FnFlow::uses`]); runs as the flow it wraps.
#[derive(Debug)]
pub struct UsesEffects<F> {
    flow: F,
    effects: Vec<&'static str>,
}

impl<F> UsesEffects<F> {
    /// Declares more effects the flow uses.
    pub fn uses(mut self, effects: &[&dyn DeclaredEffect]) -> Self {
        self.effects
            .extend(effects.iter().map(|effect| effect.effect_name()));
        self
    }
}

impl<I, O, F> FnFlow<I, O, F> {
    /// Declares the effects this flow uses, so that [`RuntimeBuilder::build`] refuses a runtime
    /// in which one of them is not registered:
    /// `flow_fn("checkout", 1, checkout).uses(&[&CHARGE, &MAIL])`.
    ///
    /// [`RuntimeBuilder::build`]: crate::runtime::RuntimeBuilder::build
    pub fn uses(self, effects: &[&dyn DeclaredEffect]) -> UsesEffects<Self> {
        UsesEffects {
            flow: self,
            effects: Vec::new(),
        }
        .uses(effects)
    }
}

impl<F: Flow> Flow for UsesEffects<F> {
    fn name(&self) -> &str {
        self.flow.name()
    }

    fn version(&self) -> u32 {
        self.flow.version()
    }

    fn run(&self, ctx: FlowCtx, input: Payload) -> BoxFuture<'static, Result<Payload, FlowError>> {
        self.flow.run(ctx, input)
    }

    fn declared_effects(&self) -> &[&'static str] {
        &self.effects
    }
}

/// The first effect a flow declares that nothing registered, as a composition error.
pub(super) fn check_declared(
    flows: &BTreeMap<(String, u32), Arc<dyn Flow>>,
    effects: &BTreeMap<String, Arc<dyn Effect>>,
) -> Result<(), CompositionError> {
    for ((flow, version), registered) in flows {
        if let Some(effect) = registered
            .declared_effects()
            .iter()
            .find(|effect| !effects.contains_key(**effect))
        {
            return Err(CompositionError::UnregisteredEffect {
                flow: flow.clone(),
                version: *version,
                effect: (*effect).to_owned(),
            });
        }
    }
    Ok(())
}
