//! Folding `SURFACE_PATCH` events into per-surface models.

use loom_agent_surface::{ProjectionError, SurfaceProjection, TouchedPointer};
use loom_kernel::Event;
use loom_kernel::{ExecutionCompleted, SurfacePatch};
use serde_json::{Value, json};

fn patch(surface: &str, ops: Vec<Value>) -> Event {
    Event::SurfacePatch(SurfacePatch {
        step_id: "ui#1".into(),
        surface_id: surface.into(),
        ops: Value::Array(ops).into(),
    })
}

fn touched(surface: &str, pointer: &str) -> TouchedPointer {
    TouchedPointer {
        surface_id: surface.into(),
        pointer: pointer.into(),
    }
}

#[test]
fn folds_patches_per_surface() {
    let mut p = SurfaceProjection::new();
    let t = p
        .apply_event(&patch(
            "checkout",
            vec![
                json!({"op": "set", "path": "order", "value": {"items": [], "status": "new"}}),
                json!({"op": "append", "path": "order.items", "value": {"sku": "A1"}}),
            ],
        ))
        .unwrap();
    assert_eq!(
        t,
        [
            touched("checkout", "/order"),
            touched("checkout", "/order/items")
        ]
    );
    p.apply_event(&patch(
        "progress",
        vec![json!({"op": "increment", "path": "done", "by": 1})],
    ))
    .unwrap();
    let t = p
        .apply_event(&patch(
            "checkout",
            vec![json!({"op": "set", "path": "order.status", "value": "placed"})],
        ))
        .unwrap();
    assert_eq!(t, [touched("checkout", "/order/status")]);
    assert_eq!(
        p.model("checkout"),
        Some(&json!({"order": {"items": [{"sku": "A1"}], "status": "placed"}}))
    );
    assert_eq!(p.model("progress"), Some(&json!({"done": 1})));
    assert_eq!(p.model("other"), None);
    assert_eq!(p.surfaces().collect::<Vec<_>>(), ["checkout", "progress"]);
}

#[test]
fn ignores_other_events() {
    let mut p = SurfaceProjection::new();
    let t = p
        .apply_event(&Event::ExecutionCompleted(ExecutionCompleted {
            output: json!(1).into(),
        }))
        .unwrap();
    assert!(t.is_empty());
    assert_eq!(p.surfaces().count(), 0);
}

#[test]
fn a_bad_event_changes_nothing_and_says_where() {
    let mut p = SurfaceProjection::new();
    p.apply_event(&patch(
        "s",
        vec![json!({"op": "set", "path": "n", "value": 1})],
    ))
    .unwrap();
    let before = p.clone();

    let err = p
        .apply_event(&patch(
            "s",
            vec![
                json!({"op": "increment", "path": "n", "by": 1}),
                json!({"op": "append", "path": "n", "value": 1}),
            ],
        ))
        .unwrap_err();
    assert!(
        matches!(&err, ProjectionError::Patch { surface_id, source, .. }
        if surface_id == "s" && source.index == 1)
    );
    assert_eq!(p, before);

    let err = p
        .apply_event(&patch(
            "s",
            vec![
                json!({"op": "set", "path": "n", "value": 2}),
                json!({"op": "nope"}),
            ],
        ))
        .unwrap_err();
    assert!(
        matches!(&err, ProjectionError::Decode { index: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("ui#1"), "{err}");
    assert_eq!(p, before);

    // A surface whose first patch is refused does not come into being.
    p.apply_event(&patch("t", vec![json!({"op": "remove", "path": "x"})]))
        .unwrap_err();
    assert_eq!(p, before);
}

#[test]
fn folding_is_deterministic() {
    let events: Vec<Event> = (0..50)
        .map(|i| {
            patch(
                &format!("s{}", i % 7),
                vec![
                    json!({"op": "increment", "path": "n", "by": i}),
                    json!({"op": "set", "path": format!("k{i}"), "value": i}),
                ],
            )
        })
        .collect();
    let fold = || {
        let mut p = SurfaceProjection::new();
        let touched: Vec<_> = events
            .iter()
            .flat_map(|e| p.apply_event(e).unwrap())
            .collect();
        (p, touched)
    };
    assert_eq!(fold(), fold());
}
