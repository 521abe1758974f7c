//! The kernel's integration tests, one test binary (one link, one process to schedule), its
//! themes as modules: `effects` (effects and their budget, handles, recovery), `gates` (gates,
//! timers, children, callers, parked flows and their SIGKILL tests), `replay` (flows, replay,
//! panics, shutdown, versioning, the runtime against its model) and `store` (the fold and its
//! laws, the stores' conformance, corruption, crash consistency, older layouts). A test's name
//! starts with its theme (`store::journal::...`), so `cargo test -p loom-kernel --test kernel
//! store::` runs one theme.

#[path = "../support/mod.rs"]
mod support;

mod effects;
mod gates;
mod replay;
mod store;
