//! The agent surface's tests, one test binary: surface ops against a reference model, paths and
//! pointers, deep and large models, refusals, the projection and the flow-side emitter.

#[path = "../../../loom-kernel/tests/support/divergence.rs"]
mod divergence;

mod deep_patches;
mod emitter;
mod large_model;
mod paths;
mod projection;
mod reference_model;
mod refusals;
