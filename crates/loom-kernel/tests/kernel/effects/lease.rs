//! The lease check before a non-idempotent effect: a store that says this worker does not hold
//! the execution gets no call of a non-idempotent handler (idempotent ones still run), and a
//! store without leases hands no token.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use loom_kernel::conformance::{Hooked, StoreHooks};
use loom_kernel::kit::LeaseHold;
use loom_kernel::*;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::support::id;

async fn fetch_then_charge(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let fetched = ctx.execute("fetch", &input).await?;
    let charged = ctx.execute("charge", &input).await?;
    Ok(json!([fetched.to_value(), charged.to_value()]))
}

/// An effect that counts its calls (when called, before it runs) and answers with the lease
/// token it was given.
fn counted(idempotent: bool, calls: Arc<AtomicU32>) -> impl Effect {
    FnEffect::new(idempotent, move |call: EffectCall| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move { EffectOutcome::ok(json!({ "token": call.lease_token }).into()) }
    })
}

/// A store on which another worker has taken every execution over.
struct TakenOver {
    asked: mpsc::UnboundedSender<ExecutionId>,
}

impl StoreHooks<MemoryStore> for TakenOver {
    async fn hold_lease(
        &self,
        _inner: &MemoryStore,
        execution: &ExecutionId,
        _head: u64,
    ) -> Result<LeaseHold, ReadError> {
        let _ = self.asked.send(execution.clone());
        Ok(LeaseHold::NotHeld)
    }
}

fn runtime<S: EventStore>(
    store: S,
    fetches: &Arc<AtomicU32>,
    charges: &Arc<AtomicU32>,
) -> Runtime<S> {
    Runtime::builder(store)
        .flow(flow_fn("pay", 1, fetch_then_charge))
        .effect("fetch", counted(true, Arc::clone(fetches)))
        .effect("charge", counted(false, Arc::clone(charges)))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_worker_without_the_lease_calls_no_non_idempotent_handler() {
    let (asked, mut asks) = mpsc::unbounded_channel();
    let inner = MemoryStore::new();
    let store = Hooked::new(inner.clone(), TakenOver { asked });
    let (fetches, charges) = (Arc::default(), Arc::default());
    let rt = runtime(store, &fetches, &charges);
    let e = id("order-1");
    rt.start(
        "pay",
        &json!(1),
        StartOptions::new(e.clone()).grant("fetch").grant("charge"),
    )
    .await
    .unwrap();
    assert_eq!(
        asks.recv().await,
        Some(e.clone()),
        "asked before the charge"
    );
    // Joins the driver: whatever it was going to call has been called by now.
    rt.shutdown().await;
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "idempotent steps are not held"
    );
    assert_eq!(
        charges.load(Ordering::SeqCst),
        0,
        "called without the lease"
    );
    // Nothing was recorded for the charge but its start: the step is the lease holder's.
    let state = inner.fold(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Running);
    let log = inner.read_all(&e).await.unwrap();
    assert!(matches!(
        log.last().map(|e| &e.event),
        Some(Event::StepStarted(s)) if s.effect == "charge"
    ));
    // One question, for the charge: idempotent steps run without one.
    assert!(asks.try_recv().is_err());
}

#[tokio::test]
async fn a_store_without_leases_runs_the_effect_with_no_token() {
    let (fetches, charges) = (Arc::default(), Arc::default());
    let rt = runtime(MemoryStore::new(), &fetches, &charges);
    let e = id("order-2");
    rt.start(
        "pay",
        &json!(1),
        StartOptions::new(e.clone()).grant("fetch").grant("charge"),
    )
    .await
    .unwrap();
    let state = rt.wait_ended(&e).await.unwrap();
    assert_eq!(
        state.output().unwrap().to_value(),
        json!([{ "token": null }, { "token": null }])
    );
    assert_eq!(charges.load(Ordering::SeqCst), 1);
}
