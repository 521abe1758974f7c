//! The flow-side emitter on the real runtime: what it records, what it refuses, and how its
//! patches replay.

use std::sync::{Arc, Mutex};

use loom_agent_surface::{EmitError, OpKind, PatchFailure, SurfaceExt, SurfaceProjection};
use loom_kernel::Event;
use loom_kernel::conformance::id;
use loom_kernel::*;
use loom_kernel::{EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore, Payload};
use serde_json::{Map, Value, json};

use crate::divergence::assert_resume_diverges;

fn runtime(store: MemoryStore, flow: impl Flow) -> Runtime<MemoryStore> {
    let ok = |_: EffectCall| async { EffectOutcome::ok(Payload::null()) };
    Runtime::builder(store)
        .flow(flow)
        .effect("noop", FnEffect::new(true, ok))
        .build()
        .unwrap()
}

/// Starts the flow `name` as `execution` (input `null`, granted `noop`) on `rt` and waits until
/// it ends or parks: the execution and its status.
async fn start(
    rt: &Runtime<MemoryStore>,
    name: &str,
    execution: &str,
) -> (ExecutionId, ExecutionStatus) {
    let options = StartOptions::new(id(execution)).grant("noop");
    let e = rt.start(name, &json!(null), options).await.unwrap();
    let status = rt.wait(&e).await.unwrap().status();
    (e, status)
}

/// Runs `flow`, registered as `name`, as `execution` on a fresh runtime as [`start`] does: the
/// runtime, the execution and its status.
async fn run(
    flow: impl Flow,
    name: &str,
    execution: &str,
) -> (Runtime<MemoryStore>, ExecutionId, ExecutionStatus) {
    let rt = runtime(MemoryStore::new(), flow);
    let (e, status) = start(&rt, name, execution).await;
    (rt, e, status)
}

async fn log(rt: &Runtime<MemoryStore>, e: &ExecutionId) -> Vec<Event> {
    rt.store()
        .read_all(e)
        .await
        .unwrap()
        .into_iter()
        .map(|x| x.event)
        .collect()
}

/// `(step_id, surface_id, ops)` of each `SURFACE_PATCH`, in log order.
fn patches(events: &[Event]) -> Vec<(String, String, Value)> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::SurfacePatch(p) => {
                Some((p.step_id.clone(), p.surface_id.clone(), p.ops.to_value()))
            }
            _ => None,
        })
        .collect()
}

fn project(events: &[Event]) -> SurfaceProjection {
    let mut projection = SurfaceProjection::new();
    for event in events {
        projection.apply_event(event).unwrap();
    }
    projection
}

/// The error an emit returned, or a flow failure if it was accepted.
fn refused(outcome: Result<(), EmitError>) -> Result<EmitError, FlowError> {
    match outcome {
        Err(error) => Ok(error),
        Ok(()) => Err(FlowError::new(
            "test",
            "an emit that should be refused was recorded",
        )),
    }
}

/// Single ops and a batch on two surfaces, a refusal it shrugs off, a gate, and one more op
/// that only applies to the model built before the gate.
async fn order_flow(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let ui = ctx.surface("main");
    ui.set("order", json!({"items": [], "count": 0}))?;
    ui.patch()
        .append("order.items", json!({"sku": "A1"}))
        .increment("order.count", 1)
        .set("order.status", "pending")
        .emit()?;
    ctx.surface("side").merge("", json!({"note": "hi"}))?;
    let error = refused(ui.append("order.status", "x"))?;
    let answer = ctx.suspend("Approval", "k").await?;
    ui.patch()
        .set("order.status", answer.to_value())
        .increment("order.count", 2)
        .emit()?;
    Ok(json!(error.to_string()))
}

fn order_runtime(store: MemoryStore) -> Runtime<MemoryStore> {
    runtime(store, flow_fn("order", 1, order_flow))
}

#[tokio::test]
async fn ops_are_recorded_one_patch_per_emit_and_fold_to_the_model() {
    let rt = order_runtime(MemoryStore::new());
    let (e, status) = start(&rt, "order", "o-1").await;
    assert_eq!(status, ExecutionStatus::Suspended);
    let events = log(&rt, &e).await;
    let names: Vec<_> = events.iter().map(Event::type_name).collect();
    assert_eq!(
        names,
        [
            "EXECUTION_STARTED",
            "SURFACE_PATCH",
            "SURFACE_PATCH",
            "SURFACE_PATCH",
            "EXECUTION_SUSPENDED"
        ],
        "the refused append recorded nothing"
    );
    assert_eq!(
        patches(&events),
        [
            (
                "surface:main#1".to_owned(),
                "main".to_owned(),
                json!([{"op": "set", "path": "order", "value": {"items": [], "count": 0}}])
            ),
            (
                "surface:main#2".to_owned(),
                "main".to_owned(),
                json!([
                    {"op": "append", "path": "order.items", "value": {"sku": "A1"}},
                    {"op": "increment", "path": "order.count", "by": 1},
                    {"op": "set", "path": "order.status", "value": "pending"}
                ])
            ),
            (
                "surface:side#1".to_owned(),
                "side".to_owned(),
                json!([{"op": "merge", "path": "", "value": {"note": "hi"}}])
            ),
        ]
    );
    let Event::SurfacePatch(batch) = &events[2] else {
        panic!("{:?}", events[2])
    };
    assert_eq!(
        batch.ops.as_json(),
        r#"[{"op":"append","path":"order.items","value":{"sku":"A1"}},{"by":1,"op":"increment","path":"order.count"},{"op":"set","path":"order.status","value":"pending"}]"#
    );
    let projection = project(&events);
    assert_eq!(
        projection.model("main"),
        Some(&json!({"order": {"items": [{"sku": "A1"}], "count": 1, "status": "pending"}}))
    );
    assert_eq!(projection.model("side"), Some(&json!({"note": "hi"})));
}

#[tokio::test]
async fn refused_ops_name_the_op_and_path_and_record_nothing() {
    let seen: Arc<Mutex<Vec<EmitError>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let flow = flow_fn("refusals", 1, move |ctx: FlowCtx, _: Value| {
        let sink = Arc::clone(&sink);
        async move {
            let ui = ctx.surface("main");
            ui.set("order", json!({"status": "new", "items": {}, "count": 1}))?;
            let errors = vec![
                refused(ui.increment("order.status", 1))?,
                // Atomic: the valid set before the bad append is not recorded either.
                refused(
                    ui.patch()
                        .set("order.note", "gift")
                        .append("order.items", 1)
                        .emit(),
                )?,
                refused(ui.set("order.shipping.city", "Oslo"))?,
                refused(ui.remove("order.gone"))?,
                refused(ui.set("order..status", 1))?,
                refused(ui.patch().set("order.a", 1).merge("order", 5).emit())?,
                refused(ui.increment("order.count", f64::NAN))?,
                // A refused first patch does not bring a surface into being.
                refused(ctx.surface("ghost").set("a.b", 1))?,
            ];
            // The model is as before the refusals: `note` was never set, `count` is still 1.
            ui.patch()
                .increment("order.count", 1)
                .set("order.note", "late")
                .emit()?;
            ctx.surface("ghost").set("a", 1)?;
            sink.lock().unwrap().extend(errors);
            Ok(())
        }
    });
    let (rt, e, status) = run(flow, "refusals", "r-1").await;
    assert_eq!(status, ExecutionStatus::Completed);

    let errors = seen.lock().unwrap().clone();
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let expect = [
        "surface `main`: surface op #0 (increment at `order.status`) refused: the target is a string, but increment needs a number; nothing was recorded",
        "surface `main`: surface op #1 (append at `order.items`) refused: the target is an object, but append needs an array; nothing was recorded",
        "surface `main`: surface op #0 (set at `order.shipping.city`) refused: the parent `order.shipping` does not exist (parents are never created); nothing was recorded",
        "surface `main`: surface op #0 (remove at `order.gone`) refused: there is nothing at the path to remove; nothing was recorded",
        "surface `main`: op #0 (set) has a bad path: invalid surface path `order..status`: segment 1 is empty (a leading, trailing or doubled `.`)",
        "surface `main`: op #1 (merge at `order`) needs an object, but the value is a number",
        "surface `main`: op #0 (increment at `order.count`) needs a number, but the value is null",
        "surface `ghost`: surface op #0 (set at `a.b`) refused: the parent `a` does not exist (parents are never created); nothing was recorded",
    ];
    assert_eq!(messages, expect);
    let EmitError::Refused { source, .. } = &errors[1] else {
        panic!("{:?}", errors[1])
    };
    assert_eq!((source.index, source.kind), (1, OpKind::Append));
    assert_eq!(source.path.to_string(), "order.items");
    assert!(matches!(
        source.reason,
        PatchFailure::WrongTargetType {
            op: OpKind::Append,
            ..
        }
    ));
    assert_eq!(errors[0].code(), "loom.surface.refused");
    assert_eq!(errors[4].code(), "loom.surface.path");
    assert_eq!(errors[5].code(), "loom.surface.value");

    let events = log(&rt, &e).await;
    let ids: Vec<_> = patches(&events).into_iter().map(|p| p.0).collect();
    assert_eq!(
        ids,
        ["surface:main#1", "surface:main#2", "surface:ghost#1"],
        "only the patches that applied were recorded, and step ids have no gaps"
    );
    let projection = project(&events);
    assert_eq!(
        projection.model("main"),
        Some(&json!({"order": {"status": "new", "items": {}, "count": 2, "note": "late"}}))
    );
    assert_eq!(projection.model("ghost"), Some(&json!({"a": 1})));
}

#[tokio::test]
async fn a_refusal_propagated_with_question_mark_fails_the_flow_with_its_code() {
    let flow = flow_fn("strict", 1, |ctx: FlowCtx, _: Value| async move {
        let ui = ctx.surface("main");
        ui.set("total", "n/a")?;
        ui.increment("total", 1)?;
        Ok(())
    });
    let (rt, e, status) = run(flow, "strict", "s-1").await;
    assert_eq!(status, ExecutionStatus::Failed);
    let events = log(&rt, &e).await;
    let Some(Event::ExecutionFailed(failed)) = events.last() else {
        panic!("{events:?}")
    };
    assert_eq!(failed.error.code, "loom.surface.refused");
    assert!(
        failed
            .error
            .message
            .contains("op #0 (increment at `total`) refused"),
        "{}",
        failed.error.message
    );
    assert_eq!(patches(&events).len(), 1);
}

#[tokio::test]
async fn a_new_runtime_replays_the_emits_and_the_flow_completes() {
    let store = MemoryStore::new();
    let e = {
        let rt = order_runtime(store.clone());
        let (e, status) = start(&rt, "order", "o-2").await;
        assert_eq!(status, ExecutionStatus::Suspended);
        e
    };
    // A new driver starts from empty per-execution state: the emits before the gate replay
    // against a rebuilt model, and the batch after it (which needs `order`) validates.
    let rt = order_runtime(store.clone());
    rt.resume(&e, "Approval", "k", json!("paid").into())
        .await
        .unwrap();
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);

    let events = log(&rt, &e).await;
    let ids: Vec<_> = patches(&events).into_iter().map(|p| p.0).collect();
    assert_eq!(
        ids,
        [
            "surface:main#1",
            "surface:main#2",
            "surface:side#1",
            "surface:main#3"
        ],
        "each patch once"
    );
    let Some(Event::ExecutionCompleted(done)) = events.last() else {
        panic!("{events:?}")
    };
    assert!(
        done.output
            .to_value()
            .as_str()
            .is_some_and(|m| m.contains("op #0 (append at `order.status`) refused")),
        "the refusal is made again on replay: {}",
        done.output
    );
    assert_eq!(
        project(&events).model("main"),
        Some(&json!({"order": {"items": [{"sku": "A1"}], "count": 3, "status": "paid"}}))
    );

    // The same log as an uninterrupted run.
    let rt = order_runtime(MemoryStore::new());
    let (uninterrupted, _) = start(&rt, "order", "o-2").await;
    rt.resume(&uninterrupted, "Approval", "k", json!("paid").into())
        .await
        .unwrap();
    rt.wait(&uninterrupted).await.unwrap();
    assert_eq!(log(&rt, &uninterrupted).await, events);
}

async fn pending_then_gate(ctx: FlowCtx, _: Value) -> Result<(), FlowError> {
    ctx.surface("main").set("status", "pending")?;
    ctx.suspend("Approval", "k").await?;
    Ok(())
}

async fn paid_then_gate(ctx: FlowCtx, _: Value) -> Result<(), FlowError> {
    ctx.surface("main").set("status", "paid")?;
    ctx.suspend("Approval", "k").await?;
    Ok(())
}

#[tokio::test]
async fn a_flow_that_now_emits_another_value_is_non_deterministic() {
    let store = MemoryStore::new();
    let rt = runtime(store.clone(), flow_fn("f", 1, pending_then_gate));
    let (e, status) = start(&rt, "f", "nd").await;
    assert_eq!(status, ExecutionStatus::Suspended);
    drop(rt);

    let rt = runtime(store.clone(), flow_fn("f", 1, paid_then_gate));
    let words = "at seq 1: recorded SURFACE_PATCH 'surface:main#1'";
    assert_resume_diverges(&rt, &e, 1, words).await;
}

#[tokio::test]
async fn a_patch_the_kernel_refuses_is_taken_back_from_the_model() {
    let seen: Arc<Mutex<Vec<EmitError>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let flow = flow_fn("taken", 1, move |ctx: FlowCtx, _: Value| {
        let sink = Arc::clone(&sink);
        async move {
            let ui = ctx.surface("main");
            ui.set("n", 1)?;
            // Takes the step id the next surface patch would get.
            ctx.execute_as(StepName::Explicit("surface:main#2".into()), "noop", &())
                .await?;
            let taken = refused(ui.patch().set("list", json!([])).increment("n", 1).emit())?;
            // Rolled back: `list` is gone again and `n` is still 1.
            let missing = refused(ui.set("list.0", "x"))?;
            ui.increment("n", 1)?;
            sink.lock().unwrap().extend([taken, missing]);
            Ok(())
        }
    });
    let (rt, e, status) = run(flow, "taken", "t-1").await;
    assert_eq!(status, ExecutionStatus::Completed);
    let errors = seen.lock().unwrap().clone();
    assert!(
        matches!(
            &errors[0],
            EmitError::Step { source: StepError::DuplicateStepId(id), ops: 2, .. } if id == "surface:main#2"
        ),
        "{:?}",
        errors[0]
    );
    assert_eq!(errors[0].code(), "loom.step");
    assert!(
        matches!(&errors[1], EmitError::Refused { source, .. } if matches!(source.reason, PatchFailure::MissingParent { .. })),
        "{:?}",
        errors[1]
    );
    let events = log(&rt, &e).await;
    let ids: Vec<_> = patches(&events).into_iter().map(|p| p.0).collect();
    assert_eq!(ids, ["surface:main#1", "surface:main#3"]);
    assert_eq!(project(&events).model("main"), Some(&json!({"n": 2})));
}

#[tokio::test]
async fn one_increment_on_a_100k_key_model_records_one_op_touching_one_pointer() {
    let flow = flow_fn("big", 1, |ctx: FlowCtx, _: Value| async move {
        let rows: Map<String, Value> = (0..100_000)
            .map(|i| (format!("r{i}"), json!({"qty": i})))
            .collect();
        let ui = ctx.surface("main");
        ui.set("rows", &rows)?;
        ui.increment("rows.r54321.qty", 2)?;
        Ok(())
    });
    let (rt, e, status) = run(flow, "big", "big").await;
    assert_eq!(status, ExecutionStatus::Completed);
    let events = log(&rt, &e).await;
    let patch_events: Vec<&Event> = events
        .iter()
        .filter(|event| matches!(event, Event::SurfacePatch(_)))
        .collect();
    let [first, increment] = patch_events.as_slice() else {
        panic!("{}", patch_events.len())
    };
    let Event::SurfacePatch(p) = increment else {
        unreachable!()
    };
    assert_eq!(
        p.ops.as_json(),
        r#"[{"by":2,"op":"increment","path":"rows.r54321.qty"}]"#
    );
    let mut projection = SurfaceProjection::new();
    projection.apply_event(first).unwrap();
    let touched = projection.apply_event(increment).unwrap();
    assert_eq!(touched.len(), 1);
    assert_eq!(touched[0].pointer, "/rows/r54321/qty");
    let model = projection.model("main").unwrap();
    assert_eq!(model["rows"]["r54321"]["qty"], json!(54_323));
    assert_eq!(model["rows"]["r54320"]["qty"], json!(54_320));
    assert_eq!(model["rows"].as_object().unwrap().len(), 100_000);
}
