//! The runtime's flow and replay tests: running flows, replay after a restart,
//! flow shapes, panics in user code, shutdown, starts, versioning, catching up, plugins, and the
//! model-based test of the runtime against a reference model.

mod catch_up;
mod flow_shapes;
mod panics;
mod plugins;
// The file of this theme that bears its name, as before the themes were one binary.
#[allow(clippy::module_inception)]
mod replay;
mod runtime;
mod shutdown;
mod start;
mod state_machine;
mod versioning;
mod wait;
