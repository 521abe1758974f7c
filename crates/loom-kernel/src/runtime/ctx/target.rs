//! What `ctx.execute` accepts: the sealed [`ExecuteTarget`] trait and its implementations for
//! effect names; typed handles implement it in `handle.rs`.

use std::future::Future;

use serde::Serialize;

use super::{Command, FlowCtx, Naming};
#[cfg(doc)]
use crate::EffectHandle;
#[cfg(doc)]
use crate::payload::Payload;

/// What [`FlowCtx::execute`] runs: an effect's name (`&str`, `String`), whose output is the raw
/// [`Payload`], or an [`EffectHandle`], whose output is decoded to its type. Sealed: only these
/// implement it.
pub trait ExecuteTarget<I: ?Sized>: sealed::Sealed {
    /// The future `execute` returns.
    type Command: Future + Send + 'static;

    #[doc(hidden)]
    fn issue(&self, ctx: &FlowCtx, input: &I) -> Self::Command;
}

/// What keeps [`ExecuteTarget`] to the kernel's own types (`handle.rs` adds
/// [`EffectHandle`]); public in a private module, so nothing outside can name it.
pub(crate) mod sealed {
    pub trait Sealed {}
    impl Sealed for str {}
    impl Sealed for String {}
}

impl<I: Serialize + ?Sized> ExecuteTarget<I> for str {
    type Command = Command;

    fn issue(&self, ctx: &FlowCtx, input: &I) -> Command {
        ctx.issue_step(Naming::Counted(self), self, input, false).0
    }
}

impl<I: Serialize + ?Sized> ExecuteTarget<I> for String {
    type Command = Command;

    fn issue(&self, ctx: &FlowCtx, input: &I) -> Command {
        self.as_str().issue(ctx, input)
    }
}
