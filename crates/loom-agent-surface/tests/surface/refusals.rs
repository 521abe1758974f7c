//! Every kind of refusal: the error names the op, its path and why, and the model is unchanged
//! even when earlier ops of the batch had applied.

use loom_agent_surface::{OpKind, PatchFailure, SurfaceOp, SurfacePath, apply_surface_patches};
use serde_json::{Value, json};

fn model() -> Value {
    json!({
        "order": {"status": "new", "items": [{"qty": 1}, {"qty": 2}], "count": 1, "big": i64::MAX,
                  "huge": u64::MAX, "note": "gift"},
        "flags": [true],
    })
}

fn op(json: Value) -> SurfaceOp {
    SurfaceOp::from_value(&json).unwrap()
}

fn path(text: &str) -> SurfacePath {
    SurfacePath::parse(text).unwrap()
}

/// Ops that apply to [`model`], run before the refused one so that rollback has work to do.
fn preamble() -> Vec<SurfaceOp> {
    vec![
        op(json!({"op": "set", "path": "order.status", "value": "paid"})),
        op(json!({"op": "set", "path": "order.fresh", "value": {"a": 1}})),
        op(json!({"op": "set", "path": "order.items.2", "value": {"qty": 3}})),
        op(json!({"op": "merge", "path": "order", "value": {"note": "x", "added": 1}})),
        op(json!({"op": "merge", "path": "order.made", "value": {"k": 1}})),
        op(json!({"op": "append", "path": "flags", "value": false})),
        op(json!({"op": "append", "path": "order.list", "value": 1})),
        op(json!({"op": "remove", "path": "order.items.0"})),
        op(json!({"op": "remove", "path": "order.note"})),
        op(json!({"op": "increment", "path": "order.count", "by": 5})),
        op(json!({"op": "increment", "path": "order.counter", "by": 1.5})),
        op(json!({"op": "set", "path": "", "value": {"order": {"items": [], "count": 0}}})),
        op(json!({"op": "set", "path": "", "value": model()})),
    ]
}

#[track_caller]
fn refused(bad: Value, kind: OpKind, reason: PatchFailure) {
    let bad = op(bad);
    let original = model();
    for ops in [
        vec![bad.clone()],
        preamble().into_iter().chain([bad.clone()]).collect(),
    ] {
        let mut model = original.clone();
        let err = apply_surface_patches(&mut model, &ops).unwrap_err();
        assert_eq!(err.index, ops.len() - 1);
        assert_eq!(err.kind, kind);
        assert_eq!(&err.path, bad.path());
        assert_eq!(err.reason, reason, "{err}");
        assert_eq!(model, original, "model changed by a refused batch: {err}");
        let message = err.to_string();
        assert!(message.contains(kind.as_str()), "{message}");
    }
}

#[test]
fn the_preamble_applies() {
    let mut m = model();
    apply_surface_patches(&mut m, &preamble()).unwrap();
    assert_eq!(m, model());
}

#[test]
fn missing_parents_are_never_created() {
    refused(
        json!({"op": "set", "path": "order.shipping.city", "value": "Oslo"}),
        OpKind::Set,
        PatchFailure::MissingParent {
            parent: path("order.shipping"),
        },
    );
    refused(
        json!({"op": "increment", "path": "nope.count", "by": 1}),
        OpKind::Increment,
        PatchFailure::MissingParent {
            parent: path("nope"),
        },
    );
}

#[test]
fn scalars_have_no_children() {
    refused(
        json!({"op": "set", "path": "order.status.x", "value": 1}),
        OpKind::Set,
        PatchFailure::NotAContainer {
            at: path("order.status"),
            found: "a string",
        },
    );
    refused(
        json!({"op": "set", "path": "order.count.x.y", "value": 1}),
        OpKind::Set,
        PatchFailure::NotAContainer {
            at: path("order.count"),
            found: "a number",
        },
    );
}

#[test]
fn array_indices_must_be_canonical_and_in_range() {
    refused(
        json!({"op": "set", "path": "order.items.first", "value": 1}),
        OpKind::Set,
        PatchFailure::NotAnIndex {
            array: path("order.items"),
            segment: "first".into(),
        },
    );
    refused(
        json!({"op": "set", "path": "order.items.01", "value": 1}),
        OpKind::Set,
        PatchFailure::NotAnIndex {
            array: path("order.items"),
            segment: "01".into(),
        },
    );
    refused(
        json!({"op": "set", "path": "order.items.3", "value": 1}),
        OpKind::Set,
        PatchFailure::IndexOutOfRange {
            array: path("order.items"),
            index: 3,
            len: 2,
        },
    );
    refused(
        json!({"op": "set", "path": "order.items.5.qty", "value": 1}),
        OpKind::Set,
        PatchFailure::IndexOutOfRange {
            array: path("order.items"),
            index: 5,
            len: 2,
        },
    );
    refused(
        json!({"op": "remove", "path": "order.items.2"}),
        OpKind::Remove,
        PatchFailure::IndexOutOfRange {
            array: path("order.items"),
            index: 2,
            len: 2,
        },
    );
}

#[test]
fn ops_need_the_right_target_type() {
    refused(
        json!({"op": "increment", "path": "order.status", "by": 1}),
        OpKind::Increment,
        PatchFailure::WrongTargetType {
            op: OpKind::Increment,
            expected: "a number",
            found: "a string",
        },
    );
    refused(
        json!({"op": "append", "path": "order.status", "value": 1}),
        OpKind::Append,
        PatchFailure::WrongTargetType {
            op: OpKind::Append,
            expected: "an array",
            found: "a string",
        },
    );
    refused(
        json!({"op": "merge", "path": "order.items", "value": {"a": 1}}),
        OpKind::Merge,
        PatchFailure::WrongTargetType {
            op: OpKind::Merge,
            expected: "an object",
            found: "an array",
        },
    );
}

#[test]
fn remove_needs_something_to_remove() {
    refused(
        json!({"op": "remove", "path": "order.missing"}),
        OpKind::Remove,
        PatchFailure::MissingTarget,
    );
    refused(
        json!({"op": "remove", "path": ""}),
        OpKind::Remove,
        PatchFailure::RemoveRoot,
    );
}

#[test]
fn increments_refuse_overflow() {
    refused(
        json!({"op": "increment", "path": "order.huge", "by": 1}),
        OpKind::Increment,
        PatchFailure::Overflow {
            current: u64::MAX.into(),
            by: 1.into(),
        },
    );
    let mut m = json!({"n": i64::MIN});
    let err = apply_surface_patches(
        &mut m,
        &[op(json!({"op": "increment", "path": "n", "by": -1}))],
    )
    .unwrap_err();
    assert_eq!(
        err.reason,
        PatchFailure::Overflow {
            current: i64::MIN.into(),
            by: (-1).into()
        }
    );
    assert_eq!(m, json!({"n": i64::MIN}));
    let max = serde_json::Number::from_f64(f64::MAX).unwrap();
    let mut m = json!({"f": f64::MAX});
    let err = apply_surface_patches(
        &mut m,
        &[SurfaceOp::Increment {
            path: path("f"),
            by: max.clone(),
        }],
    )
    .unwrap_err();
    assert_eq!(
        err.reason,
        PatchFailure::Overflow {
            current: max.clone(),
            by: max
        }
    );
    assert_eq!(m, json!({"f": f64::MAX}));
}

#[test]
fn increments_keep_integers_exact_and_cross_into_u64() {
    let mut m = model();
    let ops = [
        op(json!({"op": "increment", "path": "order.big", "by": 1})),
        op(json!({"op": "increment", "path": "order.count", "by": -3})),
        op(json!({"op": "increment", "path": "order.f", "by": 0.5})),
        op(json!({"op": "increment", "path": "order.f", "by": 1})),
        op(json!({"op": "increment", "path": "order.huge", "by": i64::MIN})),
    ];
    apply_surface_patches(&mut m, &ops).unwrap();
    assert_eq!(m["order"]["big"], json!(i64::MAX as u64 + 1));
    assert_eq!(m["order"]["count"], json!(-2));
    assert_eq!(m["order"]["f"], json!(1.5));
    assert_eq!(m["order"]["huge"], json!(i64::MAX));
}

#[test]
fn root_ops_follow_the_same_rules() {
    let mut m = json!([1]);
    let err = apply_surface_patches(
        &mut m,
        &[op(json!({"op": "merge", "path": "", "value": {"a": 1}}))],
    )
    .unwrap_err();
    assert_eq!(
        err.reason,
        PatchFailure::WrongTargetType {
            op: OpKind::Merge,
            expected: "an object",
            found: "an array"
        }
    );
    assert!(err.to_string().contains("the root"), "{err}");
    let touched = apply_surface_patches(
        &mut m,
        &[op(json!({"op": "append", "path": "", "value": 2}))],
    )
    .unwrap();
    assert_eq!(touched[0].pointer, "");
    assert_eq!(m, json!([1, 2]));
}

#[test]
fn removing_an_array_item_touches_the_array() {
    let mut m = model();
    let touched = apply_surface_patches(
        &mut m,
        &[op(json!({"op": "remove", "path": "order.items.0"}))],
    )
    .unwrap();
    assert_eq!(touched[0].pointer, "/order/items");
    assert_eq!(m["order"]["items"], json!([{"qty": 2}]));
}

#[test]
fn bad_json_ops_are_refused_on_decode() {
    use loom_agent_surface::OpDecodeError as E;
    type Expect = fn(&E) -> bool;
    let cases: [(Value, Expect); 9] = [
        (json!(3), |e| {
            matches!(e, E::NotAnObject { found: "a number" })
        }),
        (json!({"path": "a"}), |e| matches!(e, E::MissingOp)),
        (
            json!({"op": "put", "path": "a"}),
            |e| matches!(e, E::UnknownOp { op } if op == "put"),
        ),
        (json!({"op": "set", "value": 1}), |e| {
            matches!(e, E::MissingField { field: "path", .. })
        }),
        (json!({"op": "set", "path": "a"}), |e| {
            matches!(e, E::MissingField { field: "value", .. })
        }),
        (
            json!({"op": "set", "path": "a", "vaule": 1}),
            |e| matches!(e, E::UnexpectedField { field, .. } if field == "vaule"),
        ),
        (json!({"op": "merge", "path": "a", "value": [1]}), |e| {
            matches!(e, E::WrongType { field: "value", .. })
        }),
        (json!({"op": "increment", "path": "a", "by": "1"}), |e| {
            matches!(e, E::WrongType { field: "by", .. })
        }),
        (json!({"op": "remove", "path": "a..b"}), |e| {
            matches!(e, E::BadPath { .. })
        }),
    ];
    for (json, expected) in cases {
        let err = SurfaceOp::from_value(&json).unwrap_err();
        assert!(expected(&err), "{json}: {err:?}");
        assert!(serde_json::from_value::<SurfaceOp>(json).is_err());
    }
}
