//! The runtime's effect tests: effects and their budget, typed effect handles, and
//! recovery.

mod effect_handles;
// The file of this theme that bears its name, as before the themes were one binary.
#[allow(clippy::module_inception)]
mod effects;
mod lease;
mod recover;
