//! Loom's agent surface: the native UI state of an execution, changed only by `SURFACE_PATCH`
//! events.
//!
//! # What it owns
//! - The op vocabulary ([`SurfaceOp`]: set / merge / append / remove / increment) and its JSON
//!   form, which the kernel stores as opaque values inside `SURFACE_PATCH` events.
//! - Dot-paths ([`SurfacePath`]: `order.items.0.qty`, with `\.` and `\\` escapes) and their
//!   RFC 6901 JSON Pointer form for egress.
//! - [`apply_surface_patches`]: applies a batch of ops to a data model atomically, in
//!   O(path depth) per op, and reports where each op changed it.
//! - [`SurfaceProjection`]: the read-side fold of `SURFACE_PATCH` events into one data model per
//!   surface.
//! - [`SurfaceEmitter`], the write side for flows: `use loom_agent_surface::SurfaceExt;` then
//!   `ctx.surface("main").set("order.status", "pending")?` records a `SURFACE_PATCH` through
//!   the kernel's `FlowCtx::emit_surface_patch`, and `ctx.surface("main").patch().set(..)
//!   .increment(..).emit()?` records several ops as one. Ops are checked against the surface's
//!   current model first; one that cannot apply is refused ([`EmitError`]) and nothing is
//!   recorded. The kernel never learns these names.
//!
//! # What it must not depend on
//! Of the Loom crates, only `loom-kernel`. Never `loom-effect-runtime` or `loom-plugin-a2ui`:
//! the A2UI bridge builds on this crate, not the reverse. Nothing here does I/O or reads a
//! clock, so a fold over the same events always gives the same models.
//!
//! # Example
//! ```
//! use loom_agent_surface::{SurfaceOp, SurfacePath, apply_surface_patches};
//! use serde_json::json;
//!
//! let mut model = json!({"order": {"items": [], "count": 0}});
//! let ops = [
//!     SurfaceOp::from_value(&json!({"op": "append", "path": "order.items", "value": {"sku": "A1"}}))?,
//!     SurfaceOp::Increment { path: SurfacePath::parse("order.count")?, by: 1.into() },
//! ];
//! let touched = apply_surface_patches(&mut model, &ops)?;
//! assert_eq!(model, json!({"order": {"items": [{"sku": "A1"}], "count": 1}}));
//! assert_eq!(touched[1].pointer, "/order/count");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]

mod apply;
mod emitter;
mod op;
mod path;
mod projection;

pub use apply::{PatchError, PatchFailure, Touched, apply_surface_op, apply_surface_patches};
pub use emitter::{EmitError, SurfaceBatch, SurfaceEmitter, SurfaceExt};
pub use op::{OpDecodeError, OpKind, SurfaceOp, json_type_name};
pub use path::{PathError, PathErrorReason, PointerError, SurfacePath};
pub use projection::{ProjectionError, SurfaceProjection, TouchedPointer};
