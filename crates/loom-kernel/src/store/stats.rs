//! What a store counts of its own work, for an operator's metrics ([`EventStore::stats`]):
//! plain numbers. The kernel depends on no metrics library; whoever exports the figures (the
//! console's `/admin/v1/metrics`) translates them into its own types.
//!
//! The counters are relaxed atomic adds on the writer's path, one clock reading per commit and
//! one per `fdatasync`: nothing waits on a reader, and a reader may see one figure a commit
//! ahead of another.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[cfg(doc)]
use super::EventStore;

/// The upper bounds, in microseconds, of a [`LatencyHistogram`]'s buckets: from 50 µs (an
/// `fdatasync` on a fast device, or on a file system that keeps no data) to 2.5 s (a stalled
/// disk). Slower observations fall in the histogram's last, unbounded bucket.
pub const LATENCY_BOUNDS_US: [u64; 15] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000,
];

/// Durations observed since a store opened, in buckets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatencyHistogram {
    /// `buckets[i]`: how many observations took more than `LATENCY_BOUNDS_US[i - 1]` (0 for
    /// the first) and at most `LATENCY_BOUNDS_US[i]` microseconds; the last entry, past the
    /// bounds, counts the slower ones. Not cumulative.
    pub buckets: [u64; LATENCY_BOUNDS_US.len() + 1],
    /// The observations' total, in microseconds.
    pub sum_us: u64,
}

impl LatencyHistogram {
    /// How many observations in all: the buckets added up.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// What a store reports of its own work ([`EventStore::stats`]); a figure the store does not
/// keep is `None`. Counts are since the store was opened in this process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// Commits made durable: for the disk store, journal records (one group commit of one or
    /// more appends, one `fdatasync`).
    pub commits: Option<u64>,
    /// Appends made durable by those commits.
    pub appends: Option<u64>,
    /// How long each commit took its writer: for the disk store, from the batch taken off the
    /// queue to its callers answered (the journal write, its `fdatasync`, the answers), not
    /// the time a request waited in the queue before it.
    pub commit_latency: Option<LatencyHistogram>,
    /// How long each commit's `fdatasync` took.
    pub fsync_latency: Option<LatencyHistogram>,
    /// Leases this worker took over from a worker that held one and did not give it back (its
    /// lease ran out, or it was this worker's id in an earlier run): a store with leases.
    pub lease_takeovers: Option<u64>,
}

/// A [`LatencyHistogram`] filled from several threads: each observation is two relaxed
/// atomic adds (its bucket, the sum).
#[derive(Debug, Default)]
pub struct LatencyRecorder {
    buckets: [AtomicU64; LATENCY_BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

impl LatencyRecorder {
    /// Counts one observation of `elapsed`.
    pub fn record(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let bucket = LATENCY_BOUNDS_US
            .iter()
            .position(|bound| micros <= *bound)
            .unwrap_or(LATENCY_BOUNDS_US.len());
        if let Some(count) = self.buckets.get(bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_us.fetch_add(micros, Ordering::Relaxed);
    }

    /// What was recorded so far.
    pub fn snapshot(&self) -> LatencyHistogram {
        LatencyHistogram {
            buckets: std::array::from_fn(|index| self.buckets[index].load(Ordering::Relaxed)),
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_the_first_bucket_whose_bound_it_does_not_pass() {
        let recorder = LatencyRecorder::default();
        recorder.record(Duration::from_micros(50));
        recorder.record(Duration::from_micros(51));
        recorder.record(Duration::from_millis(3));
        recorder.record(Duration::from_secs(60));
        let histogram = recorder.snapshot();
        assert_eq!(histogram.buckets[0], 1);
        assert_eq!(histogram.buckets[1], 1);
        assert_eq!(histogram.buckets[6], 1, "3 ms is in (2.5 ms, 5 ms]");
        assert_eq!(histogram.buckets[LATENCY_BOUNDS_US.len()], 1);
        assert_eq!(histogram.count(), 4);
        assert_eq!(histogram.sum_us, 50 + 51 + 3_000 + 60_000_000);
    }
}
