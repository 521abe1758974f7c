//! One op on a large model touches one place and changes nothing else.

use loom_agent_surface::{SurfaceOp, SurfacePath, apply_surface_patches};
use serde_json::{Map, Value, json};

fn model(keys: usize) -> Value {
    let rows: Map<String, Value> = (0..keys)
        .map(|i| (format!("r{i}"), json!({"qty": i})))
        .collect();
    json!({"order": {"rows": rows, "count": 0}})
}

#[test]
fn one_increment_in_a_100k_key_model_touches_one_pointer() {
    let mut model = model(100_000);
    let mut expected = model.clone();
    let op = SurfaceOp::Increment {
        path: SurfacePath::parse("order.rows.r54321.qty").unwrap(),
        by: 2.into(),
    };
    let touched = apply_surface_patches(&mut model, &[op]).unwrap();
    assert_eq!(touched.len(), 1);
    assert_eq!(touched[0].pointer, "/order/rows/r54321/qty");
    expected["order"]["rows"]["r54321"]["qty"] = json!(54_323);
    assert_eq!(model, expected);
}

#[test]
fn a_refused_batch_on_a_100k_key_model_changes_nothing() {
    let mut model = model(100_000);
    let before = model.clone();
    let ops = [
        SurfaceOp::Increment {
            path: SurfacePath::parse("order.count").unwrap(),
            by: 1.into(),
        },
        SurfaceOp::Remove {
            path: SurfacePath::parse("order.rows.r7").unwrap(),
        },
        SurfaceOp::Append {
            path: SurfacePath::parse("order.rows.r8.qty").unwrap(),
            value: json!(1),
        },
    ];
    let err = apply_surface_patches(&mut model, &ops).unwrap_err();
    assert_eq!(err.index, 2);
    assert_eq!(model, before);
}
