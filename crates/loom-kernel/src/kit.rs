//! What code beneath the flow API uses: store implementations and tools that work on stored
//! logs directly.
//!
//! # Who it is for
//! - **Store implementers** (`loom-store-postgres`, a store of your own): the record codec
//!   ([`record`], [`encode_record`], [`decode_record`], [`decode_stored`]), the per-execution
//!   [`ExecutionTail`] that checks a batch before it is stored, the status codes the status
//!   index keeps ([`status_code`], [`filter_code`]), the wake index ([`wake`], [`Wakeup`]),
//!   leases ([`LeaseHold`], [`NewClaim`]), and the types the [`EventStore`](crate::EventStore)
//!   methods for queries, retention and statistics take and return ([`ExecutionQuery`],
//!   [`ExecutionQueryPage`], [`StatusCounts`], [`RetentionError`], [`StoreStats`], ...).
//! - **Tools that read or check stored logs without running their flows** (`loom-replay-check`,
//!   the console's listings, metrics and offline commands): replay against a log
//!   ([`Replayer`]), reading a feed without a runtime ([`catch_up`]), an operator's write on an
//!   execution no process runs, decided by its machine ([`offline_resume`],
//!   [`offline_resolve`], [`offline_cancel`]), the kinds and event types
//!   the runtime records for its own decisions and gates ([`CHILD_EVENT_TYPE`],
//!   [`DEADLINE_KIND`], [`REQUEST_KIND`], ...) and the step ids it records them under, and the
//!   disk store's salvage and scrub results.
//!
//! # What it must not be used for
//! Flows. A flow sees its execution only through its [`FlowCtx`](crate::FlowCtx): it does not
//! read records, the indexes or the runtime's own decisions, and it does not name these items.
//! An embedding program needs nothing here to start, drive, resume or read executions; the
//! crate root has all of that.
//!
//! These items follow the stores and the runtime's log format: they change when those do.

pub mod record;

pub use crate::classify::mask_file_paths;
pub use crate::envelope::{
    DecodeError, decode_record, encode_json_record, encode_record, encode_record_into,
};
pub use crate::event::EVENT_SCHEMA;
pub use crate::id::split_idempotency_key;
pub use crate::runtime::{
    CHILD_EVENT_TYPE, CHILD_KEY, CHILD_KIND, CLOSED_KEY, CatchUpError, DEADLINE_KIND,
    OfflineRefusal, OfflineWrite, PATCH_KIND, PAYLOAD_SCHEMA_KIND, REQUEST_KIND, ReplayError,
    ReplayReport, Replayer, TIMED_OUT_KEY, TIMER_EVENT_TYPE, catch_up, child_end_resume,
    child_parent, expected_payload, input_digest, offline_cancel, offline_resolve, offline_resume,
    payload_schema_step_id, pending_requests, pending_requests_of, request_gate_id,
    request_step_id,
};
pub use crate::store::tail::{
    RefusedEvent, TailChange, filter_code, status_code, status_from_code,
};
pub use crate::store::{
    EncodedAppend, EncodedRecords, ExecutionCursor, ExecutionPage, ExecutionQuery,
    ExecutionQueryPage, ExecutionSummary, ExecutionTail, LATENCY_BOUNDS_US, LatencyHistogram,
    LatencyRecorder, LeaseHold, LeaseInfo, ListedExecution, MAX_QUERY_LIMIT, NewClaim, RecordsIter,
    RetentionError, STREAM_PAGE, SalvageError, Salvaged, ScrubStatus, StatusCounts, StorageError,
    StoreStats, StoredLog, WakeReason, Wakeup, check_batch, decode_stored, every_listed_execution,
    prefix_upper_bound, start_of_first_record, wake, wall_clock_ms,
};
