//! Retry policy: how many attempts, and how long to wait between them.
//!
//! The jitter that spreads retries of many steps apart is derived from the idempotency key
//! and the attempt number, never from a random source: the same step waits the same time on
//! every run, which keeps tests exact and replays free of hidden inputs.

use std::time::Duration;

use loom_kernel::stable_hash;

/// Attempts and backoff for one effect. Waits grow as `initial × multiplier^(n-1)`, capped at
/// `max_backoff`, then shortened by up to `jitter` (a fraction in `0.0..=1.0`).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in one dispatch, the first included; 1 means no retry.
    pub max_attempts: u32,
    /// The wait before the first retry.
    pub initial_backoff: Duration,
    /// What each wait is multiplied by for the next.
    pub multiplier: f64,
    /// The longest wait.
    pub max_backoff: Duration,
    /// The share of each wait that varies (0 to 1), derived from the idempotency key, never random.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    /// 3 attempts, waiting about 100 ms then 200 ms (less up to 20% jitter), never more than
    /// 10 s.
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            multiplier: 2.0,
            max_backoff: Duration::from_secs(10),
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retry.
    pub fn never() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// `max_attempts` attempts with the default backoff.
    pub fn attempts(max_attempts: u32) -> Self {
        Self {
            max_attempts,
            ..Self::default()
        }
    }

    /// The backoff: `initial`, times `multiplier` per retry, at most `max`.
    pub fn with_backoff(mut self, initial: Duration, multiplier: f64, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.multiplier = multiplier;
        self.max_backoff = max;
        self
    }

    /// The jitter, a share of each wait (0 to 1).
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// What is wrong with the policy, if anything.
    pub(crate) fn problem(&self) -> Option<String> {
        if self.max_attempts == 0 {
            return Some("a retry policy needs at least one attempt".into());
        }
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            return Some(format!(
                "the backoff multiplier must be a finite number >= 1, not {}",
                self.multiplier
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Some(format!(
                "the jitter must be within 0.0..=1.0, not {}",
                self.jitter
            ));
        }
        None
    }

    /// The wait after failed attempt `attempt` (1-based) of the step with `key`.
    pub fn backoff(&self, key: &str, attempt: u32) -> Duration {
        let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        let grown = self.initial_backoff.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = grown.min(self.max_backoff.as_secs_f64());
        let shortened = capped * (1.0 - self.jitter * unit_fraction(key, attempt));
        Duration::try_from_secs_f64(shortened).unwrap_or(self.max_backoff)
    }
}

/// A fraction in `[0, 1)` fixed by `key` and `attempt`.
fn unit_fraction(key: &str, attempt: u32) -> f64 {
    let hash = stable_hash(&[key.as_bytes(), &attempt.to_le_bytes()]);
    // The top 53 bits fill an f64's mantissa exactly.
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_are_capped_and_repeat_for_the_same_key() {
        let policy = RetryPolicy::attempts(10)
            .with_backoff(Duration::from_millis(100), 2.0, Duration::from_secs(1))
            .with_jitter(0.0);
        let waits: Vec<_> = (1..=6).map(|n| policy.backoff("e:s#1", n)).collect();
        assert_eq!(
            waits,
            [100, 200, 400, 800, 1000, 1000].map(Duration::from_millis)
        );
        let jittered = policy.with_jitter(0.5);
        for n in 1..=6 {
            let wait = jittered.backoff("e:s#1", n);
            assert_eq!(wait, jittered.backoff("e:s#1", n), "deterministic per key");
            assert!(wait <= waits[n as usize - 1] && wait >= waits[n as usize - 1] / 2);
        }
        let spread: std::collections::BTreeSet<_> = (0..20)
            .map(|i| jittered.backoff(&format!("e:s#{i}"), 1))
            .collect();
        assert!(spread.len() > 10, "different keys wait different times");
    }

    #[test]
    fn bad_policies_are_named() {
        assert!(RetryPolicy::attempts(0).problem().is_some());
        assert!(RetryPolicy::default().with_jitter(1.5).problem().is_some());
        let shrinking = RetryPolicy::default().with_backoff(
            Duration::from_millis(1),
            0.5,
            Duration::from_secs(1),
        );
        assert!(shrinking.problem().is_some());
        assert!(RetryPolicy::default().problem().is_none());
    }
}
