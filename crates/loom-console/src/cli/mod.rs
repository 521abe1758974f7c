//! The `loom` binary's parts, one job each; `main.rs` wires them together.

// First: its `out!` macro is used by the modules after it.
#[macro_use]
mod output;

pub(crate) mod args;
pub(crate) mod backend;
pub(crate) mod export;
pub(crate) mod purge;
pub(crate) mod reads;
pub(crate) mod store_file;
#[cfg(test)]
mod tests;
pub(crate) mod through_admin;
pub(crate) mod writes;
