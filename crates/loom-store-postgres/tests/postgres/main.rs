//! The PostgreSQL store's tests, one test binary (each skips loudly without a server): conformance,
//! many workers, worker processes killed and cut off, timers and children across workers, and
//! replay-check on the store.

#[path = "../support/mod.rs"]
mod support;

mod children_across_workers;
mod fencing;
mod in_doubt_index;
mod lease_bounds;
mod lease_info;
mod listing;
mod lock_order;
mod many_workers;
mod multiprocess;
mod one_claimant;
mod replay_check;
mod shards;
mod store_conformance;
mod timers_across_workers;
