//! Durable timers across a real crash: a child process runs executions that sleep three times
//! on the disk store while its clock moves on, and is killed with SIGKILL at varied moments
//! (before any timer fired, while they fire). The next process recovers: every execution
//! completes exactly as if nothing had happened, each timer resumed once, and every log
//! replays.
//!
//! The child is this test binary run again with `LOOM_TIMERS_CHILD_STORE` set: it then runs
//! `timers_child_process_entry`, which does nothing in an ordinary test run. Both processes
//! use a manual clock, so nothing waits for real time beyond a few milliseconds per tick.

use crate::support::kill;

use std::time::Duration;

use loom_kernel::Event;
use loom_kernel::conformance::id;
use loom_kernel::kit::DEADLINE_KIND;
use loom_kernel::*;
use loom_kernel::{DiskStore, EventStoreExt};
use serde_json::{Value, json};

const CHILD_ENV: &str = "LOOM_TIMERS_CHILD_STORE";
const EXECUTIONS: usize = 12;
const SLEEPS: usize = 3;
const T0: u64 = 1_800_000_000_000;

/// Sleeps one second `SLEEPS` times.
async fn ticks(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    for _ in 0..SLEEPS {
        ctx.sleep(Duration::from_secs(1)).await?;
    }
    Ok(json!(SLEEPS))
}

fn runtime(store: DiskStore, clock: ManualClock) -> Runtime<DiskStore> {
    Runtime::builder(store)
        .flow(flow_fn("ticks", 1, ticks))
        .clock(clock)
        .build()
        .unwrap()
}

#[test]
fn timers_child_process_entry() {
    let ticks = (Duration::from_millis(500), Duration::from_millis(2));
    kill::ticking_child(CHILD_ENV, T0, ticks, runtime, async |runtime| {
        for n in 0..EXECUTIONS {
            let options = StartOptions::new(id(&format!("t{n}")));
            runtime.start("ticks", &json!(null), options).await.unwrap();
        }
    });
}

#[test]
fn sigkill_while_timers_wait_or_fire_loses_none_and_fires_none_twice() {
    kill::after_each_kill(
        concat!(module_path!(), "::timers_child_process_entry"),
        CHILD_ENV,
        "timers.redb",
        &["started", "tick 2", "tick 3", "tick 5"],
        async |until, store| {
            // The next process's clock starts where the first one's did: what was due in the
            // child is due here once this clock passes it again.
            let clock = ManualClock::new(T0);
            let runtime = runtime(store.clone(), clock.clone());
            runtime.recover().await.unwrap();
            let executions: Vec<_> = (0..EXECUTIONS).map(|n| id(&format!("t{n}"))).collect();
            let step = Duration::from_millis(500);
            let all_done =
                kill::advance_until_ended(&runtime, &clock, step, &executions, 2_000).await;
            assert!(all_done, "killed at '{until}': not every execution ended");
            for e in &executions {
                let log = store.read_all(e).await.unwrap();
                let mut deadlines = 0;
                let mut resumed = Vec::new();
                for envelope in &log {
                    match &envelope.event {
                        Event::DecisionRecorded(d) if d.kind == DEADLINE_KIND => deadlines += 1,
                        Event::ExecutionResumed(r) => resumed.push(r.gate_id.clone()),
                        _ => {}
                    }
                }
                assert_eq!(deadlines, SLEEPS, "killed at '{until}': {e}");
                assert_eq!(
                    resumed,
                    ["timer#1", "timer#2", "timer#3"],
                    "killed at '{until}': {e}: each timer resumed once, in order"
                );
                match &log.last().unwrap().event {
                    Event::ExecutionCompleted(done) => {
                        assert_eq!(done.output.to_value(), json!(SLEEPS))
                    }
                    other => panic!("killed at '{until}': {e} ends with {other:?}"),
                }
                runtime.replay_log(log).unwrap();
            }
        },
    );
}
