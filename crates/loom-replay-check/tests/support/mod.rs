//! What replay-check's tests share: the command that runs one test of this binary as a child
//! process (a command line whose standard output is read).
#![allow(dead_code)]

#[path = "../../../loom-kernel/tests/support/child.rs"]
pub mod child;
