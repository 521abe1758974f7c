//! Parked flows kept in memory (LD-020): every message a parked execution can receive
//! (resume, verdict, deadline, cancel) goes on from the kept flow without replaying its log;
//! the bound evicts the least recently parked, which replay and end the same; a log that moved
//! under a kept flow (another runtime on the store) is replayed, never appended to stale;
//! shutdown and recover handle kept flows; a panic after a kept resume is contained.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loom_kernel::*;
use loom_kernel::{
    ErrorInfo, EventStore, EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore, Payload,
};
use loom_kernel::{Event, Verdict};
use serde_json::{Value, json};

use crate::support::{Calls, echo, events_of, id, until};

const T0: u64 = 1_800_000_000_000;

/// How many times a flow's body was entered: 1 for a flow never replayed.
#[derive(Clone, Default)]
struct Runs(Arc<AtomicUsize>);

impl Runs {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Counts when it is dropped: a flow future holding one is dropped when its flow goes away.
struct DropGuard(Arc<AtomicUsize>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The flows of these tests, counting their runs.
fn flows(runs: &Runs, dropped: &Arc<AtomicUsize>) -> FlowSet {
    let (r1, r2, r3, r4) = (runs.clone(), runs.clone(), runs.clone(), runs.clone());
    let dropped = Arc::clone(dropped);
    FlowSet::new()
        // A step, then `gates` gates one after another, then the answers.
        .with(flow_fn("gates", 1, move |ctx: FlowCtx, gates: u32| {
            r1.0.fetch_add(1, Ordering::SeqCst);
            let guard = DropGuard(Arc::clone(&dropped));
            async move {
                let _guard = guard;
                let first = ctx.execute("echo", &json!("first")).await?;
                let mut answers = vec![first.to_value()];
                for gate in 0..gates {
                    let answer = ctx.suspend("Next", &format!("k{gate}")).await?;
                    if answer.to_value() == json!("panic") {
                        panic!("the flow was told to panic");
                    }
                    answers.push(answer.to_value());
                }
                Ok(json!(answers))
            }
        }))
        // A non-idempotent step whose outcome is in doubt, then an echo.
        .with(flow_fn("doubtful", 1, move |ctx: FlowCtx, _: Value| {
            r2.0.fetch_add(1, Ordering::SeqCst);
            async move {
                let charged = ctx.execute("doubt", &json!("charge")).await;
                let after = ctx.execute("echo", &json!("after")).await?;
                Ok(json!({"charged": charged.map(|p| p.to_value()).ok(), "after": after.to_value()}))
            }
        }))
        // A gate with a timeout.
        .with(flow_fn("timed", 1, move |ctx: FlowCtx, _: Value| {
            r3.0.fetch_add(1, Ordering::SeqCst);
            async move {
                let outcome = ctx
                    .suspend_with_timeout("Approval", "a", Duration::from_secs(60))
                    .await?;
                Ok(match outcome {
                    GateOutcome::Resumed(answer) => answer.to_value(),
                    GateOutcome::TimedOut => json!("timed out"),
                })
            }
        }))
        // A sleep, then a gate.
        .with(flow_fn("napper", 1, move |ctx: FlowCtx, _: Value| {
            r4.0.fetch_add(1, Ordering::SeqCst);
            async move {
                ctx.sleep(Duration::from_secs(10)).await?;
                let answer = ctx.suspend("Next", "after-nap").await?;
                Ok(answer.to_value())
            }
        }))
}

struct Fixture {
    runtime: Runtime<MemoryStore>,
    store: MemoryStore,
    runs: Runs,
    dropped: Arc<AtomicUsize>,
    clock: ManualClock,
}

fn fixture_on(store: MemoryStore, max_parked: Option<usize>) -> Fixture {
    let runs = Runs::default();
    let dropped = Arc::new(AtomicUsize::new(0));
    let clock = ManualClock::new(T0);
    let doubt = FnEffect::new(false, |_call: EffectCall| async {
        EffectOutcome::in_doubt(ErrorInfo::new("loom.timeout", "no answer"))
    });
    let mut builder = Runtime::builder(store.clone())
        .flows(&flows(&runs, &dropped))
        .effect("echo", echo(Calls::default()))
        .effect("doubt", doubt)
        .clock(clock.clone());
    if let Some(max) = max_parked {
        builder = builder.max_parked_in_memory(max);
    }
    Fixture {
        runtime: builder.build().unwrap(),
        store,
        runs,
        dropped,
        clock,
    }
}

fn fixture(max_parked: Option<usize>) -> Fixture {
    fixture_on(MemoryStore::new(), max_parked)
}

fn granted(execution: &ExecutionId) -> StartOptions {
    StartOptions::new(execution.clone())
        .grant("echo")
        .grant("doubt")
}

/// The events of a log, without the store's timestamps.
async fn log_of(store: &MemoryStore, execution: &ExecutionId) -> Vec<Event> {
    events_of(store, execution).await
}

async fn resume(runtime: &Runtime<MemoryStore>, execution: &ExecutionId, key: &str, answer: &str) {
    runtime
        .resume(execution, "Next", key, Payload::from(json!(answer)))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_kept_flow_is_resumed_gate_after_gate_without_replaying_its_log() {
    let f = fixture(None);
    let e = id("kept-gates");
    f.runtime.start("gates", &3, granted(&e)).await.unwrap();
    assert_eq!(
        f.runtime.wait(&e).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    assert_eq!(f.runtime.parked_in_memory(), 1);
    for gate in 0..3 {
        resume(&f.runtime, &e, &format!("k{gate}"), &format!("a{gate}")).await;
        f.runtime.wait(&e).await.unwrap();
    }
    let state = f.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(f.runs.count(), 1, "the flow never replayed");
    assert_eq!(f.runtime.parked_in_memory(), 0, "an ended flow is not kept");
    assert_eq!(
        f.dropped.load(Ordering::SeqCst),
        1,
        "the ended flow is dropped"
    );
    // The same resume again finds no gate, on the kept path as on the replayed one.
    let again = f
        .runtime
        .resume(&e, "Next", "k0", Payload::from(json!("again")))
        .await;
    assert!(matches!(again, Err(ResumeError::NoPendingGate { .. })));
}

#[tokio::test]
async fn a_kept_flow_and_a_replayed_one_write_the_same_log() {
    let kept = fixture(None);
    let replayed = fixture(Some(0));
    let e = id("same-log");
    for f in [&kept, &replayed] {
        f.runtime.start("gates", &2, granted(&e)).await.unwrap();
        f.runtime.wait(&e).await.unwrap();
        // A wrong key is refused on both paths, and nothing is recorded.
        let wrong = f
            .runtime
            .resume(&e, "Next", "k9", Payload::from(json!("x")))
            .await;
        assert!(matches!(wrong, Err(ResumeError::NoPendingGate { .. })));
        resume(&f.runtime, &e, "k0", "yes").await;
        f.runtime.wait(&e).await.unwrap();
        resume(&f.runtime, &e, "k1", "sure").await;
        assert_eq!(
            f.runtime.wait(&e).await.unwrap().status(),
            ExecutionStatus::Completed
        );
    }
    assert_eq!(kept.runs.count(), 1);
    assert_eq!(
        replayed.runs.count(),
        3,
        "the bound 0 replays at each resume"
    );
    assert_eq!(replayed.runtime.parked_in_memory(), 0);
    assert_eq!(
        log_of(&kept.store, &e).await,
        log_of(&replayed.store, &e).await
    );
}

#[tokio::test]
async fn a_verdict_on_a_kept_flow_in_doubt_drives_it_on_without_replay() {
    let f = fixture(None);
    let e = id("kept-doubt");
    f.runtime
        .start("doubtful", &json!({}), granted(&e))
        .await
        .unwrap();
    let state = f.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::InDoubt);
    assert_eq!(f.runtime.parked_in_memory(), 1);
    // A verdict on a step that is not in doubt is refused by the kept flow.
    let wrong = f.runtime.resolve(&e, "echo#1", Verdict::Retry, None).await;
    assert!(matches!(wrong, Err(ResolveError::NotInDoubt { .. })));
    f.runtime
        .resolve(
            &e,
            "doubt#1",
            Verdict::Completed {
                output: Payload::from(json!("charged")),
            },
            Some("ops".into()),
        )
        .await
        .unwrap();
    let state = f.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    assert_eq!(
        state.output().unwrap().to_value()["charged"],
        json!("charged")
    );
    assert_eq!(f.runs.count(), 1);
}

#[tokio::test]
async fn a_deadline_reaches_a_kept_flow_without_replay() {
    let f = fixture(None);
    let e = id("kept-deadline");
    f.runtime
        .start("timed", &json!({}), granted(&e))
        .await
        .unwrap();
    f.runtime.wait(&e).await.unwrap();
    assert_eq!(f.runtime.parked_in_memory(), 1);
    f.clock.advance(Duration::from_secs(60));
    let state = until(&f.runtime, &e, |s| s.is_terminal()).await;
    assert_eq!(state.output().unwrap().to_value(), json!("timed out"));
    assert_eq!(f.runs.count(), 1);
    // A late resume is told the gate timed out.
    let late = f
        .runtime
        .resume(&e, "Approval", "a", Payload::from(json!("yes")))
        .await;
    assert!(matches!(late, Err(ResumeError::TimedOut { .. })));

    // A timer, then a gate: the deadline of the sleep and the resume both reach the kept flow.
    let n = id("kept-nap");
    f.runtime
        .start("napper", &json!({}), granted(&n))
        .await
        .unwrap();
    f.runtime.wait(&n).await.unwrap();
    f.clock.advance(Duration::from_secs(10));
    // The gate after the nap is pending once the timer fired.
    for _ in 0..5_000 {
        let state = f.runtime.state(&n).await.unwrap();
        if state
            .pending_gates()
            .values()
            .any(|gate| &*gate.event_type == "Next")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    f.runtime.wait(&n).await.unwrap();
    resume(&f.runtime, &n, "after-nap", "awake").await;
    let state = f.runtime.wait(&n).await.unwrap();
    assert_eq!(state.output().unwrap().to_value(), json!("awake"));
    assert_eq!(f.runs.count(), 2, "each flow ran once");
}

#[tokio::test]
async fn parked_state_is_the_fold_of_a_kept_flow_s_log_and_none_for_any_other_execution() {
    let f = fixture(None);
    let e = id("kept-state");
    assert!(f.runtime.parked_state(&e).is_none(), "an unknown execution");
    f.runtime.start("gates", &2, granted(&e)).await.unwrap();
    f.runtime.wait(&e).await.unwrap();
    let log = f.store.read_all(&e).await.unwrap();
    let folded = ExecutionState::fold(&log).unwrap();
    assert_eq!(f.runtime.parked_state(&e), Some(folded.clone()));
    // Asked twice, it is the same, and asking takes nothing away from the kept flow.
    assert_eq!(f.runtime.parked_state(&e), Some(folded));
    assert_eq!(f.runtime.parked_in_memory(), 1);
    for gate in 0..2 {
        resume(&f.runtime, &e, &format!("k{gate}"), &format!("a{gate}")).await;
        f.runtime.wait(&e).await.unwrap();
    }
    let ended = f.runtime.wait(&e).await.unwrap();
    assert_eq!(ended.status(), ExecutionStatus::Completed);
    assert!(
        f.runtime.parked_state(&e).is_none(),
        "an ended execution is not kept"
    );
}

#[tokio::test]
async fn a_cancel_ends_a_kept_flow_and_drops_it() {
    let f = fixture(None);
    let e = id("kept-cancel");
    f.runtime.start("gates", &2, granted(&e)).await.unwrap();
    f.runtime.wait(&e).await.unwrap();
    assert_eq!(f.runtime.parked_in_memory(), 1);
    f.runtime
        .cancel(&e, Some("no longer needed".into()))
        .await
        .unwrap();
    let state = f.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Cancelled);
    assert_eq!(f.runtime.parked_in_memory(), 0);
    assert_eq!(f.dropped.load(Ordering::SeqCst), 1);
    assert_eq!(f.runs.count(), 1);
    let again = f.runtime.cancel(&e, None).await;
    assert!(matches!(again, Err(CancelError::Ended { .. })));
}

#[tokio::test]
async fn a_panic_after_a_kept_resume_fails_the_execution_and_is_contained() {
    let f = fixture(None);
    let e = id("kept-panic");
    f.runtime.start("gates", &2, granted(&e)).await.unwrap();
    f.runtime.wait(&e).await.unwrap();
    resume(&f.runtime, &e, "k0", "panic").await;
    let state = f.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Failed);
    assert_eq!(f.runtime.parked_in_memory(), 0);
    assert_eq!(f.runs.count(), 1);
    // The runtime goes on with other executions.
    let other = id("after-panic");
    f.runtime.start("gates", &0, granted(&other)).await.unwrap();
    assert_eq!(
        f.runtime.wait(&other).await.unwrap().status(),
        ExecutionStatus::Completed
    );
}

#[tokio::test]
async fn past_the_bound_the_least_recently_parked_are_evicted_and_replay_the_same() {
    let bounded = fixture(Some(2));
    let reference = fixture(Some(0));
    let ids: Vec<ExecutionId> = (0..5).map(|i| id(&format!("bound-{i}"))).collect();
    for f in [&bounded, &reference] {
        for e in &ids {
            f.runtime.start("gates", &1, granted(e)).await.unwrap();
            f.runtime.wait(e).await.unwrap();
        }
    }
    assert_eq!(bounded.runtime.parked_in_memory(), 2, "the bound holds");
    assert_eq!(
        bounded.dropped.load(Ordering::SeqCst),
        3,
        "the evicted flows were dropped"
    );
    for f in [&bounded, &reference] {
        for (i, e) in ids.iter().enumerate() {
            resume(&f.runtime, e, "k0", &format!("answer {i}")).await;
            assert_eq!(
                f.runtime.wait(e).await.unwrap().status(),
                ExecutionStatus::Completed
            );
        }
    }
    // 5 first runs, then a replay for each of the 3 evicted (the oldest three).
    assert_eq!(bounded.runs.count(), 5 + 3);
    assert_eq!(reference.runs.count(), 5 + 5);
    assert_eq!(bounded.runtime.parked_in_memory(), 0);
    for e in &ids {
        assert_eq!(
            log_of(&bounded.store, e).await,
            log_of(&reference.store, e).await
        );
    }
}

#[tokio::test]
async fn a_kept_flow_whose_log_moved_under_it_replays_and_never_appends_stale() {
    // Two runtimes on one store, as two processes on one database.
    let a = fixture(None);
    let b = fixture_on(a.store.clone(), None);
    let e = id("moved");
    a.runtime.start("gates", &3, granted(&e)).await.unwrap();
    a.runtime.wait(&e).await.unwrap();
    assert_eq!(a.runtime.parked_in_memory(), 1);

    // B resumes the first gate: B replays (it has nothing kept) and appends.
    resume(&b.runtime, &e, "k0", "from b").await;
    b.runtime.wait(&e).await.unwrap();
    let head_after_b = a.store.head(&e).await.unwrap();

    // A's kept flow is stale: the same resume through A is refused (its replay shows the gate
    // resumed), and nothing is appended.
    let stale = a
        .runtime
        .resume(&e, "Next", "k0", Payload::from(json!("from a")))
        .await;
    assert!(
        matches!(stale, Err(ResumeError::NoPendingGate { .. })),
        "{stale:?}"
    );
    assert_eq!(a.store.head(&e).await.unwrap(), head_after_b);
    assert_eq!(a.runs.count(), 2, "A replayed once the log had moved");

    // A then resumes the next gate on the log as it is, and B the last one.
    resume(&a.runtime, &e, "k1", "from a").await;
    a.runtime.wait(&e).await.unwrap();
    resume(&b.runtime, &e, "k2", "from b again").await;
    let state = b.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    let output = state.output().unwrap().to_value();
    assert_eq!(output[1], json!("from b"));
    assert_eq!(output[2], json!("from a"));
    assert_eq!(output[3], json!("from b again"));
    // The log folds, with each gate resumed once.
    let log = a.store.read_all(&e).await.unwrap();
    loom_kernel::ExecutionState::fold(&log).unwrap();
    let resumes = log
        .iter()
        .filter(|e| matches!(e.event, Event::ExecutionResumed(_)))
        .count();
    assert_eq!(resumes, 3);
}

#[tokio::test]
async fn recover_starts_no_second_driver_for_a_kept_flow() {
    let f = fixture(None);
    let e = id("kept-recover");
    f.runtime.start("gates", &1, granted(&e)).await.unwrap();
    f.runtime.wait(&e).await.unwrap();
    let report = f.runtime.recover_report().await.unwrap();
    assert_eq!(report.started, 0, "a parked execution needs no driver");
    assert_eq!(f.runtime.parked_in_memory(), 1);
    resume(&f.runtime, &e, "k0", "yes").await;
    assert_eq!(
        f.runtime.wait(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    assert_eq!(f.runs.count(), 1, "recover did not replay the kept flow");
}

#[tokio::test]
async fn shutdown_drops_every_kept_flow_and_a_new_runtime_replays_them() {
    let f = fixture(None);
    let ids: Vec<ExecutionId> = (0..4).map(|i| id(&format!("shut-{i}"))).collect();
    for e in &ids {
        f.runtime.start("gates", &1, granted(e)).await.unwrap();
        f.runtime.wait(e).await.unwrap();
    }
    assert_eq!(f.runtime.parked_in_memory(), 4);
    let handle = f.runtime.clone();
    f.runtime.clone().shutdown().await;
    assert_eq!(handle.parked_in_memory(), 0);
    assert_eq!(
        f.dropped.load(Ordering::SeqCst),
        4,
        "every kept flow stopped"
    );
    let refused = handle
        .resume(&ids[0], "Next", "k0", Payload::from(json!("late")))
        .await;
    assert!(matches!(refused, Err(ResumeError::ShutDown)));

    // The next runtime on the store replays them and drives them to their end.
    let next = fixture_on(f.store.clone(), None);
    next.runtime.recover().await.unwrap();
    for e in &ids {
        resume(&next.runtime, e, "k0", "after restart").await;
        assert_eq!(
            next.runtime.wait(e).await.unwrap().status(),
            ExecutionStatus::Completed
        );
    }
    assert_eq!(next.runs.count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_resumes_of_kept_flows_leak_no_driver() {
    let f = fixture(Some(8));
    let ids: Vec<ExecutionId> = (0..16).map(|i| id(&format!("many-{i}"))).collect();
    for e in &ids {
        f.runtime.start("gates", &3, granted(e)).await.unwrap();
        f.runtime.wait(e).await.unwrap();
    }
    assert_eq!(f.runtime.parked_in_memory(), 8);
    for gate in 0..3 {
        let mut resumes = Vec::new();
        for e in &ids {
            let runtime = f.runtime.clone();
            let e = e.clone();
            resumes.push(tokio::spawn(async move {
                runtime
                    .resume(&e, "Next", &format!("k{gate}"), Payload::from(json!(gate)))
                    .await
                    .unwrap();
                runtime.wait(&e).await.unwrap();
            }));
        }
        for resume in resumes {
            resume.await.unwrap();
        }
        assert!(f.runtime.parked_in_memory() <= 8);
    }
    for e in &ids {
        assert_eq!(
            f.runtime.wait(e).await.unwrap().status(),
            ExecutionStatus::Completed
        );
    }
    assert_eq!(f.runtime.parked_in_memory(), 0);
    assert_eq!(
        f.dropped.load(Ordering::SeqCst),
        f.runs.count(),
        "every flow future made was dropped"
    );
}

#[tokio::test]
async fn wait_on_a_kept_flow_nobody_waited_for_returns_its_state_from_the_log() {
    let f = fixture(None);
    let e = id("kept-wait");
    f.runtime.start("gates", &2, granted(&e)).await.unwrap();
    // Nobody waits: the driver parks and keeps the flow with its fold, exiting with no state.
    while f.runtime.parked_in_memory() == 0 {
        tokio::task::yield_now().await;
    }
    let state = f.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Suspended);
    assert_eq!(state, f.runtime.state(&e).await.unwrap());
    resume(&f.runtime, &e, "k0", "one").await;
    while f.runtime.parked_in_memory() == 0 {
        tokio::task::yield_now().await;
    }
    let state = f.runtime.wait(&e).await.unwrap();
    assert_eq!(state, f.runtime.state(&e).await.unwrap());
    assert_eq!(state.pending_gates().len(), 1);
    resume(&f.runtime, &e, "k1", "two").await;
    let output = f
        .runtime
        .wait(&e)
        .await
        .unwrap()
        .output()
        .unwrap()
        .to_value();
    assert_eq!(output[1], json!("one"));
    assert_eq!(output[2], json!("two"));
    assert_eq!(f.runs.count(), 1);
}

#[tokio::test]
async fn deadlines_reach_kept_and_evicted_flows_alike() {
    let f = fixture(Some(1));
    let ids: Vec<ExecutionId> = (0..3).map(|i| id(&format!("timed-{i}"))).collect();
    for e in &ids {
        f.runtime
            .start("timed", &json!({}), granted(e))
            .await
            .unwrap();
        f.runtime.wait(e).await.unwrap();
    }
    assert_eq!(f.runtime.parked_in_memory(), 1);
    assert_eq!(f.runtime.pending_timers(), 3);
    f.clock.advance(Duration::from_secs(60));
    for e in &ids {
        let state = until(&f.runtime, e, |s| s.is_terminal()).await;
        assert_eq!(state.output().unwrap().to_value(), json!("timed out"));
    }
    // Three first runs, and a replay for each of the two evicted.
    assert_eq!(f.runs.count(), 3 + 2);
    assert_eq!(f.runtime.pending_timers(), 0);
    assert_eq!(f.runtime.parked_in_memory(), 0);
}

#[tokio::test]
async fn a_kept_flow_whose_execution_another_runtime_cancelled_appends_nothing() {
    let a = fixture(None);
    let b = fixture_on(a.store.clone(), None);
    let e = id("cancelled-elsewhere");
    a.runtime.start("gates", &2, granted(&e)).await.unwrap();
    a.runtime.wait(&e).await.unwrap();
    assert_eq!(a.runtime.parked_in_memory(), 1);
    b.runtime
        .cancel(&e, Some("elsewhere".into()))
        .await
        .unwrap();
    let head = a.store.head(&e).await.unwrap();
    let refused = a
        .runtime
        .resume(&e, "Next", "k0", Payload::from(json!("late")))
        .await;
    assert!(
        matches!(refused, Err(ResumeError::NoPendingGate { .. })),
        "{refused:?}"
    );
    let again = a.runtime.cancel(&e, None).await;
    assert!(matches!(again, Err(CancelError::Ended { .. })), "{again:?}");
    assert_eq!(a.store.head(&e).await.unwrap(), head, "nothing appended");
    assert_eq!(
        a.runtime.parked_in_memory(),
        0,
        "the stale flow was dropped"
    );
    assert_eq!(
        a.runtime.wait(&e).await.unwrap().status(),
        ExecutionStatus::Cancelled
    );
}
