//! Loom's kernel: the per-execution event log, where it is stored, and the fold over it.
//!
//! # What it owns
//! - The event model ([`Event`], [`EventEnvelope`], [`kit::EVENT_SCHEMA`], [`KERNEL_ABI`]): every
//!   fact an execution records, with its JSON form.
//! - The [`EventStore`] trait (K1: append-only, gapless, atomic batches fenced by the expected
//!   seq, durable on return) and its two implementations: [`MemoryStore`] for tests and
//!   [`DiskStore`], the embedded default on redb, which group-commits concurrent appends.
//! - The fold ([`ExecutionState`]): an execution's state as a pure function of its log, which
//!   refuses a log that breaks an invariant with an error naming the seq.
//! - The runtime ([`Runtime`]): flows as async functions of a [`FlowCtx`], replay against the
//!   log with non-determinism detection, gates (suspend/resume), logged decisions, the
//!   effect-dispatch seam ([`Effect`]), recovery, and plugin composition ([`Plugin`]) checked
//!   against `KERNEL_ABI`.
//! - K10-R6 data classification ([`DataClassification`]): which values must be masked on egress.
//! - What the runtime and the stores count of their work for an operator's metrics
//!   ([`RuntimeStats`], [`kit::StoreStats`]): plain numbers kept by relaxed atomic adds,
//!   translated by whoever exports them (the console's `/admin/v1/metrics`).
//! - The record codec ([`kit::record`]): the bytes a store keeps per event, public so that every
//!   store (the PostgreSQL one included) writes the same records.
//! - `conformance` (with the `testkit` feature): the one test suite every store must pass,
//!   and helpers for tests of code built on the kernel.
//!
//! # Public surface
//! One path per item: the modules are private and their public items are re-exported. The
//! crate root holds what a flow author and an embedding program name (`loom_kernel::Runtime`,
//! `loom_kernel::FlowCtx`, `loom_kernel::ExecutionStarted`, `loom_kernel::DiskStore`). Three
//! modules are public, on purpose:
//! - [`kit`], for store implementations and for tools that work on stored logs (the record
//!   codec [`kit::record`], the execution tail, the indexes' codes, the wake index, the types of
//!   the stores' query, retention and statistics methods, replay against a log, the kinds the
//!   runtime records for its own decisions). Not for flows; its items are reached only through
//!   it (`loom_kernel::kit::ExecutionTail`), never also from the root.
//! - [`codes`], the error codes the runtime records: a namespace of constants
//!   (`loom_kernel::codes::UNKNOWN_EFFECT`) that would read ambiguously at the root.
//! - `conformance`, behind the `testkit` feature: test support, not part of a production build.
//!
//! # What it must not depend on
//! No other Loom crate: `loom-agent-surface`, `loom-effect-runtime` and `loom-plugin-a2ui` build
//! on the kernel, never the reverse. The kernel treats `SURFACE_PATCH` ops as opaque JSON. No
//! metrics library: its figures are plain numbers.
//!
//! # Example
//! ```
//! use loom_kernel::{Event, EventStore, EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore};
//! use loom_kernel::{ExecutionCompleted, ExecutionStarted};
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
mod classify;
#[cfg(any(test, feature = "testkit"))]
pub mod conformance;
mod dot_path;
mod envelope;
mod error_sentence;
mod event;
mod event_decode;
mod fold;
mod gates_guide;
#[cfg(doctest)]
mod guides;
mod hash;
mod id;
pub mod kit;
mod payload;
mod runtime;
mod store;

pub use classify::{ClassifyError, ClassifyErrorReason, DataClassification, MASK};
pub use dot_path::{DotPathError, DotSegment, format_dot_path, parse_dot_path};
pub use envelope::EventEnvelope;
pub use error_sentence::error_sentence;
pub use event::{
    AbiVersion, DecisionRecorded, EffectInDoubt, EffectResolved, ErrorInfo, Event,
    ExecutionCancelled, ExecutionCompleted, ExecutionFailed, ExecutionResumed, ExecutionStarted,
    ExecutionSuspended, KERNEL_ABI, StepCompleted, StepFailed, StepStarted, SurfacePatch, Verdict,
};
pub use fold::{
    ExecutionState, ExecutionStatus, FoldError, PendingGate, StepRecord, StepStatus, Violation,
};
pub use id::{ExecutionId, InvalidExecutionId, MAX_EXECUTION_ID_LEN, idempotency_key};
pub use payload::{MAX_DEPTH as MAX_PAYLOAD_DEPTH, Payload, PayloadError};
pub use runtime::codes;
pub use runtime::{
    AbiRange, AsyncResumeAuthenticator, Authorization, Caller, CallerError, CancelError, ChildCall,
    Clock, Command, CompositionError, Contributions, DEFAULT_MAX_PARKED_IN_MEMORY, DeclaredEffect,
    DriveError, Effect, EffectCall, EffectHandle, EffectOutcome, EffectResult, ExecuteTarget,
    FeedFollower, FeedProjection, FirstOf, Flow, FlowCtx, FlowError, FlowSet, FnEffect, FnFlow,
    FollowError, GateOutcome, Inbound, InboundError, InboundHandler, MAX_CALLER_ATTRIBUTES,
    MAX_CALLER_TEXT, ManualClock, NonDeterminism, PendingRequest, Plugin, Projection,
    RecoveryReport, ResolveError, ResumeAuthenticator, ResumeError, ResumeRequest, Runtime,
    RuntimeBuilder, RuntimeStats, Selected, SkippedExecution, StartError, StartOptions,
    StartRequest, StepError, StepName, SystemClock, TimedGate, TypedCommand, UnregisteredFlow,
    UsesEffects, WaitError, flow_fn, stable_hash,
};
pub use store::{
    AppendError, DiskStore, DiskStoreConfig, EventStore, EventStoreExt, FeedEvent, FoldStoredError,
    MemoryStore, OpenError, ReadError, StatusFilter,
};
