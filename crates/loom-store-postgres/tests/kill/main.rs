//! The kill and failover tests, a test binary of their own: their worker processes and
//! replicated pairs load the machine for a minute or two, which must not overlap the timing of
//! the PostgreSQL store's other tests (`tests/postgres`), run in parallel threads of their
//! binary; they take turns among themselves (`kill_rounds::ONE_AT_A_TIME`). Cargo runs test binaries one
//! after another; `cargo xtask test`, which runs several at once, never runs these two together
//! (`xtask/src/test_run.rs`).

#[path = "../support/mod.rs"]
mod support;

mod asynchronous_standby;
mod failover;
mod interrupted_commit;
mod kill_rounds;
mod ledger;
mod workers;
