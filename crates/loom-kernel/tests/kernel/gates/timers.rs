//! Durable timers and gates with a deadline (LD-009): `ctx.sleep`, `ctx.sleep_until` and
//! `ctx.suspend_with_timeout`, on a manual clock so that no test waits for real time.
//! The deadline is recorded once; replay serves it without the clock; a pending timer
//! survives a new runtime on the same store; whichever of a resume and a deadline comes first
//! is recorded, and the other is refused or ignored.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loom_kernel::kit::{CLOSED_KEY, DEADLINE_KIND, ReplayError, TIMED_OUT_KEY, TIMER_EVENT_TYPE};
use loom_kernel::*;
use loom_kernel::{
    DiskStore, EventStore, EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore, Payload,
};
use serde_json::{Value, json};

use crate::support::{events_of, id, until};

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
        matches!(late, ResumeError::TimedOut { .. }),
        "the ended execution's log says the gate timed out: {late:?}"
    );
    let other = runtime
        .resume(&e, "Approval", "order-2", json!("yes").into())
        .await
        .unwrap_err();
    assert!(
        matches!(other, ResumeError::NoPendingGate { .. }),
        "{other:?}"
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

#[tokio::test]
async fn a_runtime_marker_spelled_with_a_json_escape_is_refused_by_resume() {
    let store = MemoryStore::new();
    let runtime = runtime(store.clone(), ManualClock::new(T0));
    let approval = runtime
        .start("approval", &json!(null), StartOptions::new(id("approval")))
        .await
        .unwrap();
    runtime.wait(&approval).await.unwrap();
    let before = events_of(&store, &approval).await.len();

    for forged in [
        r#"{"loom\u002etimedOut": {"deadlineMs": 1}}"#,
        r#"{"\u006coom.closed": {"by": "Approval#1"}}"#,
        r#" {"loom.\u0074imedOut": null}"#,
    ] {
        let refused = runtime
            .resume(
                &approval,
                "Approval",
                "order-1",
                Payload::from_json(forged).unwrap(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(refused, ResumeError::ReservedPayload { .. }),
            "{forged}: {refused:?}"
        );
    }
    assert_eq!(events_of(&store, &approval).await.len(), before);
    let escaped_elsewhere = Payload::from_json(r#"{"note": "line\none"}"#).unwrap();
    runtime
        .resume(&approval, "Approval", "order-1", escaped_elsewhere)
        .await
        .unwrap();
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

/// A runtime of `approval_then_ack` in which execution `e` has started and waits at its
/// first gate.
async fn started_approval(
    store: &MemoryStore,
    clock: &ManualClock,
    e: &ExecutionId,
) -> Runtime<MemoryStore> {
    let runtime = approval_then_ack_runtime(store, clock);
    runtime
        .start(
            "approval_then_ack",
            &json!(null),
            StartOptions::new(e.clone()),
        )
        .await
        .unwrap();
    runtime.wait(e).await.unwrap();
    runtime
}

/// A runtime of `approval_then_ack` on `store`, reading `clock`.
fn approval_then_ack_runtime(store: &MemoryStore, clock: &ManualClock) -> Runtime<MemoryStore> {
    Runtime::builder(store.clone())
        .flow(flow_fn("approval_then_ack", 1, approval_then_ack))
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_resume_after_the_deadline_of_a_live_execution_is_refused_as_timed_out() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = approval_then_ack_runtime(&store, &clock);
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
    // An hour away: armed once its window comes (LD-033), not at recovery.
    assert_eq!(second.recover_report().await.unwrap().timers, 0);
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

/// Two timers joined, and a zero-length one: each is its own gate, and all fire.
async fn joined(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let (a, b) = futures::join!(
        ctx.sleep(Duration::from_secs(2)),
        ctx.sleep(Duration::from_secs(1))
    );
    a?;
    b?;
    ctx.sleep(Duration::ZERO).await?;
    Ok(json!("both"))
}

#[tokio::test]
async fn joined_timers_are_separate_gates_and_a_zero_timer_fires_at_once() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = Runtime::builder(store.clone())
        .flow(flow_fn("joined", 1, joined))
        .clock(clock.clone())
        .build()
        .unwrap();
    let e = runtime
        .start("joined", &json!(null), StartOptions::new(id("joined")))
        .await
        .unwrap();
    runtime.wait(&e).await.unwrap();
    assert_eq!(runtime.pending_timers(), 2);
    clock.advance(Duration::from_secs(1));
    // timer#2 (1 s) fires first; timer#1 still waits.
    for _ in 0..5_000 {
        if runtime.state(&e).await.unwrap().pending_gates().len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let state = runtime.wait(&e).await.unwrap();
    assert_eq!(
        state.pending_gates().keys().collect::<Vec<_>>(),
        ["timer#1"]
    );
    clock.advance(Duration::from_secs(1));
    until(&runtime, &e, |s| s == ExecutionStatus::Completed).await;
    assert_eq!(output(&store, &e).await, json!("both"));
    let resumed: Vec<_> = events_of(&store, &e)
        .await
        .into_iter()
        .filter_map(|e| match e {
            Event::ExecutionResumed(r) => Some(r.gate_id),
            _ => None,
        })
        .collect();
    assert_eq!(resumed, ["timer#2", "timer#1", "timer#3"]);
    replays(&runtime, &store, &e).await;
}

#[tokio::test]
async fn cancelling_a_sleeping_execution_disarms_its_timer_and_records_no_resume() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = runtime(store.clone(), clock.clone());
    let e = runtime
        .start("nap", &json!(null), StartOptions::new(id("cancelled")))
        .await
        .unwrap();
    runtime.wait(&e).await.unwrap();
    assert_eq!(runtime.pending_timers(), 1);
    runtime
        .cancel(&e, Some("no longer needed".into()))
        .await
        .unwrap();
    let state = runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Cancelled);
    assert_eq!(runtime.pending_timers(), 0);
    let before = events_of(&store, &e).await.len();
    clock.advance(Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(events_of(&store, &e).await.len(), before);
}

/// The approval flow, with a shorter timeout in a new build.
async fn approval_shorter(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    match ctx
        .suspend_with_timeout("Approval", "order-1", Duration::from_secs(60))
        .await?
    {
        GateOutcome::Resumed(answer) => Ok(json!({"approved": answer.to_value()})),
        GateOutcome::TimedOut => Ok(json!("escalated")),
    }
}

/// The approval flow rewritten to wait without a deadline.
async fn approval_without_deadline(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let answer = ctx.suspend("Approval", "order-1").await?;
    Ok(json!({"approved": answer.to_value()}))
}

#[tokio::test]
async fn a_recorded_deadline_outlives_a_code_change_and_dropping_it_is_a_divergence() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let e = id("changed");
    {
        let first = runtime(store.clone(), clock.clone());
        first
            .start("approval", &json!(null), StartOptions::new(e.clone()))
            .await
            .unwrap();
        first.wait(&e).await.unwrap();
    }
    // A new build shortens the timeout: the recorded deadline (one hour) still holds.
    {
        let second = Runtime::builder(store.clone())
            .flow(flow_fn("approval", 1, approval_shorter))
            .clock(clock.clone())
            .build()
            .unwrap();
        // An hour away: armed once its window comes (LD-033), not at recovery.
        assert_eq!(second.recover_report().await.unwrap().timers, 0);
        clock.advance(Duration::from_secs(120));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            second.state(&e).await.unwrap().status(),
            ExecutionStatus::Suspended,
            "the deadline is the recorded one, not the new code's"
        );
    }
    // A build that waits without a deadline no longer issues the recorded decision.
    let third = Runtime::builder(store.clone())
        .flow(flow_fn("approval", 1, approval_without_deadline))
        .clock(clock.clone())
        .build()
        .unwrap();
    let log = store.read_all(&e).await.unwrap();
    match third.replay_log(log) {
        Err(ReplayError::NonDeterminism(divergence)) => {
            assert_eq!(divergence.seq, 1);
            assert!(divergence.recorded.contains(DEADLINE_KIND), "{divergence}");
        }
        other => panic!("{other:?}"),
    }
    let refused = third
        .resume(&e, "Approval", "order-1", json!("yes").into())
        .await
        .unwrap_err();
    assert!(matches!(refused, ResumeError::Driver { .. }), "{refused:?}");
}

/// A resume and the deadline race: exactly one of them is recorded, whichever the driver
/// took first, and the flow's branch matches the log.
#[tokio::test]
async fn a_resume_racing_the_deadline_records_exactly_one_of_them() {
    for round in 0..20 {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let runtime = runtime(store.clone(), clock.clone());
        let e = runtime
            .start(
                "approval",
                &json!(null),
                StartOptions::new(id(&format!("race{round}"))),
            )
            .await
            .unwrap();
        runtime.wait(&e).await.unwrap();
        let resume = {
            let runtime = runtime.clone();
            let e = e.clone();
            tokio::spawn(async move {
                runtime
                    .resume(&e, "Approval", "order-1", json!("yes").into())
                    .await
            })
        };
        clock.advance(Duration::from_secs(3600));
        let resumed = resume.await.unwrap();
        until(&runtime, &e, |s| s == ExecutionStatus::Completed).await;
        let out = output(&store, &e).await;
        match resumed {
            Ok(()) => assert_eq!(out, json!({"approved": "yes"})),
            Err(ResumeError::TimedOut { .. } | ResumeError::NoPendingGate { .. }) => {
                assert_eq!(out, json!("escalated"))
            }
            Err(other) => panic!("{other:?}"),
        }
        let resumes = events_of(&store, &e)
            .await
            .iter()
            .filter(|e| matches!(e, Event::ExecutionResumed(_)))
            .count();
        assert_eq!(resumes, 1);
        replays(&runtime, &store, &e).await;
    }
}

/// A clock whose first `sleep_until` panics.
#[derive(Debug, Clone)]
struct PanicsOnce {
    inner: ManualClock,
    panicked: Arc<std::sync::atomic::AtomicBool>,
}

impl Clock for PanicsOnce {
    fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }
    fn sleep_until(
        &self,
        deadline_ms: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        if !self.panicked.swap(true, Ordering::SeqCst) {
            panic!("the clock cannot sleep");
        }
        self.inner.sleep_until(deadline_ms)
    }
}

#[tokio::test]
async fn a_clock_that_panics_stops_the_timer_task_only_until_the_next_deadline_is_armed() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = runtime(
        store.clone(),
        PanicsOnce {
            inner: clock.clone(),
            panicked: Arc::default(),
        },
    );
    let first = runtime
        .start("nap", &json!(null), StartOptions::new(id("first")))
        .await
        .unwrap();
    runtime.wait(&first).await.unwrap();
    // The task panicked in the clock; the deadline stays in the index.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = runtime
        .start("nap", &json!(null), StartOptions::new(id("second")))
        .await
        .unwrap();
    runtime.wait(&second).await.unwrap();
    assert_eq!(runtime.pending_timers(), 2);
    clock.advance(Duration::from_secs(10));
    until(&runtime, &first, |s| s == ExecutionStatus::Completed).await;
    until(&runtime, &second, |s| s == ExecutionStatus::Completed).await;
}

/// Approval, rejection, or neither within an hour.
async fn decide_order(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let gates = [("Approval", "order-1"), ("Rejection", "order-1")];
    match ctx
        .first_of(&gates, Some(Duration::from_secs(3600)))
        .await?
    {
        Selected::Gate { index, payload } => Ok(json!({"gate": index, "by": payload.to_value()})),
        Selected::TimedOut => Ok(json!("escalated")),
    }
}

/// `first_of` misused: no gate, then the same gate twice.
async fn misuses_first_of(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let none = ctx.first_of(&[], None).await;
    let twice = ctx.first_of(&[("A", "k"), ("A", "k")], None).await;
    Ok(json!([format!("{none:?}"), format!("{twice:?}")]))
}

fn first_of_runtime<S: EventStore>(store: S, clock: ManualClock) -> Runtime<S> {
    Runtime::builder(store)
        .flow(flow_fn("decide", 1, decide_order))
        .flow(flow_fn("misuse", 1, misuses_first_of))
        .clock(clock)
        .build()
        .unwrap()
}

fn resumes(events: &[Event]) -> Vec<(String, Value)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ExecutionResumed(r) => Some((r.gate_id.clone(), r.payload.to_value())),
            _ => None,
        })
        .collect()
}

/// Hole 1 of issue 24, replay side: a log written outside the runtime (an offline resume of
/// each gate of a `first_of`) holds two real resumes; the one first in the log wins on replay,
/// not the first gate of the group.
#[tokio::test]
async fn first_of_replayed_over_two_resumes_picks_the_first_in_the_log() {
    use loom_kernel::ExecutionResumed;
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let e = id("both");
    let head = {
        let runtime = first_of_runtime(store.clone(), clock.clone());
        runtime
            .start("decide", &json!(null), StartOptions::new(e.clone()))
            .await
            .unwrap();
        runtime.wait(&e).await.unwrap().next_seq()
    };
    let resume = |gate: &str, event_type: &str, by: &str| {
        Event::ExecutionResumed(ExecutionResumed {
            gate_id: gate.into(),
            event_type: event_type.into(),
            correlation_key: "order-1".into(),
            payload: json!(by).into(),
        })
    };
    store
        .append(
            &e,
            head,
            &[
                resume("Rejection#1", "Rejection", "bo"),
                resume("Approval#1", "Approval", "ana"),
            ],
        )
        .await
        .unwrap();
    let runtime = first_of_runtime(store.clone(), clock.clone());
    runtime.recover().await.unwrap();
    until(&runtime, &e, |s| s == ExecutionStatus::Completed).await;
    assert_eq!(output(&store, &e).await, json!({"gate": 1, "by": "bo"}));
}

#[tokio::test]
async fn first_of_records_the_first_resume_and_closes_the_other_gates_in_the_same_batch() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = first_of_runtime(store.clone(), clock.clone());
    let e = runtime
        .start("decide", &json!(null), StartOptions::new(id("first")))
        .await
        .unwrap();
    let parked = runtime.wait(&e).await.unwrap();
    assert_eq!(parked.pending_gates().len(), 2);
    assert_eq!(runtime.pending_timers(), 1);
    runtime
        .resume(&e, "Rejection", "order-1", json!("bo").into())
        .await
        .unwrap();
    until(&runtime, &e, |s| s == ExecutionStatus::Completed).await;
    assert_eq!(output(&store, &e).await, json!({"gate": 1, "by": "bo"}));
    assert_eq!(
        resumes(&events_of(&store, &e).await),
        [
            ("Rejection#1".to_owned(), json!("bo")),
            (
                "Approval#1".to_owned(),
                json!({CLOSED_KEY: {"by": "Rejection#1"}})
            ),
        ]
    );
    assert_eq!(runtime.pending_timers(), 0);
    let late = runtime
        .resume(&e, "Approval", "order-1", json!("ana").into())
        .await
        .unwrap_err();
    assert!(
        matches!(late, ResumeError::NoPendingGate { .. }),
        "{late:?}"
    );
    clock.advance(Duration::from_secs(7200));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(resumes(&events_of(&store, &e).await).len(), 2);
    replays(&runtime, &store, &e).await;
}

#[tokio::test]
async fn first_of_whose_deadline_passes_closes_every_gate_and_survives_a_new_runtime() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let e = id("nobody");
    {
        let first = first_of_runtime(store.clone(), clock.clone());
        first
            .start("decide", &json!(null), StartOptions::new(e.clone()))
            .await
            .unwrap();
        first.wait(&e).await.unwrap();
    }
    let second = first_of_runtime(store.clone(), clock.clone());
    // An hour away: armed once its window comes (LD-033), not at recovery.
    assert_eq!(second.recover_report().await.unwrap().timers, 0);
    clock.advance(Duration::from_secs(3600));
    until(&second, &e, |s| s == ExecutionStatus::Completed).await;
    assert_eq!(output(&store, &e).await, json!("escalated"));
    let marker = json!({TIMED_OUT_KEY: {"deadlineMs": T0 + 3_600_000}});
    assert_eq!(
        resumes(&events_of(&store, &e).await),
        [
            ("Approval#1".to_owned(), marker.clone()),
            ("Rejection#1".to_owned(), marker),
        ]
    );
    for event_type in ["Approval", "Rejection"] {
        let late = second
            .resume(&e, event_type, "order-1", json!("late").into())
            .await
            .unwrap_err();
        assert!(matches!(late, ResumeError::TimedOut { .. }), "{late:?}");
    }
    replays(&second, &store, &e).await;
}

#[tokio::test]
async fn first_of_refuses_no_gates_a_gate_twice_and_a_forged_closing_marker() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let runtime = first_of_runtime(store.clone(), clock);
    let misuse = runtime
        .start("misuse", &json!(null), StartOptions::new(id("misuse")))
        .await
        .unwrap();
    runtime.wait(&misuse).await.unwrap();
    let out = output(&store, &misuse).await;
    assert!(out[0].as_str().unwrap().contains("NoGates"), "{out}");
    assert!(out[1].as_str().unwrap().contains("DuplicateGate"), "{out}");

    let e = runtime
        .start("decide", &json!(null), StartOptions::new(id("forged")))
        .await
        .unwrap();
    runtime.wait(&e).await.unwrap();
    let forged = json!({CLOSED_KEY: {"by": "Rejection#1"}});
    let refused = runtime
        .resume(&e, "Approval", "order-1", forged.into())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ResumeError::ReservedPayload { .. }),
        "{refused:?}"
    );
    assert_eq!(
        runtime.state(&e).await.unwrap().pending_gates().len(),
        2,
        "nothing recorded"
    );
}

#[tokio::test]
async fn first_of_with_two_resumes_racing_records_one_winner() {
    for round in 0..20 {
        let store = MemoryStore::new();
        let runtime = first_of_runtime(store.clone(), ManualClock::new(T0));
        let e = runtime
            .start(
                "decide",
                &json!(null),
                StartOptions::new(id(&format!("r{round}"))),
            )
            .await
            .unwrap();
        runtime.wait(&e).await.unwrap();
        let resume = |event_type: &'static str| {
            let (runtime, e) = (runtime.clone(), e.clone());
            tokio::spawn(async move {
                runtime
                    .resume(&e, event_type, "order-1", json!(event_type).into())
                    .await
            })
        };
        let (a, b) = (resume("Approval"), resume("Rejection"));
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        assert!(a.is_ok() != b.is_ok(), "exactly one wins: {a:?} {b:?}");
        until(&runtime, &e, |s| s == ExecutionStatus::Completed).await;
        let (index, by) = if a.is_ok() {
            (0, "Approval")
        } else {
            (1, "Rejection")
        };
        assert_eq!(output(&store, &e).await, json!({"gate": index, "by": by}));
        assert_eq!(resumes(&events_of(&store, &e).await).len(), 2);
        replays(&runtime, &store, &e).await;
    }
}

#[tokio::test]
async fn recovery_skips_a_recorded_deadline_it_cannot_read_and_arms_the_others() {
    use loom_kernel::{DecisionRecorded, ExecutionStarted, ExecutionSuspended};
    let store = MemoryStore::new();
    let log = |deadline: Value| {
        vec![
            Event::ExecutionStarted(ExecutionStarted {
                flow: "nap".into(),
                flow_version: 1,
                input: Payload::null(),
                capabilities: Default::default(),
                budget: None,
            }),
            Event::DecisionRecorded(DecisionRecorded {
                step_id: "timer#1".into(),
                kind: DEADLINE_KIND.into(),
                value: deadline.into(),
            }),
            Event::ExecutionSuspended(ExecutionSuspended {
                gate_id: "timer#1".into(),
                event_type: TIMER_EVENT_TYPE.into(),
                correlation_key: "timer#1".into(),
            }),
        ]
    };
    store
        .append(&id("bad"), 0, &log(json!("soon")))
        .await
        .unwrap();
    store
        .append(&id("good"), 0, &log(json!({"deadlineMs": T0 + 5})))
        .await
        .unwrap();
    let clock = ManualClock::new(T0);
    let runtime = runtime(store.clone(), clock.clone());
    let report = runtime.recover_report().await.unwrap();
    assert_eq!(report.timers, 1);
    assert!(report.skipped.is_empty());
    clock.advance(Duration::from_millis(5));
    until(&runtime, &id("good"), |s| s == ExecutionStatus::Completed).await;
    assert_eq!(
        runtime.state(&id("bad")).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
}

/// ADR 0009's promise, whichever runtime answers: a resume of a gate its deadline closed is
/// refused as timed out (hole 13 of issue 24 looked for a path answering `NoPendingGate`).
#[tokio::test]
async fn a_resume_after_a_deadline_is_timed_out_in_a_new_runtime_with_or_without_recover() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let build = || approval_then_ack_runtime(&store, &clock);
    let e = id("a");
    {
        let runtime = started_approval(&store, &clock, &e).await;
        clock.advance(Duration::from_secs(60));
        until_gate(&runtime, &e, "Ack").await;
    }
    let runtime = build();
    runtime.recover().await.unwrap();
    let late = runtime
        .resume(&e, "Approval", "order-1", json!("yes").into())
        .await
        .unwrap_err();
    assert!(
        matches!(late, ResumeError::TimedOut { .. }),
        "restart: {late:?}"
    );
    let runtime = build();
    let late = runtime
        .resume(&e, "Approval", "order-1", json!("yes").into())
        .await
        .unwrap_err();
    assert!(
        matches!(late, ResumeError::TimedOut { .. }),
        "no recover: {late:?}"
    );
}

/// A deadline that passed while no runtime ran fires on recovery; a resume racing with it
/// either wins (the flow takes the resume branch) or is refused as timed out.
#[tokio::test]
async fn a_resume_racing_a_deadline_fired_on_recovery_wins_or_is_timed_out() {
    for round in 0..50 {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let build = || approval_then_ack_runtime(&store, &clock);
        let e = id("a");
        drop(started_approval(&store, &clock, &e).await);
        clock.advance(Duration::from_secs(61));
        let runtime = build();
        let (rec, late) = tokio::join!(runtime.recover(), async {
            for _ in 0..round {
                tokio::task::yield_now().await;
            }
            runtime
                .resume(&e, "Approval", "order-1", json!("yes").into())
                .await
        });
        rec.unwrap();
        match late {
            Err(ResumeError::TimedOut { .. }) => {}
            Ok(()) => {
                // The resume won: the flow must have taken the resume branch.
            }
            other => panic!("round {round}: {other:?}"),
        }
    }
}

/// Issue 41, hole 10: a deadline at `u64::MAX` fires when the clock reads it after a restart,
/// as an armed timer does: the wake-up index lists it (`list_wakeups(u64::MAX, ..)` has no
/// bound), on both stores.
#[tokio::test]
async fn a_deadline_at_the_end_of_time_fires_after_a_restart_on_both_stores() {
    async fn check<S: EventStore + Clone + 'static>(store: S) {
        let e = {
            let first = runtime(store.clone(), ManualClock::new(T0));
            let e = first
                .start("alarm", &u64::MAX, StartOptions::new(id("end-of-time")))
                .await
                .unwrap();
            let parked = first.wait(&e).await.unwrap();
            assert_eq!(parked.status(), ExecutionStatus::Suspended);
            first.shutdown().await;
            e
        };
        let rows = store.list_wakeups(u64::MAX, None, 10).await.unwrap();
        assert!(
            rows.iter().any(|row| row.at_ms == u64::MAX),
            "the row at u64::MAX is listed: {rows:?}"
        );
        let again = runtime(store.clone(), ManualClock::new(u64::MAX));
        again.recover().await.unwrap();
        until(&again, &e, |s| s == ExecutionStatus::Completed).await;
        assert_eq!(output(&store, &e).await, json!("rang"));
    }
    check(MemoryStore::new()).await;
    let dir = tempfile::tempdir().unwrap();
    check(DiskStore::open(dir.path().join("store.redb")).unwrap()).await;
}
