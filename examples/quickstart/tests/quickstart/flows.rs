//! The quickstart's flows, run through the runtime on the in-memory store.

use loom_agent_surface::SurfaceProjection;
use loom_kernel::Runtime;
use loom_kernel::{Event, EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore, Payload};
use quickstart::{APPROVAL_EVENT, Counters, Order, Receipt, approval_key};
use serde_json::json;

fn id(text: &str) -> ExecutionId {
    ExecutionId::new(text).unwrap()
}

fn order() -> Order {
    Order {
        sku: "A1".into(),
        qty: 2,
    }
}

fn approve() -> Payload {
    json!({"action": "approve", "by": "alice"}).into()
}

/// The output recorded by the execution's last event.
async fn output(store: &MemoryStore, e: &ExecutionId) -> Payload {
    let log = store.read_all(e).await.unwrap();
    match log.last().map(|envelope| &envelope.event) {
        Some(Event::ExecutionCompleted(done)) => done.output.clone(),
        other => panic!("{e} has not completed: its last event is {other:?}"),
    }
}

#[tokio::test]
async fn checkout_and_greet_run_to_completion() {
    let store = MemoryStore::new();
    let counters = Counters::default();
    let rt = quickstart::compose_with(Runtime::builder(store.clone()), &counters)
        .build()
        .unwrap();
    let e = rt
        .start(
            "checkout",
            &order(),
            quickstart::start_options(&id("checkout-1")),
        )
        .await
        .unwrap();
    let parked = rt.wait(&e).await.unwrap();
    assert_eq!(parked.status(), ExecutionStatus::Suspended);
    let gate = &parked.pending_gates()["A2UIAction#1"];
    assert_eq!(&*gate.event_type, APPROVAL_EVENT);
    assert_eq!(gate.correlation_key, "approve-checkout-1");

    rt.resume(&e, APPROVAL_EVENT, &approval_key(&e), approve())
        .await
        .unwrap();
    let done = rt.wait_ended(&e).await.unwrap();
    assert_eq!(done.status(), ExecutionStatus::Completed);
    assert_eq!(done.budget_spent(), 3, "reserve costs 1, charge 2");
    // The child `notify` slept, wrote the message, and is its own execution.
    let child = rt.state(&id("checkout-1/notify#1")).await.unwrap();
    assert_eq!(child.status(), ExecutionStatus::Completed);
    let receipt: Receipt = output(&store, &e).await.decode().unwrap();
    assert_eq!((receipt.sku.as_str(), receipt.qty), ("A1", 2));
    assert_eq!(receipt.charged, 2000);
    assert_eq!(receipt.payment_key, "checkout-1:payments.charge#1");
    assert_eq!(
        receipt.approval,
        json!({"action": "approve", "by": "alice"})
    );
    assert!(receipt.reservation.starts_with("rsv-"), "{receipt:?}");
    assert!(receipt.reserved_at_ms > 0);
    assert_eq!(receipt.message, "PAID: 2 X A1");
    assert_eq!((counters.reserve(), counters.charge()), (1, 1));

    let mut surfaces = SurfaceProjection::new();
    for envelope in store.read_all(&e).await.unwrap() {
        surfaces.apply_event(&envelope.event).unwrap();
    }
    assert_eq!(
        surfaces.model("checkout"),
        Some(&json!({"order": {"status": "paid", "items": [{"sku": "A1", "qty": 2}]}}))
    );

    let g = rt
        .start("greet", "ada", quickstart::start_options(&id("greet-1")))
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&g).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    let greeting: String = output(&store, &g).await.decode().unwrap();
    assert!(greeting.ends_with(", ADA!"), "{greeting}");
    assert_eq!(counters.upper(), 2, "notify's and greet's");
}

#[tokio::test]
async fn a_new_runtime_resumes_a_parked_checkout_without_reserving_again() {
    let store = MemoryStore::new();
    let counters = Counters::default();
    let runtime = || {
        quickstart::compose_with(Runtime::builder(store.clone()), &counters)
            .build()
            .unwrap()
    };
    let first = runtime();
    let e = first
        .start(
            "checkout",
            &order(),
            quickstart::start_options(&id("checkout-7")),
        )
        .await
        .unwrap();
    assert_eq!(
        first.wait(&e).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    assert_eq!((counters.reserve(), counters.charge()), (1, 0));
    drop(first);

    // As after a restart: the new runtime knows the execution only from its log.
    let second = runtime();
    assert_eq!(
        second.recover().await.unwrap(),
        0,
        "a parked execution waits"
    );
    second
        .resume(&e, APPROVAL_EVENT, &approval_key(&e), approve())
        .await
        .unwrap();
    assert_eq!(
        second.wait_ended(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    assert_eq!(
        counters.reserve(),
        1,
        "the reservation was replayed, not redone"
    );
    assert_eq!(counters.charge(), 1);
    let receipt: Receipt = output(&store, &e).await.decode().unwrap();
    assert_eq!(receipt.charged, 2000);
    assert_eq!(receipt.payment_key, "checkout-7:payments.charge#1");
}
