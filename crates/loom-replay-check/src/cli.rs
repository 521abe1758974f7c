//! The `replay-check` and `export-log` commands.
//!
//! Exit codes of `replay-check`: 0 when every execution checked replays as recorded, 1 when at
//! least one diverges, 2 when the check could not run (a source that cannot be read, flows that
//! do not compose) or could not check some execution (an invalid or unsupported log, a flow
//! that is not registered) and found no divergence, or refused a source holding executions of
//! flows the program does not have (it checks nothing then: another program recorded them).

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use loom_kernel::DataClassification;
use loom_kernel::FlowSet;
use loom_kernel::{
    DiskStore, DiskStoreConfig, EventEnvelope, EventStore, EventStoreExt, ExecutionId,
};
use tokio::sync::mpsc;

use crate::check::{Checker, Finding, Outcome};
use crate::jsonl;
use loom_kernel::error_sentence;

/// Checks that recorded executions replay deterministically against today's flow code.
#[derive(Debug, Parser)]
#[command(name = "replay-check")]
pub struct CheckArgs {
    /// An embedded store file (it must not be open in another process).
    #[arg(long, value_name = "PATH", conflicts_with = "logs")]
    pub store: Option<PathBuf>,
    /// A directory of exported logs (`<execution id>.jsonl`, see `export-log`).
    #[arg(long, value_name = "DIR")]
    pub logs: Option<PathBuf>,
    /// Only executions of this flow.
    #[arg(long, value_name = "NAME")]
    pub flow: Option<String>,
    /// Only these executions (repeatable).
    #[arg(long = "execution", value_name = "ID")]
    pub executions: Vec<String>,
    /// Only executions started at or after this time: Unix milliseconds, `YYYY-MM-DD` or
    /// `YYYY-MM-DDTHH:MM:SSZ` (UTC). Executions with no recorded start time are kept.
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<u64>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Executions checked at once; defaults to the number of cores.
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Mask the value at this dot-path in every finding printed (K10-R6); repeatable.
    #[arg(long = "mask", value_name = "PATH")]
    pub masks: Vec<String>,
    /// A file of classified dot-paths, one per line (`#` starts a comment). Default:
    /// `<store file>.masks` beside `--store` when it exists (the file the process running the
    /// flows writes from its classification).
    #[arg(long, value_name = "FILE")]
    pub mask_file: Option<PathBuf>,
}

impl CheckArgs {
    /// The classification findings are masked with: `--mask` paths, plus those of
    /// `--mask-file` (or of the `<store>.masks` file beside `--store`, when there is one).
    pub fn classification(&self) -> Result<DataClassification, BoxError> {
        let beside_store = self
            .store
            .as_ref()
            .map(|store| PathBuf::from(format!("{}.masks", store.display())))
            .filter(|file| file.is_file());
        let mut paths = self.masks.clone();
        if let Some(file) = self.mask_file.clone().or(beside_store) {
            let text = std::fs::read_to_string(&file).map_err(|error| {
                format!("cannot read the mask file {}: {error}", file.display())
            })?;
            paths.extend(loom_kernel::mask_file_paths(&text).map(str::to_owned));
        }
        Ok(DataClassification::mask_paths(paths)?)
    }
}

/// Writes recorded executions as JSON Lines files, one per execution.
#[derive(Debug, Parser)]
#[command(name = "export-log")]
pub struct ExportArgs {
    /// The embedded store file to read.
    #[arg(long, value_name = "PATH")]
    pub store: PathBuf,
    /// The directory to write `<execution id>.jsonl` files into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Only these executions (repeatable).
    #[arg(long = "execution", value_name = "ID")]
    pub executions: Vec<String>,
}

/// Runs `replay-check` with `args` (the first is the program name) against `flows`.
pub fn main(
    flows: FlowSet,
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
) -> ExitCode {
    ExitCode::from(check_command(&flows, args))
}

/// [`main`], returning the exit status as a number.
pub fn check_command(
    flows: &FlowSet,
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
) -> u8 {
    let args = match CheckArgs::try_parse_from(args) {
        Ok(args) => args,
        Err(error) => {
            usage(&error);
            return if error.use_stderr() { 2 } else { 0 };
        }
    };
    match run(flows, &args) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("replay-check: {}", error_sentence(&*error));
            2
        }
    }
}

/// Runs `export-log` with `args` (the first is the program name).
pub fn export_main(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> ExitCode {
    let args = match ExportArgs::try_parse_from(args) {
        Ok(args) => args,
        Err(error) => {
            usage(&error);
            return if error.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match export(&args) {
        Ok((written, failed)) => {
            eprintln!(
                "export-log: wrote {written} executions to {}",
                args.out.display()
            );
            if failed == 0 {
                ExitCode::SUCCESS
            } else {
                eprintln!("export-log: {failed} executions could not be exported (see above)");
                ExitCode::from(2)
            }
        }
        Err(error) => {
            eprintln!("export-log: {}", error_sentence(&*error));
            ExitCode::from(2)
        }
    }
}

/// Prints a command-line error (or `--help`, `--version`) with `print!`/`eprint!`, which a test
/// harness captures: a test of a bad argument then prints nothing unless it fails.
fn usage(error: &clap::Error) {
    let styled = error.render();
    // Colours only on a terminal, as clap itself would.
    let terminal = if error.use_stderr() {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    let text = match terminal {
        true => styled.ansi().to_string(),
        false => styled.to_string(),
    };
    if error.use_stderr() {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
}

/// Any error, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `replay-check` over any [`EventStore`] (PostgreSQL, or a store of your own) that the
/// caller opens: `open` runs on the check's Tokio runtime, `label` names the store in the
/// report. `args` take the same filters as [`main`]; `--store` and `--logs` must be absent.
/// Returns the exit status as a number.
pub fn check_store_command<S, F, Fut>(
    flows: &FlowSet,
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    label: &str,
    open: F,
) -> u8
where
    S: EventStore + Clone,
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<S, BoxError>>,
{
    let args = match CheckArgs::try_parse_from(args) {
        Ok(args) => args,
        Err(error) => {
            usage(&error);
            return if error.use_stderr() { 2 } else { 0 };
        }
    };
    if args.store.is_some() || args.logs.is_some() {
        eprintln!("replay-check: {label} is the source: give neither --store nor --logs");
        return 2;
    }
    let outcome = (|| {
        let started = Instant::now();
        let checker = Arc::new(Checker::with_classification(flows, args.classification()?)?);
        let jobs = jobs_of(&args);
        let runtime = tokio_runtime(jobs)?;
        let only = parse_ids(&args.executions)?;
        let store = runtime.block_on(open())?;
        let ids = runtime.block_on(store_ids(&store, &only))?;
        let source: Source<S> = Source::Any(store, ids);
        Ok::<_, BoxError>(finish(
            &runtime, source, checker, flows, &args, jobs, label, started,
        ))
    })();
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("replay-check: {}", error_sentence(&*error));
            2
        }
    }
}

fn jobs_of(args: &CheckArgs) -> usize {
    args.jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

/// Executions read from a store at once.
const READ_BATCH: usize = 32;

/// How `replay-check` opens a store (read-only, so no page check runs at open; the store's own
/// checks apply to every record read): with a small page cache. The check reads each record
/// once, in key order, so the cache need only hold the B-trees' upper pages; a larger one
/// costs memory.
fn check_store_config() -> DiskStoreConfig {
    DiskStoreConfig {
        cache_size_bytes: 2 << 20,
        ..DiskStoreConfig::default()
    }
}

fn tokio_runtime(jobs: usize) -> Result<tokio::runtime::Runtime, BoxError> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(jobs.max(1))
        .enable_all()
        .build()?)
}

fn parse_ids(ids: &[String]) -> Result<Vec<ExecutionId>, BoxError> {
    ids.iter()
        .map(|id| ExecutionId::new(id).map_err(|err| err.into()))
        .collect()
}

async fn store_ids<S: EventStore>(
    store: &S,
    only: &[ExecutionId],
) -> Result<Vec<ExecutionId>, BoxError> {
    if !only.is_empty() {
        return Ok(only.to_vec());
    }
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let page = store.list_executions(after.as_ref(), 1024).await?;
        ids.extend(page.executions.into_iter().map(|summary| summary.id));
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(ids),
        }
    }
}

/// Exports every execution asked for: one that cannot be read or written is reported and
/// the others are still exported. How many were written, and how many failed.
fn export(args: &ExportArgs) -> Result<(usize, usize), BoxError> {
    let only = parse_ids(&args.executions)?;
    std::fs::create_dir_all(&args.out)?;
    tokio_runtime(2)?.block_on(async {
        let store = DiskStore::open_read_only(&args.store, DiskStoreConfig::default())?;
        let (mut written, mut failed) = (0, 0);
        for id in store_ids(&store, &only).await? {
            let exported = match store.read_all(&id).await {
                Ok(log) => jsonl::write_log(&args.out, &log).map_err(BoxError::from),
                Err(error) => Err(error.into()),
            };
            match exported {
                Ok(Some(_)) => written += 1,
                Ok(None) => {}
                Err(error) => {
                    failed += 1;
                    eprintln!("export-log: {id}: {}", error_sentence(&*error));
                }
            }
        }
        Ok((written, failed))
    })
}

/// Where the logs come from.
enum Source<S> {
    Store(DiskStore, Vec<ExecutionId>),
    /// A store the caller opened, read through the `EventStore` trait.
    Any(S, Vec<ExecutionId>),
    Logs(Vec<PathBuf>),
}

fn run(flows: &FlowSet, args: &CheckArgs) -> Result<u8, BoxError> {
    let started = Instant::now();
    let checker = Arc::new(Checker::with_classification(flows, args.classification()?)?);
    let jobs = jobs_of(args);
    let runtime = tokio_runtime(jobs)?;
    let only = parse_ids(&args.executions)?;
    let (source, label): (Source<DiskStore>, _) = match (&args.store, &args.logs) {
        (Some(path), _) => {
            // Read-only: a missing or empty file is an error, never a new empty store.
            let store = DiskStore::open_read_only(path, check_store_config())?;
            let ids = runtime.block_on(store_ids(&store, &only))?;
            (Source::Store(store, ids), path.display().to_string())
        }
        (None, Some(dir)) => {
            let mut paths = jsonl::list_logs(dir)?;
            if !only.is_empty() {
                paths.retain(|path| only.iter().any(|id| *path == jsonl::path_for(dir, id)));
            }
            (Source::Logs(paths), dir.display().to_string())
        }
        (None, None) => return Err("give --store <PATH> or --logs <DIR>".into()),
    };
    Ok(finish(
        &runtime, source, checker, flows, args, jobs, &label, started,
    ))
}

/// Checks everything `source` holds, prints the report, and returns the exit status. A source
/// holding executions of flows that `flows` does not have is refused as a whole (exit 2): it
/// was written by another program, whose own flows must check it.
#[allow(clippy::too_many_arguments)]
fn finish<S: EventStore + Clone>(
    runtime: &tokio::runtime::Runtime,
    source: Source<S>,
    checker: Arc<Checker>,
    flows: &FlowSet,
    args: &CheckArgs,
    jobs: usize,
    label: &str,
    started: Instant,
) -> u8 {
    let total = match &source {
        Source::Store(_, ids) | Source::Any(_, ids) => ids.len(),
        Source::Logs(paths) => paths.len(),
    };
    let progress = Progress::new(total as u64, args.json);
    let outcomes = runtime.block_on(check_all(source, checker, args, jobs, &progress));
    progress.finish();
    let unknown = UnknownFlows::find(flows, &outcomes);
    if !unknown.is_empty() {
        if args.json {
            println!("{}", unknown.to_json(label));
        } else {
            eprintln!("replay-check: {}", unknown.sentence(label));
        }
        return 2;
    }
    let report = Report::new(outcomes, started.elapsed().as_secs_f64());
    if args.json {
        println!("{}", report.to_json(label));
    } else {
        report.print(label);
    }
    report.exit_code()
}

async fn check_all<S: EventStore + Clone>(
    source: Source<S>,
    checker: Arc<Checker>,
    args: &CheckArgs,
    jobs: usize,
    progress: &Progress,
) -> Vec<Outcome> {
    // Outcomes travel a batch at a time (`None` for an execution the filters leave out): one
    // wake-up of the collecting thread per batch rather than per execution.
    let (done, mut results) = mpsc::channel::<Vec<Option<Outcome>>>(jobs * 4);
    let limit = Arc::new(tokio::sync::Semaphore::new(jobs * 2));
    let flow = args.flow.clone();
    let since = args.since;
    let keep = move |log: &[EventEnvelope]| -> bool {
        let Some(first) = log.first() else {
            return true;
        };
        let flow_ok = match (&flow, &first.event) {
            (Some(name), loom_kernel::Event::ExecutionStarted(started)) => started.flow == *name,
            (Some(_), _) => false,
            (None, _) => true,
        };
        let since_ok = match (since, first.recorded_at_ms) {
            (Some(since), Some(at)) => at >= since,
            _ => true,
        };
        flow_ok && since_ok
    };
    let keep = Arc::new(keep);
    let spawner = {
        let done = done.clone();
        async move {
            match source {
                // Small batches: one read transaction and one blocking-pool trip per batch.
                Source::Store(store, ids) => {
                    check_batches(&ids, &limit, &done, |batch| {
                        let (store, checker, keep) =
                            (store.clone(), Arc::clone(&checker), Arc::clone(&keep));
                        async move {
                            match store.read_stored_logs(&batch).await {
                                Ok(logs) => {
                                    logs.iter()
                                        .map(|stored| match stored.decode() {
                                            Ok(log) => keep(&log)
                                                .then(|| checker.check_decoded(log, stored)),
                                            Err(error) => Some(Outcome::unread(
                                                stored.execution_id().to_string(),
                                                &error,
                                            )),
                                        })
                                        .collect()
                                }
                                Err(error) => unread_batch(&batch, &error),
                            }
                        }
                    })
                    .await;
                }
                Source::Any(store, ids) => {
                    check_batches(&ids, &limit, &done, |batch| {
                        let (store, checker, keep) =
                            (store.clone(), Arc::clone(&checker), Arc::clone(&keep));
                        async move {
                            match store.read_logs(&batch).await {
                                Ok(logs) => logs
                                    .into_iter()
                                    .map(|log| keep(&log).then(|| checker.check(log)))
                                    .collect(),
                                Err(error) => unread_batch(&batch, &error),
                            }
                        }
                    })
                    .await;
                }
                Source::Logs(paths) => {
                    for path in paths {
                        let Ok(permit) = Arc::clone(&limit).acquire_owned().await else {
                            break;
                        };
                        let (checker, keep, done) =
                            (Arc::clone(&checker), Arc::clone(&keep), done.clone());
                        tokio::spawn(async move {
                            let outcome = match jsonl::read_log(&path) {
                                Ok(log) if keep(&log) => Some(checker.check(log)),
                                Ok(_) => None,
                                Err(error) => Some(Outcome::unread(
                                    path.file_stem()
                                        .map(|stem| stem.to_string_lossy().into_owned())
                                        .unwrap_or_default(),
                                    &error,
                                )),
                            };
                            let _ = done.send(vec![outcome]).await;
                            drop(permit);
                        });
                    }
                }
            }
        }
    };
    drop(done);
    let collect = async {
        let mut outcomes = Vec::new();
        while let Some(batch) = results.recv().await {
            for outcome in batch {
                progress.tick();
                outcomes.extend(outcome);
            }
        }
        outcomes
    };
    let ((), mut outcomes) = futures::join!(spawner, collect);
    outcomes.sort_by(|a, b| a.execution.cmp(&b.execution));
    outcomes
}

/// The flows a source holds executions of that the checking program does not have, with how
/// many executions each; and the flows it has, to name them.
struct UnknownFlows {
    unknown: std::collections::BTreeMap<(String, u32), usize>,
    known: std::collections::BTreeSet<(String, u32)>,
}

impl UnknownFlows {
    fn find(flows: &FlowSet, outcomes: &[Outcome]) -> Self {
        let known: std::collections::BTreeSet<(String, u32)> = flows
            .iter()
            .map(|flow| (flow.name().to_owned(), flow.version()))
            .collect();
        let mut unknown = std::collections::BTreeMap::new();
        for flow in outcomes.iter().filter_map(|outcome| outcome.flow.as_ref()) {
            if !known.contains(flow) {
                *unknown.entry(flow.clone()).or_insert(0) += 1;
            }
        }
        Self { unknown, known }
    }

    fn is_empty(&self) -> bool {
        self.unknown.is_empty()
    }

    fn named(set: impl Iterator<Item = String>) -> String {
        let names: Vec<String> = set.collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }

    /// Why the source is refused, and what to do instead.
    fn sentence(&self, label: &str) -> String {
        let unknown = Self::named(self.unknown.iter().map(|((name, version), count)| {
            format!(
                "{name} v{version} ({count} execution{})",
                if *count == 1 { "" } else { "s" }
            )
        }));
        let known = Self::named(
            self.known
                .iter()
                .map(|(name, version)| format!("{name} v{version}")),
        );
        format!(
            "{label} holds executions of flows this program does not have: {unknown}. It checks \
             only its own flows ({known}), so it cannot say whether those replay. Check them \
             with a replay-check built with the flows that recorded them (docs/REPLAY-CHECK.md, \
             \"Checking your own flows\"), or pass --flow with one of its own flows to check only that one."
        )
    }

    fn to_json(&self, label: &str) -> serde_json::Value {
        let unknown: Vec<serde_json::Value> = self
            .unknown
            .iter()
            .map(|((name, version), count)| {
                serde_json::json!({"flow": name, "version": version, "executions": count})
            })
            .collect();
        let known: Vec<serde_json::Value> = self
            .known
            .iter()
            .map(|(name, version)| serde_json::json!({"flow": name, "version": version}))
            .collect();
        serde_json::json!({
            "source": label, "result": "refused", "reason": self.sentence(label),
            "unknown_flows": unknown, "known_flows": known,
        })
    }
}

/// Checks `ids` a batch of [`READ_BATCH`] at a time, each batch on its own task once a permit
/// of `limit` is free, and sends each batch's outcomes to `done`.
async fn check_batches<F, Fut>(
    ids: &[ExecutionId],
    limit: &Arc<tokio::sync::Semaphore>,
    done: &mpsc::Sender<Vec<Option<Outcome>>>,
    check: F,
) where
    F: Fn(Vec<ExecutionId>) -> Fut,
    Fut: std::future::Future<Output = Vec<Option<Outcome>>> + Send + 'static,
{
    for batch in ids.chunks(READ_BATCH) {
        let Ok(permit) = Arc::clone(limit).acquire_owned().await else {
            break;
        };
        let (checked, done) = (check(batch.to_vec()), done.clone());
        tokio::spawn(async move {
            let _ = done.send(checked.await).await;
            drop(permit);
        });
    }
}

/// An unread outcome for each execution of a batch that could not be read.
fn unread_batch(batch: &[ExecutionId], error: &dyn std::error::Error) -> Vec<Option<Outcome>> {
    batch
        .iter()
        .map(|id| Some(Outcome::unread(id.to_string(), error)))
        .collect()
}

/// A progress bar on a terminal, a line per tenth otherwise.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u64,
    done: std::sync::atomic::AtomicU64,
    quiet: bool,
}

impl Progress {
    fn new(total: u64, quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} executions ({per_sec}, {eta} left)",
            ) {
                bar.set_style(style);
            }
            bar
        });
        Self {
            bar,
            total,
            done: std::sync::atomic::AtomicU64::new(0),
            quiet,
        }
    }

    fn tick(&self) {
        let done = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        match &self.bar {
            Some(bar) => bar.inc(1),
            None if !self.quiet && self.total >= 10 && done.is_multiple_of(self.total / 10) => {
                eprintln!("replay-check: checked {done}/{}", self.total);
            }
            None => {}
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

struct Report {
    outcomes: Vec<Outcome>,
    seconds: f64,
}

impl Report {
    fn new(outcomes: Vec<Outcome>, seconds: f64) -> Self {
        Self { outcomes, seconds }
    }

    fn count(&self, pick: impl Fn(&Finding) -> bool) -> usize {
        self.outcomes.iter().filter(|o| pick(&o.finding)).count()
    }

    fn divergent(&self) -> usize {
        self.count(|f| matches!(f, Finding::Divergent { .. }))
    }

    fn errors(&self) -> usize {
        self.count(|f| matches!(f, Finding::Error { .. }))
    }

    fn events(&self) -> u64 {
        self.outcomes.iter().map(|o| o.events).sum()
    }

    fn exit_code(&self) -> u8 {
        if self.divergent() > 0 {
            1
        } else if self.errors() > 0 {
            2
        } else {
            0
        }
    }

    /// Prints the report on stdout, in one `print!` (which a test harness captures).
    fn print(&self, label: &str) {
        use std::fmt::Write as _;
        let mut out = String::new();
        let flow = |o: &Outcome| {
            o.flow.as_ref().map_or_else(
                || "flow unknown".to_owned(),
                |(name, v)| format!("{name} v{v}"),
            )
        };
        for outcome in &self.outcomes {
            match &outcome.finding {
                Finding::Deterministic => {}
                Finding::Divergent {
                    seq,
                    recorded,
                    attempted,
                } => {
                    let _ = writeln!(
                        out,
                        "DIVERGENT {} ({}) at seq {seq}\n  recorded:  {recorded}\n  attempted: the flow now {attempted}",
                        outcome.execution,
                        flow(outcome)
                    );
                }
                Finding::Error { detail } => {
                    let _ = writeln!(
                        out,
                        "ERROR     {} ({}): {detail}",
                        outcome.execution,
                        flow(outcome)
                    );
                }
            }
        }
        let broken = crate::breaks::summary(&self.outcomes);
        if !broken.is_empty() {
            let _ = write!(out, "\n{broken}");
        }
        let _ = writeln!(out, "\nreplay-check of {label}");
        let _ = writeln!(
            out,
            "{:>10}  {:>10}  {:>9}  {:>6}  {:>8}",
            "executions", "events", "divergent", "errors", "time"
        );
        let _ = writeln!(
            out,
            "{:>10}  {:>10}  {:>9}  {:>6}  {:>7.2}s",
            self.outcomes.len(),
            self.events(),
            self.divergent(),
            self.errors(),
            self.seconds
        );
        print!("{out}");
    }

    fn to_json(&self, label: &str) -> serde_json::Value {
        let findings: Vec<serde_json::Value> = self
            .outcomes
            .iter()
            .filter_map(|o| {
                let (name, version) = o
                    .flow
                    .clone()
                    .map_or((None, None), |(name, version)| (Some(name), Some(version)));
                let base = serde_json::json!({
                    "execution": o.execution, "flow": name, "version": version, "events": o.events,
                });
                let extra = match &o.finding {
                    Finding::Deterministic => return None,
                    Finding::Divergent {
                        seq,
                        recorded,
                        attempted,
                    } => serde_json::json!({
                        "result": "divergent", "seq": seq, "recorded": recorded, "attempted": attempted,
                    }),
                    Finding::Error { detail } => {
                        serde_json::json!({"result": "error", "detail": detail})
                    }
                };
                let mut merged = base;
                if let (Some(merged), Some(extra)) = (merged.as_object_mut(), extra.as_object()) {
                    merged.extend(extra.clone());
                }
                Some(merged)
            })
            .collect();
        serde_json::json!({
            "source": label,
            "summary": {
                "executions": self.outcomes.len(),
                "events": self.events(),
                "deterministic": self.outcomes.len() - self.divergent() - self.errors(),
                "divergent": self.divergent(),
                "errors": self.errors(),
                "seconds": self.seconds,
            },
            "findings": findings,
            "breaks": crate::breaks::breakages(&self.outcomes).iter().map(|b| serde_json::json!({
                "flow": b.flow, "version": b.version, "executions": b.executions,
                "first": {
                    "execution": b.first.execution, "seq": b.first.seq,
                    "recorded": b.first.recorded, "attempted": b.first.attempted,
                },
            })).collect::<Vec<_>>(),
        })
    }
}

/// Unix milliseconds, `YYYY-MM-DD`, or `YYYY-MM-DDTHH:MM:SSZ` (UTC).
fn parse_since(text: &str) -> Result<u64, String> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let bad = || format!("'{text}' is not Unix milliseconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ");
    let (date, time) = match text.split_once('T') {
        Some((date, time)) => (date, Some(time.strip_suffix('Z').ok_or_else(bad)?)),
        None => (text, None),
    };
    let mut parts = date.splitn(3, '-').map(|part| part.parse::<i64>());
    let (Some(Ok(year)), Some(Ok(month)), Some(Ok(day))) =
        (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(bad());
    }
    let seconds_of_day = match time {
        None => 0,
        Some(time) => {
            let mut parts = time.splitn(3, ':').map(|part| part.parse::<i64>());
            let (Some(Ok(h)), Some(Ok(m)), Some(Ok(s))) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            if h > 23 || m > 59 || s > 60 {
                return Err(bad());
            }
            h * 3600 + m * 60 + s
        }
    };
    let days = days_from_civil(year, month, day);
    u64::try_from((days * 86_400 + seconds_of_day) * 1000).map_err(|_| bad())
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::parse_since;

    #[test]
    fn since_accepts_millis_dates_and_utc_times() {
        assert_eq!(parse_since("1764490000000"), Ok(1_764_490_000_000));
        assert_eq!(parse_since("1970-01-01"), Ok(0));
        assert_eq!(parse_since("2026-11-30"), Ok(1_795_996_800_000));
        assert_eq!(parse_since("2026-11-30T00:00:10Z"), Ok(1_795_996_810_000));
        assert!(parse_since("30/11/2026").is_err());
        assert!(parse_since("2026-13-01").is_err());
        assert!(parse_since("2026-11-30T10:00").is_err());
    }
}
