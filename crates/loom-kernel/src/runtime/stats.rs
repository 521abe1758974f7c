//! What the runtime counts of the steps its drivers run, for an operator's metrics
//! ([`Runtime::stats`](crate::Runtime::stats)): plain numbers, kept by relaxed atomic adds.
//! Nothing reads them to decide anything; they never reach a log or a fold.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::event::{Event, Verdict};

/// The step counters of one runtime, since it was built.
#[derive(Debug, Default)]
pub(crate) struct StepCounters {
    started: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
}

impl StepCounters {
    /// An effect is invoked: one attempt of a step begins.
    pub(crate) fn started(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }

    /// An append of this runtime is durable: its step outcomes are counted.
    pub(crate) fn durable(&self, events: &[Event]) {
        let (mut completed, mut failed) = (0, 0);
        for event in events {
            match event {
                Event::StepCompleted(_) => completed += 1,
                Event::StepFailed(_) => failed += 1,
                // A step in doubt ends with an operator's verdict alone, no outcome event.
                Event::EffectResolved(resolved) => match resolved.verdict {
                    Verdict::Completed { .. } => completed += 1,
                    Verdict::Failed { .. } => failed += 1,
                    Verdict::Retry => {}
                },
                _ => {}
            }
        }
        if completed > 0 {
            self.completed.fetch_add(completed, Ordering::Relaxed);
        }
        if failed > 0 {
            self.failed.fetch_add(failed, Ordering::Relaxed);
        }
    }

    pub(crate) fn snapshot(&self) -> RuntimeStats {
        RuntimeStats {
            steps_started: self.started.load(Ordering::Relaxed),
            steps_completed: self.completed.load(Ordering::Relaxed),
            steps_failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// What a runtime has counted of its steps since it was built
/// ([`Runtime::stats`](crate::Runtime::stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeStats {
    /// Effects invoked: each attempt of a step (a `retry` verdict's, or a re-run of an
    /// idempotent step found in flight by `recover`, counts again; replay invokes none). An
    /// effect's own retries inside one invocation (the effect runtime's backoff) are one.
    pub steps_started: u64,
    /// Steps this runtime recorded as completed, durably: a `STEP_COMPLETED`, or an
    /// operator's `completed` verdict on a step in doubt (`EFFECT_RESOLVED`).
    pub steps_completed: u64,
    /// Steps this runtime recorded as failed, durably: a `STEP_FAILED`, or an operator's
    /// `failed` verdict.
    pub steps_failed: u64,
}
