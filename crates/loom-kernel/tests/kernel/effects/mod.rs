//! The runtime's effect tests: effects and their budget, typed effect handles, and
//! recovery.

mod effect_handles;
mod effects;
mod lease;
mod recover;
