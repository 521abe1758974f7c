//! The store conformance suite: one set of checks every [`EventStore`] must pass.
//!
//! A store's tests implement [`StoreHarness`] and call [`run_all`] (or single checks). Each
//! check documents its preconditions and panics with a message on a breach of the contract in
//! [`crate::EventStore`]: it is test support, not library code for production paths.
//!
//! ```
//! use loom_kernel::conformance::{self, StoreHarness};
//! use loom_kernel::MemoryStore;
//!
//! struct Memory;
//! impl StoreHarness for Memory {
//!     type Store = MemoryStore;
//!     fn fresh(&mut self) -> MemoryStore { MemoryStore::new() }
//!     fn reopen(&mut self, store: MemoryStore) -> MemoryStore { store }
//! }
//! # tokio::runtime::Runtime::new().unwrap().block_on(conformance::run_all(&mut Memory));
//! ```

mod events;
mod feed;
mod hooked;
mod logs;
mod queries;
mod retention;
mod runtimes;
mod status_index;
mod validation;
mod wake_index;

use crate::store::EventStore;

pub use events::{
    asleep_on_timer, completed, deadline, id, in_doubt, log_of, nested, resolved, resumed, started,
    step_completed, step_started, suspended, tagged,
};
pub use feed::{feed_gives_every_event_once_in_order, follow_wakes_on_append};
pub use hooked::{Hooked, OneBadLog, StoreHooks};
pub use logs::{
    a_claimed_id_takes_the_claimants_first_append_only, a_store_holds_what_it_just_appended,
    append_then_read, conflicting_append_changes_nothing, contending_writers_keep_the_log_gapless,
    empty_batch_is_refused, ids_sharing_a_prefix_stay_apart, large_payloads,
    many_executions_and_paging, racing_appenders_one_winner_per_seq, read_logs_reads_whole_logs,
    reads_after_reopen, stream_crosses_pages, wait_for_wakes_on_append,
};
pub use queries::queries_agree_with_the_reference;
pub use retention::{
    a_deleted_id_started_again_feeds_each_event_once_in_order,
    delete_ended_keeps_a_child_its_parent_still_waits_for,
    delete_ended_removes_only_old_ended_executions,
};
pub use runtimes::{RUNNING_LEFT, echo_effect, fill_for_recovery, fill_logs, stuck_runtime};
pub use status_index::status_index_follows_every_transition;
pub use validation::{
    invalid_appends_are_refused_whole, payloads_too_deep_to_read_back_are_refused,
};
pub use wake_index::wake_index_follows_deadlines_and_child_links;

/// How the suite gets stores to check.
pub trait StoreHarness {
    /// The store under test.
    type Store: EventStore + Clone;
    /// A new, empty store.
    fn fresh(&mut self) -> Self::Store;
    /// Closes `store` and opens the same logs again (for a durable store: from its files).
    fn reopen(&mut self, store: Self::Store) -> Self::Store;
}

/// Runs every check, each on a fresh store.
pub async fn run_all<H: StoreHarness>(harness: &mut H) {
    run_log_checks(harness).await;
    run_index_checks(harness).await;
}

/// The checks of validation, the status index, the feed and retention
/// ([`EventStore::list_by_status`], [`EventStore::read_feed`], [`EventStore::delete_ended`]).
pub async fn run_index_checks<H: StoreHarness>(harness: &mut H) {
    invalid_appends_are_refused_whole(harness.fresh()).await;
    payloads_too_deep_to_read_back_are_refused(harness.fresh()).await;
    status_index_follows_every_transition(harness).await;
    feed_gives_every_event_once_in_order(harness).await;
    follow_wakes_on_append(harness.fresh()).await;
    delete_ended_removes_only_old_ended_executions(harness.fresh()).await;
    delete_ended_keeps_a_child_its_parent_still_waits_for(harness.fresh()).await;
    a_deleted_id_started_again_feeds_each_event_once_in_order(harness).await;
    queries_agree_with_the_reference(harness).await;
    wake_index_follows_deadlines_and_child_links(harness).await;
}

/// The checks of the log itself: appends, fencing, reads, listing, waiting.
pub async fn run_log_checks<H: StoreHarness>(harness: &mut H) {
    append_then_read(harness.fresh()).await;
    conflicting_append_changes_nothing(harness.fresh()).await;
    empty_batch_is_refused(harness.fresh()).await;
    racing_appenders_one_winner_per_seq(harness.fresh()).await;
    contending_writers_keep_the_log_gapless(harness.fresh()).await;
    reads_after_reopen(harness).await;
    large_payloads(harness.fresh()).await;
    many_executions_and_paging(harness.fresh()).await;
    ids_sharing_a_prefix_stay_apart(harness.fresh()).await;
    stream_crosses_pages(harness.fresh()).await;
    wait_for_wakes_on_append(harness.fresh()).await;
    read_logs_reads_whole_logs(harness.fresh()).await;
    a_store_holds_what_it_just_appended(harness.fresh()).await;
    a_claimed_id_takes_the_claimants_first_append_only(harness.fresh()).await;
}
