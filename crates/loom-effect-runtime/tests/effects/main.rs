//! The effect runtime's tests, one test binary: at most once (K9) with in-memory and real crashes,
//! the in-doubt listing, typed effect handles, and the middleware (authorization, metering,
//! retries, timeouts).

#[path = "../support/mod.rs"]
mod support;

mod at_most_once;
mod crash;
mod effect_handles;
mod in_doubt_listing;
mod middleware;
