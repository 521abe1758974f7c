//! Sustained load (soak): how an execution's latency, the process's memory and the store's size
//! behave over minutes of steady traffic, on the embedded disk store and on PostgreSQL. A burst
//! says how fast the engine goes; a soak, whether it keeps going: a stall at a checkpoint, a
//! queue that never drains or memory that creeps up only shows after a while.
//!
//! For each store and shape (executions of 1 or of 10 steps of a no-op idempotent effect):
//! first the maximum: the most executions/s a closed loop sustains (clients each starting an
//! execution and waiting for its end; 2 s of warm-up, then `--calibrate-secs` counted; 64
//! clients, then 4 times as many while that gains 5%, up to 1,024), then the highest open-loop
//! rate that keeps up, found by a ramp on one store from half that figure, 10% more every
//! step (20 s, `--ramp-step-secs`), until a step completes less than 95% of what it offered
//! (`soak-ramp` lines; `soak-max` gives both figures). Then, per load (a fraction of that maximum), an open loop: execution `i` is started at `t0 + i / rate` whether or not earlier ones have
//! ended, and its latency runs from that intended start to `wait` returning Completed, so a
//! stall that holds the generator up is counted too (no coordinated omission). Latencies go
//! into HDR histograms (microseconds, 3 significant digits), one per interval and one per run.
//! Every calibration level and soak run has a fresh store (scratch directory or schema).
//!
//! Per interval, one line: `soak store=disk shape=1 load=0.80 rate=... interval=3 at_s=45
//! done=... failed=... in_flight=... p50_us=... p99_us=... p999_us=... max_us=... rss_mib=...
//! store_mib=... checkpoints=...`; `done` counts executions completed in the interval (the last
//! one also those ending after the last start), `failed` those failed since the start of the
//! run, `rss_mib` is VmRSS, `store_mib` the store file and the files beside it named after it
//! (its journal) on disk, `pg_total_relation_size` summed over the schema's tables on
//! PostgreSQL, and `checkpoints` (disk only) the writer's since the store opened; on disk also
//! `commits_over_10ms` and `syncs_over_10ms` (the interval's group commits and journal
//! `fdatasync`s slower than 10 ms) and `slowest_commit_ms_at_most` and
//! `slowest_sync_ms_at_most` (the bound of the slowest one's bucket in `StoreStats`), which
//! tell a tail that waited for the writer, and there for the disk, from one that did not; on
//! PostgreSQL the server's own work in the interval (`soak/server_figures.rs`):
//! `server_checkpoints` begun, `checkpoint_write_ms` and `checkpoint_sync_ms` of those that
//! ended (the sync phase is the data files' `fsync`s),
//! `wal_mib` and `wal_fpi` (WAL written, and full-page images in it, which follow a
//! checkpoint), `autovacuums` (autovacuums and autoanalyzes of the store's tables ended) and
//! `vacuuming_now` (vacuums running as the interval ended). On both, the machine's disks in
//! the interval (`soak/disk_figures.rs`, Linux's `/proc/diskstats`): `disk_write_mib`
//! written, `disk_write_ms_avg` a write's average time, `disk_flushes` and
//! `disk_flush_ms_avg` (cache flushes: every `fsync` asks for one), `disk_busy_pct`. Per run,
//! `soak-summary`: its percentiles and a verdict, `ok` or the intervals that broke a criterion:
//! p99.9 at most 10 times p50 in every interval, RSS after every interval within 10% of RSS
//! after the first, and every interval but the last completing at least 95% of the executions
//! offered in it (an overload otherwise: a backlog grows). Ended executions are kept, as the stores' defaults keep them: the store's
//! growth is part of what is watched.
//!
//! `cargo xtask soak [options]`, or `cargo bench -p loom-store-postgres --bench soak -- ...`:
//! - `--minutes N`: length of each soak run (default 10; fractions allowed, e.g. 0.5);
//! - `--interval-secs N`: reporting interval (default 60);
//! - `--store disk|postgres|both` (default both); PostgreSQL is found as the store's tests find
//!   it (`cargo xtask pg-up`, or `LOOM_TEST_POSTGRES_URL`), and skipped, saying so, without one;
//! - `--shape 1|10|both`: steps per execution (default both);
//! - `--loads 0.5,0.8,0.95`: fractions of the maximum rate (the default);
//! - `--calibrate-secs N`: counted time of each calibration level (default 15);
//! - `--ramp-step-secs N`: length of each step of the open-loop ramp (default 20); longer steps
//!   let a store's periodic work (PostgreSQL's autovacuum of a growing table) into each step,
//!   and find a maximum nearer what a 10-minute run sustains;
//! - `--rate R`: no calibration; R executions/s is taken as the maximum;
//! - `--checkpoint-commits N`: the disk store's `DiskStoreConfig::checkpoint_commits` (default
//!   its default), to see what the checkpoints' size does to the tail;
//! - `--cache-mib N`: the disk store's `DiskStoreConfig::cache_size_bytes` in MiB (default its
//!   default, 64), to see what a page cache smaller than the store does to the tail.
//!
//! The defaults take 2 stores x 2 shapes x 3 loads x 10 minutes, plus calibration.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use loom_kernel::{DiskStore, EventStore, ExecutionId, ExecutionStatus};
use loom_kernel::{
    EffectCall, EffectOutcome, FlowCtx, FlowError, FnEffect, Runtime, StartOptions, flow_fn,
};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig, fresh_schema, server_url};
use tokio::time::Instant;

#[path = "soak/disk_figures.rs"]
mod disk_figures;
#[path = "soak/probe.rs"]
mod probe;
#[path = "soak/server_figures.rs"]
mod server_figures;
#[path = "../../loom-kernel/benches/support/mod.rs"]
mod support;

use disk_figures::DiskFigures;
use probe::Probe;
use server_figures::ServerFigures;

const USAGE: &str = "options: --minutes N, --interval-secs N, --store disk|postgres|both, \
                     --shape 1|10|both, --loads 0.5,0.8,0.95, --calibrate-secs N, \
                     --ramp-step-secs N, --rate R, --checkpoint-commits N, --cache-mib N";
const CALIBRATION_WARM_UP: Duration = Duration::from_secs(2);
const CALIBRATION_CLIENTS: [u64; 3] = [64, 256, 1024];
/// The open-loop ramp: its first rate (of the closed loop's), its factor from step to step, and
/// each step's reporting interval (its length is `Options::ramp_step`).
const RAMP_START: f64 = 0.5;
const RAMP_FACTOR: f64 = 1.1;
/// The ramp gives up below the closed loop's figure divided by this.
const RAMP_FLOOR_DIVISOR: f64 = 64.0;
const RAMP_INTERVAL: Duration = Duration::from_secs(5);
/// A level of the calibration ramp must beat the best so far by this factor for the next one.
const CALIBRATION_GAIN: f64 = 1.05;
/// How long a run waits, after its last start, for the executions still running.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// An hour, in microseconds: a longer latency is recorded as this.
const LONGEST_LATENCY_US: u64 = 3_600_000_000;
const P999_OVER_P50_LIMIT: u64 = 10;
const RSS_DRIFT_LIMIT: f64 = 0.10;
/// An interval keeps up when it completes at least this share of the executions offered in it.
const KEPT_UP: f64 = 0.95;

#[derive(Debug, Clone, Copy)]
enum StoreKind {
    Disk,
    Postgres,
}

struct Options {
    run_length: Duration,
    interval: Duration,
    stores: Vec<StoreKind>,
    shapes: Vec<u64>,
    loads: Vec<f64>,
    calibration: Duration,
    /// Each step of the open-loop ramp.
    ramp_step: Duration,
    max_rate: Option<f64>,
    /// The disk store's `checkpoint_commits` and `cache_size_bytes`; its defaults when not
    /// given.
    checkpoint_commits: Option<u64>,
    cache_bytes: Option<usize>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut options = Options {
            run_length: Duration::from_secs(600),
            interval: Duration::from_secs(60),
            stores: vec![StoreKind::Disk, StoreKind::Postgres],
            shapes: vec![1, 10],
            loads: vec![0.5, 0.8, 0.95],
            calibration: Duration::from_secs(15),
            ramp_step: Duration::from_secs(20),
            max_rate: None,
            checkpoint_commits: None,
            cache_bytes: None,
        };
        // cargo passes `--bench` to every bench binary.
        let mut args = args.iter().filter(|arg| *arg != "--bench");
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let set = options.set(flag, value);
            set.map_err(|error| format!("{flag}: {error}"))?;
        }
        Ok(options)
    }

    fn set(&mut self, flag: &str, arg: &str) -> Result<(), String> {
        use StoreKind::{Disk, Postgres};
        let seconds = |unit: f64| positive(arg).map(|n| Duration::from_secs_f64(n * unit));
        match flag {
            "--minutes" => self.run_length = seconds(60.0)?,
            "--interval-secs" => self.interval = seconds(1.0)?,
            "--calibrate-secs" => self.calibration = seconds(1.0)?,
            "--ramp-step-secs" => self.ramp_step = seconds(1.0)?,
            "--rate" => self.max_rate = Some(positive(arg)?),
            "--checkpoint-commits" => self.checkpoint_commits = Some(positive(arg)? as u64),
            "--cache-mib" => self.cache_bytes = Some((positive(arg)? * 1_048_576.0) as usize),
            "--store" => self.stores = one_or_both(arg, [("disk", Disk), ("postgres", Postgres)])?,
            "--shape" => self.shapes = one_or_both(arg, [("1", 1), ("10", 10)])?,
            "--loads" => self.loads = arg.split(',').map(positive).collect::<Result<_, _>>()?,
            _ => return Err("unknown option".to_owned()),
        }
        Ok(())
    }
}

fn positive(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(number) if number.is_finite() && number > 0.0 => Ok(number),
        _ => Err(format!("{value} is not a positive number")),
    }
}

fn one_or_both<T: Copy>(value: &str, choices: [(&str, T); 2]) -> Result<Vec<T>, String> {
    let [(first, a), (second, b)] = choices;
    match value {
        "both" => Ok(vec![a, b]),
        _ if value == first => Ok(vec![a]),
        _ if value == second => Ok(vec![b]),
        _ => Err(format!("{value} is not {first}, {second} or both")),
    }
}

/// The `live` bench's flow: `n` steps of the no-op idempotent effect.
async fn steps(ctx: FlowCtx, n: u64) -> Result<(), FlowError> {
    for i in 0..n {
        ctx.execute("noop", &i).await?;
    }
    Ok(())
}

fn runtime<S: EventStore>(store: S) -> Runtime<S> {
    let noop = FnEffect::new(true, |call: EffectCall| async move {
        EffectOutcome::ok(call.input)
    });
    Runtime::builder(store)
        .flow(flow_fn("steps", 1, steps))
        .effect("noop", noop)
        .build()
        .expect("runtime")
}

/// Starts execution `name` of `shape` steps and waits for its end; an error says why it did not
/// complete.
async fn run_one<S: EventStore>(loom: &Runtime<S>, name: &str, shape: u64) -> Result<(), String> {
    let execution = ExecutionId::new(name).map_err(|error| error.to_string())?;
    let options = StartOptions::new(execution.clone()).grant("noop");
    loom.start("steps", &shape, options)
        .await
        .map_err(|error| format!("start {name}: {error}"))?;
    match loom.wait(&execution).await {
        Ok(state) if state.status() == ExecutionStatus::Completed => Ok(()),
        Ok(state) => Err(format!("{name} ended {:?}", state.status())),
        Err(error) => Err(format!("wait {name}: {error}")),
    }
}

/// A fresh disk store in a scratch directory of its own, and its probe.
fn fresh_disk(options: &Options) -> (DiskStore, Probe) {
    let scratch = support::scratch_dir();
    let mut config = loom_kernel::DiskStoreConfig::default();
    if let Some(commits) = options.checkpoint_commits {
        config.checkpoint_commits = commits;
    }
    if let Some(bytes) = options.cache_bytes {
        config.cache_size_bytes = bytes;
    }
    let store = DiskStore::open_with(scratch.path().join("soak.redb"), config).expect("disk store");
    let probe = Probe::Disk {
        store: store.clone(),
        writes_before: Mutex::default(),
        _scratch: scratch,
    };
    (store, probe)
}

/// A fresh PostgreSQL store on a new schema, and its probe.
async fn fresh_postgres(url: &str) -> (PostgresStore, Probe) {
    let schema = fresh_schema("soak");
    let config = PostgresStoreConfig::new(url).schema(&schema);
    let store = PostgresStore::connect(config).await;
    let client = connect(url).await.expect("postgres connection for sizes");
    (
        store.expect("postgres store"),
        Probe::Postgres {
            client,
            schema,
            server: ServerFigures::new(),
        },
    )
}

async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// The server's URL, or `None` after saying why PostgreSQL is skipped: a URL that no server
/// answers is skipped too, rather than failing halfway through a series of runs.
async fn postgres_url() -> Option<String> {
    let url = server_url("soak bench (postgres)")?;
    let error = match connect(&url).await {
        Ok(_) => return Some(url),
        Err(error) => error,
    };
    eprintln!(
        "\n*** SKIPPED soak bench (postgres): no server answers at {url} ({error}).\n\
         *** Run `cargo xtask pg-up` to start one.\n"
    );
    None
}

/// Executions completed per second by `clients` closed-loop clients, counted after a warm-up.
async fn closed_loop<S: EventStore>(
    loom: Runtime<S>,
    shape: u64,
    clients: u64,
    counted: Duration,
) -> f64 {
    let counting_from = Instant::now() + CALIBRATION_WARM_UP;
    let until = counting_from + counted;
    let completed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for client in 0..clients {
        let (loom, completed) = (loom.clone(), Arc::clone(&completed));
        tasks.push(tokio::spawn(async move {
            for n in 0.. {
                let outcome = run_one(&loom, &format!("cal-{client}-{n}"), shape).await;
                if let Err(error) = &outcome {
                    eprintln!("soak: calibration execution failed: {error}");
                }
                let now = Instant::now();
                if now >= until {
                    break;
                }
                if now >= counting_from && outcome.is_ok() {
                    completed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("calibration client");
    }
    loom.shutdown().await;
    completed.load(Ordering::Relaxed) as f64 / counted.as_secs_f64()
}

/// The maximum: the best closed-loop rate over the ramp of client counts (each level on a
/// fresh store), then the highest open-loop rate under it that keeps up (`open_loop_ramp`).
async fn calibrate<S: EventStore + Clone>(
    store: &str,
    fresh: &impl AsyncFn() -> (S, Probe),
    shape: u64,
    options: &Options,
) -> f64 {
    let (mut closed_rate, mut best_clients) = (0.0, 0);
    for clients in CALIBRATION_CLIENTS {
        let (events, probe) = fresh().await;
        let rate = closed_loop(runtime(events), shape, clients, options.calibration).await;
        probe.discard().await;
        println!("soak-calibrate store={store} shape={shape} clients={clients} rate={rate:.0}");
        let gained = rate > closed_rate * CALIBRATION_GAIN;
        if rate > closed_rate {
            (closed_rate, best_clients) = (rate, clients);
        }
        if !gained {
            break;
        }
    }
    let kept_up = open_loop_ramp(store, fresh, shape, closed_rate, options.ramp_step).await;
    println!(
        "soak-max store={store} shape={shape} rate={kept_up:.0} closed_loop_rate={closed_rate:.0} clients={best_clients}"
    );
    kept_up
}

/// The highest open-loop rate that kept up for a whole step: from half the closed loop's
/// figure (halved again until a step keeps up), 10% more each step, all steps on one store
/// (which grows as a soak's does), until a step completes less than 95% of what it offered in
/// one of its intervals (the last aside).
/// The closed loop's figure overstates it: its clients start the next execution only when one
/// ends, so a slower moment lowers the load instead of building a backlog; an open loop past
/// its maximum builds one, and more executions in flight make each slower (measured: 38,131
/// executions/s closed, and an open loop at 80% of that fell behind at once). Steps on fresh
/// stores overstate it too: 80% of such a ramp's figure (25,212/s) kept up for minutes, but
/// with its tail at 100 ms.
async fn open_loop_ramp<S: EventStore + Clone>(
    store: &str,
    fresh: &impl AsyncFn() -> (S, Probe),
    shape: u64,
    closed_rate: f64,
    step_length: Duration,
) -> f64 {
    let (events, probe) = fresh().await;
    let mut step_number = 0;
    let mut keeps_up = async |rate: f64| {
        step_number += 1;
        let labels = format!("store={store} shape={shape} load=ramp rate={rate:.0}");
        let mut step = SoakRun::with_length(labels, shape, rate, step_length, RAMP_INTERVAL);
        step.id_prefix = format!("ramp{step_number}");
        let failures = Arc::new(step).run(runtime(events.clone()), &probe).await;
        let kept_up = !failures
            .iter()
            .any(|failure| failure.ends_with("fell_behind"));
        println!("soak-ramp store={store} shape={shape} rate={rate:.0} kept_up={kept_up}");
        kept_up
    };
    // Down by halves until a step keeps up (a store whose closed loop gains from a crowd of
    // clients, as PostgreSQL's group commit does, may keep up with far less in an open loop)...
    let mut rate = closed_rate * RAMP_START;
    while !keeps_up(rate).await {
        rate /= 2.0;
        if rate < closed_rate / RAMP_FLOOR_DIVISOR {
            return 0.0;
        }
    }
    // ...then up by 10% while it does.
    let mut kept_up = rate;
    rate *= RAMP_FACTOR;
    while rate <= closed_rate && keeps_up(rate).await {
        kept_up = rate;
        rate *= RAMP_FACTOR;
    }
    probe.discard().await;
    kept_up
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LONGEST_LATENCY_US, 3).expect("histogram bounds")
}

/// Latencies of the executions that ended, in the current interval and in the run, and how
/// many ended and failed in the run.
struct Recorder {
    interval: Histogram<u64>,
    whole: Histogram<u64>,
    failed: u64,
    ended: u64,
}

impl Recorder {
    fn record(&mut self, latency: Duration, outcome: Result<(), String>) {
        self.ended += 1;
        match outcome {
            Ok(()) => {
                let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
                self.interval.saturating_record(micros);
                self.whole.saturating_record(micros);
            }
            Err(error) => {
                // A few say what goes wrong; the count says how often.
                if self.failed < 3 {
                    eprintln!("soak: execution failed: {error}");
                }
                self.failed += 1;
            }
        }
    }
}

/// An interval's figures that the verdict judges.
struct IntervalFigures {
    done: u64,
    p50_us: u64,
    p999_us: u64,
    /// NaN where it could not be read.
    rss_mib: f64,
}

/// One soak run, shared by its generator, executions and reports: `total` executions of
/// `shape` steps, the `i`-th due at `t0 + i / rate`.
struct SoakRun {
    labels: String,
    shape: u64,
    rate: f64,
    run_length: Duration,
    interval: Duration,
    t0: Instant,
    total: u64,
    /// Before each execution's number in its id: ramp steps share a store.
    id_prefix: String,
    started: AtomicU64,
    recorder: Mutex<Recorder>,
    /// The machine's disks, read with the store at each interval's end.
    disks: DiskFigures,
}

impl SoakRun {
    fn new(store: &str, shape: u64, load: f64, rate: f64, options: &Options) -> Self {
        let labels = format!("store={store} shape={shape} load={load:.2} rate={rate:.0}");
        Self::with_length(labels, shape, rate, options.run_length, options.interval)
    }

    fn with_length(
        labels: String,
        shape: u64,
        rate: f64,
        run_length: Duration,
        interval: Duration,
    ) -> Self {
        let recorder = Recorder {
            interval: histogram(),
            whole: histogram(),
            failed: 0,
            ended: 0,
        };
        SoakRun {
            labels,
            shape,
            rate,
            run_length,
            interval,
            // A moment to set the generator up, so that the first executions are not late.
            t0: Instant::now() + Duration::from_millis(50),
            total: (run_length.as_secs_f64() * rate).floor() as u64,
            id_prefix: "soak".to_owned(),
            started: AtomicU64::new(0),
            recorder: Mutex::new(recorder),
            disks: DiskFigures::new(),
        }
    }

    /// Runs the open loop to its end and drains it; what broke the verdict's criteria.
    async fn run<S: EventStore>(self: Arc<Self>, loom: Runtime<S>, probe: &Probe) -> Vec<String> {
        probe.begin().await;
        self.disks.start();
        let generator = tokio::spawn(Arc::clone(&self).generate(loom.clone()));
        let intervals = (self.run_length.as_secs_f64() / self.interval.as_secs_f64()).ceil() as u64;
        let mut figures = Vec::new();
        for index in 1..intervals {
            tokio::time::sleep_until(self.t0 + self.interval.mul_f64(index as f64)).await;
            figures.push(self.report_interval(index, probe).await);
        }
        generator.await.expect("load generator");
        let drained = self.drain().await;
        figures.push(self.report_interval(intervals, probe).await);
        loom.shutdown().await;
        self.summarise(&figures, drained)
    }

    /// Starts each execution when it is due, on its own task, never waiting for earlier ones:
    /// woken late, it starts all that are due at once, and their latencies still count from
    /// when they were due.
    async fn generate<S: EventStore>(self: Arc<Self>, loom: Runtime<S>) {
        let intended_start = |i: u64| self.t0 + Duration::from_secs_f64(i as f64 / self.rate);
        tokio::time::sleep_until(self.t0).await;
        let mut next = 0;
        while next < self.total {
            let elapsed = Instant::now().saturating_duration_since(self.t0);
            let due = ((elapsed.as_secs_f64() * self.rate) as u64 + 1).min(self.total);
            for i in next..due {
                let (loom, run) = (loom.clone(), Arc::clone(&self));
                let intended = intended_start(i);
                self.started.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let outcome =
                        run_one(&loom, &format!("{}-{i}", run.id_prefix), run.shape).await;
                    let latency = intended.elapsed();
                    if let Ok(mut recorder) = run.recorder.lock() {
                        recorder.record(latency, outcome);
                    }
                });
            }
            next = due;
            if next < self.total {
                tokio::time::sleep_until(intended_start(next)).await;
            }
        }
    }

    /// Waits until every execution has ended, up to [`DRAIN_LIMIT`]; whether they all did.
    async fn drain(&self) -> bool {
        let all_ended = async {
            while self.recorder.lock().expect("recorder").ended < self.total {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(DRAIN_LIMIT, all_ended).await.is_ok()
    }

    async fn report_interval(&self, index: u64, probe: &Probe) -> IntervalFigures {
        // The lock is let go before the store's size is read.
        let (latencies, failed, in_flight) = {
            let mut recorder = self.recorder.lock().expect("recorder");
            let latencies = std::mem::replace(&mut recorder.interval, histogram());
            let in_flight = self.started.load(Ordering::Relaxed) - recorder.ended;
            (latencies, recorder.failed, in_flight)
        };
        let rss_mib = rss_mib().unwrap_or(f64::NAN);
        // NaN where a size could not be read: the line keeps its fields.
        let store_bytes = probe.store_bytes().await;
        let store_mib = store_bytes.map_or(f64::NAN, |bytes| bytes as f64 / 1_048_576.0);
        let store_figures = probe.interval_figures().await + &self.disks.interval();
        println!(
            "soak {} interval={index} at_s={:.0} done={} failed={failed} in_flight={in_flight} \
             {} rss_mib={:.1} store_mib={store_mib:.1}{}",
            self.labels,
            self.t0.elapsed().as_secs_f64(),
            latencies.len(),
            percentiles(&latencies),
            rss_mib,
            store_figures,
        );
        IntervalFigures {
            done: latencies.len(),
            p50_us: latencies.value_at_quantile(0.5),
            p999_us: latencies.value_at_quantile(0.999),
            rss_mib,
        }
    }

    fn summarise(&self, figures: &[IntervalFigures], drained: bool) -> Vec<String> {
        let recorder = self.recorder.lock().expect("recorder");
        let offered_per_interval = self.rate * self.interval.as_secs_f64();
        let mut failures = verdict_failures(figures, offered_per_interval);
        if recorder.failed > 0 {
            failures.push(format!("{}_executions_failed", recorder.failed));
        }
        if !drained {
            failures.push("executions_still_running_after_the_drain_limit".to_owned());
        }
        let verdict = match failures.is_empty() {
            true => "ok".to_owned(),
            false => format!("fail reasons={}", failures.join(",")),
        };
        let failures_found = failures.clone();
        println!(
            "soak-summary {} minutes={:.2} done={} failed={} {} verdict={verdict}",
            self.labels,
            self.run_length.as_secs_f64() / 60.0,
            recorder.whole.len(),
            recorder.failed,
            percentiles(&recorder.whole),
        );
        failures_found
    }
}

/// The intervals (from 1) that broke a criterion: p99.9 above 10 times p50 (or nothing
/// completed), RSS more than 10% away from its value after the first interval, or fewer
/// executions done than 95% of those offered (`offered_per_interval`; the last interval, which
/// also counts the drain, aside): an overload, whose backlog the first two would not show once
/// p50 itself is seconds.
fn verdict_failures(figures: &[IntervalFigures], offered_per_interval: f64) -> Vec<String> {
    let mut failures = Vec::new();
    let baseline = figures.first().map_or(f64::NAN, |first| first.rss_mib);
    let last = figures.len();
    for (index, interval) in (1..).zip(figures) {
        if index < last && (interval.done as f64) < KEPT_UP * offered_per_interval {
            failures.push(format!("interval{index}_fell_behind"));
        }
        if interval.done == 0 {
            failures.push(format!("interval{index}_nothing_completed"));
        } else if interval.p999_us > P999_OVER_P50_LIMIT * interval.p50_us {
            failures.push(format!("interval{index}_p999_over_10x_p50"));
        }
        // NaN compares false: an RSS that could not be read fails nothing.
        if (interval.rss_mib - baseline).abs() > RSS_DRIFT_LIMIT * baseline {
            failures.push(format!("interval{index}_rss_off_by_over_10pct"));
        }
    }
    failures
}

fn percentiles(latencies: &Histogram<u64>) -> String {
    format!(
        "p50_us={} p99_us={} p999_us={} max_us={}",
        latencies.value_at_quantile(0.5),
        latencies.value_at_quantile(0.99),
        latencies.value_at_quantile(0.999),
        latencies.max()
    )
}

/// The process's resident memory (VmRSS), in MiB.
fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|arg| arg == "--list") {
        return;
    }
    let options = Options::parse(&args).unwrap_or_else(|error| {
        eprintln!("soak: {error}\n{USAGE}");
        std::process::exit(2);
    });
    let tokio = support::tokio_runtime();
    for &store in &options.stores {
        match store {
            StoreKind::Disk => {
                let fresh = async || fresh_disk(&options);
                tokio.block_on(soak_store("disk", fresh, &options));
            }
            StoreKind::Postgres => {
                if let Some(url) = tokio.block_on(postgres_url()) {
                    let fresh = async || fresh_postgres(&url).await;
                    tokio.block_on(soak_store("postgres", fresh, &options));
                }
            }
        }
    }
}

/// For each shape: calibrates (unless `--rate` is given), then soaks once per load; each
/// calibration level and soak run on a fresh store from `fresh`, none inheriting another's data.
async fn soak_store<S: EventStore + Clone>(
    store: &'static str,
    fresh: impl AsyncFn() -> (S, Probe),
    options: &Options,
) {
    for &shape in &options.shapes {
        let max_rate = match options.max_rate {
            Some(rate) => rate,
            None => calibrate(store, &fresh, shape, options).await,
        };
        if max_rate <= 0.0 {
            eprintln!("soak: {store} shape={shape}: nothing completed in calibration");
            continue;
        }
        for &load in &options.loads {
            let (events, probe) = fresh().await;
            let run = SoakRun::new(store, shape, load, max_rate * load, options);
            Arc::new(run).run(runtime(events), &probe).await;
            probe.discard().await;
        }
    }
}
