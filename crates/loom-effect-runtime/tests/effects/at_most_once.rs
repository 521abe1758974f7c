//! K9 as a property: whatever the points at which the worker dies, a non-idempotent effect's
//! side effect happens at most once without an operator's `retry` verdict, and every
//! idempotent step ends up done.
//!
//! A "worker" is a tokio runtime over a store that lets a chosen number of appends through and
//! then dies on the next one: either before it commits or after it commits but before anyone
//! hears back. The worker is then dropped with whatever it was running, and a new one recovers
//! from the same store. The last worker never dies; steps it finds in doubt get `completed`
//! verdicts (never `retry`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use loom_effect_runtime::*;
use loom_kernel::Verdict;
use loom_kernel::conformance::id;
use loom_kernel::{EventStore, ExecutionStatus, MemoryStore};
use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, flow_fn};
use proptest::prelude::*;
use serde_json::json;
use tokio::sync::Notify;

use crate::support::append_hook::{AppendHooked, on_append};

/// How a worker dies on its last append.
#[derive(Debug, Clone, Copy)]
enum Death {
    BeforeCommit,
    AfterCommit,
}

/// A worker's store: the shared memory store, dying on the append after a number of them.
type DyingStore = AppendHooked;

/// A store over `memory` that lets `appends` appends through (all when `None`) and dies on the
/// next one, and what is notified when it dies.
fn dying_store(
    memory: &MemoryStore,
    appends: Option<usize>,
    death: Death,
) -> (DyingStore, Arc<Notify>) {
    let appends_left = Arc::new(AtomicUsize::new(appends.unwrap_or(usize::MAX)));
    let died = Arc::new(Notify::new());
    let notify = Arc::clone(&died);
    let store = on_append(memory.clone(), move |append| {
        let (appends_left, died) = (Arc::clone(&appends_left), Arc::clone(&died));
        async move {
            let left = appends_left.load(Ordering::SeqCst);
            if left > 0 {
                appends_left.store(left - 1, Ordering::SeqCst);
                return append.forward().await;
            }
            if let Death::AfterCommit = death {
                let _ = append.forward().await;
            }
            died.notify_one();
            std::future::pending().await
        }
    });
    (store, notify)
}

/// A worker's own tokio runtime: dropping it drops every task the worker was running.
fn worker_tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Side effects by idempotency key.
type Ledger = Arc<Mutex<BTreeMap<String, u32>>>;

fn registry(ledger: &Ledger) -> EffectRegistry {
    let effect = |name: &str, ledger: Ledger| {
        EffectDef::new(name, move |ctx: EffectContext, n: u64| {
            *ledger
                .lock()
                .unwrap()
                .entry(ctx.idempotency_key().to_owned())
                .or_default() += 1;
            async move {
                // Give the worker a chance to die while the effect is out in the world.
                tokio::task::yield_now().await;
                Ok(n * 10)
            }
        })
        .capability("world")
    };
    EffectRegistry::new()
        .with(effect("idem", Arc::clone(ledger)).idempotent())
        .unwrap()
        .with(effect("once", Arc::clone(ledger)))
        .unwrap()
}

/// Steps named by the flow's input: `true` is idempotent.
async fn steps(ctx: FlowCtx, kinds: Vec<bool>) -> Result<Vec<u64>, FlowError> {
    let mut outputs = Vec::new();
    for (n, idempotent) in kinds.into_iter().enumerate() {
        let effect = if idempotent { "idem" } else { "once" };
        outputs.push(ctx.execute(effect, &(n as u64)).await?.decode()?);
    }
    Ok(outputs)
}

fn worker(store: DyingStore, ledger: &Ledger) -> Runtime<DyingStore> {
    Runtime::builder(store)
        .flow(flow_fn("steps", 1, steps))
        .plugin(&registry(ledger))
        .build()
        .unwrap()
}

/// One worker's life: start (the first) or recover, and run until the execution stops moving
/// or the worker dies. Returns the status when it stopped moving.
fn live(
    memory: &MemoryStore,
    ledger: &Ledger,
    appends: Option<usize>,
    death: Death,
    first: Option<&[bool]>,
) -> Option<ExecutionStatus> {
    let tokio = worker_tokio();
    let (store, died) = dying_store(memory, appends, death);
    let rt = worker(store, ledger);
    let e = id("order");
    let status = tokio.block_on(async {
        let run = async {
            match first {
                Some(kinds) => {
                    let options = StartOptions::new(e.clone()).grant("world");
                    rt.start("steps", &kinds, options).await.unwrap();
                }
                None => {
                    rt.recover().await.unwrap();
                }
            }
            rt.wait(&e).await.map(|state| state.status()).ok()
        };
        tokio::select! {
            status = stalled_after_a_minute(run) => status,
            () = died.notified() => {
                // Whatever was already running goes on for a moment as the worker dies.
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                }
                None
            }
        }
    });
    drop(rt);
    // Dropping the runtime drops every task: the worker is gone mid-flight.
    drop(tokio);
    status
}

fn resolve_in_doubt(memory: &MemoryStore, ledger: &Ledger) -> ExecutionStatus {
    let tokio = worker_tokio();
    let (store, _) = dying_store(memory, None, Death::BeforeCommit);
    let rt = worker(store, ledger);
    let e = id("order");
    tokio.block_on(stalled_after_a_minute(async {
        rt.recover().await.unwrap();
        loop {
            let state = rt.wait(&e).await.unwrap();
            if state.status() != ExecutionStatus::InDoubt {
                return state.status();
            }
            for step in steps_in_doubt(memory).await.unwrap() {
                let verdict = Verdict::Completed {
                    output: json!(999).into(),
                };
                rt.resolve(&e, &step.step_id, verdict, Some("ops".into()))
                    .await
                    .unwrap();
            }
        }
    }))
}

/// A worker that neither finishes, parks nor dies is a bug: fail instead of hanging.
async fn stalled_after_a_minute<T>(work: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(60), work)
        .await
        .expect("the execution stalled: it neither ended, parked nor died")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_non_idempotent_side_effect_happens_at_most_once_without_a_verdict(
        kinds in prop::collection::vec(any::<bool>(), 1..6),
        deaths in prop::collection::vec((0usize..6, any::<bool>()), 0..5),
    ) {
        let memory = MemoryStore::new();
        let ledger: Ledger = Arc::default();
        let mut first = Some(kinds.as_slice());
        for (appends, after_commit) in deaths {
            let death = if after_commit { Death::AfterCommit } else { Death::BeforeCommit };
            live(&memory, &ledger, Some(appends), death, first.take());
            // A start that died before its first commit left nothing behind: start again.
            if first.is_none() && memory_is_empty(&memory) {
                first = Some(kinds.as_slice());
            }
        }
        if first.is_some() {
            live(&memory, &ledger, None, Death::BeforeCommit, first.take());
        }
        let status = resolve_in_doubt(&memory, &ledger);
        prop_assert_eq!(status, ExecutionStatus::Completed);
        let ledger = ledger.lock().unwrap();
        for (n, idempotent) in kinds.iter().enumerate() {
            let effect = if *idempotent { "idem" } else { "once" };
            let key = format!("order:{effect}#{}", kinds[..=n].iter().filter(|k| *k == idempotent).count());
            let runs = ledger.get(&key).copied().unwrap_or(0);
            if *idempotent {
                prop_assert!(runs >= 1, "{} never ran: {:?}", key, ledger);
            } else {
                prop_assert!(runs <= 1, "{} ran {} times: {:?}", key, runs, ledger);
            }
        }
    }
}

fn memory_is_empty(memory: &MemoryStore) -> bool {
    worker_tokio().block_on(async { memory.head(&id("order")).await.unwrap() == 0 })
}
