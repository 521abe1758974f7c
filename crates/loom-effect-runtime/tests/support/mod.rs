//! What the effect runtime's tests share: the command that runs one test of this binary as a
//! child process (the crash tests).
#![allow(dead_code)]

#[path = "../../../loom-kernel/tests/support/child.rs"]
pub mod child;
