//! The runtime's effect tests, one test binary: effects and their budget, typed effect handles, and
//! recovery.

#[path = "../support/mod.rs"]
mod support;

mod effect_handles;
mod effects;
mod lease;
mod recover;
