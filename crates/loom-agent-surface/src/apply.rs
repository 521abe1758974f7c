//! Applying a batch of ops to a data model: atomic, deterministic, O(path depth) per op.
//!
//! The rules are documented on [`apply_surface_patches`], where users of the crate see them.

use serde_json::{Map, Number, Value};
use thiserror::Error;

use crate::op::{OpKind, SurfaceOp, json_type_name};
use crate::path::{SurfacePath, array_index};

/// Where one op changed the model.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Touched {
    /// The dot-path the op changed.
    pub path: SurfacePath,
    /// `path` as an RFC 6901 JSON Pointer.
    pub pointer: String,
}

impl Touched {
    fn at(path: SurfacePath) -> Self {
        let pointer = path.to_pointer();
        Self { path, pointer }
    }
}

/// A batch was refused: the op at `index` could not apply, and the model is unchanged.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("surface op #{index} ({kind} at {}) refused: {reason}", describe(path))]
pub struct PatchError {
    /// Position of the refused op in the batch.
    pub index: usize,
    /// The refused op's kind.
    pub kind: OpKind,
    /// The refused op's path.
    pub path: SurfacePath,
    /// Why it could not apply.
    pub reason: PatchFailure,
}

/// Why one op could not apply.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum PatchFailure {
    #[error(
        "the parent {} does not exist (parents are never created)",
        describe(parent)
    )]
    /// The parent of the path does not exist.
    MissingParent {
        /// The path of the missing parent.
        parent: SurfacePath,
    },
    /// A value on the path is neither an object nor an array.
    #[error("{} is {found}, which has no children", describe(at))]
    NotAContainer {
        /// The path of the value that has no children.
        at: SurfacePath,
        /// The JSON type found there.
        found: &'static str,
    },
    #[error(
        "`{segment}` is not an array index (a canonical decimal) into the array at {}",
        describe(array)
    )]
    /// A segment into an array is not a canonical decimal index.
    NotAnIndex {
        /// The path of the array.
        array: SurfacePath,
        /// The segment that is not an index.
        segment: String,
    },
    #[error(
        "index {index} is out of range for the array at {} of length {len}",
        describe(array)
    )]
    /// An array index is past the end of the array.
    IndexOutOfRange {
        /// The path of the array.
        array: SurfacePath,
        /// The index asked for.
        index: usize,
        /// The array's length.
        len: usize,
    },
    /// `remove` found nothing at its path.
    #[error("there is nothing at the path to remove")]
    MissingTarget,
    /// The value at the path has the wrong JSON type for the op.
    #[error("the target is {found}, but {op} needs {expected}")]
    WrongTargetType {
        /// The op's kind.
        op: OpKind,
        /// The JSON type the op needs.
        expected: &'static str,
        /// The JSON type found at the path.
        found: &'static str,
    },
    #[error(
        "{current} + {by} does not fit a JSON number (integers must fit i64 or u64, floats must stay finite)"
    )]
    /// An `increment` whose result does not fit a JSON number.
    Overflow {
        /// The current value.
        current: Number,
        /// The amount to add.
        by: Number,
    },
    /// `remove` of the root.
    #[error("the root cannot be removed (set it instead)")]
    RemoveRoot,
}

pub(crate) fn describe(path: &SurfacePath) -> String {
    if path.is_root() {
        "the root".to_owned()
    } else {
        format!("`{path}`")
    }
}

/// Applies `ops` in order to `model`, all or nothing, and reports where each op changed it.
///
/// On error the model is exactly as it was before the call.
///
/// # Rules
/// - **Parents must exist.** Every segment but the last must name an existing object key or
///   array item; nothing invents intermediate containers, so a typo (`ordr.status`) is refused
///   instead of growing a stray branch.
/// - **The last segment may be absent** (an object key not present, or an array index equal to
///   the length) for `set`, `merge`, `append` and `increment`, which then create it from the
///   op's neutral start: `set` puts the value, `merge` starts from `{}`, `append` from `[]`,
///   `increment` from `0`. An array index beyond the length is refused. `remove` needs the
///   target to exist.
/// - **Numeric segments** index arrays (canonical decimals only: `0`, `12`, never `012`) and
///   are plain keys on objects.
/// - **`increment`**: integers stay integers, with overflow refused (the result must fit `i64` or
///   `u64`); if either side is a float the sum is a float, and a non-finite sum is refused.
/// - **Atomicity** without copying the model: each op records its inverse in an undo log as it
///   applies, and a refused op rolls the earlier ones back in reverse order. An op checks
///   everything it needs before it mutates, so the refused op itself has changed nothing.
///
/// # Touched paths
/// One [`Touched`] per op: the place whose value changed as a whole. That is the op's own path,
/// except for `remove` of an array item, which reports the array, because the items after it
/// moved.
pub fn apply_surface_patches(
    model: &mut Value,
    ops: &[SurfaceOp],
) -> Result<Vec<Touched>, PatchError> {
    apply_batch(model, ops).map(|applied| applied.touched)
}

/// A batch that applied, with what it takes to take it back.
pub(crate) struct Applied {
    pub(crate) touched: Vec<Touched>,
    undo: UndoLog,
}

/// The inverses of a batch's ops, in op order. Only [`UndoLog::revert`] can use it, and only
/// on the model the batch left, with the same ops.
pub(crate) struct UndoLog(Vec<Undo>);

impl UndoLog {
    /// Takes the batch back, leaving the model as it was before [`apply_batch`]. The model must
    /// be exactly as the batch left it, and `ops` the batch's ops.
    pub(crate) fn revert(self, model: &mut Value, ops: &[SurfaceOp]) {
        for (op, action) in ops.iter().zip(self.0).rev() {
            revert(model, op.path(), action);
        }
    }
}

impl Applied {
    pub(crate) fn into_undo(self) -> UndoLog {
        self.undo
    }
}

/// [`apply_surface_patches`], keeping the undo log so that a caller who learns afterwards that
/// the batch must not stand (the emitter, when the kernel refuses to record it) can take it
/// back without having copied the model.
pub(crate) fn apply_batch(model: &mut Value, ops: &[SurfaceOp]) -> Result<Applied, PatchError> {
    let mut undo = Vec::with_capacity(ops.len());
    let mut touched = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        match apply_one(model, op) {
            Ok((action, place)) => {
                undo.push(action);
                touched.push(place);
            }
            Err(reason) => {
                UndoLog(undo).revert(model, ops);
                return Err(PatchError {
                    index,
                    kind: op.kind(),
                    path: op.path().clone(),
                    reason,
                });
            }
        }
    }
    Ok(Applied {
        touched,
        undo: UndoLog(undo),
    })
}

/// Applies a single op; the same as a batch of one.
pub fn apply_surface_op(model: &mut Value, op: &SurfaceOp) -> Result<Touched, PatchError> {
    apply_one(model, op)
        .map(|(_, touched)| touched)
        .map_err(|reason| PatchError {
            index: 0,
            kind: op.kind(),
            path: op.path().clone(),
            reason,
        })
}

/// The ops that write a value, borrowed from the op; `remove` is handled on its own.
#[derive(Clone, Copy)]
enum Write<'o> {
    Set(&'o Value),
    Merge(&'o Map<String, Value>),
    Append(&'o Value),
    Increment(&'o Number),
}

impl<'o> Write<'o> {
    fn of(op: &'o SurfaceOp) -> Option<Self> {
        match op {
            SurfaceOp::Set { value, .. } => Some(Write::Set(value)),
            SurfaceOp::Merge { value, .. } => Some(Write::Merge(value)),
            SurfaceOp::Append { value, .. } => Some(Write::Append(value)),
            SurfaceOp::Increment { by, .. } => Some(Write::Increment(by)),
            SurfaceOp::Remove { .. } => None,
        }
    }

    /// The value an absent target takes: the op applied to its neutral start.
    fn fresh(self) -> Value {
        match self {
            Write::Set(value) => value.clone(),
            Write::Merge(patch) => Value::Object(patch.clone()),
            Write::Append(value) => Value::Array(vec![value.clone()]),
            Write::Increment(by) => Value::Number(by.clone()),
        }
    }

    /// Changes an existing target, checking before mutating so a refusal changes nothing.
    fn onto(self, slot: &mut Value) -> Result<Undo, PatchFailure> {
        match (self, slot) {
            (Write::Set(value), slot) => Ok(Undo::Restore(std::mem::replace(slot, value.clone()))),
            (Write::Merge(patch), Value::Object(target)) => {
                let previous = patch
                    .iter()
                    .map(|(key, value)| (key.clone(), target.insert(key.clone(), value.clone())))
                    .collect();
                Ok(Undo::Unmerge(previous))
            }
            (Write::Append(value), Value::Array(items)) => {
                items.push(value.clone());
                Ok(Undo::PopAppended)
            }
            (Write::Increment(by), Value::Number(current)) => {
                let sum = add(current, by).ok_or_else(|| PatchFailure::Overflow {
                    current: current.clone(),
                    by: by.clone(),
                })?;
                Ok(Undo::Restore(Value::Number(std::mem::replace(
                    current, sum,
                ))))
            }
            (write, other) => Err(PatchFailure::WrongTargetType {
                op: write.kind(),
                expected: write.expects(),
                found: json_type_name(other),
            }),
        }
    }

    fn kind(self) -> OpKind {
        match self {
            Write::Set(_) => OpKind::Set,
            Write::Merge(_) => OpKind::Merge,
            Write::Append(_) => OpKind::Append,
            Write::Increment(_) => OpKind::Increment,
        }
    }

    fn expects(self) -> &'static str {
        match self {
            Write::Set(_) => "any value",
            Write::Merge(_) => "an object",
            Write::Append(_) => "an array",
            Write::Increment(_) => "a number",
        }
    }
}

/// The inverse of one applied op, interpreted against that op's path.
enum Undo {
    /// The target existed and was replaced: put this back.
    Restore(Value),
    /// The target was a new object key: remove it.
    RemoveCreatedKey,
    /// The target was a new item at the end of its array: pop it.
    PopCreatedItem,
    /// `append` pushed onto the array at the path: pop it.
    PopAppended,
    /// `remove` took this object value: put it back under the last segment.
    ReinsertKey(Value),
    /// `remove` took this array item: insert it back at the last segment's index.
    ReinsertItem(Value),
    /// `merge` wrote these keys: restore each previous value, or remove the key if it was new.
    Unmerge(Vec<(String, Option<Value>)>),
}

fn apply_one(model: &mut Value, op: &SurfaceOp) -> Result<(Undo, Touched), PatchFailure> {
    let path = op.path();
    let write = Write::of(op);
    let Some((last, parents)) = path.segments().split_last() else {
        let write = write.ok_or(PatchFailure::RemoveRoot)?;
        return Ok((write.onto(model)?, Touched::at(SurfacePath::root())));
    };
    match descend(model, parents)? {
        Value::Object(map) => {
            let Some(write) = write else {
                let old = map
                    .remove(last.as_str())
                    .ok_or(PatchFailure::MissingTarget)?;
                return Ok((Undo::ReinsertKey(old), Touched::at(path.clone())));
            };
            let undo = match map.get_mut(last.as_str()) {
                Some(slot) => write.onto(slot)?,
                None => {
                    map.insert(last.clone(), write.fresh());
                    Undo::RemoveCreatedKey
                }
            };
            Ok((undo, Touched::at(path.clone())))
        }
        Value::Array(items) => {
            let len = items.len();
            let index = array_index(last).ok_or_else(|| PatchFailure::NotAnIndex {
                array: SurfacePath::from_prefix(parents),
                segment: last.clone(),
            })?;
            let out_of_range = || PatchFailure::IndexOutOfRange {
                array: SurfacePath::from_prefix(parents),
                index,
                len,
            };
            let Some(write) = write else {
                if index >= len {
                    return Err(out_of_range());
                }
                let old = items.remove(index);
                let array = Touched::at(SurfacePath::from_prefix(parents));
                return Ok((Undo::ReinsertItem(old), array));
            };
            let undo = match items.get_mut(index) {
                Some(slot) => write.onto(slot)?,
                None if index == len => {
                    items.push(write.fresh());
                    Undo::PopCreatedItem
                }
                None => return Err(out_of_range()),
            };
            Ok((undo, Touched::at(path.clone())))
        }
        other => Err(PatchFailure::NotAContainer {
            at: SurfacePath::from_prefix(parents),
            found: json_type_name(other),
        }),
    }
}

/// Follows `segments` down from `model`; every one must exist.
fn descend<'m>(model: &'m mut Value, segments: &[String]) -> Result<&'m mut Value, PatchFailure> {
    let mut node = model;
    for (depth, segment) in segments.iter().enumerate() {
        node = match node {
            Value::Object(map) => {
                map.get_mut(segment.as_str())
                    .ok_or_else(|| PatchFailure::MissingParent {
                        parent: SurfacePath::from_prefix(
                            segments.get(..=depth).unwrap_or(segments),
                        ),
                    })?
            }
            Value::Array(items) => {
                let len = items.len();
                let array = || SurfacePath::from_prefix(segments.get(..depth).unwrap_or(segments));
                let index = array_index(segment).ok_or_else(|| PatchFailure::NotAnIndex {
                    array: array(),
                    segment: segment.clone(),
                })?;
                items
                    .get_mut(index)
                    .ok_or_else(|| PatchFailure::IndexOutOfRange {
                        array: array(),
                        index,
                        len,
                    })?
            }
            other => {
                return Err(PatchFailure::NotAContainer {
                    at: SurfacePath::from_prefix(segments.get(..depth).unwrap_or(segments)),
                    found: json_type_name(other),
                });
            }
        };
    }
    Ok(node)
}

/// Undoes one op. The model is exactly as that op left it, so every step below finds what it
/// expects; the `if let`s only keep a broken invariant from becoming a panic.
///
/// Key order is restored exactly because `serde_json::Map` is a `BTreeMap` here; were the
/// workspace to enable serde_json's `preserve_order`, a re-inserted key would move to the end
/// (the model would still compare equal).
fn revert(model: &mut Value, path: &SurfacePath, undo: Undo) {
    let segments = path.segments();
    let split = segments.split_last();
    match undo {
        Undo::Restore(old) => {
            if let Ok(slot) = descend(model, segments) {
                *slot = old;
            }
        }
        Undo::PopAppended => {
            if let Ok(Value::Array(items)) = descend(model, segments) {
                items.pop();
            }
        }
        Undo::Unmerge(previous) => {
            if let Ok(Value::Object(target)) = descend(model, segments) {
                for (key, old) in previous.into_iter().rev() {
                    match old {
                        Some(old) => {
                            target.insert(key, old);
                        }
                        None => {
                            target.remove(key.as_str());
                        }
                    }
                }
            }
        }
        Undo::RemoveCreatedKey
        | Undo::ReinsertKey(_)
        | Undo::PopCreatedItem
        | Undo::ReinsertItem(_) => {
            let Some((last, parents)) = split else { return };
            let Ok(parent) = descend(model, parents) else {
                return;
            };
            match (undo, parent) {
                (Undo::RemoveCreatedKey, Value::Object(map)) => {
                    map.remove(last.as_str());
                }
                (Undo::ReinsertKey(old), Value::Object(map)) => {
                    map.insert(last.clone(), old);
                }
                (Undo::PopCreatedItem, Value::Array(items)) => {
                    items.pop();
                }
                (Undo::ReinsertItem(old), Value::Array(items)) => {
                    if let Some(index) = array_index(last).filter(|i| *i <= items.len()) {
                        items.insert(index, old);
                    }
                }
                _ => {}
            }
        }
    }
}

/// `current + by`, keeping integers exact and refusing what JSON cannot hold.
fn add(current: &Number, by: &Number) -> Option<Number> {
    fn integer(n: &Number) -> Option<i128> {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    }
    if let (Some(a), Some(b)) = (integer(current), integer(by)) {
        // i64/u64 operands cannot overflow i128, so only the narrowing can fail.
        let sum = a + b;
        return i64::try_from(sum)
            .map(Number::from)
            .or_else(|_| u64::try_from(sum).map(Number::from))
            .ok();
    }
    Number::from_f64(current.as_f64()? + by.as_f64()?)
}
