//! `Runtime::wait` after the execution's driver is gone: the state the driver left is served
//! only while it is still the log's fold (the log has not grown or been deleted since), and is
//! always what folding the log gives.

use loom_kernel::*;
use loom_kernel::{DiskStore, EventStore, EventStoreExt, ExecutionStatus, MemoryStore};
use serde_json::{Value, json};

use crate::support::{Calls, echo, options, with_echo};

async fn one_step(ctx: FlowCtx, order: Value) -> Result<Value, FlowError> {
    let charged = ctx.execute("echo", &order).await?;
    Ok(charged.to_value())
}

async fn gate(ctx: FlowCtx, order: Value) -> Result<Value, FlowError> {
    ctx.execute("echo", &order).await?;
    Ok(ctx.suspend("Approval", "k").await?.to_value())
}

fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("one", 1, one_step))
        .with(flow_fn("gate", 1, gate))
}

/// Starts `flow` as `name` with the input 1.
async fn start<S: EventStore>(rt: &Runtime<S>, flow: &str, name: &str) -> ExecutionId {
    rt.start(flow, &json!(1), options(name, &["echo"]))
        .await
        .unwrap()
}

/// Starts `n` executions at once, each waited for as soon as its start returns, and checks
/// every state `wait` gave against the fold of the log, then waits for each again.
async fn waits_agree_with_the_fold<S: EventStore>(rt: &Runtime<S>, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let rt = rt.clone();
            tokio::spawn(async move {
                let flow = if i % 3 == 0 { "gate" } else { "one" };
                let e = rt
                    .start(flow, &json!(i), options(&format!("w{i}"), &["echo"]))
                    .await
                    .unwrap();
                (e.clone(), rt.wait(&e).await.unwrap())
            })
        })
        .collect();
    for task in tasks {
        let (e, waited) = task.await.unwrap();
        let folded = rt.state(&e).await.unwrap();
        assert_eq!(waited, folded, "{e}");
        assert!(
            matches!(
                waited.status(),
                ExecutionStatus::Completed | ExecutionStatus::Suspended
            ),
            "{e}: {:?}",
            waited.status()
        );
        assert_eq!(rt.wait(&e).await.unwrap(), folded, "{e}, waited again");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_right_after_start_gives_the_fold_of_the_log_on_the_memory_store() {
    let rt = with_echo(MemoryStore::new(), flows(), Calls::default());
    waits_agree_with_the_fold(&rt, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_right_after_start_gives_the_fold_of_the_log_on_the_disk_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path().join("w.redb")).unwrap();
    let rt = Runtime::builder(store)
        .flows(&flows())
        .effect("echo", echo(Calls::default()))
        .build()
        .unwrap();
    waits_agree_with_the_fold(&rt, 300).await;
}

/// Once the runtime has shut down every driver is gone and has left its state behind; the
/// deletion that follows must not be hidden by it.
#[tokio::test]
async fn a_wait_after_retention_deleted_the_execution_reads_the_empty_log() {
    let store = MemoryStore::new();
    let rt = with_echo(store.clone(), flows(), Calls::default());
    let e = start(&rt, "one", "gone").await;
    rt.clone().shutdown().await;
    assert_eq!(
        store.delete_ended(u64::MAX, 10).await.unwrap(),
        std::slice::from_ref(&e)
    );
    let state = rt.wait(&e).await.unwrap();
    assert_eq!(state.next_seq(), 0, "{state:?}");
    assert_eq!(state, ExecutionState::new());
}

/// A parked execution's left state is stale once a resume has grown its log.
#[tokio::test]
async fn a_wait_after_the_log_grew_reads_it_again() {
    let store = MemoryStore::new();
    let rt = with_echo(store.clone(), flows(), Calls::default());
    let e = start(&rt, "gate", "grown").await;
    let parked = rt.wait(&e).await.unwrap();
    assert_eq!(parked.status(), ExecutionStatus::Suspended);
    rt.resume(&e, "Approval", "k", Payload::from_value(&json!("yes")))
        .await
        .unwrap();
    let ended = rt.wait(&e).await.unwrap();
    assert_eq!(ended.status(), ExecutionStatus::Completed);
    assert_eq!(ended, store.fold(&e).await.unwrap());
    assert!(ended.next_seq() > parked.next_seq());
}

/// Starts `gate` as `name` and waits, without `wait`, until its driver has parked the flow in
/// memory and exited (nobody waited: no copy of the fold was made); returns the kept state.
async fn kept_in_memory(rt: &Runtime<MemoryStore>, name: &str) -> (ExecutionId, ExecutionState) {
    let e = start(rt, "gate", name).await;
    loop {
        if let Some(state) = rt.parked_state(&e) {
            return (e, state);
        }
        tokio::task::yield_now().await;
    }
}

/// A flow parked in memory with no caller waiting (its driver exits without copying its fold):
/// a later `wait` gets a copy of the fold the kept flow carries, equal to the log's.
#[tokio::test]
async fn a_wait_after_a_flow_was_kept_in_memory_gives_the_fold_of_the_log() {
    let store = MemoryStore::new();
    let rt = with_echo(store.clone(), flows(), Calls::default());
    let (e, parked) = kept_in_memory(&rt, "kept").await;
    assert_eq!(parked.status(), ExecutionStatus::Suspended);
    let waited = rt.wait(&e).await.unwrap();
    assert_eq!(waited, store.fold(&e).await.unwrap());
    assert_eq!(waited, parked);
    assert_eq!(rt.parked_in_memory(), 1, "the flow is still kept");
}

/// The same, after another writer appended to the log: the kept fold is stale, and `wait`
/// folds the log as it is.
#[tokio::test]
async fn a_wait_after_another_writer_moved_a_kept_flow_s_log_folds_it() {
    let store = MemoryStore::new();
    let rt = with_echo(store.clone(), flows(), Calls::default());
    let (e, parked) = kept_in_memory(&rt, "moved").await;
    store
        .append(
            &e,
            parked.next_seq(),
            &[loom_kernel::conformance::tagged(json!("another writer"))],
        )
        .await
        .unwrap();
    let waited = rt.wait(&e).await.unwrap();
    assert_eq!(waited.next_seq(), parked.next_seq() + 1);
    assert_eq!(waited, store.fold(&e).await.unwrap());
}

/// Many waits for one execution at once, right after its start, and a wait for an id that was
/// never started: each gives the fold of the log (the empty state for the unknown id), whether
/// or not another wait took the state its driver left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_at_once_for_one_execution_and_for_an_unknown_one_give_the_fold() {
    let store = MemoryStore::new();
    let rt = with_echo(store.clone(), flows(), Calls::default());
    let e = rt
        .start("one", &json!(7), options("together", &["echo"]))
        .await
        .unwrap();
    let waits: Vec<_> = (0..16)
        .map(|_| {
            let rt = rt.clone();
            let e = e.clone();
            tokio::spawn(async move { rt.wait(&e).await.unwrap() })
        })
        .collect();
    let folded = store.fold(&e).await.unwrap();
    for wait in waits {
        assert_eq!(wait.await.unwrap(), folded);
    }
    let unknown = rt
        .wait(&loom_kernel::conformance::id("never"))
        .await
        .unwrap();
    assert_eq!(unknown, ExecutionState::new());
}
