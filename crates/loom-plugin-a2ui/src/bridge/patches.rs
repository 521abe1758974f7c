//! Surface patches folded into the true model and sent as the masked values they leave at
//! each pointer touched.

use std::collections::{BTreeMap, BTreeSet};

use loom_agent_surface::{SurfaceOp, apply_surface_patches};
use loom_kernel::Event;
use serde_json::Value;

use super::{A2UISurfaceBridge, BridgeError};
use crate::wire::{AgentMessage, UpdateDataModel};

impl A2UISurfaceBridge {
    /// Folds one durable event. A `SURFACE_PATCH` of this surface applies (all or nothing) and
    /// gives the `updateDataModel` messages for it (none before `createSurface`); every other
    /// event gives none.
    pub fn apply_event(&mut self, event: &Event) -> Result<Vec<AgentMessage>, BridgeError> {
        let Event::SurfacePatch(patch) = event else {
            return Ok(Vec::new());
        };
        if patch.surface_id != self.surface_id {
            return Ok(Vec::new());
        }
        let raw: Vec<Value> = patch.ops.decode().map_err(|err| BridgeError::Decode {
            surface_id: self.surface_id.clone(),
            detail: loom_kernel::Payload::describe_decode_error(&err),
        })?;
        let ops = raw
            .iter()
            .map(SurfaceOp::from_value)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| BridgeError::Decode {
                surface_id: self.surface_id.clone(),
                detail: err.to_string(),
            })?;
        self.apply_ops(&ops)
    }

    /// Applies ops (all or nothing) and gives one `updateDataModel` per place changed, minimal:
    /// a pointer below another touched pointer is covered by it. Each carries the post-patch
    /// value, masked; a removed value is `null`. Before `createSurface`, the model is folded
    /// and no message is produced.
    pub fn apply_ops(&mut self, ops: &[SurfaceOp]) -> Result<Vec<AgentMessage>, BridgeError> {
        let touched =
            apply_surface_patches(&mut self.model, ops).map_err(|source| BridgeError::Patch {
                surface_id: self.surface_id.clone(),
                source: Box::new(source),
            })?;
        if !self.created {
            return Ok(Vec::new());
        }
        let pointers = refine_appends(&self.model, ops, touched.into_iter().map(|t| t.pointer));
        let mut updates = Vec::with_capacity(pointers.len());
        for pointer in pointers {
            let value = self.value_at(&pointer);
            // Only a masked value can need its pointer moved up: one walk for the rest.
            if value.as_str() == Some(loom_kernel::MASK) {
                let root = self.masked_root(pointer);
                let value = self.value_at(&root);
                updates.push((root, value));
            } else {
                updates.push((pointer, value));
            }
        }
        let keep = minimal_mask(updates.iter().map(|(p, _)| p.as_str()));
        Ok(updates
            .into_iter()
            .zip(keep)
            .filter(|(_, keep)| *keep)
            .map(|((pointer, value), _)| self.update_message(pointer, value))
            .collect())
    }

    fn value_at(&self, pointer: &str) -> Value {
        match self.model.pointer(pointer) {
            None => Value::Null,
            Some(value) => self.classification.mask_at(pointer, value),
        }
    }

    fn update_message(&self, pointer: String, value: Value) -> AgentMessage {
        AgentMessage::UpdateDataModel(UpdateDataModel {
            surface_id: self.wire_id.clone(),
            path: Some(if pointer.is_empty() {
                "/".to_owned()
            } else {
                pointer
            }),
            value,
        })
    }

    /// The renderer holds a masked value whole (`"***"`), so a change below a classified path
    /// is sent as the classified path itself: nothing can be written below a string.
    fn masked_root(&self, pointer: String) -> String {
        if self.classification.is_empty() || !self.classification.is_masked_pointer(&pointer) {
            return pointer;
        }
        ancestors(&pointer)
            .chain(std::iter::once(pointer.as_str()))
            .find(|p| !p.is_empty() && self.classification.is_masked_pointer(p))
            .map_or_else(|| pointer.clone(), str::to_owned)
    }
}

/// An `append` reports its array; when nothing else in the batch touched that array, the new
/// items alone are sent (`/items/3`, `/items/4`), so appending to a long list costs what was
/// appended, not the list.
fn refine_appends(
    model: &Value,
    ops: &[SurfaceOp],
    touched: impl Iterator<Item = String>,
) -> Vec<String> {
    let touched: Vec<String> = touched.collect();
    if !ops.iter().any(|op| matches!(op, SurfaceOp::Append { .. })) {
        return touched;
    }
    let mut appends: BTreeMap<&str, usize> = BTreeMap::new();
    let mut other: BTreeSet<&str> = BTreeSet::new();
    for (op, pointer) in ops.iter().zip(&touched) {
        match op {
            SurfaceOp::Append { .. } => *appends.entry(pointer.as_str()).or_default() += 1,
            _ => {
                other.insert(pointer.as_str());
            }
        }
    }
    let mut out = Vec::with_capacity(touched.len());
    for pointer in &touched {
        let Some(&count) = appends.get(pointer.as_str()) else {
            out.push(pointer.clone());
            continue;
        };
        let related = other
            .iter()
            .any(|o| is_ancestor_or_self(o, pointer) || is_ancestor_or_self(pointer, o));
        let len = model
            .pointer(pointer)
            .and_then(Value::as_array)
            .map(Vec::len);
        match len {
            // A new array (count == len) goes whole: its parent key did not exist before.
            Some(len) if !related && count < len => {
                for index in len - count..len {
                    out.push(format!("{pointer}/{index}"));
                }
            }
            _ => out.push(pointer.clone()),
        }
    }
    out
}

fn is_ancestor_or_self(ancestor: &str, pointer: &str) -> bool {
    pointer == ancestor
        || (pointer.starts_with(ancestor) && pointer.as_bytes().get(ancestor.len()) == Some(&b'/'))
}

/// Which pointers to keep: not a duplicate of an earlier one, and not below another pointer
/// of the set.
pub(crate) fn minimal_mask<'p>(pointers: impl Iterator<Item = &'p str> + Clone) -> Vec<bool> {
    let all: BTreeSet<&str> = pointers.clone().collect();
    let mut emitted = BTreeSet::new();
    pointers
        .map(|p| !ancestors(p).any(|a| all.contains(a)) && emitted.insert(p))
        .collect()
}

/// The proper ancestors of a pointer, root (`""`) first.
fn ancestors(pointer: &str) -> impl Iterator<Item = &str> + '_ {
    let cut_points = pointer
        .char_indices()
        .filter(|(_, c)| *c == '/')
        .map(|(i, _)| i);
    cut_points.map(move |i| &pointer[..i])
}
