//! The agent surface's tests, one test binary: surface ops against a reference model, paths and
//! pointers, deep and large models, refusals, the projection and the flow-side emitter.

mod deep_patches;
mod emitter;
mod large_model;
mod paths;
mod projection;
mod reference_model;
mod refusals;
