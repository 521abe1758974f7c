//! The test command's runner: builds the workspace's test binaries with `cargo test --no-run`
//! and runs each as soon as it is linked, several at a time, then the doc tests once the build is
//! over. Most of a test binary's time is spent waiting (fsync, PostgreSQL, child processes, a
//! browser) and the build is CPU-bound, so on two cores the two overlap and three binaries run
//! at once. The integration tests that ran longest last time (`target/xtask-test-times`) are
//! built first and start first, so that the run does not end waiting on one started last. Each
//! binary's output is printed whole when it ends, never interleaved, and the run ends with every
//! binary's time and the totals.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// What `cargo xtask test` was asked for.
#[derive(Debug, Default)]
pub struct TestOptions {
    /// The long tests in full (what CI runs), instead of enough to exercise every path.
    pub long: bool,
    /// How many test binaries run at once; by default one more than the cores.
    pub jobs: Option<usize>,
    /// Given to every test binary (a name filter, `--nocapture`, ...).
    pub test_args: Vec<OsString>,
    /// Environment every test binary gets (the skipped-tests file, the kill tests' rounds).
    pub env: Vec<(OsString, OsString)>,
}

/// What `--long` (and so CI) runs in full where an ordinary run does less: the PostgreSQL kill
/// tests' rounds and pauses, and the cases of the two costliest property tests.
pub const LONG_RUN: [(&str, &str); 4] = [
    ("LOOM_KILL_ROUNDS", "30"),
    ("LOOM_KILL_PAUSES", "5"),
    ("LOOM_STATE_MACHINE_CASES", "10000"),
    ("LOOM_SURFACE_MODEL_CASES", "4000"),
];

/// One thing to run: a test binary, or cargo running the doc tests.
#[derive(Debug, Clone)]
struct Job {
    /// As cargo names it: `loom-kernel tests/kernel/main.rs`, `loom-kernel (doc tests)`.
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    dir: PathBuf,
    env: Vec<(OsString, OsString)>,
    /// Jobs with the same mark never run at once.
    apart: Option<&'static str>,
    /// An integration test's target name (`cargo test --test <name>`).
    test_target: Option<String>,
}

/// The integration tests of the PostgreSQL store: its kill test's worker processes load the
/// machine for a minute or two, which must not overlap the lease timing of its other tests.
const POSTGRES_STORE_TESTS: &str = "loom-store-postgres tests";

/// How a job ended.
#[derive(Debug)]
struct Finished {
    job: Job,
    /// When it started, from the start of the test command's build.
    began: Duration,
    took: Duration,
    passed: bool,
    counts: Counts,
}

/// Added up from the `test result:` lines of libtest.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Counts {
    /// The sum of every `test result: ... N passed; N failed; N ignored; ...` line of `output`.
    fn of(output: &str) -> Self {
        let mut counts = Self::default();
        for line in output.lines() {
            let Some(rest) = line.trim_start().strip_prefix("test result: ") else {
                continue;
            };
            for part in rest.split(';') {
                let mut words = part.split_whitespace().rev();
                let (Some(what), Some(number)) = (words.next(), words.next()) else {
                    continue;
                };
                let Ok(number) = number.parse::<u64>() else {
                    continue;
                };
                match what {
                    "passed" => counts.passed += number,
                    "failed" => counts.failed += number,
                    "ignored" => counts.ignored += number,
                    _ => {}
                }
            }
        }
        counts
    }

    fn add(&mut self, other: Self) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }
}

/// What the runner hears: a test binary built, the build's end, a job's end.
enum Event {
    Built(Job),
    BuildEnded(std::io::Result<std::process::ExitStatus>),
    Ended(Box<Finished>, String),
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// A test failed (every binary ran; the summary names the ones that failed).
    Failed,
    /// The build failed, with cargo's exit code; the tests already started were let end.
    BuildFailed(i32),
}

/// Builds the workspace's test binaries and runs each as soon as it is linked, with the doc tests
/// once the build is over, `jobs` at a time; prints the summary. `ready` is waited for before
/// the first test starts (the PostgreSQL server, started while the build runs).
pub fn run_all(
    root: &Path,
    cargo: &Path,
    options: &TestOptions,
    ready: impl FnOnce(),
) -> Result<Outcome> {
    let started = Instant::now();
    let times_file = root.join("target/xtask-test-times");
    let last = read_times(&times_file);
    let times = &last.seconds;
    let parallel = options.jobs.unwrap_or_else(default_jobs).max(1);
    let (events, heard) = mpsc::channel();
    let first = if last.seconds.is_empty() {
        USUALLY_LONGEST.map(String::from).to_vec()
    } else {
        last.long_tests.clone()
    };
    build(root, cargo, &first, events.clone())?;
    ready();
    let mut waiting: Vec<Job> = Vec::new();
    let mut running = 0;
    let mut build_over = false;
    let mut finished = Vec::new();
    let mut busy = BTreeSet::new();
    loop {
        while running < parallel {
            let Some(job) = take_next(&mut waiting, times, &busy) else {
                break;
            };
            busy.extend(job.apart);
            start(job, started, &events);
            running += 1;
        }
        if build_over && running == 0 && waiting.is_empty() {
            break;
        }
        let Ok(event) = heard.recv() else { break };
        match event {
            Event::Built(mut job) => {
                job.args.extend(options.test_args.iter().cloned());
                job.env.extend(options.env.iter().cloned());
                waiting.push(job);
            }
            Event::BuildEnded(status) => {
                build_over = true;
                match status {
                    Ok(status) if status.success() => {
                        eprintln!(
                            "xtask: test binaries built in {:.1} s ({} of them ran or are running, \
                             {parallel} at a time); the doc tests start now",
                            started.elapsed().as_secs_f64(),
                            finished.len() + running + waiting.len(),
                        );
                        // At once, beside the others: cargo could not build them while the
                        // test binaries built, and nothing ends the run later than they would.
                        start(doc_tests(root, cargo, options), started, &events);
                        running += 1;
                    }
                    failed => {
                        // What was started ends first, so that no test process is left behind.
                        while running > 0 {
                            if let Ok(Event::Ended(done, output)) = heard.recv() {
                                running -= 1;
                                print_job(&done, &output);
                            }
                        }
                        let code = match failed {
                            Ok(status) => {
                                eprintln!("xtask: building the tests failed: cargo {status}");
                                status.code()
                            }
                            Err(error) => {
                                eprintln!("xtask: building the tests failed: {error}");
                                None
                            }
                        };
                        return Ok(Outcome::BuildFailed(code.unwrap_or(101)));
                    }
                }
            }
            Event::Ended(done, output) => {
                running -= 1;
                if let Some(apart) = done.job.apart {
                    busy.remove(apart);
                }
                print_job(&done, &output);
                finished.push(*done);
            }
        }
    }
    let _ = write_times(&times_file, &finished);
    Ok(if summarize(&finished, started.elapsed()) {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}

/// Runs `job` on a thread of its own, which says when it ended.
fn start(job: Job, since: Instant, events: &mpsc::Sender<Event>) {
    let events = events.clone();
    std::thread::spawn(move || {
        let (done, output) = run_job(job, since);
        let _ = events.send(Event::Ended(Box::new(done), output));
    });
}

/// One more than the cores: a test binary spends much of its time waiting.
fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get() + 1)
}

/// `cargo test --workspace --doc`, with the test arguments.
fn doc_tests(root: &Path, cargo: &Path, options: &TestOptions) -> Job {
    let mut args: Vec<OsString> = ["test", "--workspace", "--doc", "--"]
        .iter()
        .map(OsString::from)
        .collect();
    args.extend(options.test_args.iter().cloned());
    Job {
        name: DOC_TESTS.to_owned(),
        program: cargo.to_path_buf(),
        args,
        dir: root.to_path_buf(),
        env: options.env.clone(),
        apart: None,
        test_target: None,
    }
}

/// The doc tests' job, among the test binaries.
const DOC_TESTS: &str = "doc tests (cargo test --workspace --doc)";

/// Starts `cargo test --workspace --tests --no-run`, which sends each test binary as it can run,
/// then the build's end. `--tests` is every target whose manifest says `test = true`
/// (libraries, binaries and integration tests, not those that opt out); the examples, which
/// `cargo test` would build and not run, are left out: they are not tests, and clippy
/// `--all-targets` checks them. The integration tests in `first` (those that ran longest last
/// time) are built by a build of their own before it, so that they start early.
fn build(root: &Path, cargo: &Path, first: &[String], events: mpsc::Sender<Event>) -> Result<()> {
    let workspace = Workspace::read(root, cargo);
    let mut builds: Vec<Vec<String>> = Vec::new();
    if let Some(workspace) = &workspace {
        let first: Vec<&String> = first
            .iter()
            .filter(|name| workspace.tests.contains(*name))
            .collect();
        if !first.is_empty() {
            let mut build = vec!["test".to_owned(), "--workspace".to_owned()];
            for name in first {
                build.extend(["--test".to_owned(), name.clone()]);
            }
            builds.push(build);
        }
    }
    builds.push(vec![
        "test".to_owned(),
        "--workspace".to_owned(),
        "--tests".to_owned(),
    ]);
    let mut binaries = BinariesFirst::new(workspace.map(|workspace| workspace.binaries));
    let root = root.to_path_buf();
    let cargo = cargo.to_path_buf();
    std::thread::spawn(move || {
        let mut sent = BTreeSet::new();
        for mut args in builds {
            args.extend(["--no-run", "--message-format=json-render-diagnostics"].map(String::from));
            eprintln!("$ cargo {}", args.join(" "));
            let child = Command::new(&cargo)
                .args(&args)
                .current_dir(&root)
                .stdout(Stdio::piped())
                .spawn();
            let mut child = match child {
                Ok(child) => child,
                Err(error) => {
                    let _ = events.send(Event::BuildEnded(Err(error)));
                    return;
                }
            };
            let Some(stdout) = child.stdout.take() else {
                let _ = events.send(Event::BuildEnded(child.wait()));
                return;
            };
            for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
                let Ok(line) = line else { break };
                let ready = match artifact(&line, &root, &cargo) {
                    Some(Artifact::Test {
                        job,
                        package,
                        integration,
                    }) if sent.insert(job.program.clone()) => {
                        binaries.test_built(&package, integration, job)
                    }
                    Some(Artifact::Binary { package, name }) => {
                        binaries.binary_built(&package, &name)
                    }
                    _ => Vec::new(),
                };
                for job in ready {
                    let _ = events.send(Event::Built(job));
                }
            }
            let status = child.wait();
            if !status.as_ref().is_ok_and(|status| status.success()) {
                let _ = events.send(Event::BuildEnded(status));
                return;
            }
        }
        for job in binaries.build_ended() {
            let _ = events.send(Event::Built(job));
        }
        let _ = events.send(Event::BuildEnded(Ok(std::process::ExitStatus::default())));
    });
    Ok(())
}

/// What `cargo metadata` says of the workspace's packages.
#[derive(Debug)]
struct Workspace {
    /// Each package's binaries.
    binaries: BTreeMap<String, BTreeSet<String>>,
    /// Every integration test target's name.
    tests: BTreeSet<String>,
}

impl Workspace {
    /// `None` if cargo cannot say.
    fn read(root: &Path, cargo: &Path) -> Option<Self> {
        let output = Command::new(cargo)
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .current_dir(root)
            .stderr(Stdio::inherit())
            .output()
            .ok()?;
        let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
        let mut workspace = Self {
            binaries: BTreeMap::new(),
            tests: BTreeSet::new(),
        };
        for package in metadata["packages"].as_array()? {
            let mut names = BTreeSet::new();
            for target in package["targets"].as_array()? {
                let name = target["name"].as_str()?.to_owned();
                match target["kind"][0].as_str() {
                    Some("bin") => {
                        names.insert(name);
                    }
                    Some("test") => {
                        workspace.tests.insert(name);
                    }
                    _ => {}
                }
            }
            workspace
                .binaries
                .insert(package["name"].as_str()?.to_owned(), names);
        }
        Some(workspace)
    }
}

/// An integration test may run its package's binaries (`CARGO_BIN_EXE_<name>`), which cargo
/// may link after the test itself: such a test is held until every binary of its package is
/// built.
#[derive(Debug)]
struct BinariesFirst {
    /// A package's binaries not built yet; `None`: unknown, every integration test waits for
    /// the build's end.
    missing: Option<BTreeMap<String, BTreeSet<String>>>,
    held: Vec<(String, Job)>,
}

impl BinariesFirst {
    fn new(binaries: Option<BTreeMap<String, BTreeSet<String>>>) -> Self {
        Self {
            missing: binaries,
            held: Vec::new(),
        }
    }

    /// The jobs that may run now that `job`, a test binary of `package`, is built.
    fn test_built(&mut self, package: &str, integration: bool, job: Job) -> Vec<Job> {
        let waits = integration
            && self
                .missing
                .as_ref()
                .is_none_or(|missing| missing.get(package).is_some_and(|names| !names.is_empty()));
        if waits {
            self.held.push((package.to_owned(), job));
            Vec::new()
        } else {
            vec![job]
        }
    }

    /// The jobs that may run now that binary `name` of `package` is built.
    fn binary_built(&mut self, package: &str, name: &str) -> Vec<Job> {
        let Some(missing) = self.missing.as_mut() else {
            return Vec::new();
        };
        let Some(names) = missing.get_mut(package) else {
            return Vec::new();
        };
        names.remove(name);
        if !names.is_empty() {
            return Vec::new();
        }
        let (ready, held) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(of, _)| of == package);
        self.held = held;
        ready.into_iter().map(|(_, job)| job).collect()
    }

    /// Whatever is still held, once the build is over.
    fn build_ended(&mut self) -> Vec<Job> {
        std::mem::take(&mut self.held)
            .into_iter()
            .map(|(_, job)| job)
            .collect()
    }
}

/// What a line of cargo's JSON output announces, if it matters here.
enum Artifact {
    /// A test binary, and what to run it with.
    Test {
        job: Job,
        package: String,
        integration: bool,
    },
    /// A package's binary (which its integration tests may run).
    Binary { package: String, name: String },
}

fn artifact(line: &str, root: &Path, cargo: &Path) -> Option<Artifact> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" {
        return None;
    }
    let manifest = PathBuf::from(message["manifest_path"].as_str().unwrap_or_default());
    let dir = manifest.parent().unwrap_or(root).to_path_buf();
    let package = package_name(message["package_id"].as_str().unwrap_or_default(), &dir);
    if message["profile"]["test"] != true {
        if message["target"]["kind"][0] != "bin" {
            return None;
        }
        let name = message["target"]["name"].as_str()?.to_owned();
        return Some(Artifact::Binary { package, name });
    }
    let executable = message["executable"].as_str()?;
    let source = message["target"]["src_path"].as_str().unwrap_or_default();
    let source = Path::new(source)
        .strip_prefix(&dir)
        .map_or_else(|_| source.to_owned(), |p| p.display().to_string());
    let integration = message["target"]["kind"][0] == "test";
    let name = if integration {
        format!("{package} {source}")
    } else {
        format!("{package} {source} (unit tests)")
    };
    let apart = (integration && package == "loom-store-postgres").then_some(POSTGRES_STORE_TESTS);
    // What cargo gives a test binary it runs: its package's directory and manifest.
    let env = vec![
        (OsString::from("CARGO_MANIFEST_DIR"), dir.clone().into()),
        (OsString::from("CARGO_PKG_NAME"), OsString::from(&package)),
        (OsString::from("CARGO"), cargo.into()),
    ];
    let test_target = integration
        .then(|| message["target"]["name"].as_str().map(str::to_owned))
        .flatten();
    let job = Job {
        name,
        program: PathBuf::from(executable),
        args: Vec::new(),
        dir,
        env,
        apart,
        test_target,
    };
    Some(Artifact::Test {
        job,
        package,
        integration,
    })
}

/// A package's name from its id (`path+file:///.../loom-kernel#0.1.0`, or `...#name@0.1.0`),
/// else its directory's name.
fn package_name(id: &str, dir: &Path) -> String {
    if let Some((_, tail)) = id.rsplit_once('#')
        && let Some((name, _)) = tail.split_once('@')
    {
        return name.to_owned();
    }
    dir.file_name()
        .map_or_else(String::new, |name| name.to_string_lossy().into_owned())
}

/// The job to start next: the longest of the last run among those whose mark no running job
/// has (`busy`).
fn take_next(
    waiting: &mut Vec<Job>,
    times: &BTreeMap<String, f64>,
    busy: &BTreeSet<&'static str>,
) -> Option<Job> {
    order_longest_first(waiting, times);
    let next = waiting
        .iter()
        .position(|job| job.apart.is_none_or(|apart| !busy.contains(apart)))?;
    Some(waiting.remove(next))
}

/// The longest of the last run first; a job it did not see before all of them.
fn order_longest_first(jobs: &mut [Job], times: &BTreeMap<String, f64>) {
    jobs.sort_by(|a, b| {
        let time = |job: &Job| times.get(&job.name).copied().unwrap_or(f64::INFINITY);
        time(b)
            .total_cmp(&time(a))
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// What the last run took: each job's seconds, and the integration tests that ran longest.
#[derive(Debug, Default)]
struct LastRun {
    seconds: BTreeMap<String, f64>,
    /// The `--test` names of the integration tests that ran for `FIRST_IF_LONGER` or more.
    long_tests: Vec<String>,
}

/// The integration tests built first when there is no last run (a fresh clone): the ones that
/// ran longest in the runs of docs/PERFORMANCE.md ("Build time"). A name no longer in the
/// workspace is left out.
const USUALLY_LONGEST: [&str; 3] = ["kernel", "kill", "postgres"];

/// An integration test that ran this long is built before the others: started early, it does
/// not end the run long after the rest.
const FIRST_IF_LONGER: f64 = 15.0;

/// `seconds<TAB>job<TAB>test target` lines, as `write_times` leaves them; nothing when there
/// are none.
fn read_times(path: &Path) -> LastRun {
    let Ok(text) = std::fs::read_to_string(path) else {
        return LastRun::default();
    };
    let mut last = LastRun::default();
    for line in text.lines() {
        let mut fields = line.split('\t');
        let (Some(seconds), Some(name)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Ok(seconds) = seconds.parse::<f64>() else {
            continue;
        };
        if let Some(target) = fields.next().filter(|target| !target.is_empty())
            && seconds >= FIRST_IF_LONGER
        {
            last.long_tests.push(target.to_owned());
        }
        last.seconds.insert(name.to_owned(), seconds);
    }
    last
}

fn write_times(path: &Path, finished: &[Finished]) -> std::io::Result<()> {
    let text: String = finished
        .iter()
        .map(|done| {
            format!(
                "{:.3}\t{}\t{}\n",
                done.took.as_secs_f64(),
                done.job.name,
                done.job.test_target.as_deref().unwrap_or_default()
            )
        })
        .collect();
    std::fs::write(path, text)
}

/// A job's output, whole, under a line that names it.
fn print_job(done: &Finished, output: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "     Running {} ({:.1} s{})",
        done.job.name,
        done.took.as_secs_f64(),
        if done.passed { "" } else { ", FAILED" }
    );
    let _ = out.write_all(output.as_bytes());
    let _ = out.flush();
}

/// Runs one job to its end, its standard output and error in one text, in the order written.
fn run_job(job: Job, since: Instant) -> (Finished, String) {
    let began = since.elapsed();
    let started = Instant::now();
    let (output, passed) = match spawn_and_read(&job) {
        Ok(result) => result,
        Err(error) => (
            format!("xtask: cannot run {}: {error:#}\n", job.name),
            false,
        ),
    };
    let counts = Counts::of(&output);
    let done = Finished {
        job,
        began,
        took: started.elapsed(),
        // A binary that exits 0 with a failed count (a harness of its own) still failed.
        passed: passed && counts.failed == 0,
        counts,
    };
    (done, output)
}

fn spawn_and_read(job: &Job) -> Result<(String, bool)> {
    let (mut reader, writer) = std::io::pipe().context("a pipe for the test's output")?;
    let mut command = Command::new(&job.program);
    command
        .args(&job.args)
        .current_dir(&job.dir)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().context("the pipe's second end")?)
        .stderr(writer);
    for (key, value) in &job.env {
        command.env(key, value);
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {}", job.program.display()))?;
    // The command holds the pipe's write ends: dropped, the pipe ends with the child's (and its
    // children's) last write.
    drop(command);
    let output = Arc::new(Mutex::new(Vec::new()));
    let (ended, read_all) = mpsc::channel();
    {
        let output = Arc::clone(&output);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n @ 1..) = reader.read(&mut chunk) {
                if let Ok(mut output) = output.lock() {
                    output.extend_from_slice(&chunk[..n]);
                }
            }
            let _ = ended.send(());
        });
    }
    let status = child.wait().context("waiting for it")?;
    // A process the test started and left running keeps the pipe open: its output after the
    // test's end is not waited for.
    let _ = read_all.recv_timeout(Duration::from_secs(5));
    let bytes = output.lock().map(|bytes| bytes.clone()).unwrap_or_default();
    Ok((
        String::from_utf8_lossy(&bytes).into_owned(),
        status.success(),
    ))
}

/// Every job's time, longest first, and the totals; whether everything passed.
fn summarize(finished: &[Finished], took: Duration) -> bool {
    let mut by_time: Vec<&Finished> = finished.iter().collect();
    by_time.sort_by_key(|done| std::cmp::Reverse(done.took));
    let mut total = Counts::default();
    let mut failed = Vec::new();
    eprintln!("\nxtask: test binaries by time (and when each started, from the build's start):");
    for done in &by_time {
        total.add(done.counts);
        if !done.passed {
            failed.push(done.job.name.as_str());
        }
        eprintln!(
            "  {:>6.1} s  (at {:>5.1} s)  {}{}",
            done.took.as_secs_f64(),
            done.began.as_secs_f64(),
            done.job.name,
            if done.passed { "" } else { "  FAILED" }
        );
    }
    eprintln!(
        "xtask: {} tests passed, {} failed, {} ignored, in {} test binaries and the doc tests \
         ({:.1} s in all)",
        total.passed,
        total.failed,
        total.ignored,
        finished.len().saturating_sub(1),
        took.as_secs_f64()
    );
    if !failed.is_empty() {
        eprintln!("xtask: failed: {}", failed.join(", "));
    }
    // The closing line, alone, in the form test logs are read by.
    println!("{} passed, {} failed", total.passed, total.failed);
    failed.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_every_result_line() {
        let output = "running 3 tests\n\
             test a ... ok\n\
             test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\
             \n   Doc-tests x\n\
             test result: FAILED. 5 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n";
        assert_eq!(
            Counts::of(output),
            Counts {
                passed: 7,
                failed: 1,
                ignored: 1
            }
        );
        assert_eq!(Counts::of("no result line\n"), Counts::default());
    }

    #[test]
    fn the_longest_of_the_last_run_starts_first_and_a_new_one_before_all() {
        let job = |name: &str| Job {
            name: name.to_owned(),
            program: PathBuf::new(),
            args: Vec::new(),
            dir: PathBuf::new(),
            env: Vec::new(),
            apart: None,
            test_target: None,
        };
        let mut jobs = vec![job("short"), job("new"), job("long")];
        let times = BTreeMap::from([("short".to_owned(), 1.0), ("long".to_owned(), 30.0)]);
        order_longest_first(&mut jobs, &times);
        let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
        assert_eq!(names, ["new", "long", "short"]);
    }

    #[test]
    fn jobs_marked_apart_never_start_beside_each_other() {
        let job = |name: &str, apart| Job {
            name: name.to_owned(),
            program: PathBuf::new(),
            args: Vec::new(),
            dir: PathBuf::new(),
            env: Vec::new(),
            apart,
            test_target: None,
        };
        let times = BTreeMap::from([
            ("kill".to_owned(), 50.0),
            ("postgres".to_owned(), 40.0),
            ("other".to_owned(), 1.0),
        ]);
        let mut waiting = vec![
            job("other", None),
            job("postgres", Some(POSTGRES_STORE_TESTS)),
            job("kill", Some(POSTGRES_STORE_TESTS)),
        ];
        let mut busy = BTreeSet::new();
        let first = take_next(&mut waiting, &times, &busy).unwrap();
        assert_eq!(first.name, "kill");
        busy.extend(first.apart);
        let second = take_next(&mut waiting, &times, &busy).unwrap();
        assert_eq!(second.name, "other", "the longer one waits for its like");
        assert!(take_next(&mut waiting, &times, &busy).is_none());
        busy.clear();
        assert_eq!(
            take_next(&mut waiting, &times, &busy).unwrap().name,
            "postgres"
        );
    }

    #[test]
    fn an_integration_test_waits_for_its_package_s_binaries() {
        let job = |name: &str| Job {
            name: name.to_owned(),
            program: PathBuf::new(),
            args: Vec::new(),
            dir: PathBuf::new(),
            env: Vec::new(),
            apart: None,
            test_target: None,
        };
        let names = |jobs: Vec<Job>| -> Vec<String> { jobs.into_iter().map(|j| j.name).collect() };
        let binaries = BTreeMap::from([
            (
                "app".to_owned(),
                BTreeSet::from(["app".to_owned(), "tool".to_owned()]),
            ),
            ("lib".to_owned(), BTreeSet::new()),
        ]);
        let mut first = BinariesFirst::new(Some(binaries));
        assert_eq!(
            names(first.test_built("app", false, job("app unit"))),
            ["app unit"]
        );
        assert_eq!(
            names(first.test_built("lib", true, job("lib tests"))),
            ["lib tests"]
        );
        assert!(first.test_built("app", true, job("app tests")).is_empty());
        assert!(first.binary_built("app", "app").is_empty());
        assert!(first.binary_built("other", "x").is_empty());
        assert_eq!(names(first.binary_built("app", "tool")), ["app tests"]);
        assert!(first.build_ended().is_empty());

        let mut unknown = BinariesFirst::new(None);
        assert!(unknown.test_built("lib", true, job("lib tests")).is_empty());
        assert_eq!(names(unknown.build_ended()), ["lib tests"]);
    }

    #[test]
    fn times_written_are_read_back_with_the_long_integration_tests() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("times");
        let done = |name: &str, millis, test_target: Option<&str>| Finished {
            job: Job {
                name: name.to_owned(),
                program: PathBuf::new(),
                args: Vec::new(),
                dir: PathBuf::new(),
                env: Vec::new(),
                apart: None,
                test_target: test_target.map(str::to_owned),
            },
            began: Duration::ZERO,
            took: Duration::from_millis(millis),
            passed: true,
            counts: Counts::default(),
        };
        let finished = vec![
            done("loom-kernel tests/kernel/main.rs", 52_345, Some("kernel")),
            done("loom-kernel src/lib.rs (unit tests)", 20_000, None),
            done("loom-console tests/console/main.rs", 9_000, Some("console")),
        ];
        write_times(&path, &finished).unwrap();
        let last = read_times(&path);
        assert_eq!(
            last.seconds.get("loom-kernel tests/kernel/main.rs"),
            Some(&52.345)
        );
        assert_eq!(last.seconds.len(), 3);
        assert_eq!(
            last.long_tests,
            ["kernel"],
            "unit tests and short ones are not first"
        );
        let none = read_times(&dir.path().join("missing"));
        assert!(none.seconds.is_empty() && none.long_tests.is_empty());
    }

    #[test]
    fn a_package_is_named_from_its_id_or_its_directory() {
        let dir = Path::new("/w/crates/loom-kernel");
        assert_eq!(
            package_name("path+file:///w/crates/loom-kernel#0.1.0", dir),
            "loom-kernel"
        );
        assert_eq!(
            package_name("path+file:///w/examples/quickstart#quickstart@0.1.0", dir),
            "quickstart"
        );
    }
}
