//! The kill test, a test binary of its own: its worker processes load the machine for a minute
//! or two, which must not overlap the timing of the PostgreSQL store's other tests
//! (`tests/postgres`), run in parallel threads of their binary. Cargo runs test binaries one
//! after another; `cargo xtask test`, which runs several at once, never runs these two together
//! (`xtask/src/test_run.rs`).

#[path = "../support/mod.rs"]
mod support;

mod asynchronous_standby;
mod failover;
mod interrupted_commit;
mod kill_rounds;
