//! Child executions (LD-015): `ctx.child` starts a flow as a child with a deterministic id
//! and awaits its end; a cancel of the parent reaches the child; a crash at any point, played
//! by a log cut at that point and a new runtime that recovers, loses nothing and starts no
//! child twice; replay is deterministic; careless or hostile callers get typed errors.

use std::time::Duration;

use loom_kernel::Event;
use loom_kernel::kit::{CHILD_EVENT_TYPE, CHILD_KIND};
use loom_kernel::*;
use loom_kernel::{
    DiskStore, EventStore, EventStoreExt, ExecutionId, ExecutionState, ExecutionStatus,
    MemoryStore, Payload,
};
use serde_json::{Value, json};

use crate::support;
use crate::support::{Calls, echo, events_of, id, until};

/// Doubles its input, through the effect `echo` (so a test sees how often it ran).
async fn double(ctx: FlowCtx, n: u64) -> Result<u64, FlowError> {
    ctx.execute("echo", &n).await?;
    Ok(n * 2)
}

/// Asks a child to double its input and adds one.
async fn parent(ctx: FlowCtx, n: u64) -> Result<u64, FlowError> {
    let doubled: u64 = ctx.call_child("double", &n).await?;
    Ok(doubled + 1)
}

/// Waits at a gate for its answer.
async fn waiter(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.suspend("Go", "go").await?.to_value())
}

/// Starts a `waiter` child and returns what it returns.
async fn awaits_waiter(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.child("waiter", &json!(null)).await?.to_value())
}

async fn failing(_ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Err(FlowError::new("child.bad", "no, thanks"))
}

async fn panicking(_ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    panic!("the child flow lost its mind")
}

/// Starts the flow named by its input as a child and reports how it ended, without failing.
async fn catches(ctx: FlowCtx, flow: String) -> Result<Value, FlowError> {
    match ctx.child(&flow, &json!(1)).await {
        Ok(output) => Ok(json!({"ok": output.to_value()})),
        Err(StepError::Failed(error)) => {
            Ok(json!({"failed": error.code, "message": error.message}))
        }
        Err(other) => Ok(json!({"refused": other.to_string()})),
    }
}

/// Two children of the same flow, joined: ids `#1` and `#2` in call order.
async fn twins(ctx: FlowCtx, _: Value) -> Result<Vec<u64>, FlowError> {
    let (a, b) = futures::join!(
        ctx.call_child::<u64, _>("double", &1),
        ctx.call_child::<u64, _>("double", &2)
    );
    Ok(vec![a?, b?])
}

/// A grandparent: its child is a parent of a `double`.
async fn grandparent(ctx: FlowCtx, n: u64) -> Result<u64, FlowError> {
    Ok(ctx.call_child::<u64, _>("parent", &n).await?)
}

/// Starts itself as a child until the id would be too long; returns how deep it went.
async fn recurse(ctx: FlowCtx, depth: u64) -> Result<u64, FlowError> {
    match ctx.call_child::<u64, _>("recurse", &(depth + 1)).await {
        Ok(deepest) => Ok(deepest),
        Err(StepError::ChildId { .. }) => Ok(depth),
        Err(other) => Err(other.into()),
    }
}

/// Spends on one step, then asks a child.
async fn spends(ctx: FlowCtx, n: u64) -> Result<u64, FlowError> {
    ctx.execute("echo", &"first").await?;
    Ok(ctx.call_child::<u64, _>("double", &n).await?)
}

fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("spends", 1, spends))
        .with(flow_fn("recurse", 1, recurse))
        .with(flow_fn("double", 1, double))
        .with(flow_fn("parent", 1, parent))
        .with(flow_fn("waiter", 1, waiter))
        .with(flow_fn("awaits-waiter", 1, awaits_waiter))
        .with(flow_fn("failing", 1, failing))
        .with(flow_fn("panicking", 1, panicking))
        .with(flow_fn("catches", 1, catches))
        .with(flow_fn("twins", 1, twins))
        .with(flow_fn("grandparent", 1, grandparent))
}

fn runtime<S: EventStore>(store: S, calls: &Calls) -> Runtime<S> {
    Runtime::builder(store)
        .flows(&flows())
        .effect("echo", echo(calls.clone()))
        .build()
        .unwrap()
}

fn opts(execution: &str) -> StartOptions {
    StartOptions::new(id(execution)).grant("echo")
}

/// Polls until the execution has ended (the child and the parent's resume run on their own
/// tasks), then waits for its driver.
async fn ended<S: EventStore>(runtime: &Runtime<S>, execution: &ExecutionId) -> ExecutionState {
    until(runtime, execution, |s| s.is_terminal()).await
}

fn output(state: &ExecutionState) -> Value {
    state.output().map(Payload::to_value).unwrap_or(Value::Null)
}

/// Copies the first `keep` events of `execution` from `from` to `to` (a crash after them).
async fn copy_prefix<S: EventStore>(from: &MemoryStore, to: &S, execution: &str, keep: usize) {
    let events: Vec<Event> = events_of(from, &id(execution))
        .await
        .into_iter()
        .take(keep)
        .collect();
    to.append(&id(execution), 0, &events).await.unwrap();
}

/// The event type names of a log.
async fn names<S: EventStore>(store: &S, execution: &str) -> Vec<&'static str> {
    support::event_names(store, &id(execution)).await
}

#[tokio::test]
async fn a_parent_awaits_its_child_whose_id_derives_from_the_parents() {
    let calls = Calls::default();
    let rt = runtime(MemoryStore::new(), &calls);
    rt.start("parent", &20, opts("p1")).await.unwrap();
    let state = ended(&rt, &id("p1")).await;
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(output(&state), json!(41));
    assert_eq!(calls.count(), 1);

    let child = id("p1/double#1");
    let child_state = rt.state(&child).await.unwrap();
    assert_eq!(child_state.status(), ExecutionStatus::Completed);
    assert_eq!(output(&child_state), json!(40));
    // The child inherits the parent's grants.
    assert!(child_state.capabilities().contains("echo"));

    assert_eq!(
        names(rt.store(), "p1").await,
        [
            "EXECUTION_STARTED",
            "DECISION_RECORDED",
            "EXECUTION_SUSPENDED",
            "EXECUTION_RESUMED",
            "EXECUTION_COMPLETED"
        ]
    );
    let log = events_of(rt.store(), &id("p1")).await;
    let Event::DecisionRecorded(decision) = &log[1] else {
        panic!("{log:?}")
    };
    assert_eq!(decision.kind, CHILD_KIND);
    assert_eq!(decision.step_id, "child:double#1");
    assert_eq!(
        decision.value.to_value()["executionId"],
        json!("p1/double#1")
    );
    let Event::ExecutionSuspended(gate) = &log[2] else {
        panic!("{log:?}")
    };
    assert_eq!(
        (gate.event_type.as_str(), gate.correlation_key.as_str()),
        (CHILD_EVENT_TYPE, "p1/double#1")
    );
    let Event::ExecutionResumed(resumed) = &log[3] else {
        panic!("{log:?}")
    };
    assert_eq!(
        resumed.payload.to_value(),
        json!({"loom.child": {"completed": 40}})
    );
}

#[tokio::test]
async fn joined_children_get_ids_in_call_order_and_grandchildren_nest() {
    let calls = Calls::default();
    let rt = runtime(MemoryStore::new(), &calls);
    rt.start("twins", &json!(null), opts("t")).await.unwrap();
    assert_eq!(output(&ended(&rt, &id("t")).await), json!([2, 4]));
    assert_eq!(
        output(&rt.state(&id("t/double#2")).await.unwrap()),
        json!(4)
    );

    rt.start("grandparent", &5, opts("g")).await.unwrap();
    assert_eq!(output(&ended(&rt, &id("g")).await), json!(11));
    let grandchild = rt.state(&id("g/parent#1/double#1")).await.unwrap();
    assert_eq!(output(&grandchild), json!(10));
}

#[tokio::test]
async fn a_failed_or_panicking_child_fails_the_parents_call_with_its_code() {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    rt.start("catches", "failing", opts("c1")).await.unwrap();
    let caught = output(&ended(&rt, &id("c1")).await);
    assert_eq!(caught["failed"], json!("child.bad"));
    assert!(
        caught["message"].as_str().unwrap().contains("c1/failing#1"),
        "{caught}"
    );

    rt.start("catches", "panicking", opts("c2")).await.unwrap();
    let caught = output(&ended(&rt, &id("c2")).await);
    assert_eq!(caught["failed"], json!(codes::FLOW_PANICKED));

    // Unhandled, the child's failure is the parent's, with the same code.
    rt.start("awaits-waiter", &json!(null), opts("c3"))
        .await
        .unwrap();
    until(&rt, &id("c3/waiter#1"), |s| s == ExecutionStatus::Suspended).await;
    rt.cancel(&id("c3/waiter#1"), Some("not needed".into()))
        .await
        .unwrap();
    let state = ended(&rt, &id("c3")).await;
    assert_eq!(state.status(), ExecutionStatus::Failed);
    assert_eq!(state.failure().unwrap().code, codes::CHILD_CANCELLED);
}

#[tokio::test]
async fn cancelling_the_parent_cancels_the_child_it_waits_for() {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    rt.start("awaits-waiter", &json!(null), opts("pc"))
        .await
        .unwrap();
    let child = id("pc/waiter#1");
    until(&rt, &child, |s| s == ExecutionStatus::Suspended).await;
    rt.cancel(&id("pc"), Some("changed my mind".into()))
        .await
        .unwrap();
    let state = ended(&rt, &child).await;
    assert_eq!(state.status(), ExecutionStatus::Cancelled);
    assert_eq!(
        state.cancel_reason(),
        Some(Some("parent pc ended")),
        "the child says why"
    );
    // The child's end reaches a parent that has ended: nothing more is recorded there.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        names(rt.store(), "pc").await.last(),
        Some(&"EXECUTION_CANCELLED")
    );
}

#[tokio::test]
async fn hostile_callers_get_typed_errors_and_nothing_is_recorded() {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    rt.start("awaits-waiter", &json!(null), opts("h"))
        .await
        .unwrap();
    let child = id("h/waiter#1");
    until(&rt, &child, |s| s == ExecutionStatus::Suspended).await;
    let before = names(rt.store(), "h").await.len();

    // The parent's gate on its child belongs to the runtime.
    let forged = rt
        .resume(
            &id("h"),
            CHILD_EVENT_TYPE,
            child.as_str(),
            json!({"loom.child": {"completed": "forged"}}).into(),
        )
        .await;
    assert!(
        matches!(forged, Err(ResumeError::ReservedGate { .. })),
        "{forged:?}"
    );
    // A child's marker cannot be slipped in through an ordinary gate either.
    let marker = rt
        .resume(
            &child,
            "Go",
            "go",
            json!({"loom.child": {"completed": 1}}).into(),
        )
        .await;
    assert!(
        matches!(marker, Err(ResumeError::ReservedPayload { .. })),
        "{marker:?}"
    );
    assert_eq!(names(rt.store(), "h").await.len(), before);

    // Starting the child's id by hand: the same flow and input is the same child (nothing
    // runs again); another input is refused.
    assert_eq!(
        rt.start("waiter", &json!(null), opts("h/waiter#1"))
            .await
            .unwrap(),
        child
    );
    let other = rt.start("waiter", &json!(2), opts("h/waiter#1")).await;
    assert!(
        matches!(other, Err(StartError::Conflict { .. })),
        "{other:?}"
    );

    rt.resume(&child, "Go", "go", json!("now").into())
        .await
        .unwrap();
    assert_eq!(output(&ended(&rt, &id("h")).await), json!("now"));
}

#[tokio::test]
async fn an_execution_made_under_a_child_s_id_with_other_grants_or_budget_is_not_adopted() {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    // Someone made the id the child will get, with the same flow and input, but wider grants
    // and no budget.
    let squatter = id("b/double#1");
    rt.start(
        "double",
        &json!(1),
        opts("b/double#1").grant("payments.charge"),
    )
    .await
    .unwrap();
    let squatted = rt.wait(&squatter).await.unwrap();
    rt.start("catches", "double", opts("b").budget(10))
        .await
        .unwrap();
    let caught = output(&ended(&rt, &id("b")).await);
    assert_eq!(caught["failed"], json!(codes::CHILD_CONFLICT), "{caught}");
    assert_eq!(
        rt.state(&squatter).await.unwrap(),
        squatted,
        "left as it was"
    );

    // The same start again, with other grants or another budget, is refused too.
    let wider = rt.start("double", &json!(1), opts("b/double#1")).await;
    assert!(
        matches!(wider, Err(StartError::Conflict { .. })),
        "{wider:?}"
    );
    let budgeted = rt
        .start(
            "double",
            &json!(1),
            opts("b/double#1").grant("payments.charge").budget(5),
        )
        .await;
    assert!(
        matches!(budgeted, Err(StartError::Conflict { .. })),
        "{budgeted:?}"
    );
}

#[tokio::test]
async fn a_child_id_taken_by_another_execution_or_an_unknown_flow_fails_the_call() {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    // Someone started the id the child would get, with another flow.
    rt.start("waiter", &json!(null), opts("k/failing#1"))
        .await
        .unwrap();
    rt.start("catches", "failing", opts("k")).await.unwrap();
    let caught = output(&ended(&rt, &id("k")).await);
    assert_eq!(caught["failed"], json!(codes::CHILD_CONFLICT), "{caught}");
    // The execution that owned the id is untouched.
    let owner = rt.state(&id("k/failing#1")).await.unwrap();
    assert_eq!(owner.status(), ExecutionStatus::Suspended);

    rt.start("catches", "nobody", opts("u")).await.unwrap();
    let caught = output(&ended(&rt, &id("u")).await);
    assert_eq!(
        caught["failed"],
        json!(codes::CHILD_UNKNOWN_FLOW),
        "{caught}"
    );

    // A flow name that cannot be part of an execution id is refused before anything starts.
    rt.start("catches", "a/b", opts("s")).await.unwrap();
    let caught = output(&ended(&rt, &id("s")).await);
    assert!(
        caught["refused"]
            .as_str()
            .unwrap()
            .contains("cannot start flow 'a/b' as a child"),
        "{caught}"
    );
}

#[tokio::test]
async fn replay_is_deterministic_and_a_changed_child_input_is_a_divergence() {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    rt.start("parent", &3, opts("r")).await.unwrap();
    ended(&rt, &id("r")).await;
    for execution in ["r", "r/double#1"] {
        let log = rt.store().read_all(&id(execution)).await.unwrap();
        let report = rt.replay_log(log).unwrap();
        assert!(report.returned, "{execution}");
    }

    async fn parent_changed(ctx: FlowCtx, n: u64) -> Result<u64, FlowError> {
        let doubled: u64 = ctx.call_child("double", &(n + 1)).await?;
        Ok(doubled + 1)
    }
    let changed = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("parent", 1, parent_changed))
        .build()
        .unwrap();
    let log = rt.store().read_all(&id("r")).await.unwrap();
    let error = changed.replay_log(log).unwrap_err().to_string();
    assert!(
        error.contains("at seq 1") && error.contains("starts child flow 'double'"),
        "{error}"
    );
}

/// The events of a finished parent `p` (flow `parent`, input 20) and its child, recorded once.
async fn recorded_family() -> MemoryStore {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    rt.start("parent", &20, opts("p")).await.unwrap();
    ended(&rt, &id("p")).await;
    rt.store().clone()
}

#[tokio::test]
async fn crash_after_the_parents_record_before_the_child_started() {
    let recorded = recorded_family().await;
    let store = MemoryStore::new();
    // The parent's start, decision and gate are durable; the child does not exist.
    copy_prefix(&recorded, &store, "p", 3).await;
    let calls = Calls::default();
    let rt = runtime(store, &calls);
    rt.recover().await.unwrap();
    assert_eq!(output(&ended(&rt, &id("p")).await), json!(41));
    assert_eq!(calls.count(), 1, "the child ran once");
    assert_eq!(
        events_of(rt.store(), &id("p")).await[..4],
        events_of(&recorded, &id("p")).await[..4]
    );
}

#[tokio::test]
async fn crash_while_the_child_runs() {
    let recorded = recorded_family().await;
    let store = MemoryStore::new();
    copy_prefix(&recorded, &store, "p", 3).await;
    // The child's start is durable, its step not.
    copy_prefix(&recorded, &store, "p/double#1", 1).await;
    let calls = Calls::default();
    let rt = runtime(store, &calls);
    rt.recover().await.unwrap();
    assert_eq!(output(&ended(&rt, &id("p")).await), json!(41));
    assert_eq!(calls.count(), 1);
    assert_eq!(
        rt.store().list_all_executions().await.unwrap().len(),
        2,
        "no second child"
    );
}

#[tokio::test]
async fn crash_after_the_child_ended_before_the_parent_was_resumed() {
    let recorded = recorded_family().await;
    let store = MemoryStore::new();
    copy_prefix(&recorded, &store, "p", 3).await;
    copy_prefix(&recorded, &store, "p/double#1", usize::MAX).await;
    let calls = Calls::default();
    let rt = runtime(store, &calls);
    rt.recover().await.unwrap();
    let state = ended(&rt, &id("p")).await;
    assert_eq!(output(&state), json!(41));
    assert_eq!(calls.count(), 0, "the child's effect does not run again");
    assert_eq!(
        events_of(rt.store(), &id("p")).await,
        events_of(&recorded, &id("p")).await,
        "the parent's log is what it would have been"
    );
}

/// Issue 41, hole 2: a purge between that crash and the recovery keeps the ended child, whose
/// parent still waits for its end; the recovery then delivers it, and the child's effect does
/// not run again. Once the parent has heard, the purge takes the child.
#[tokio::test]
async fn a_purge_after_the_child_ended_before_the_parent_was_resumed_keeps_the_child() {
    let recorded = recorded_family().await;
    let store = MemoryStore::new();
    copy_prefix(&recorded, &store, "p", 3).await;
    copy_prefix(&recorded, &store, "p/double#1", usize::MAX).await;
    let purged = store.delete_ended(u64::MAX, 100).await.unwrap();
    assert!(purged.is_empty(), "the awaited child is kept: {purged:?}");
    let calls = Calls::default();
    let rt = runtime(store.clone(), &calls);
    rt.recover().await.unwrap();
    assert_eq!(output(&ended(&rt, &id("p")).await), json!(41));
    assert_eq!(calls.count(), 0, "the child's effect does not run again");
    let mut purged = store.delete_ended(u64::MAX, 100).await.unwrap();
    purged.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    assert_eq!(purged, [id("p"), id("p/double#1")]);
}

#[tokio::test]
async fn crash_after_the_parent_was_cancelled_before_its_child_was() {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    rt.start("awaits-waiter", &json!(null), opts("x"))
        .await
        .unwrap();
    until(&rt, &id("x/waiter#1"), |s| s == ExecutionStatus::Suspended).await;
    let store = MemoryStore::new();
    copy_prefix(rt.store(), &store, "x", usize::MAX).await;
    copy_prefix(rt.store(), &store, "x/waiter#1", usize::MAX).await;
    // The parent's cancel is durable; the child's is not.
    store
        .append(
            &id("x"),
            3,
            &[Event::ExecutionCancelled(loom_kernel::ExecutionCancelled {
                reason: Some("stop".into()),
            })],
        )
        .await
        .unwrap();
    let rt = runtime(store, &Calls::default());
    rt.recover().await.unwrap();
    let child = ended(&rt, &id("x/waiter#1")).await;
    assert_eq!(child.status(), ExecutionStatus::Cancelled);
}

#[tokio::test]
async fn a_parked_family_survives_a_restart_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    {
        let rt = runtime(DiskStore::open(&path).unwrap(), &Calls::default());
        rt.start("awaits-waiter", &json!(null), opts("d"))
            .await
            .unwrap();
        until(&rt, &id("d/waiter#1"), |s| s == ExecutionStatus::Suspended).await;
        until(&rt, &id("d"), |s| s == ExecutionStatus::Suspended).await;
        rt.shutdown().await;
    }
    let rt = runtime(DiskStore::open(&path).unwrap(), &Calls::default());
    rt.recover().await.unwrap();
    rt.resume(&id("d/waiter#1"), "Go", "go", json!("later").into())
        .await
        .unwrap();
    assert_eq!(output(&ended(&rt, &id("d")).await), json!("later"));
    assert_eq!(rt.store().list_all_executions().await.unwrap().len(), 2);
    // Recovering again starts nothing and changes nothing.
    let before = events_of(rt.store(), &id("d")).await;
    rt.recover().await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(events_of(rt.store(), &id("d")).await, before);
}

#[tokio::test]
async fn an_id_that_only_looks_like_a_childs_reaches_no_parent() {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    rt.start("awaits-waiter", &json!(null), opts("lp"))
        .await
        .unwrap();
    until(&rt, &id("lp/waiter#1"), |s| s == ExecutionStatus::Suspended).await;
    // A user's execution named like a second child of `lp`, which `lp` never asked for.
    rt.start("waiter", &json!(null), opts("lp/waiter#2"))
        .await
        .unwrap();
    rt.resume(&id("lp/waiter#2"), "Go", "go", json!("mine").into())
        .await
        .unwrap();
    assert_eq!(output(&ended(&rt, &id("lp/waiter#2")).await), json!("mine"));
    let before = names(rt.store(), "lp").await;
    // A new runtime recovers both and still delivers nothing of it to `lp`.
    let rt2 = runtime(rt.store().clone(), &Calls::default());
    rt2.recover().await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(names(rt2.store(), "lp").await, before);
    assert_eq!(
        rt2.state(&id("lp")).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    // Its real child's end still reaches it.
    rt2.resume(&id("lp/waiter#1"), "Go", "go", json!("real").into())
        .await
        .unwrap();
    assert_eq!(output(&ended(&rt2, &id("lp")).await), json!("real"));
}

#[tokio::test]
async fn a_flow_that_starts_itself_stops_where_the_id_would_be_too_long() {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    rt.start("recurse", &0, opts("r")).await.unwrap();
    let state = ended(&rt, &id("r")).await;
    // "r" then "/recurse#1" (10 bytes) per level, within 256 bytes.
    assert_eq!(output(&state), json!(25));
    assert_eq!(rt.store().list_all_executions().await.unwrap().len(), 26);
}

#[tokio::test]
async fn wait_ended_of_an_unknown_execution_returns_at_once() {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    let state = rt.wait_ended(&id("nobody")).await.unwrap();
    assert_eq!(state.next_seq(), 0);
}

#[tokio::test]
async fn a_child_inherits_the_grants_and_what_is_left_of_the_budget() {
    let rt = runtime(MemoryStore::new(), &Calls::default());
    rt.start("spends", &4, opts("b").budget(5)).await.unwrap();
    let parent = ended(&rt, &id("b")).await;
    assert_eq!(output(&parent), json!(8));
    assert_eq!(parent.budget_spent(), 1, "the child's spending is its own");
    let child = rt.state(&id("b/double#1")).await.unwrap();
    assert_eq!(
        child.budget(),
        Some(4),
        "5 less the 1 spent before the call"
    );
    assert_eq!(child.budget_spent(), 1);
    assert!(child.capabilities().contains("echo"));
}
