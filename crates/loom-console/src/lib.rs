//! The operator's console: the `loom` command line and the admin API it talks to.
//!
//! # What it owns
//! - The views an operator reads ([`ExecutionView`], [`ShowView`], [`EventsPage`],
//!   [`InDoubtView`]): executions, folded state, event logs and steps in doubt, with every
//!   payload masked by the K10-R6 classification before it leaves.
//! - The reads over any store ([`list_executions`], [`show`], [`events_from`], [`in_doubt`]):
//!   listings through the status index, one execution, a log from a seq on (for `tail`), the
//!   steps in doubt with how long they have waited.
//! - The admin API: [`admin_router`], an axum router that a server embedding a
//!   `Runtime` mounts on loopback, bearer-token guarded, with read and verdict endpoints that
//!   go through the runtime, starting executions and cancelling by filter among them
//!   ([`FlowView`], [`CancelManyRequest`]); and the web console it serves at `/admin/` (`web/`: a static
//!   page, script and style sheet built into the crate, calling the same API).
//! - Writes on a store no process runs flows on ([`resolve`], [`resume`], [`cancel`]): the one
//!   event the kernel's driver would record, when the fold says it would accept it.
//! - Metrics: `GET /admin/v1/metrics`, the Prometheus text exposition of the runtime's, the
//!   store's and the store's reads' figures, written by `prometheus-client` (`src/metrics.rs`).
//! - Retention ([`purge`]): `loom purge` deletes ended executions older than a cutoff in
//!   bounded batches, on a store file or through the admin API.
//! - A small client of the admin API ([`AdminClient`]) and the `loom` binary (`src/main.rs`).
//!   `docs/CONSOLE.md` describes the commands, exit codes and endpoints.
//!
//! # Public surface
//! One path per item: the modules are private and their public items are re-exported at the
//! crate root (`loom_console::purge`, `loom_console::AdminClient`). The offline writes keep
//! their short names (`loom_console::resolve`); the clock read for the in-doubt ages is
//! [`now_ms`] (retention keeps its own copy private).
//!
//! # What it must not depend on
//! Flow code: the console works on any store without knowing the flows (what needs them, a
//! `retry` verdict, goes through the admin API of the process that has them). It builds on
//! `loom-kernel` (and reads stores through `loom-store-postgres` and writes exports in
//! `loom-replay-check`'s format); no library crate depends on it.
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]

mod actions;
mod admin;
mod client;
mod error;
mod expected;
mod metrics;
mod offline;
mod query;
mod retention;
mod view;

pub use actions::{
    CancelManyAnswer, CancelManyRequest, DEFAULT_CANCEL_MANY, FlowView, MAX_CANCEL_MANY,
    SkippedCancel, Started, flow_views,
};
pub use admin::{
    ADMIN_CALLER, AdminConfig, AdminConfigError, CONTENT_SECURITY_POLICY, MAX_WAIT, MIN_TOKEN_LEN,
    admin_router, bearer_matches, bind_loopback, constant_time_eq, random_token, static_file,
};
pub use client::AdminClient;
pub use error::{ConsoleError, ErrorKind};
pub use expected::{
    ExpectedPayload, FieldViolation, check_resume, describe, example_payload, expected_of,
    field_violations, gate_expectations, gate_for, violations,
};
pub use metrics::METRICS_CONTENT_TYPE;
pub use offline::{
    GOES_ON_WHEN_RECOVERED, GOES_ON_WHEN_RECOVERED_POSTGRES, cancel, no_pending_gate, not_in_doubt,
    resolve, resume,
};
pub use query::{
    CountsView, DEFAULT_LIST_LIMIT, ExecutionList, ListFilter, MAX_LIST_LIMIT, counts_by_name,
    events_from, execution_counts, execution_id, in_doubt, list_executions, list_limit, now_ms,
    show, stopped_steps,
};
pub use retention::{
    DEFAULT_BATCH, MAX_BATCH, cutoff_ms, delete_batch, parse_age, purge, retention_error,
    would_purge,
};
pub use view::{
    ChildView, DecisionView, EventView, EventsPage, ExecutionView, ExportPage, GateView,
    InDoubtView, LeaseView, OutcomeView, STATUSES, ShowView, StateView, StepView, event_view,
    gate_requests, mask_event_value, mask_events, masked_event, parse_status, shell_word,
    state_view, status_name, thousands, utc,
};
