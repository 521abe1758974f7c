//! Loom's kernel: the per-execution event log, where it is stored, and the fold over it.
//!
//! # What it owns
//! - The event model ([`Event`], [`EventEnvelope`], [`EVENT_SCHEMA`], [`KERNEL_ABI`]): every
//!   fact an execution records, with its JSON form.
//! - The [`EventStore`] trait (K1: append-only, gapless, atomic batches fenced by the expected
//!   seq, durable on return) and its two implementations: [`MemoryStore`] for tests and
//!   [`DiskStore`], the embedded default on redb, which group-commits concurrent appends.
//! - The fold ([`ExecutionState`]): an execution's state as a pure function of its log, which
//!   refuses a log that breaks an invariant with an error naming the seq.
//! - The runtime ([`runtime`]): flows as async functions of a [`runtime::FlowCtx`], replay
//!   against the log with non-determinism detection, gates (suspend/resume), logged decisions,
//!   the effect-dispatch seam, recovery, and plugin composition checked against `KERNEL_ABI`.
//! - K10-R6 data classification ([`classify`]): which values must be masked on egress.
//! - The record codec ([`record`]): the bytes a store keeps per event, public so that every
//!   store (the PostgreSQL one included) writes the same records.
//! - `conformance` (with the `testkit` feature): the one test suite every store must pass,
//!   and helpers for tests of code built on the kernel.
//!
//! # What it must not depend on
//! No other Loom crate: `loom-agent-surface`, `loom-effect-runtime` and `loom-plugin-a2ui` build
//! on the kernel, never the reverse. The kernel treats `SURFACE_PATCH` ops as opaque JSON.
//!
//! # Example
//! ```
//! use loom_kernel::{Event, EventStore, EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore};
//! use loom_kernel::event::{ExecutionCompleted, ExecutionStarted};
//! use serde_json::json;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let id = ExecutionId::new("order-42")?;
//! let started = Event::ExecutionStarted(ExecutionStarted {
//!     flow: "checkout".into(),
//!     flow_version: 1,
//!     input: json!({"sku": "A1"}).into(),
//!     capabilities: Default::default(),
//!     budget: None,
//! });
//! let done = Event::ExecutionCompleted(ExecutionCompleted { output: json!("ok").into() });
//! let head = store.append(&id, 0, &[started, done]).await?;
//! assert_eq!(head, 2);
//! let state = store.fold(&id).await?;
//! assert_eq!(state.status(), ExecutionStatus::Completed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]

mod checksum;
pub mod classify;
#[cfg(any(test, feature = "testkit"))]
pub mod conformance;
mod dot_path;
pub mod envelope;
pub mod event;
mod event_decode;
pub mod fold;
mod gates_guide;
#[cfg(doctest)]
mod guides;
mod hash;
mod id;
mod payload;
pub mod record;
pub mod runtime;
pub mod store;

pub use dot_path::{DotPathError, DotSegment, format_dot_path, parse_dot_path};
pub use envelope::{DecodeError, EventEnvelope};
pub use event::{AbiVersion, EVENT_SCHEMA, ErrorInfo, Event, KERNEL_ABI, Verdict};
pub use fold::{
    ExecutionState, ExecutionStatus, FoldError, PendingGate, StepRecord, StepStatus, Violation,
};
pub use id::{
    ExecutionId, InvalidExecutionId, MAX_EXECUTION_ID_LEN, idempotency_key, split_idempotency_key,
};
pub use payload::{MAX_DEPTH as MAX_PAYLOAD_DEPTH, Payload, PayloadError};
pub use store::{
    AppendError, DiskStore, DiskStoreConfig, EventStore, EventStoreExt, ExecutionPage,
    ExecutionSummary, ExecutionTail, FeedEvent, FoldStoredError, MemoryStore, OpenError, ReadError,
    RetentionError, StatusFilter,
};
