//! Fills a store with many executions quickly, through its public API: every execution is one
//! append (its start, and its end or its gate), appended many at a time so that the store's
//! writer takes them in large group commits. No flow runs.

use std::time::{Duration, Instant};

use loom_kernel::conformance::{completed, started, suspended};
use loom_kernel::{ErrorInfo, Event, EventStore, ExecutionFailed, ExecutionId};

/// The flows the executions belong to, in turn.
pub const FILL_FLOWS: [&str; 3] = ["checkout", "refund", "notify"];

/// Appends in flight at a time.
const IN_FLIGHT: usize = 20_000;

/// The id of the `n`th execution: `run-0000042`, so ids sort as they were started.
pub fn fill_id(n: usize) -> ExecutionId {
    ExecutionId::new(format!("run-{n:07}")).expect("a valid id")
}

/// What the `n`th execution holds: 1 in 100 failed, 1 in 50 waiting at a gate, 1 in 10
/// running, the others completed.
pub fn fill_events(n: usize) -> Vec<Event> {
    let start = started(FILL_FLOWS[n % FILL_FLOWS.len()]);
    match n {
        n if n % 100 == 0 => vec![
            start,
            Event::ExecutionFailed(ExecutionFailed {
                error: ErrorInfo::new("flow.error", "the card was declined"),
            }),
        ],
        n if n % 50 == 1 => vec![start, suspended("approve")],
        n if n % 10 == 2 => vec![start],
        _ => vec![start, completed()],
    }
}

/// Appends executions `0..count` to `store` and says how long it took.
pub async fn fill<S: EventStore>(store: &S, count: usize) -> Duration {
    let began = Instant::now();
    let mut next = 0;
    while next < count {
        let end = (next + IN_FLIGHT).min(count);
        let appends = (next..end).map(|n| async move {
            store
                .append(&fill_id(n), 0, &fill_events(n))
                .await
                .expect("the fill appends")
        });
        futures::future::join_all(appends).await;
        next = end;
    }
    began.elapsed()
}
