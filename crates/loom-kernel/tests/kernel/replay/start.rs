//! Starting an execution: a start of an id that exists never runs the flow; with the same flow
//! and input it returns that execution (idempotent start), otherwise it is refused.

use loom_kernel::*;
use loom_kernel::{EventStore, ExecutionStatus, MemoryStore};
use serde_json::{Value, json};
use std::sync::Arc;

use crate::support::{Calls, events_of, id, options, with_echo};

async fn one_step(ctx: FlowCtx, order: Value) -> Result<Value, FlowError> {
    let charged = ctx.execute("echo", &order).await?;
    Ok(charged.to_value())
}

async fn two_steps(ctx: FlowCtx, order: Value) -> Result<Value, FlowError> {
    ctx.execute("echo", &order).await?;
    let approval = ctx.suspend("Approval", "k").await?;
    Ok(approval.to_value())
}

fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("one", 1, one_step))
        .with(flow_fn("gate", 1, two_steps))
        .with(flow_fn("other", 1, one_step))
}

/// A runtime where `s` ran `one` (`{"sku": 1}`) to its end; its store, its effect's calls and `s`.
async fn one_ran() -> (Runtime<MemoryStore>, MemoryStore, Calls, ExecutionId) {
    let calls = Calls::default();
    let store = MemoryStore::new();
    let rt = with_echo(store.clone(), flows(), calls.clone());
    let e = rt
        .start("one", &json!({"sku": 1}), options("s", &["echo"]))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    (rt, store, calls, e)
}

#[tokio::test]
async fn a_second_start_with_the_same_flow_and_input_returns_the_execution_and_runs_nothing() {
    let (rt, store, calls, e) = one_ran().await;
    let log = events_of(&store, &e).await;
    let again = rt
        .start("one", &json!({"sku": 1}), options("s", &["echo"]))
        .await
        .unwrap();
    assert_eq!(again, e);
    assert_eq!(calls.count(), 1, "no effect ran for the second start");
    assert_eq!(events_of(&store, &e).await, log, "nothing was recorded");
}

/// What the docs say of retention (`Runtime::start`, `docs/CONSOLE.md`): no tombstone is kept,
/// so a start after the deletion runs the flow again, under the same idempotency keys.
#[tokio::test]
async fn a_start_after_retention_deleted_the_execution_runs_again_under_the_same_keys() {
    let (rt, store, calls, e) = one_ran().await;
    let first = rt.wait(&e).await.unwrap().output().map(Payload::to_value);
    assert_eq!(
        store.delete_ended(u64::MAX, 10).await.unwrap(),
        std::slice::from_ref(&e)
    );
    let again = rt
        .start("one", &json!({"sku": 1}), options("s", &["echo"]))
        .await
        .unwrap();
    let second = rt
        .wait(&again)
        .await
        .unwrap()
        .output()
        .map(Payload::to_value);
    assert_eq!(calls.count(), 2, "the flow ran again");
    assert_eq!(first, second, "under the same idempotency key: {second:?}");
}

#[tokio::test]
async fn a_second_start_of_a_waiting_execution_returns_it() {
    let calls = Calls::default();
    let rt = with_echo(MemoryStore::new(), flows(), calls.clone());
    let e = rt
        .start("gate", &json!(1), options("w", &["echo"]))
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&e).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    let again = rt
        .start("gate", &json!(1), options("w", &["echo"]))
        .await
        .unwrap();
    assert_eq!(again, e);
    assert_eq!(calls.count(), 1);
}

#[tokio::test]
async fn a_second_start_with_other_input_or_flow_is_refused_and_runs_nothing() {
    let (rt, store, calls, e) = one_ran().await;
    let log = events_of(&store, &e).await;
    let err = rt
        .start("one", &json!({"sku": 2}), options("s", &["echo"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StartError::Conflict { ref execution, .. } if *execution == e),
        "{err}"
    );
    assert!(err.to_string().contains("other input"), "{err}");
    let err = rt
        .start("other", &json!({"sku": 1}), options("s", &["echo"]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("flow 'one'"), "{err}");
    assert_eq!(calls.count(), 1, "no effect ran for a refused start");
    assert_eq!(events_of(&store, &e).await, log, "nothing was recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starts_of_one_id_run_the_flow_once() {
    let calls = Calls::default();
    let rt = with_echo(MemoryStore::new(), flows(), calls.clone());
    let starts = (0..8).map(|_| {
        let rt = rt.clone();
        tokio::spawn(async move {
            rt.start("one", &json!({"sku": 1}), options("c", &["echo"]))
                .await
        })
    });
    for start in futures::future::join_all(starts).await {
        assert_eq!(start.unwrap().unwrap(), id("c"));
    }
    let state = rt.wait(&id("c")).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(calls.count(), 1, "the effect ran once");
}

#[tokio::test]
async fn a_start_on_a_second_runtime_of_one_store_runs_nothing() {
    let store = MemoryStore::new();
    let first = Calls::default();
    let second = Calls::default();
    let rt1 = with_echo(store.clone(), flows(), first.clone());
    let rt2 = with_echo(store.clone(), flows(), second.clone());
    let e = rt1
        .start("one", &json!({"sku": 1}), options("x", &["echo"]))
        .await
        .unwrap();
    rt1.wait(&e).await.unwrap();
    let err = rt2
        .start("one", &json!({"sku": 2}), options("x", &["echo"]))
        .await
        .unwrap_err();
    assert!(matches!(err, StartError::Conflict { .. }), "{err}");
    let again = rt2
        .start("one", &json!({"sku": 1}), options("x", &["echo"]))
        .await
        .unwrap();
    assert_eq!(again, e);
    assert_eq!(second.count(), 0, "the second runtime ran no effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_starts_on_two_runtimes_of_one_store_run_one_effect_with_the_winners_input() {
    racing_starts_run_one_effect(MemoryStore::new).await;
}

/// The disk store claims a new id in memory, so the winner's idempotent effect runs before its
/// start is durable: the loser must still run nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_starts_on_two_runtimes_of_one_disk_store_run_one_effect_with_the_winners_input() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path().join("race.redb")).unwrap();
    racing_starts_run_one_effect(move || store.clone()).await;
}

/// A store that claims new ids: an execution of one idempotent step is one commit (its start,
/// step and end together), one of a non-idempotent step two (its STEP_STARTED durable first).
#[tokio::test]
async fn a_one_step_execution_commits_once_if_idempotent_and_twice_if_not() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path().join("commits.redb")).unwrap();
    for idempotent in [true, false] {
        // A non-idempotent effect runs only once its STEP_STARTED is durable, so it could
        // finish and commit before the head is read below: it waits for that read.
        let head_read = Arc::new(tokio::sync::Semaphore::new(usize::from(idempotent)));
        let gate = Arc::clone(&head_read);
        let rt = Runtime::builder(store.clone())
            .flows(&flows())
            .effect(
                "echo",
                FnEffect::new(idempotent, move |call: EffectCall| {
                    let gate = Arc::clone(&gate);
                    async move {
                        let _read = gate.acquire().await;
                        EffectOutcome::ok(call.input)
                    }
                }),
            )
            .build()
            .unwrap();
        let execution = format!("one-{idempotent}");
        let e = rt
            .start("one", &json!(1), options(&execution, &["echo"]))
            .await
            .unwrap();
        // `start` returns once the first commit is durable.
        let first_commit = store.head(&e).await.unwrap();
        head_read.add_permits(1);
        rt.wait(&e).await.unwrap();
        let names = crate::support::event_names(&store, &e).await;
        if idempotent {
            assert_eq!(first_commit, 3, "one commit: {names:?}");
        } else {
            assert_eq!(
                first_commit, 2,
                "the start and STEP_STARTED first: {names:?}"
            );
            assert_eq!(
                store.head(&e).await.unwrap(),
                4,
                "then the outcome and the end"
            );
        }
    }
}

async fn racing_starts_run_one_effect<S: EventStore + Clone>(fresh: impl Fn() -> S) {
    for round in 0..20 {
        let store = fresh();
        let calls = Calls::default();
        let inputs = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let runtime = |store: S| {
            let inputs = inputs.clone();
            let calls = calls.clone();
            Runtime::builder(store)
                .flows(&flows())
                .effect(
                    "echo",
                    FnEffect::new(true, move |call: EffectCall| {
                        calls.bump();
                        inputs.lock().unwrap().push(call.input.to_value());
                        async { EffectOutcome::ok(json!(1).into()) }
                    }),
                )
                .build()
                .unwrap()
        };
        let rt1 = runtime(store.clone());
        let rt2 = runtime(store.clone());
        let execution = format!("race-{round}");
        let start = |rt: &Runtime<S>, input: u64| {
            let rt = rt.clone();
            let execution = execution.clone();
            tokio::spawn(async move {
                rt.start("one", &input, options(&execution, &["echo"]))
                    .await
            })
        };
        let (a, b) = (start(&rt1, 1), start(&rt2, 2));
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        assert!(
            a.is_ok() != b.is_ok(),
            "exactly one start wins: {a:?} {b:?}"
        );
        let winner = if a.is_ok() { json!(1) } else { json!(2) };
        let e = id(&execution);
        let rt = if a.is_ok() { &rt1 } else { &rt2 };
        rt.wait(&e).await.unwrap();
        assert_eq!(calls.count(), 1, "round {round}");
        assert_eq!(*inputs.lock().unwrap(), vec![winner]);
        assert!(store.head(&e).await.unwrap() > 0);
    }
}
