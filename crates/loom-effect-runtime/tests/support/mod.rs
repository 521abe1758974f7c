//! What the effect runtime's tests share: the command that runs one test of this binary as a
//! child process (the crash tests), and a memory store whose appends a test decides.
#![allow(dead_code)]

#[path = "../../../loom-kernel/tests/support/child.rs"]
pub mod child;

#[path = "../../../loom-kernel/tests/support/append_hook.rs"]
pub mod append_hook;
