//! Gates: several gates resumed in any order, concurrent and unmatched resumes, the resume
//! authenticator, cancel while waiting, and a flow that parks and resumes many times.

use loom_kernel::Event;
use loom_kernel::conformance::id;
use loom_kernel::*;
use loom_kernel::{EventStore, EventStoreExt, ExecutionStatus, MemoryStore, Payload};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn several_gates_resumed_in_every_order() {
    let orders = [
        ["a", "b", "c"],
        ["a", "c", "b"],
        ["b", "a", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["c", "b", "a"],
    ];
    for (n, order) in orders.iter().enumerate() {
        let store = MemoryStore::new();
        let e = id(&format!("gates-{n}"));
        for (i, key) in order.iter().enumerate() {
            // A fresh runtime for every resume: each one replays the gates positionally.
            let rt = Runtime::builder(store.clone())
                .flow(flow_fn("gates", 1, three_gates))
                .build()
                .unwrap();
            if i == 0 {
                rt.start("gates", &json!(null), grant_all(e.clone()))
                    .await
                    .unwrap();
                assert_eq!(rt.wait(&e).await.unwrap().pending_gates().len(), 3);
            }
            rt.resume(&e, "Pick", key, json!(format!("picked {key}")).into())
                .await
                .unwrap();
            let state = rt.wait(&e).await.unwrap();
            assert_eq!(state.pending_gates().len(), 2 - i, "order {order:?}");
        }
        let log = store.read_all(&e).await.unwrap();
        let Some(Event::ExecutionCompleted(done)) = log.last().map(|x| &x.event) else {
            panic!("{order:?}: not completed")
        };
        assert_eq!(
            done.output.to_value(),
            json!(["picked a", "picked b", "picked c"])
        );
    }
}

struct OnlyAlice;

impl ResumeAuthenticator for OnlyAlice {
    fn authorize(&self, request: &ResumeRequest<'_>) -> Result<(), String> {
        if request.payload.to_value()["user"] == "alice" {
            Ok(())
        } else {
            Err("only alice approves".into())
        }
    }
}

#[tokio::test]
async fn a_resume_refused_by_the_authenticator_records_nothing() {
    let store = MemoryStore::new();
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("f", 1, charge_then_mail))
        .effect(
            "payments.charge",
            FnEffect::new(true, |_| async { EffectOutcome::ok(Payload::null()) }),
        )
        .resume_authenticator(OnlyAlice)
        .build()
        .unwrap();
    let e = rt
        .start("f", &json!(null), grant_all(id("auth")))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    let head = store.head(&e).await.unwrap();
    let err = rt
        .resume(&e, "Approval", "k", json!({"user": "mallory"}).into())
        .await
        .unwrap_err();
    assert!(matches!(err, ResumeError::Unauthorized { .. }), "{err}");
    assert_eq!(store.head(&e).await.unwrap(), head);
    rt.resume(&e, "Approval", "k", json!({"user": "alice"}).into())
        .await
        .unwrap();
    assert_eq!(
        rt.wait(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_resumes_of_one_gate_exactly_one_wins() {
    let store = MemoryStore::new();
    let rt = Runtime::builder(store.clone())
        .flow(flow_fn("gates", 1, three_gates))
        .build()
        .unwrap();
    let e = rt
        .start("gates", &json!(null), grant_all(id("race")))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|n| {
            let (rt, e) = (rt.clone(), e.clone());
            tokio::spawn(async move { rt.resume(&e, "Pick", "b", json!(n).into()).await })
        })
        .collect();
    let mut wins = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => wins += 1,
            Err(ResumeError::NoPendingGate { .. }) => {}
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(wins, 1);
    let resumed = store
        .read_all(&e)
        .await
        .unwrap()
        .iter()
        .filter(|x| matches!(x.event, Event::ExecutionResumed(_)))
        .count();
    assert_eq!(resumed, 1);
}

#[tokio::test]
async fn resumes_that_match_nothing_are_refused_clearly() {
    let rt = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("gates", 1, three_gates))
        .build()
        .unwrap();
    let err = rt
        .resume(&id("nobody"), "Pick", "a", Payload::null())
        .await
        .unwrap_err();
    assert!(matches!(err, ResumeError::UnknownExecution { .. }), "{err}");
    let e = rt
        .start("gates", &json!(null), grant_all(id("g")))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    let err = rt
        .resume(&e, "Pick", "zzz", Payload::null())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "execution g has no pending gate for (Pick, key 'zzz')"
    );
    let err = rt
        .resume(&e, "Other", "a", Payload::null())
        .await
        .unwrap_err();
    assert!(matches!(err, ResumeError::NoPendingGate { .. }));
}

#[tokio::test]
async fn cancel_ends_a_waiting_execution() {
    let rt = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("gates", 1, three_gates))
        .build()
        .unwrap();
    let e = rt
        .start("gates", &json!(null), grant_all(id("c")))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    rt.cancel(&e, Some("user left".into())).await.unwrap();
    assert_eq!(
        rt.wait(&e).await.unwrap().status(),
        ExecutionStatus::Cancelled
    );
    assert!(matches!(
        rt.cancel(&e, None).await,
        Err(CancelError::Ended { .. })
    ));
    assert!(matches!(
        rt.resume(&e, "Pick", "a", Payload::null()).await,
        Err(ResumeError::NoPendingGate { .. })
    ));
}

async fn gate_loop(ctx: FlowCtx, n: u64) -> Result<(), FlowError> {
    for i in 0..n {
        ctx.suspend("Go", &i.to_string()).await?;
        ctx.execute("echo", &i).await?;
    }
    Ok(())
}

/// A flow that parks 50 times: each resume starts a new driver that replays the log so far.
async fn parks_and_resumes_many_times<S: EventStore>(store: S) {
    let rt = Runtime::builder(store)
        .flow(flow_fn("loop", 1, gate_loop))
        .effect("echo", echo(Calls::default()))
        .build()
        .unwrap();
    let e = rt
        .start("loop", &50u64, grant_all(id("loop")))
        .await
        .unwrap();
    for i in 0..50u64 {
        let state = rt.wait(&e).await.unwrap();
        assert_eq!(
            state.status(),
            ExecutionStatus::Suspended,
            "before resume {i}"
        );
        rt.resume(&e, "Go", &i.to_string(), Payload::null())
            .await
            .unwrap_or_else(|err| panic!("resume {i}: {err}"));
    }
    assert_eq!(
        rt.wait(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_parks_and_resumes_many_times() {
    parks_and_resumes_many_times(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_parks_and_resumes_many_times_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    parks_and_resumes_many_times(loom_kernel::DiskStore::open(dir.path().join("s.redb")).unwrap())
        .await;
}

async fn approve_once(ctx: FlowCtx, _: serde_json::Value) -> Result<serde_json::Value, FlowError> {
    Ok(ctx.suspend("Approval", "k").await?.to_value())
}

#[tokio::test]
async fn a_resume_that_loses_the_append_race_to_another_runtime_is_a_typed_error_and_wait_reports_the_end()
 {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, OnceLock};

    let inner = MemoryStore::new();
    let other: Arc<OnceLock<Runtime<MemoryStore>>> = Arc::default();
    let raced = Arc::new(AtomicBool::new(false));
    // Just before this runtime's resume is appended, the other runtime resumes the same gate
    // and drives the execution to its end.
    let store = append_hook::on_append(inner.clone(), {
        let other = other.clone();
        move |append| {
            let other = other.clone();
            let raced = raced.clone();
            async move {
                let resumes = append
                    .events
                    .iter()
                    .any(|event| matches!(event, Event::ExecutionResumed(_)));
                if resumes && !raced.swap(true, Ordering::SeqCst) {
                    let rival = other.get().expect("the other runtime").clone();
                    rival
                        .resume(&append.execution, "Approval", "k", json!("theirs").into())
                        .await
                        .unwrap();
                    rival.wait(&append.execution).await.unwrap();
                }
                append.forward().await
            }
        }
    });
    let flows = FlowSet::new().with(flow_fn("approve", 1, approve_once));
    let ours = Runtime::builder(store).flows(&flows).build().unwrap();
    let _ = other.set(
        Runtime::builder(inner.clone())
            .flows(&flows)
            .build()
            .unwrap(),
    );
    let e = start_parked(&ours, "approve", StartOptions::new(id("race"))).await;

    let lost = ours
        .resume(&e, "Approval", "k", json!("ours").into())
        .await
        .unwrap_err();
    assert!(matches!(lost, ResumeError::LogMoved { .. }), "{lost:?}");

    let state = ours.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(state.output().map(Payload::to_value), Some(json!("theirs")));
    let late = ours
        .resume(&e, "Approval", "k", json!("ours").into())
        .await
        .unwrap_err();
    assert!(
        matches!(late, ResumeError::NoPendingGate { .. }),
        "{late:?}"
    );
}
