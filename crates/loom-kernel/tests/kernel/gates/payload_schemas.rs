//! Gates that declare the payload they expect (LD-031): `ctx.suspend_expecting` records the
//! JSON Schema just before its gate, in the same batch, only when the gate opens live;
//! `expected_payload` reads it back without the flow's code; replay neither matches nor serves
//! it, so logs recorded before a gate declared a schema replay and resume as before, and logs
//! that hold one replay against code that no longer declares it. A schema the log could not
//! hold is refused when the gate is opened, and nothing is recorded.

use loom_kernel::conformance::nested;
use loom_kernel::kit::{PAYLOAD_SCHEMA_KIND, expected_payload, payload_schema_step_id};
use loom_kernel::*;
use loom_kernel::{EventStoreExt, ExecutionStatus, MemoryStore};
use serde_json::{Value, json};

use crate::support::id;

fn locale_schema() -> Value {
    json!({"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]})
}

/// Today's code: the gate says what it expects.
async fn declares(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let answer = ctx
        .suspend_expecting("Locale", "k", &locale_schema())
        .await?;
    Ok(answer.to_value())
}

/// The code before gates could say so (or after the declaration was dropped).
async fn plain(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.suspend("Locale", "k").await?.to_value())
}

/// A schema nested deeper than a payload may be, then a reserved event type.
async fn hostile(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let deep = ctx.suspend_expecting("Locale", "deep", &nested(200)).await;
    let reserved = ctx.suspend_expecting("loom.timer", "k", &json!({})).await;
    Ok(json!([format!("{deep:?}"), format!("{reserved:?}")]))
}

fn runtime(store: MemoryStore, flows: FlowSet) -> Runtime<MemoryStore> {
    Runtime::builder(store).flows(&flows).build().unwrap()
}

fn flow_declaring() -> FlowSet {
    FlowSet::new().with(flow_fn("locale", 1, declares))
}

fn flow_plain() -> FlowSet {
    FlowSet::new().with(flow_fn("locale", 1, plain))
}

#[tokio::test]
async fn the_schema_is_recorded_just_before_its_gate_and_read_back_without_the_flow() {
    let store = MemoryStore::new();
    let loom = runtime(store.clone(), flow_declaring());
    let e = id("locale-1");
    loom.start("locale", &json!({}), StartOptions::new(e.clone()))
        .await
        .unwrap();
    let state = loom.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Suspended);
    let log = store.read_all(&e).await.unwrap();
    let kinds: Vec<_> = log.iter().map(|e| e.event.type_name()).collect();
    assert_eq!(
        kinds,
        [
            "EXECUTION_STARTED",
            "DECISION_RECORDED",
            "EXECUTION_SUSPENDED"
        ]
    );
    let Event::DecisionRecorded(decision) = &log[1].event else {
        unreachable!()
    };
    assert_eq!(decision.kind, PAYLOAD_SCHEMA_KIND);
    assert_eq!(decision.step_id, "Locale#1:payloadSchema");
    assert_eq!(decision.step_id, payload_schema_step_id("Locale#1"));
    let schema = expected_payload(&store, &e, &state, "Locale#1")
        .await
        .unwrap();
    assert_eq!(schema.map(|s| s.to_value()), Some(locale_schema()));
    assert_eq!(
        expected_payload(&store, &e, &state, "Other#1")
            .await
            .unwrap(),
        None
    );
    loom.shutdown().await;

    // Replayed by a new process (no kept flow): nothing more is recorded for the gate.
    let again = runtime(store.clone(), flow_declaring());
    again.recover().await.unwrap();
    again
        .resume(&e, "Locale", "k", json!({"value": "de-CH"}).into())
        .await
        .unwrap();
    let done = again.wait(&e).await.unwrap();
    assert_eq!(done.output().unwrap().to_value(), json!({"value": "de-CH"}));
    let log = store.read_all(&e).await.unwrap();
    assert_eq!(log.len(), 5, "started, schema, gate, resume, completed");
    again.replay_log(log).unwrap();
}

#[tokio::test]
async fn a_log_recorded_before_gates_declared_schemas_replays_and_resumes_as_before() {
    let store = MemoryStore::new();
    let old = runtime(store.clone(), flow_plain());
    let e = id("locale-old");
    old.start("locale", &json!({}), StartOptions::new(e.clone()))
        .await
        .unwrap();
    old.wait(&e).await.unwrap();
    old.shutdown().await;
    let before = store.read_all(&e).await.unwrap().len();

    let new = runtime(store.clone(), flow_declaring());
    new.recover().await.unwrap();
    let state = new.state(&e).await.unwrap();
    assert_eq!(
        expected_payload(&store, &e, &state, "Locale#1")
            .await
            .unwrap(),
        None,
        "the old gate declared nothing, and nothing was added"
    );
    // Any payload, as before: nothing checks a gate without a schema.
    new.resume(&e, "Locale", "k", json!("de-CH").into())
        .await
        .unwrap();
    let done = new.wait(&e).await.unwrap();
    assert_eq!(done.status(), ExecutionStatus::Completed);
    let log = store.read_all(&e).await.unwrap();
    assert_eq!(
        log.len(),
        before + 2,
        "the resume and the end, nothing else"
    );
    assert!(
        log.iter()
            .all(|e| !matches!(&e.event, Event::DecisionRecorded(_))),
        "no schema was written into the old log"
    );
    new.replay_log(log).unwrap();
}

#[tokio::test]
async fn a_log_that_holds_a_schema_replays_against_code_that_no_longer_declares_it() {
    let store = MemoryStore::new();
    let first = runtime(store.clone(), flow_declaring());
    let e = id("locale-dropped");
    first
        .start("locale", &json!({}), StartOptions::new(e.clone()))
        .await
        .unwrap();
    first.wait(&e).await.unwrap();
    first.shutdown().await;

    let later = runtime(store.clone(), flow_plain());
    later.recover().await.unwrap();
    later
        .resume(&e, "Locale", "k", json!({"value": "fr"}).into())
        .await
        .unwrap();
    let done = later.wait(&e).await.unwrap();
    assert_eq!(done.status(), ExecutionStatus::Completed);
    later.replay_log(store.read_all(&e).await.unwrap()).unwrap();
}

#[tokio::test]
async fn a_schema_the_log_could_not_hold_is_refused_and_nothing_is_recorded() {
    let store = MemoryStore::new();
    let loom = runtime(
        store.clone(),
        FlowSet::new().with(flow_fn("hostile", 1, hostile)),
    );
    let e = id("hostile");
    loom.start("hostile", &json!({}), StartOptions::new(e.clone()))
        .await
        .unwrap();
    let done = loom.wait(&e).await.unwrap();
    let refusals = done.output().unwrap().to_value();
    assert!(
        refusals[0]
            .as_str()
            .unwrap()
            .starts_with("Err(InvalidSchema("),
        "{refusals}"
    );
    assert!(
        refusals[1]
            .as_str()
            .unwrap()
            .starts_with("Err(ReservedEventType("),
        "{refusals}"
    );
    let kinds: Vec<_> = store
        .read_all(&e)
        .await
        .unwrap()
        .iter()
        .map(|e| e.event.type_name())
        .collect();
    assert_eq!(kinds, ["EXECUTION_STARTED", "EXECUTION_COMPLETED"]);
}

/// Opens one gate per entry of `input[field]`, one after another, declaring a schema where the
/// entry is `true`; returns how many it passed.
async fn gates_by(ctx: FlowCtx, input: Value, field: &str) -> Result<Value, FlowError> {
    let declares: Vec<bool> = serde_json::from_value(input[field].clone()).unwrap_or_default();
    for (n, declared) in declares.iter().enumerate() {
        let key = n.to_string();
        if *declared {
            ctx.suspend_expecting("Step", &key, &locale_schema())
                .await?;
        } else {
            ctx.suspend("Step", &key).await?;
        }
    }
    Ok(json!(declares.len()))
}

async fn recording(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    gates_by(ctx, input, "recorded").await
}

async fn replaying(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    gates_by(ctx, input, "replayed").await
}

fn schema_notes(log: &[loom_kernel::EventEnvelope]) -> usize {
    log.iter()
        .filter(|e| matches!(&e.event, Event::DecisionRecorded(d) if d.kind == PAYLOAD_SCHEMA_KIND))
        .count()
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 32, ..Default::default() })]

    /// The law: whether, and where, gates declare schemas never changes a replay. A log recorded
    /// by code declaring some gates, resumed part way, is driven on by code declaring others: no
    /// divergence, it completes, and a schema note exists exactly for each gate opened live by
    /// code that declared it.
    #[test]
    fn declaring_schemas_never_changes_a_replay(
        flags in proptest::collection::vec((proptest::bool::ANY, proptest::bool::ANY), 1..6),
        resumed_first in 0usize..6,
    ) {
        let recorded: Vec<bool> = flags.iter().map(|f| f.0).collect();
        let replayed: Vec<bool> = flags.iter().map(|f| f.1).collect();
        let first = resumed_first.min(flags.len());
        let tokio = tokio::runtime::Runtime::new().unwrap();
        tokio.block_on(async {
            let store = MemoryStore::new();
            let e = id("law");
            let input = json!({"recorded": recorded, "replayed": replayed});
            let before = runtime(store.clone(), FlowSet::new().with(flow_fn("gates", 1, recording)));
            before.start("gates", &input, StartOptions::new(e.clone())).await.unwrap();
            before.wait(&e).await.unwrap();
            for n in 0..first {
                before.resume(&e, "Step", &n.to_string(), json!({"value": "ok"}).into()).await.unwrap();
                before.wait(&e).await.unwrap();
            }
            before.shutdown().await;

            let after = runtime(store.clone(), FlowSet::new().with(flow_fn("gates", 1, replaying)));
            after.recover().await.unwrap();
            for n in first..flags.len() {
                after.resume(&e, "Step", &n.to_string(), json!({"value": "ok"}).into()).await.unwrap();
                after.wait(&e).await.unwrap();
            }
            let done = after.wait(&e).await.unwrap();
            assert_eq!(done.status(), ExecutionStatus::Completed, "{flags:?} resumed first {first}");
            let log = store.read_all(&e).await.unwrap();
            // Gates 0..=first opened under the recording code (gate `first` parked there when
            // there is one), the rest under the replaying code.
            let expected = (0..flags.len())
                .filter(|&n| if n <= first { recorded[n] } else { replayed[n] })
                .count();
            assert_eq!(schema_notes(&log), expected, "{flags:?} resumed first {first}");
            after.replay_log(log).unwrap();
        });
    }
}
