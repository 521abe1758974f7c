//! The figures of `GET /admin/v1/metrics`, in the Prometheus text format (version 0.0.4) as
//! the official client (`prometheus-client`) writes it. The kernel keeps plain numbers
//! ([`Runtime::stats`], [`EventStore::stats`]) and depends on no metrics library: this module
//! gathers them with the store's reads ([`Figures::gather`]) and translates them
//! ([`Figures::encode`]). `docs/CONSOLE.md` ("Metrics") lists every metric.

use futures::{StreamExt, TryStreamExt};
use loom_kernel::kit::{LATENCY_BOUNDS_US, LatencyHistogram, StoreStats};
use loom_kernel::{
    EventStore, EventStoreExt, ExecutionStatus, Runtime, RuntimeStats, StatusFilter,
};
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::error::ConsoleError;
use crate::view::{STATUSES, status_name};

/// The `Content-Type` of the answer: the Prometheus text format, version 0.0.4.
pub const METRICS_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// How many parked executions have their last event read at once.
const PARKED_READS_AT_ONCE: usize = 16;

/// What one scrape reports: the runtime's and the store's counters as they stand, and what
/// the store's reads say now.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Figures {
    /// Executions per status, in [`STATUSES`] order.
    pub(crate) executions: Vec<(ExecutionStatus, u64)>,
    pub(crate) runtime: RuntimeStats,
    /// `None` for a store that keeps no figures.
    pub(crate) store: Option<StoreStats>,
    /// Steps in doubt, as the in-doubt listing lists them (a cancel's included).
    pub(crate) steps_in_doubt: u64,
    /// How long the execution parked longest has been parked, in seconds; `None` when none is
    /// parked (or none has a recorded time, or this machine has no clock).
    pub(crate) oldest_parked_age_seconds: Option<f64>,
}

impl Figures {
    /// The figures of `runtime` and its store, ages measured against `now_ms`.
    pub(crate) async fn gather<S: EventStore>(
        runtime: &Runtime<S>,
        now_ms: Option<u64>,
    ) -> Result<Self, ConsoleError> {
        let store = runtime.store();
        let counts = store.count_by_status().await?;
        let executions = STATUSES
            .into_iter()
            .map(|status| (status, counts.get(status)))
            .collect();
        let steps_in_doubt = steps_in_doubt(store).await?;
        let oldest_parked = oldest_parked_since_ms(store).await?;
        Ok(Self {
            executions,
            runtime: runtime.stats(),
            store: store.stats(),
            steps_in_doubt,
            oldest_parked_age_seconds: oldest_parked
                .zip(now_ms)
                .map(|(since, now)| now.saturating_sub(since) as f64 / 1000.0),
        })
    }

    /// The exposition: every figure as `prometheus-client` writes it. A figure the store does
    /// not keep is left out, not written as 0.
    pub(crate) fn encode(&self) -> Result<String, ConsoleError> {
        let mut registry = Registry::with_prefix("loom");
        registry.register(
            "executions",
            "Executions in the store, by status (from the store's counts per status)",
            StatusGauges(self.executions.clone()),
        );
        registry.register(
            "steps_started",
            "Effects invoked by this process's runtime: one per attempt of a step",
            ConstCounter::new(self.runtime.steps_started),
        );
        registry.register(
            "steps_completed",
            "Steps this process's runtime recorded as completed (STEP_COMPLETED, or an operator's completed verdict)",
            ConstCounter::new(self.runtime.steps_completed),
        );
        registry.register(
            "steps_failed",
            "Steps this process's runtime recorded as failed (STEP_FAILED, or an operator's failed verdict)",
            ConstCounter::new(self.runtime.steps_failed),
        );
        registry.register(
            "steps_in_doubt",
            "Steps in doubt, waiting for an operator's verdict (those a cancel left in doubt included), as the in-doubt listing lists them",
            ConstGauge::new(gauge_value(self.steps_in_doubt)),
        );
        if let Some(age) = self.oldest_parked_age_seconds {
            registry.register_with_unit(
                "oldest_parked_age",
                "How long the execution parked (suspended) longest has waited since its last event",
                Unit::Seconds,
                ConstGauge::<f64>::new(age),
            );
        }
        if let Some(store) = &self.store {
            let store_registry = registry.sub_registry_with_prefix("store");
            if let Some(commits) = store.commits {
                store_registry.register(
                    "commits",
                    "Commits the store made durable since it was opened (the disk store: journal records, each one fdatasync)",
                    ConstCounter::new(commits),
                );
            }
            if let Some(appends) = store.appends {
                store_registry.register(
                    "appends",
                    "Appends the store made durable since it was opened (a commit holds one or more)",
                    ConstCounter::new(appends),
                );
            }
            if let Some(latency) = &store.commit_latency {
                store_registry.register_with_unit(
                    "commit_duration",
                    "How long each commit took the store's writer, from its batch taken to its callers answered",
                    Unit::Seconds,
                    KernelHistogram(latency.clone()),
                );
            }
            if let Some(latency) = &store.fsync_latency {
                store_registry.register_with_unit(
                    "fsync_duration",
                    "How long each commit's fdatasync took",
                    Unit::Seconds,
                    KernelHistogram(latency.clone()),
                );
            }
            if let Some(takeovers) = store.lease_takeovers {
                store_registry.register(
                    "lease_takeovers",
                    "Leases this worker took over from a worker that had not given them back",
                    ConstCounter::new(takeovers),
                );
            }
        }
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).map_err(
            |_| ConsoleError::internal("the metrics could not be written in the text format"),
        )?;
        Ok(text)
    }
}

/// A count as a gauge's value (an `i64`): a count past `i64::MAX` is shown as `i64::MAX`.
fn gauge_value(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// One gauge per status, labelled `status` with the status's name, in the order given (a
/// `Family` writes its members in hash order).
#[derive(Debug)]
struct StatusGauges(Vec<(ExecutionStatus, u64)>);

impl EncodeMetric for StatusGauges {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (status, count) in &self.0 {
            let labels = [("status", status_name(*status))];
            encoder
                .encode_family(&labels)?
                .encode_gauge(&gauge_value(*count))?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// A histogram the kernel filled ([`LatencyHistogram`], microseconds), written as a
/// Prometheus histogram in seconds with the kernel's bounds.
#[derive(Debug)]
struct KernelHistogram(LatencyHistogram);

impl EncodeMetric for KernelHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let bounds = LATENCY_BOUNDS_US
            .iter()
            .map(|bound| *bound as f64 / 1e6)
            .chain(std::iter::once(f64::INFINITY));
        let buckets: Vec<(f64, u64)> = bounds.zip(self.0.buckets.iter().copied()).collect();
        encoder.encode_histogram::<NoLabelSet>(
            self.0.sum_us as f64 / 1e6,
            self.0.count(),
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// How many steps the in-doubt listing lists (`GET /admin/v1/in-doubt`, the web console's
/// panel): those of executions in doubt, and those a cancel left in doubt, each such execution
/// folded once, as the listing folds them.
async fn steps_in_doubt<S: EventStore>(store: &S) -> Result<u64, ConsoleError> {
    let mut steps = 0u64;
    for status in [ExecutionStatus::InDoubt, ExecutionStatus::Cancelled] {
        let mut listed = std::pin::pin!(store.executions_by_status(StatusFilter::Status(status)));
        while let Some(summary) = listed.try_next().await? {
            match store.fold(&summary.id).await {
                Ok(state) => steps += state.steps_in_doubt().len() as u64,
                Err(error) => {
                    tracing::warn!(execution = %summary.id, %error, "the metrics skip an execution they cannot fold");
                }
            }
        }
    }
    Ok(steps)
}

/// When the execution parked longest parked: the earliest recorded time of a suspended
/// execution's last event. One read per parked execution, a few at once.
async fn oldest_parked_since_ms<S: EventStore>(store: &S) -> Result<Option<u64>, ConsoleError> {
    let listed = store.executions_by_status(StatusFilter::Status(ExecutionStatus::Suspended));
    let oldest = listed
        .map(|summary| async move {
            let summary = summary?;
            let last = match summary.head {
                0 => None,
                head => store
                    .read(&summary.id, head - 1, 1)
                    .await?
                    .into_iter()
                    .next()
                    .and_then(|envelope| envelope.recorded_at_ms),
            };
            Ok::<_, ConsoleError>(last)
        })
        .buffer_unordered(PARKED_READS_AT_ONCE)
        .try_fold(None, |oldest: Option<u64>, since| async move {
            Ok(match (oldest, since) {
                (Some(oldest), Some(since)) => Some(oldest.min(since)),
                (oldest, since) => oldest.or(since),
            })
        })
        .await?;
    Ok(oldest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use loom_kernel::kit::LatencyRecorder;
    use prometheus_client::metrics::histogram::Histogram;
    use std::time::Duration;

    /// The kernel's histogram, written through [`KernelHistogram`], reads exactly as the
    /// client's own `Histogram` fed the same observations.
    #[test]
    fn a_kernel_histogram_is_written_as_the_client_s_own_histogram() {
        let observed = [30, 50, 51, 900, 1_000, 7_500, 2_000_000, 9_000_000];
        let recorder = LatencyRecorder::default();
        let native = Histogram::new(LATENCY_BOUNDS_US.iter().map(|bound| *bound as f64 / 1e6));
        for micros in observed {
            recorder.record(Duration::from_micros(micros));
            native.observe(micros as f64 / 1e6);
        }
        let written = |metric: Box<dyn Fn(&mut Registry)>| {
            let mut registry = Registry::default();
            metric(&mut registry);
            let mut text = String::new();
            prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
                .expect("encodes");
            text
        };
        let snapshot = recorder.snapshot();
        let ours = written(Box::new(move |registry| {
            registry.register_with_unit(
                "latency",
                "h",
                Unit::Seconds,
                KernelHistogram(snapshot.clone()),
            );
        }));
        let theirs = written(Box::new(move |registry| {
            registry.register_with_unit("latency", "h", Unit::Seconds, native.clone());
        }));
        // The sums differ in the last digits (microseconds added as integers, seconds as
        // floats): compared as numbers, every other line as text.
        let (our_sum, our_rest) = split_sum(&ours);
        let (their_sum, their_rest) = split_sum(&theirs);
        assert_eq!(our_rest, their_rest);
        assert!(
            (our_sum - their_sum).abs() < 1e-9,
            "{our_sum} vs {their_sum}"
        );
        assert!(
            ours.contains("latency_seconds_bucket{le=\"+Inf\"} 8\n"),
            "{ours}"
        );
    }

    fn split_sum(text: &str) -> (f64, Vec<&str>) {
        let mut sum = f64::NAN;
        let mut rest = Vec::new();
        for line in text.lines() {
            match line.strip_prefix("latency_seconds_sum ") {
                Some(value) => sum = value.parse().expect("a number"),
                None => rest.push(line),
            }
        }
        (sum, rest)
    }

    #[test]
    fn every_figure_is_written_with_its_name_and_type() {
        let figures = Figures {
            executions: vec![(ExecutionStatus::Running, 2), (ExecutionStatus::InDoubt, 1)],
            runtime: RuntimeStats::default(),
            store: Some(StoreStats::default()),
            steps_in_doubt: 1,
            oldest_parked_age_seconds: Some(1.5),
        };
        let text = figures.encode().expect("encodes");
        for line in [
            "# TYPE loom_executions gauge",
            "loom_executions{status=\"running\"} 2",
            "loom_executions{status=\"in-doubt\"} 1",
            "# TYPE loom_steps_started_total counter",
            "loom_steps_in_doubt 1",
            "# TYPE loom_oldest_parked_age_seconds gauge",
            "loom_oldest_parked_age_seconds 1.5",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing in\n{text}"
            );
        }
        // The store keeps none of its figures here: none is written.
        assert!(!text.contains("loom_store_"), "{text}");
    }
}
