//! The read side: every surface's data model, folded from an execution's `SURFACE_PATCH` events.

use std::collections::BTreeMap;

use loom_kernel::Event;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::apply::{PatchError, apply_surface_patches};
use crate::op::{OpDecodeError, SurfaceOp};

/// The data models of one execution's surfaces, keyed by surface id.
///
/// A surface comes into being with its first `SURFACE_PATCH`, starting from an empty object.
/// Folding the same events gives the same models: the map is ordered and nothing here reads a
/// clock or iterates a hash map.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SurfaceProjection {
    models: BTreeMap<String, Value>,
}

/// One place a folded event changed, on one surface.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TouchedPointer {
    /// The surface that changed.
    pub surface_id: String,
    /// RFC 6901 JSON Pointer into that surface's model.
    pub pointer: String,
}

/// A `SURFACE_PATCH` event that does not fold; the projection is left unchanged.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ProjectionError {
    #[error(
        "SURFACE_PATCH of step `{step_id}` on surface `{surface_id}`: op #{index} is not a surface op: {source}"
    )]
    /// An op of the patch does not decode.
    Decode {
        /// The step that recorded the patch.
        step_id: String,
        /// The surface's id.
        surface_id: String,
        /// Position of the op in its batch.
        index: usize,
        /// The underlying error.
        #[source]
        source: Box<OpDecodeError>,
    },
    #[error(
        "SURFACE_PATCH of step `{step_id}` on surface `{surface_id}`: ops are not a JSON array of ops: {detail}"
    )]
    /// The patch's ops are not a JSON array.
    NotAnArray {
        /// The step that recorded the patch.
        step_id: String,
        /// The surface's id.
        surface_id: String,
        /// What went wrong, in words.
        detail: String,
    },
    /// An op does not apply to the surface's model.
    #[error("SURFACE_PATCH of step `{step_id}` on surface `{surface_id}` does not apply: {source}")]
    Patch {
        /// The step that recorded the patch.
        step_id: String,
        /// The surface's id.
        surface_id: String,
        /// Which op and why.
        #[source]
        source: Box<PatchError>,
    },
}

impl SurfaceProjection {
    /// A projection with no surface.
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds one event. Events other than `SURFACE_PATCH` change nothing and touch nothing.
    pub fn apply_event(&mut self, event: &Event) -> Result<Vec<TouchedPointer>, ProjectionError> {
        let Event::SurfacePatch(patch) = event else {
            return Ok(Vec::new());
        };
        let raw_ops: Vec<serde_json::Value> =
            patch
                .ops
                .decode()
                .map_err(|err| ProjectionError::NotAnArray {
                    step_id: patch.step_id.clone(),
                    surface_id: patch.surface_id.clone(),
                    detail: loom_kernel::Payload::describe_decode_error(&err),
                })?;
        let ops = raw_ops
            .iter()
            .enumerate()
            .map(|(index, op)| {
                SurfaceOp::from_value(op).map_err(|source| ProjectionError::Decode {
                    step_id: patch.step_id.clone(),
                    surface_id: patch.surface_id.clone(),
                    index,
                    source: Box::new(source),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.apply_ops(&patch.surface_id, &ops)
            .map_err(|source| ProjectionError::Patch {
                step_id: patch.step_id.clone(),
                surface_id: patch.surface_id.clone(),
                source: Box::new(source),
            })
    }

    /// Applies already-decoded ops to one surface, all or nothing.
    pub fn apply_ops(
        &mut self,
        surface_id: &str,
        ops: &[SurfaceOp],
    ) -> Result<Vec<TouchedPointer>, PatchError> {
        let touched = match self.models.get_mut(surface_id) {
            Some(model) => apply_surface_patches(model, ops)?,
            None => {
                // Only a batch that applies brings a surface into being.
                let mut model = Value::Object(Map::new());
                let touched = apply_surface_patches(&mut model, ops)?;
                self.models.insert(surface_id.to_owned(), model);
                touched
            }
        };
        Ok(touched
            .into_iter()
            .map(|t| TouchedPointer {
                surface_id: surface_id.to_owned(),
                pointer: t.pointer,
            })
            .collect())
    }

    /// The current data model of a surface, if any patch has created it.
    pub fn model(&self, surface_id: &str) -> Option<&Value> {
        self.models.get(surface_id)
    }

    /// The ids of the surfaces seen so far, in order.
    pub fn surfaces(&self) -> impl Iterator<Item = &str> + '_ {
        self.models.keys().map(String::as_str)
    }
}
