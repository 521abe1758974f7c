//! An execution's slot (its driver's mailbox and settled state) is dropped once its driver has
//! ended and every wait has let go of it, whichever came last: a wait that subscribed while the
//! execution ran used to leave the slot for good, about 1.7 KiB an execution, found by the
//! soak bench on PostgreSQL, where `start` returns before the flow ends.

use std::time::Duration;

use crate::{
    EffectCall, EffectOutcome, ExecutionId, ExecutionStatus, FlowCtx, FlowError, FnEffect,
    MemoryStore, Runtime, StartOptions, flow_fn,
};

async fn one_slow_step(ctx: FlowCtx, n: u64) -> Result<u64, FlowError> {
    ctx.execute("slow", &n).await?;
    Ok(n)
}

fn runtime() -> Runtime<MemoryStore> {
    Runtime::builder(MemoryStore::new())
        .flow(flow_fn("slow", 1, one_slow_step))
        .effect(
            "slow",
            FnEffect::new(true, |call: EffectCall| async move {
                tokio::time::sleep(Duration::from_millis(15)).await;
                EffectOutcome::ok(call.input)
            }),
        )
        .build()
        .expect("runtime")
}

fn holds_slot(loom: &Runtime<MemoryStore>, id: &ExecutionId) -> bool {
    loom.inner.slots(id).contains_key(id)
}

#[tokio::test]
async fn a_wait_that_began_while_the_execution_ran_leaves_no_slot_behind() {
    let loom = runtime();
    for n in 0..10u64 {
        let id = ExecutionId::new(format!("waited-{n}")).expect("id");
        loom.start("slow", &n, StartOptions::new(id.clone()).grant("slow"))
            .await
            .expect("start");
        assert!(holds_slot(&loom, &id), "running, so its slot is there");
        assert_eq!(
            loom.wait(&id).await.expect("wait").status(),
            ExecutionStatus::Completed
        );
        assert!(!holds_slot(&loom, &id), "execution {n} kept its slot");
        // A later wait still answers, from the state kept or the log.
        assert_eq!(
            loom.wait(&id).await.expect("wait again").status(),
            ExecutionStatus::Completed
        );
        assert!(!holds_slot(&loom, &id));
    }
}

#[tokio::test]
async fn two_waits_at_once_and_wait_ended_leave_no_slot_behind() {
    let loom = runtime();
    let id = ExecutionId::new("waited-twice").expect("id");
    loom.start("slow", &1u64, StartOptions::new(id.clone()).grant("slow"))
        .await
        .expect("start");
    let (first, second, ended) = tokio::join!(loom.wait(&id), loom.wait(&id), loom.wait_ended(&id));
    for state in [first, second, ended] {
        assert_eq!(state.expect("wait").status(), ExecutionStatus::Completed);
    }
    assert!(!holds_slot(&loom, &id));
}
