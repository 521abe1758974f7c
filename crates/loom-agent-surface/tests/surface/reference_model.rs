//! `apply_surface_patches` against a naive reference that clones and rebuilds the model for
//! every op: same results, same touched pointers, same refusals, and a refused batch leaves
//! the model exactly as it was.

use loom_agent_surface::{SurfaceOp, SurfacePath, apply_surface_patches};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

// ---------------------------------------------------------------------------------------------
// The reference: the rules of `apply.rs`, restated as a pure rebuild.

enum Leaf {
    Put(Value),
    Delete,
}

fn ref_index(segment: &str) -> Option<usize> {
    let canonical = segment == "0"
        || (!segment.is_empty()
            && !segment.starts_with('0')
            && segment.bytes().all(|b| b.is_ascii_digit()));
    if canonical {
        segment.parse().ok()
    } else {
        None
    }
}

fn ref_add(a: &Number, b: &Number) -> Option<Number> {
    let int = |n: &Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (int(a), int(b)) {
        (Some(x), Some(y)) => {
            let s = x + y;
            if let Ok(v) = i64::try_from(s) {
                Some(v.into())
            } else {
                u64::try_from(s).ok().map(Number::from)
            }
        }
        _ => Number::from_f64(a.as_f64()? + b.as_f64()?),
    }
}

fn ref_leaf(current: Option<&Value>, op: &SurfaceOp) -> Option<Leaf> {
    Some(match (op, current) {
        (SurfaceOp::Set { value, .. }, _) => Leaf::Put(value.clone()),
        (SurfaceOp::Merge { value, .. }, None) => Leaf::Put(Value::Object(value.clone())),
        (SurfaceOp::Merge { value, .. }, Some(Value::Object(m))) => {
            let mut m = m.clone();
            for (k, v) in value {
                m.insert(k.clone(), v.clone());
            }
            Leaf::Put(Value::Object(m))
        }
        (SurfaceOp::Append { value, .. }, None) => Leaf::Put(Value::Array(vec![value.clone()])),
        (SurfaceOp::Append { value, .. }, Some(Value::Array(a))) => {
            let mut a = a.clone();
            a.push(value.clone());
            Leaf::Put(Value::Array(a))
        }
        (SurfaceOp::Increment { by, .. }, None) => Leaf::Put(Value::Number(by.clone())),
        (SurfaceOp::Increment { by, .. }, Some(Value::Number(n))) => {
            Leaf::Put(Value::Number(ref_add(n, by)?))
        }
        (SurfaceOp::Remove { .. }, Some(_)) => Leaf::Delete,
        _ => return None,
    })
}

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The model after `op`, and the pointer it touched; `None` if the op is refused.
fn ref_apply(model: &Value, op: &SurfaceOp) -> Option<(Value, String)> {
    let segments = op.path().segments();
    if segments.is_empty() {
        return match ref_leaf(Some(model), op)? {
            Leaf::Put(v) => Some((v, String::new())),
            Leaf::Delete => None,
        };
    }
    rebuild(model, segments, op, "")
}

fn rebuild(node: &Value, segments: &[String], op: &SurfaceOp, at: &str) -> Option<(Value, String)> {
    let (first, rest) = segments.split_first()?;
    let here = format!("{at}/{}", escape(first));
    match node {
        Value::Object(m) => {
            let mut m = m.clone();
            let touched = if rest.is_empty() {
                match ref_leaf(m.get(first), op)? {
                    Leaf::Put(v) => m.insert(first.clone(), v),
                    Leaf::Delete => m.remove(first),
                };
                here
            } else {
                let (child, touched) = rebuild(m.get(first)?, rest, op, &here)?;
                m.insert(first.clone(), child);
                touched
            };
            Some((Value::Object(m), touched))
        }
        Value::Array(a) => {
            let i = ref_index(first)?;
            let mut a = a.clone();
            if i > a.len() {
                return None;
            }
            let touched = if rest.is_empty() {
                match ref_leaf(a.get(i), op)? {
                    Leaf::Put(v) if i == a.len() => a.push(v),
                    Leaf::Put(v) => a[i] = v,
                    Leaf::Delete => {
                        a.remove(i);
                        return Some((Value::Array(a), at.to_owned()));
                    }
                }
                here
            } else {
                let (child, touched) = rebuild(a.get(i)?, rest, op, &here)?;
                a[i] = child;
                touched
            };
            Some((Value::Array(a), touched))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Generators: a small key alphabet, so that paths often meet what the model holds.

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a"),
        Just("b"),
        Just("c"),
        Just("0"),
        Just("1"),
        Just("2"),
        Just("01"),
        Just("x.y"),
        Just("t~/"),
    ]
    .prop_map(str::to_owned)
}

fn number() -> impl Strategy<Value = Number> {
    prop_oneof![
        4 => (-3i64..4).prop_map(Number::from),
        1 => Just(Number::from(i64::MAX)),
        1 => Just(Number::from(i64::MIN)),
        1 => Just(Number::from(u64::MAX)),
        2 => (-4.0f64..4.0).prop_map(|f| Number::from_f64(f).unwrap()),
        1 => Just(Number::from_f64(f64::MAX).unwrap()),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number().prop_map(Value::Number),
        "[a-c]{0,2}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn model() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => prop::collection::btree_map(key(), value(), 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => value(),
    ]
}

fn path() -> impl Strategy<Value = SurfacePath> {
    prop::collection::vec(key(), 0..4).prop_map(|s| SurfacePath::from_segments(s).unwrap())
}

fn op() -> impl Strategy<Value = SurfaceOp> {
    prop_oneof![
        (path(), value()).prop_map(|(path, value)| SurfaceOp::Set { path, value }),
        (path(), prop::collection::btree_map(key(), value(), 0..3)).prop_map(|(path, m)| {
            SurfaceOp::Merge {
                path,
                value: m.into_iter().collect::<Map<_, _>>(),
            }
        }),
        (path(), value()).prop_map(|(path, value)| SurfaceOp::Append { path, value }),
        path().prop_map(|path| SurfaceOp::Remove { path }),
        (path(), number()).prop_map(|(path, by)| SurfaceOp::Increment { path, by }),
    ]
}

// ---------------------------------------------------------------------------------------------

/// Cases each property runs: 1,000 in an ordinary run; `cargo xtask test --long` and CI run
/// 4,000 (`LOOM_SURFACE_MODEL_CASES` sets any number).
fn cases() -> u32 {
    std::env::var("LOOM_SURFACE_MODEL_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(1_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn every_op_matches_the_reference(model in model(), op in op()) {
        let mut actual = model.clone();
        let result = apply_surface_patches(&mut actual, std::slice::from_ref(&op));
        match ref_apply(&model, &op) {
            Some((expected, pointer)) => {
                let touched = result.map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&actual, &expected);
                prop_assert_eq!(touched.len(), 1);
                prop_assert_eq!(&touched[0].pointer, &pointer);
                prop_assert_eq!(touched[0].path.to_pointer(), pointer);
            }
            None => {
                let err = result.err().ok_or_else(|| TestCaseError::fail("applied, the reference refuses"))?;
                prop_assert_eq!(err.index, 0);
                prop_assert_eq!(err.kind, op.kind());
                prop_assert_eq!(&actual, &model, "refused op changed the model");
            }
        }
    }

    #[test]
    fn batches_match_the_reference_and_refusals_are_atomic(
        model in model(),
        ops in prop::collection::vec(op(), 1..8),
    ) {
        let mut expected = Ok((model.clone(), Vec::new()));
        for (index, op) in ops.iter().enumerate() {
            let Ok((current, mut pointers)) = expected else { break };
            expected = match ref_apply(&current, op) {
                Some((next, pointer)) => {
                    pointers.push(pointer);
                    Ok((next, pointers))
                }
                None => Err(index),
            };
        }
        let mut actual = model.clone();
        let result = apply_surface_patches(&mut actual, &ops);
        match (expected, result) {
            (Ok((expected, pointers)), Ok(touched)) => {
                prop_assert_eq!(&actual, &expected);
                let got: Vec<String> = touched.into_iter().map(|t| t.pointer).collect();
                prop_assert_eq!(got, pointers);
            }
            (Err(index), Err(err)) => {
                prop_assert_eq!(err.index, index);
                prop_assert_eq!(&err.path, ops[index].path());
                prop_assert_eq!(&actual, &model, "refused batch changed the model");
            }
            (expected, result) => {
                return Err(TestCaseError::fail(format!("reference {expected:?}, actual {result:?}")));
            }
        }
    }

    #[test]
    fn ops_round_trip_through_json(op in op()) {
        let json = op.to_value();
        prop_assert_eq!(SurfaceOp::from_value(&json).unwrap(), op.clone());
        let text = serde_json::to_string(&op).unwrap();
        prop_assert_eq!(serde_json::from_str::<SurfaceOp>(&text).unwrap(), op);
    }
}
