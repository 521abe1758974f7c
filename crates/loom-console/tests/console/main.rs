//! The console's tests, one test binary: the `loom` command line on a store, the admin API and its
//! callers, and the web console in a browser.

#[path = "../support/mod.rs"]
mod support;

mod admin_actions;
mod admin_api;
mod admin_caller;
mod browser;
mod browser_on_call;
mod browser_operator;
mod browser_paging;
mod cli_gate_requests;
mod cli_postgres;
mod cli_purge;
mod cli_stopped_steps;
mod cli_store;
mod cli_store_health;
mod gate_schemas;
mod metrics;
mod offline_reserved;
