//! Durable timers and gates with a deadline (ADR 0009): `ctx.sleep`, `ctx.sleep_until` and
//! `ctx.suspend_with_timeout`, on a manual clock so that no test waits for real time.
//! The deadline is recorded once; replay serves it without the clock; a pending timer
//! survives a new runtime on the same store; whichever of a resume and a deadline comes first
//! is recorded, and the other is refused or ignored.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loom_kernel::event::Event;
use loom_kernel::runtime::*;
use loom_kernel::{
    DiskStore, EventStore, EventStoreExt, ExecutionId, ExecutionState, ExecutionStatus,
    MemoryStore, Payload,
};
use serde_json::{Value, json};
use support::{events_of, id};

const T0: u64 = 1_800_000_000_000;

/// Sleeps 10 s, records the time, and returns it.
async fn nap(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let slept = ctx.sleep(Duration::from_secs(10)).await?;
    let now = ctx.now()?;
    Ok(json!({"slept": slept.to_value(), "now": now}))
}

/// Waits for an approval for one hour; escalates when none comes.
async fn approval(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    match ctx
        .suspend_with_timeout("Approval", "order-1", Duration::from_secs(3600))
        .await?
    {
        GateOutcome::Resumed(answer) => Ok(json!({"approved": answer.to_value()})),
        GateOutcome::TimedOut => Ok(json!("escalated")),
    }
}

/// Sleeps until an absolute deadline given as input.
async fn alarm(ctx: FlowCtx, at: u64) -> Result<Value, FlowError> {
    ctx.sleep_until(at).await?;
    Ok(json!("rang"))
}

fn flows() -> FlowSet {
    FlowSet::new()
        .with(flow_fn("nap", 1, nap))
        .with(flow_fn("approval", 1, approval))
        .with(flow_fn("alarm", 1, alarm))
}

fn runtime<S: EventStore>(store: S, clock: impl Clock) -> Runtime<S> {
    Runtime::builder(store)
        .flows(&flows())
        .clock(clock)
        .build()
        .unwrap()
}

/// Polls the log until the execution's status satisfies `done` (the timer task and the
/// driver it wakes run on their own tasks).
async fn until<S: EventStore>(
    runtime: &Runtime<S>,
    execution: &ExecutionId,
    done: impl Fn(ExecutionStatus) -> bool,
) -> ExecutionState {
    for _ in 0..5_000 {
        let state = runtime.state(execution).await.unwrap();
        if done(state.status()) {
            // Let the driver finish whatever follows the event it just made durable.
            return runtime.wait(execution).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("execution {execution} never reached the expected status");
}

/// Polls the log until a gate of `event_type` is pending, then waits for the driver to park.
async fn until_gate<S: EventStore>(
    runtime: &Runtime<S>,
    execution: &ExecutionId,
    event_type: &str,
) {
    for _ in 0..5_000 {
        let state = runtime.state(execution).await.unwrap();
        if state
            .pending_gates()
            .values()
            .any(|gate| &*gate.event_type == event_type)
        {
            runtime.wait(execution).await.unwrap();
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("execution {execution} never waited at a gate of {event_type}");
}

async fn output<S: EventStore>(store: &S, execution: &ExecutionId) -> Value {
    match events_of(store, execution).await.pop() {
        Some(Event::ExecutionCompleted(done)) => done.output.to_value(),
        other => panic!("not completed: {other:?}"),
    }
}

#[tokio::test]
async fn sleep_records_its_deadline_parks_and_fires_when_the_clock_reaches_it() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = runtime(store.clone(), clock.clone());
    let e = runtime
        .start("nap", &json!(null), StartOptions::new(id("nap")))
        .await
        .unwrap();
    let parked = runtime.wait(&e).await.unwrap();
    assert_eq!(parked.status(), ExecutionStatus::Suspended);
    assert_eq!(runtime.pending_timers(), 1);
    let events = events_of(&store, &e).await;
    match &events[1] {
        Event::DecisionRecorded(d) => {
            assert_eq!(d.step_id, "timer#1");
            assert_eq!(d.kind, DEADLINE_KIND);
            assert_eq!(d.value.to_value(), json!({"deadlineMs": T0 + 10_000}));
        }
        other => panic!("{other:?}"),
    }
    match &events[2] {
        Event::ExecutionSuspended(g) => {
            assert_eq!(g.gate_id, "timer#1");
            assert_eq!(g.event_type, TIMER_EVENT_TYPE);
            assert_eq!(g.correlation_key, "timer#1");
        }
        other => panic!("{other:?}"),
    }

    // Not yet: one millisecond short.
    clock.advance(Duration::from_millis(9_999));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        runtime.state(&e).await.unwrap().status(),
        ExecutionStatus::Suspended
    );

    clock.advance(Duration::from_millis(1));
    until(&runtime, &e, |s| s == ExecutionStatus::Completed).await;
    assert_eq!(
        output(&store, &e).await,
        json!({"slept": null, "now": T0 + 10_000})
    );
    assert_eq!(runtime.pending_timers(), 0);
    let events = events_of(&store, &e).await;
    let resumed: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ExecutionResumed(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].gate_id, "timer#1");
    assert_eq!(
        resumed[0].payload.to_value(),
        json!({TIMED_OUT_KEY: {"deadlineMs": T0 + 10_000}})
    );
}

#[tokio::test]
async fn sleep_until_a_past_deadline_fires_at_once() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = runtime(store.clone(), clock);
    let e = runtime
        .start("alarm", &(T0 - 1), StartOptions::new(id("alarm")))
        .await
        .unwrap();
    until(&runtime, &e, |s| s == ExecutionStatus::Completed).await;
    assert_eq!(output(&store, &e).await, json!("rang"));
}

#[tokio::test]
async fn a_gate_resumed_before_its_deadline_takes_the_resume_branch_and_the_late_deadline_is_ignored()
 {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = runtime(store.clone(), clock.clone());
    let e = runtime
        .start("approval", &json!(null), StartOptions::new(id("approve")))
        .await
        .unwrap();
    runtime.wait(&e).await.unwrap();
    runtime
        .resume(&e, "Approval", "order-1", json!("yes").into())
        .await
        .unwrap();
    until(&runtime, &e, |s| s == ExecutionStatus::Completed).await;
    assert_eq!(output(&store, &e).await, json!({"approved": "yes"}));
    assert_eq!(
        runtime.pending_timers(),
        0,
        "the resume disarmed the deadline"
    );

    // The deadline passes later: nothing is recorded.
    let before = events_of(&store, &e).await.len();
    clock.advance(Duration::from_secs(7200));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(events_of(&store, &e).await.len(), before);
    replays(&runtime, &store, &e).await;
}

#[tokio::test]
async fn a_gate_whose_deadline_passes_first_takes_the_timeout_branch_and_a_late_resume_is_refused()
{
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = runtime(store.clone(), clock.clone());
    let e = runtime
        .start("approval", &json!(null), StartOptions::new(id("late")))
        .await
        .unwrap();
    runtime.wait(&e).await.unwrap();
    clock.advance(Duration::from_secs(3600));
    until(&runtime, &e, |s| s == ExecutionStatus::Completed).await;
    assert_eq!(output(&store, &e).await, json!("escalated"));

    let before = events_of(&store, &e).await.len();
    let late = runtime
        .resume(&e, "Approval", "order-1", json!("yes").into())
        .await
        .unwrap_err();
    assert!(
        matches!(late, ResumeError::NoPendingGate { .. }),
        "an ended execution has no gate: {late:?}"
    );
    assert_eq!(events_of(&store, &e).await.len(), before);
    replays(&runtime, &store, &e).await;
}

/// The whole log replays against the flow with no clock (whole-log replay reads none).
async fn replays<S: EventStore>(runtime: &Runtime<S>, store: &S, e: &ExecutionId) {
    let log = store.read_all(e).await.unwrap();
    let report = runtime.replay_log(log).unwrap();
    assert!(report.returned);
}

#[tokio::test]
async fn a_resume_of_a_timer_gate_or_with_the_timeout_marker_is_refused() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = runtime(store.clone(), clock.clone());
    let nap = runtime
        .start("nap", &json!(null), StartOptions::new(id("nap")))
        .await
        .unwrap();
    let approval = runtime
        .start("approval", &json!(null), StartOptions::new(id("approval")))
        .await
        .unwrap();
    runtime.wait(&nap).await.unwrap();
    runtime.wait(&approval).await.unwrap();
    let before = events_of(&store, &nap).await.len();

    let refused = runtime
        .resume(&nap, TIMER_EVENT_TYPE, "timer#1", Payload::null())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ResumeError::ReservedGate { .. }),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("belong to the runtime"));

    let forged = json!({TIMED_OUT_KEY: {"deadlineMs": T0}});
    let refused = runtime
        .resume(&approval, "Approval", "order-1", forged.into())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ResumeError::ReservedPayload { .. }),
        "{refused:?}"
    );
    assert_eq!(events_of(&store, &nap).await.len(), before);
    assert_eq!(
        runtime.state(&approval).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
}

/// Times out on an approval, then waits for a second gate: the execution is still live when a
/// late resume of the first gate comes.
async fn approval_then_ack(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let first = ctx
        .suspend_with_timeout("Approval", "order-1", Duration::from_secs(60))
        .await?;
    let ack = ctx.suspend("Ack", "order-1").await?;
    Ok(json!({"timedOut": first == GateOutcome::TimedOut, "ack": ack.to_value()}))
}

#[tokio::test]
async fn a_resume_after_the_deadline_of_a_live_execution_is_refused_as_timed_out() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = Runtime::builder(store.clone())
        .flow(flow_fn("approval_then_ack", 1, approval_then_ack))
        .clock(clock.clone())
        .build()
        .unwrap();
    let e = runtime
        .start(
            "approval_then_ack",
            &json!(null),
            StartOptions::new(id("a")),
        )
        .await
        .unwrap();
    runtime.wait(&e).await.unwrap();
    clock.advance(Duration::from_secs(60));
    // The timeout is recorded, then the flow opens its second gate.
    until_gate(&runtime, &e, "Ack").await;
    let before = events_of(&store, &e).await.len();
    let late = runtime
        .resume(&e, "Approval", "order-1", json!("yes").into())
        .await
        .unwrap_err();
    assert!(matches!(late, ResumeError::TimedOut { .. }), "{late:?}");
    assert!(late.to_string().contains("timed out"), "{late}");
    assert_eq!(
        events_of(&store, &e).await.len(),
        before,
        "nothing recorded"
    );

    runtime
        .resume(&e, "Ack", "order-1", json!("ok").into())
        .await
        .unwrap();
    until(&runtime, &e, |s| s == ExecutionStatus::Completed).await;
    assert_eq!(
        output(&store, &e).await,
        json!({"timedOut": true, "ack": "ok"})
    );
}

/// A clock that counts how often it is read, over a manual one.
#[derive(Debug, Clone)]
struct CountingClock {
    inner: ManualClock,
    reads: Arc<AtomicUsize>,
}

impl Clock for CountingClock {
    fn now_ms(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.now_ms()
    }
    fn sleep_until(
        &self,
        deadline_ms: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        self.inner.sleep_until(deadline_ms)
    }
}

/// A runtime dropped while a timer waits; a new runtime on the same store recovers it. The
/// timer fires at its recorded deadline (not earlier, whatever the new runtime's time when it
/// starts), or at once when that has passed; the replayed flow never asks the clock for it.
async fn timer_survives_a_new_runtime<S: EventStore + Clone>(store: S, late: bool) {
    let clock = ManualClock::new(T0);
    {
        let first = runtime(store.clone(), clock.clone());
        let e = first
            .start("nap", &json!(null), StartOptions::new(id("nap")))
            .await
            .unwrap();
        first.wait(&e).await.unwrap();
        assert_eq!(first.pending_timers(), 1);
    }
    // Some time passed while no runtime ran.
    clock.advance(Duration::from_secs(if late { 20 } else { 4 }));
    let counting = CountingClock {
        inner: clock.clone(),
        reads: Arc::default(),
    };
    let second = runtime(store.clone(), counting.clone());
    let report = second.recover_report().await.unwrap();
    assert_eq!(report.started, 0, "a parked execution needs no driver");
    assert_eq!(report.timers, 1);
    let e = id("nap");
    if !late {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            second.state(&e).await.unwrap().status(),
            ExecutionStatus::Suspended,
            "the deadline has not passed"
        );
        clock.advance(Duration::from_secs(6));
    }
    until(&second, &e, |s| s == ExecutionStatus::Completed).await;
    let fired_at = if late { T0 + 20_000 } else { T0 + 10_000 };
    assert_eq!(
        output(&store, &e).await,
        json!({"slept": null, "now": fired_at})
    );
    // The timer task reads the clock to know what is due; the replayed flow read it once,
    // for its live `now` after the timer (its deadline came from the log).
    let log = store.read_all(&e).await.unwrap();
    let decisions = log
        .iter()
        .filter(|e| matches!(e.event, Event::DecisionRecorded(_)))
        .count();
    assert_eq!(
        decisions, 2,
        "one deadline, one `now`: the deadline was not recorded again"
    );
    replays(&second, &store, &e).await;
}

#[tokio::test]
async fn a_timer_survives_a_new_runtime_on_the_memory_store_and_fires_at_its_deadline() {
    timer_survives_a_new_runtime(MemoryStore::new(), false).await;
}

#[tokio::test]
async fn a_timer_whose_deadline_passed_while_no_runtime_ran_fires_at_once_on_recovery() {
    timer_survives_a_new_runtime(MemoryStore::new(), true).await;
}

#[tokio::test]
async fn a_timer_survives_a_new_runtime_on_the_disk_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("timers.redb");
    let clock = ManualClock::new(T0);
    {
        let store = DiskStore::open(&path).unwrap();
        let first = runtime(store, clock.clone());
        let e = first
            .start("approval", &json!(null), StartOptions::new(id("disk")))
            .await
            .unwrap();
        first.wait(&e).await.unwrap();
    }
    let store = DiskStore::open(&path).unwrap();
    let second = runtime(store.clone(), clock.clone());
    assert_eq!(second.recover_report().await.unwrap().timers, 1);
    clock.advance(Duration::from_secs(3600));
    let e = id("disk");
    until(&second, &e, |s| s == ExecutionStatus::Completed).await;
    assert_eq!(output(&store, &e).await, json!("escalated"));
}

/// Sleeps, then waits at a gate.
async fn nap_then_go(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    ctx.sleep(Duration::from_secs(10)).await?;
    let timed = ctx
        .suspend_with_timeout("Approval", "a", Duration::from_secs(5))
        .await?;
    let go = ctx.suspend("Go", "go").await?;
    Ok(json!({"timedOut": timed == GateOutcome::TimedOut, "go": go.to_value()}))
}

#[tokio::test]
async fn replay_serves_recorded_deadlines_and_outcomes_without_reading_the_clock() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let build = |clock: CountingClock| {
        Runtime::builder(store.clone())
            .flow(flow_fn("nap_then_go", 1, nap_then_go))
            .clock(clock)
            .build()
            .unwrap()
    };
    let e = id("replayed");
    {
        let first = build(CountingClock {
            inner: clock.clone(),
            reads: Arc::default(),
        });
        first
            .start("nap_then_go", &json!(null), StartOptions::new(e.clone()))
            .await
            .unwrap();
        first.wait(&e).await.unwrap();
        clock.advance(Duration::from_secs(10));
        until_gate(&first, &e, "Approval").await;
        clock.advance(Duration::from_secs(5));
        until_gate(&first, &e, "Go").await;
    }
    // A new runtime whose clock is far off and counts its reads: the resume replays the
    // timer and the timed-out gate from the log.
    clock.set(0);
    let counting = CountingClock {
        inner: clock.clone(),
        reads: Arc::default(),
    };
    let second = build(counting.clone());
    second
        .resume(&e, "Go", "go", json!("now").into())
        .await
        .unwrap();
    until(&second, &e, |s| s == ExecutionStatus::Completed).await;
    assert_eq!(
        output(&store, &e).await,
        json!({"timedOut": true, "go": "now"})
    );
    assert_eq!(
        counting.reads.load(Ordering::SeqCst),
        0,
        "replay read the clock"
    );
    replays(&second, &store, &e).await;
}

/// Opens a timer under the reserved name by hand: refused.
async fn forges_a_timer(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    match ctx.suspend(TIMER_EVENT_TYPE, "mine").await {
        Err(StepError::ReservedEventType(t)) => Ok(json!(t)),
        other => Ok(json!(format!("{other:?}"))),
    }
}

#[tokio::test]
async fn a_flow_cannot_open_a_gate_of_a_reserved_type() {
    let store = MemoryStore::new();
    let runtime = Runtime::builder(store.clone())
        .flow(flow_fn("forge", 1, forges_a_timer))
        .clock(ManualClock::new(T0))
        .build()
        .unwrap();
    let e = runtime
        .start("forge", &json!(null), StartOptions::new(id("forge")))
        .await
        .unwrap();
    runtime.wait(&e).await.unwrap();
    assert_eq!(output(&store, &e).await, json!(TIMER_EVENT_TYPE));
}
