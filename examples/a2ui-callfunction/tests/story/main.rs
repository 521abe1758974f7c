//! The a2ui-callfunction example's tests, one test binary: the flow, the server, the whole story as
//! real processes, on PostgreSQL, and the playground in a browser.

#[path = "../support/mod.rs"]
mod support;

mod attacks;
mod flow;
mod hostile;
mod logs;
mod playground;
mod postgres;
mod server;
mod stop;
mod story;
mod v0_9;
