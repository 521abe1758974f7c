//! The runtime's flow and replay tests, one test binary: running flows, replay after a restart,
//! flow shapes, panics in user code, shutdown, starts, versioning, catching up, plugins, and the
//! model-based test of the runtime against a reference model.

#[path = "../support/mod.rs"]
mod support;

mod catch_up;
mod flow_shapes;
mod panics;
mod plugins;
mod replay;
mod runtime;
mod shutdown;
mod start;
mod state_machine;
mod versioning;
mod wait;
