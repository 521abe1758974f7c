//! What the PostgreSQL store's tests share: the command that runs one test of this binary as a
//! child process (the worker processes).
#![allow(dead_code)]

#[path = "../../../loom-kernel/tests/support/child.rs"]
pub mod child;
