//! The quickstart's tests, one test binary: its flows, the golden logs, and the README's program.

mod flows;
mod golden;
mod logs;
mod operator;
mod readme;
