//! The `replay-check` and `export-log` commands.
//!
//! Exit codes of `replay-check`: 0 when every execution checked replays as recorded, 1 when at
//! least one diverges, 2 when the check could not run (a source that cannot be read, flows that
//! do not compose) or could not check some execution (an invalid or unsupported log, a flow
//! that is not registered) and found no divergence, or refused a source holding executions of
//! flows the program does not have (it checks nothing then: another program recorded them).

mod args;
mod check_all;
mod progress;
mod report;

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use loom_kernel::FlowSet;
use loom_kernel::{DiskStore, DiskStoreConfig, EventStore, EventStoreExt, ExecutionId};

pub use args::{CheckArgs, ExportArgs};
use check_all::check_all;
use progress::Progress;
use report::{Report, UnknownFlows};

use crate::check::Checker;
use crate::jsonl;
use loom_kernel::error_sentence;

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
