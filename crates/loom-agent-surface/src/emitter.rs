//! The write side, for flows: [`SurfaceExt::surface`] gives a [`SurfaceEmitter`], which checks
//! ops against the surface's current model and records those that apply as `SURFACE_PATCH`
//! events through [`FlowCtx::emit_surface_patch`].
//!
//! The kernel knows nothing of this module: it records opaque ops and keeps per-execution
//! state for extension crates ([`FlowCtx::with_local`]); everything else is here.

use std::collections::BTreeMap;

use loom_kernel::Payload;
use loom_kernel::{FlowCtx, FlowError, StepError};
use serde::Serialize;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::apply::{PatchError, apply_batch, describe};
use crate::op::{OpKind, SurfaceOp, json_type_name};
use crate::path::{PathError, SurfacePath};

/// Gives a flow's context its surfaces: `ctx.surface("main").set("order.status", "pending")`.
pub trait SurfaceExt {
    /// The emitter for `surface_id` in this execution. Cheap; emitters for the same surface
    /// share its model.
    fn surface(&self, surface_id: &str) -> SurfaceEmitter;
}

impl SurfaceExt for FlowCtx {
    fn surface(&self, surface_id: &str) -> SurfaceEmitter {
        SurfaceEmitter {
            ctx: self.clone(),
            surface_id: surface_id.to_owned(),
        }
    }
}

/// Records ops on one surface of the running execution.
///
/// Each single-op method ([`set`](Self::set), [`merge`](Self::merge),
/// [`append`](Self::append), [`remove`](Self::remove), [`increment`](Self::increment)) records
/// one `SURFACE_PATCH` holding one op. To record several ops as one `SURFACE_PATCH`, build a
/// batch with [`patch`](Self::patch) and [`emit`](SurfaceBatch::emit) it; the batch applies
/// all or nothing, like the event that records it.
///
/// # Validation
/// The emitter keeps the model each surface of the execution has after the patches recorded
/// so far (starting from `{}`, as [`SurfaceProjection`](crate::SurfaceProjection) does). Before
/// recording, the ops are applied to that model; an op that cannot apply (increment of a
/// string, append to an object, a missing parent, ...) is refused with
/// [`EmitError::Refused`], naming the op's index, kind, path and reason, and nothing is
/// recorded. So a recorded patch always folds.
///
/// # Replay
/// A replayed flow issues the same emits in the same order, so the model, rebuilt from `{}` by
/// each new driver, goes through the same states: validation gives the same answers as on the
/// live run, and the kernel matches each recorded `SURFACE_PATCH` (ops included) like any
/// other command.
///
/// # Rollback
/// The ops are applied to the model first and recorded second. If the kernel then refuses to
/// record them (a [`StepError`]: the flow diverged from its log, or the step id is taken), the
/// batch is taken back through the undo log the apply kept, in O(ops), never by copying the
/// model; the model is again as the log has it. Validation and recording run under one lock, so
/// emits from clones of the context cannot interleave between the two.
#[derive(Debug, Clone)]
pub struct SurfaceEmitter {
    ctx: FlowCtx,
    surface_id: String,
}

impl SurfaceEmitter {
    /// The id of the surface this emitter writes.
    pub fn surface_id(&self) -> &str {
        &self.surface_id
    }

    /// Records `set`: puts `value` at `path`.
    pub fn set(&self, path: &str, value: impl Serialize) -> Result<(), EmitError> {
        self.patch().set(path, value).emit()
    }

    /// Records `merge`: shallow-merges `value`, which must serialize to a JSON object, into the
    /// object at `path`.
    pub fn merge(&self, path: &str, value: impl Serialize) -> Result<(), EmitError> {
        self.patch().merge(path, value).emit()
    }

    /// Records `append`: pushes `value` onto the array at `path`.
    pub fn append(&self, path: &str, value: impl Serialize) -> Result<(), EmitError> {
        self.patch().append(path, value).emit()
    }

    /// Records `remove`: deletes the object key or array item at `path`.
    pub fn remove(&self, path: &str) -> Result<(), EmitError> {
        self.patch().remove(path).emit()
    }

    /// Records `increment`: adds `by`, which must serialize to a JSON number, to the number at
    /// `path`.
    pub fn increment(&self, path: &str, by: impl Serialize) -> Result<(), EmitError> {
        self.patch().increment(path, by).emit()
    }

    /// Starts a batch: the ops added to it are recorded as one `SURFACE_PATCH` by
    /// [`SurfaceBatch::emit`].
    pub fn patch(&self) -> SurfaceBatch<'_> {
        SurfaceBatch {
            emitter: self,
            ops: Vec::new(),
            error: None,
        }
    }

    /// Records already-built ops as one `SURFACE_PATCH`, after the same validation. An empty
    /// slice records nothing.
    pub fn emit_ops(&self, ops: &[SurfaceOp]) -> Result<(), EmitError> {
        if ops.is_empty() {
            return Ok(());
        }
        self.ctx.with_local(|models: &mut SurfaceModels| {
            models.record(&self.ctx, &self.surface_id, ops)
        })
    }
}

/// Ops gathered to be recorded as one `SURFACE_PATCH`; see [`SurfaceEmitter::patch`].
///
/// ```no_run
/// # use loom_agent_surface::{EmitError, SurfaceExt};
/// # fn flow(ctx: loom_kernel::FlowCtx) -> Result<(), EmitError> {
/// ctx.surface("main")
///     .patch()
///     .set("order.status", "paid")
///     .increment("order.count", 1)
///     .emit()?;
/// # Ok(())
/// # }
/// ```
///
/// Adding an op never fails on the spot: the first bad path or value is kept and returned by
/// [`emit`](Self::emit), which then records nothing. That keeps the chain free of `?`s and
/// still reports the op by its index in the batch.
#[derive(Debug)]
#[must_use = "a batch records nothing until it is emitted"]
pub struct SurfaceBatch<'e> {
    emitter: &'e SurfaceEmitter,
    ops: Vec<SurfaceOp>,
    error: Option<EmitError>,
}

impl SurfaceBatch<'_> {
    /// Adds `set`: puts `value` at `path`.
    pub fn set(self, path: &str, value: impl Serialize) -> Self {
        self.push(OpKind::Set, path, |path, index, emitter| {
            Ok(SurfaceOp::Set {
                value: to_json(&value, emitter, index, OpKind::Set, &path)?,
                path,
            })
        })
    }

    /// Adds `merge`: `value` must serialize to a JSON object.
    pub fn merge(self, path: &str, value: impl Serialize) -> Self {
        self.push(OpKind::Merge, path, |path, index, emitter| {
            match to_json(&value, emitter, index, OpKind::Merge, &path)? {
                Value::Object(value) => Ok(SurfaceOp::Merge { path, value }),
                other => Err(emitter.wrong_type(index, OpKind::Merge, path, "an object", &other)),
            }
        })
    }

    /// Adds `append`: pushes `value` onto the array at `path`.
    pub fn append(self, path: &str, value: impl Serialize) -> Self {
        self.push(OpKind::Append, path, |path, index, emitter| {
            Ok(SurfaceOp::Append {
                value: to_json(&value, emitter, index, OpKind::Append, &path)?,
                path,
            })
        })
    }

    /// Adds `remove`: deletes the object key or array item at `path`.
    pub fn remove(self, path: &str) -> Self {
        self.push(OpKind::Remove, path, |path, _, _| {
            Ok(SurfaceOp::Remove { path })
        })
    }

    /// Adds `increment`: `by` must serialize to a JSON number (a NaN or infinite float
    /// serializes to `null`, so it is refused here).
    pub fn increment(self, path: &str, by: impl Serialize) -> Self {
        self.push(
            OpKind::Increment,
            path,
            |path, index, emitter| match to_json(&by, emitter, index, OpKind::Increment, &path)? {
                Value::Number(by) => Ok(SurfaceOp::Increment { path, by }),
                other => {
                    Err(emitter.wrong_type(index, OpKind::Increment, path, "a number", &other))
                }
            },
        )
    }

    /// Adds an already-built op.
    pub fn op(mut self, op: SurfaceOp) -> Self {
        if self.error.is_none() {
            self.ops.push(op);
        }
        self
    }

    /// The ops gathered so far (up to the first bad one).
    pub fn ops(&self) -> &[SurfaceOp] {
        &self.ops
    }

    /// Checks the batch against the surface's model and records it as one `SURFACE_PATCH`;
    /// see [`SurfaceEmitter`] for the rules. An empty batch records nothing.
    pub fn emit(self) -> Result<(), EmitError> {
        match self.error {
            Some(error) => Err(error),
            None => self.emitter.emit_ops(&self.ops),
        }
    }

    fn push(
        mut self,
        kind: OpKind,
        path: &str,
        build: impl FnOnce(SurfacePath, usize, &SurfaceEmitter) -> Result<SurfaceOp, EmitError>,
    ) -> Self {
        if self.error.is_some() {
            return self;
        }
        let index = self.ops.len();
        let built = SurfacePath::parse(path)
            .map_err(|source| EmitError::BadPath {
                surface_id: self.emitter.surface_id.clone(),
                index,
                kind,
                source,
            })
            .and_then(|path| build(path, index, self.emitter));
        match built {
            Ok(op) => self.ops.push(op),
            Err(error) => self.error = Some(error),
        }
        self
    }
}

impl SurfaceEmitter {
    fn wrong_type(
        &self,
        index: usize,
        kind: OpKind,
        path: SurfacePath,
        expected: &'static str,
        value: &Value,
    ) -> EmitError {
        EmitError::WrongValueType {
            surface_id: self.surface_id.clone(),
            index,
            kind,
            path,
            expected,
            found: json_type_name(value),
        }
    }
}

fn to_json(
    value: &impl Serialize,
    emitter: &SurfaceEmitter,
    index: usize,
    kind: OpKind,
    path: &SurfacePath,
) -> Result<Value, EmitError> {
    serde_json::to_value(value).map_err(|err| EmitError::NotSerializable {
        surface_id: emitter.surface_id.clone(),
        index,
        kind,
        path: path.clone(),
        detail: err.to_string(),
    })
}

/// The models of the execution's surfaces as the emitter has recorded them; kept in the
/// context's per-execution state. Private, so that nothing but the emitter can change a model
/// without recording the change.
#[derive(Debug, Default)]
struct SurfaceModels {
    models: BTreeMap<String, Value>,
}

impl SurfaceModels {
    fn record(
        &mut self,
        ctx: &FlowCtx,
        surface_id: &str,
        ops: &[SurfaceOp],
    ) -> Result<(), EmitError> {
        match self.models.get_mut(surface_id) {
            Some(model) => apply_and_record(ctx, surface_id, model, ops),
            None => {
                // As in the projection, only a batch that is recorded brings a surface into
                // being.
                let mut model = Value::Object(Map::new());
                apply_and_record(ctx, surface_id, &mut model, ops)?;
                self.models.insert(surface_id.to_owned(), model);
                Ok(())
            }
        }
    }
}

fn apply_and_record(
    ctx: &FlowCtx,
    surface_id: &str,
    model: &mut Value,
    ops: &[SurfaceOp],
) -> Result<(), EmitError> {
    // Refused before anything changes: the log never holds what no reader could parse back.
    let payload =
        Payload::try_from_value(&Value::Array(ops.iter().map(SurfaceOp::to_value).collect()))
            .map_err(|_| EmitError::TooDeep {
                surface_id: surface_id.to_owned(),
                ops: ops.len(),
            })?;
    let applied = apply_batch(model, ops).map_err(|source| EmitError::Refused {
        surface_id: surface_id.to_owned(),
        source: Box::new(source),
    })?;
    ctx.emit_surface_patch(surface_id, payload)
        .map_err(|source| {
            applied.into_undo().revert(model, ops);
            EmitError::Step {
                surface_id: surface_id.to_owned(),
                ops: ops.len(),
                source,
            }
        })
}

/// Why an emit recorded nothing.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum EmitError {
    /// A path string is not a dot-path.
    #[error("surface `{surface_id}`: op #{index} ({kind}) has a bad path: {source}")]
    BadPath {
        /// The surface's id.
        surface_id: String,
        /// Position of the op in its batch (0 for a single op).
        index: usize,
        /// The op's kind.
        kind: OpKind,
        /// The underlying error.
        #[source]
        source: PathError,
    },
    /// A value did not serialize to JSON.
    #[error(
        "surface `{surface_id}`: op #{index} ({kind} at {}): the value does not serialize to JSON: {detail}",
        describe(path)
    )]
    NotSerializable {
        /// The surface's id.
        surface_id: String,
        /// Position of the op in its batch.
        index: usize,
        /// The op's kind.
        kind: OpKind,
        /// The dot-path of the op.
        path: SurfacePath,
        /// What went wrong, in words.
        detail: String,
    },
    /// A value serialized to the wrong JSON type for its op (`merge` needs an object,
    /// `increment` a number).
    #[error(
        "surface `{surface_id}`: op #{index} ({kind} at {}) needs {expected}, but the value is {found}",
        describe(path)
    )]
    WrongValueType {
        /// The surface's id.
        surface_id: String,
        /// Position of the op in its batch.
        index: usize,
        /// The op's kind.
        kind: OpKind,
        /// The dot-path of the op.
        path: SurfacePath,
        /// The JSON type the op needs.
        expected: &'static str,
        /// The JSON type of the value given.
        found: &'static str,
    },
    /// The ops hold a value nested deeper than a recorded payload may be
    /// (`loom_kernel::MAX_PAYLOAD_DEPTH`, counting the patch's own two levels), which no reader
    /// could parse back.
    #[error(
        "surface `{surface_id}`: the patch of {ops} op(s) is nested deeper than {} levels; nothing was recorded",
        loom_kernel::MAX_PAYLOAD_DEPTH
    )]
    TooDeep {
        /// The surface's id.
        surface_id: String,
        /// How many ops the patch held.
        ops: usize,
    },
    /// An op does not apply to the surface's current model; `source` names it and says why.
    #[error("surface `{surface_id}`: {source}; nothing was recorded")]
    Refused {
        /// The surface's id.
        surface_id: String,
        /// The underlying error.
        #[source]
        source: Box<PatchError>,
    },
    /// The ops apply, but the kernel did not record them (divergence from the log, or a taken
    /// step id); the model is back as it was.
    #[error("surface `{surface_id}`: the kernel did not record the patch of {ops} op(s): {source}")]
    Step {
        /// The surface's id.
        surface_id: String,
        /// How many ops the patch held.
        ops: usize,
        /// The underlying error.
        #[source]
        source: StepError,
    },
}

impl EmitError {
    /// The code a flow failing with this error records: `loom.surface.path`,
    /// `loom.surface.value`, `loom.surface.refused`, `loom.surface.too_deep`, or `loom.step` when
    /// the kernel refused.
    pub fn code(&self) -> &'static str {
        match self {
            EmitError::BadPath { .. } => "loom.surface.path",
            EmitError::NotSerializable { .. } | EmitError::WrongValueType { .. } => {
                "loom.surface.value"
            }
            EmitError::Refused { .. } => "loom.surface.refused",
            EmitError::TooDeep { .. } => "loom.surface.too_deep",
            EmitError::Step { .. } => "loom.step",
        }
    }

    /// The surface the emit was for.
    pub fn surface_id(&self) -> &str {
        match self {
            EmitError::BadPath { surface_id, .. }
            | EmitError::NotSerializable { surface_id, .. }
            | EmitError::WrongValueType { surface_id, .. }
            | EmitError::Refused { surface_id, .. }
            | EmitError::TooDeep { surface_id, .. }
            | EmitError::Step { surface_id, .. } => surface_id,
        }
    }
}

impl From<EmitError> for FlowError {
    fn from(error: EmitError) -> Self {
        FlowError::new(error.code(), error.to_string())
    }
}
