//! Containment of panics in user code (flows, effects, projections, the resume authenticator,
//! inbound handlers): a panic becomes a value the runtime records or returns, and never
//! unwinds into the runtime's caller or ends a driver silently.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

/// Runs `f`, turning a panic into its message.
///
/// User code is called with the runtime's own state consistent (no lock held, nothing half
/// updated), so observing its state after a panic is sound: that is what makes the
/// `AssertUnwindSafe` true.
pub(crate) fn contain<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|panic| panic_text(&*panic))
}

/// `future`, with a panic while it is polled turned into its message.
pub(crate) fn contain_future<F: Future>(
    future: F,
) -> impl Future<Output = Result<F::Output, String>> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .map(|result| result.map_err(|panic| panic_text(&*panic)))
}

/// The message of a panic payload (`panic!` with a literal or a formatted string).
pub(crate) fn panic_text(panic: &(dyn Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a payload that is not text".to_owned()
    }
}
