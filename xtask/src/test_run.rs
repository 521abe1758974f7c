//! The test command's runner: builds the workspace's test binaries with one `cargo test
//! --no-run`, then runs them and the doc tests several at a time, where cargo runs them one
//! after another. Most of a test binary's time is spent waiting (fsync, PostgreSQL, child
//! processes, a browser), so on two cores three binaries run at once. The longest of the last
//! run start first (`target/xtask-test-times`; on a fresh clone, the ones that usually are), so
//! that the run does not end waiting on one started last. Each binary's output is printed whole
//! when it ends, never interleaved, and the run ends with every binary's time and the totals.
//!
//! Measured and left: running each binary as soon as it is linked, while the rest still builds
//! (with the longest built first). On two cores the build and the tests each keep both cores
//! busy, and overlapped they took more CPU and more time: 199 and 210 s against 187 and 203 s
//! for the test command after a cold main job (docs/PERFORMANCE.md, "Build time").

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

impl TestOptions {
    /// What every test binary gets: `env`, and with `long` the full amounts of `LONG_RUN`
    /// where the caller's environment does not set them already (a number set by the caller
    /// wins).
    fn environment(&self) -> Vec<(OsString, OsString)> {
        let mut env = self.env.clone();
        if self.long {
            for (name, value) in LONG_RUN {
                if std::env::var_os(name).is_none() {
                    env.push((name.into(), value.into()));
                }
            }
        }
        env
    }
}

/// What `--long` (and so CI) runs in full where an ordinary run does less: the PostgreSQL kill
/// tests' rounds and pauses, the failovers of two replicated shards (none in an ordinary run:
/// the one-pair failover test takes the same paths), and the cases of the two costliest
/// property tests.
const LONG_RUN: [(&str, &str); 5] = [
    ("LOOM_KILL_ROUNDS", "30"),
    ("LOOM_KILL_PAUSES", "5"),
    ("LOOM_SHARDED_FAILOVERS", "4"),
    ("LOOM_STATE_MACHINE_CASES", "10000"),
    ("LOOM_SURFACE_MODEL_CASES", "4000"),
];

/// One thing to run: a test binary, or cargo running the doc tests.
#[derive(Debug)]
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

/// A job's end, as its thread reports it, with its output.
struct Ended(Box<Finished>, String);

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// A test failed (every binary ran; the summary names the ones that failed).
    Failed,
    /// The build failed, with cargo's exit code (nothing ran).
    BuildFailed(i32),
}

/// Builds the workspace's test binaries, then runs them and the doc tests, `jobs` at a time;
/// prints the summary. `ready` is waited for before the first test starts (the PostgreSQL
/// server, started while the tests build).
pub fn run_all(root: &Path, options: &TestOptions, ready: impl FnOnce()) -> Result<Outcome> {
    let started = Instant::now();
    let cargo = PathBuf::from(crate::cargo_program());
    let times_file = root.join("target/xtask-test-times");
    let times = read_times(&times_file);
    let parallel = options.jobs.unwrap_or_else(default_jobs).max(1);
    let env = options.environment();
    let mut waiting = match build(root, &cargo)? {
        Ok(jobs) => jobs,
        Err(code) => return Ok(Outcome::BuildFailed(code)),
    };
    for job in &mut waiting {
        job.args.extend(options.test_args.iter().cloned());
        job.env.extend(env.iter().cloned());
    }
    waiting.push(doc_tests(root, &cargo, &options.test_args, env));
    // Once: what waits only shrinks.
    order_longest_first(&mut waiting, &times);
    eprintln!(
        "xtask: {} test binaries built in {:.1} s; running them and the doc tests, {parallel} at a \
         time",
        waiting.len() - 1,
        started.elapsed().as_secs_f64(),
    );
    ready();
    let (ended, heard) = mpsc::channel();
    let mut running = 0;
    let mut finished = Vec::new();
    let mut busy = BTreeSet::new();
    loop {
        while running < parallel {
            let Some(job) = take_next(&mut waiting, &busy) else {
                break;
            };
            busy.extend(job.apart);
            start(job, started, &ended);
            running += 1;
        }
        if running == 0 {
            break;
        }
        let Ok(Ended(done, output)) = heard.recv() else {
            break;
        };
        running -= 1;
        if let Some(apart) = done.job.apart {
            busy.remove(apart);
        }
        print_job(&done, &output);
        finished.push(*done);
    }
    let _ = write_times(&times_file, &finished);
    Ok(if summarize(&finished, started.elapsed()) {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}

/// Runs `job` on a thread of its own, which says when it ended.
fn start(job: Job, since: Instant, ended: &mpsc::Sender<Ended>) {
    let ended = ended.clone();
    std::thread::spawn(move || {
        let (done, output) = run_job(job, since);
        let _ = ended.send(Ended(Box::new(done), output));
    });
}

/// One more than the cores: a test binary spends much of its time waiting.
fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get() + 1)
}

/// `cargo test --workspace --doc`, with the test arguments.
fn doc_tests(
    root: &Path,
    cargo: &Path,
    test_args: &[OsString],
    env: Vec<(OsString, OsString)>,
) -> Job {
    let mut args: Vec<OsString> = ["test", "--workspace", "--doc", "--"]
        .iter()
        .map(OsString::from)
        .collect();
    args.extend(test_args.iter().cloned());
    Job {
        name: DOC_TESTS.to_owned(),
        program: cargo.to_path_buf(),
        args,
        dir: root.to_path_buf(),
        env,
        apart: None,
        test_target: None,
    }
}

/// The doc tests' job, among the test binaries.
const DOC_TESTS: &str = "doc tests (cargo test --workspace --doc)";

/// `cargo test --workspace --tests --no-run`: every test binary, and what to run it with; or
/// cargo's exit code if the build failed. `--tests` is every target whose manifest says `test =
/// true` (libraries, binaries and integration tests, not those that opt out); the examples,
/// which `cargo test` would build and not run, are left out: they are not tests, and clippy
/// `--all-targets` checks them.
fn build(root: &Path, cargo: &Path) -> Result<Result<Vec<Job>, i32>> {
    let args = [
        "test",
        "--workspace",
        "--tests",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ];
    let mut child = crate::cargo_command(root, &args)
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo test --no-run")?;
    let mut text = String::new();
    child
        .stdout
        .take()
        .context("cargo's output")?
        .read_to_string(&mut text)
        .context("reading cargo's output")?;
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        eprintln!("xtask: building the tests failed: cargo {status}");
        return Ok(Err(status.code().unwrap_or(101)));
    }
    let jobs: Vec<Job> = text
        .lines()
        .filter_map(|line| test_binary(line, root, cargo))
        .collect();
    anyhow::ensure!(!jobs.is_empty(), "cargo built no test binary");
    Ok(Ok(jobs))
}

/// The test binary a line of cargo's JSON output announces, and what to run it with.
fn test_binary(line: &str, root: &Path, cargo: &Path) -> Option<Job> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let executable = message["executable"].as_str()?;
    let manifest = PathBuf::from(message["manifest_path"].as_str().unwrap_or_default());
    let dir = manifest.parent().unwrap_or(root).to_path_buf();
    let package = package_name(message["package_id"].as_str().unwrap_or_default(), &dir);
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
    let test_target = integration
        .then(|| message["target"]["name"].as_str().map(str::to_owned))
        .flatten();
    // What cargo gives a test binary it runs: its package's directory and manifest.
    let env = vec![
        (OsString::from("CARGO_MANIFEST_DIR"), dir.clone().into()),
        (OsString::from("CARGO_PKG_NAME"), OsString::from(&package)),
        (OsString::from("CARGO"), cargo.into()),
    ];
    Some(Job {
        name,
        program: PathBuf::from(executable),
        args: Vec::new(),
        dir,
        env,
        apart,
        test_target,
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

/// The job to start next: the first of `waiting` (in the order it starts in) whose mark no
/// running job has (`busy`).
fn take_next(waiting: &mut Vec<Job>, busy: &BTreeSet<&'static str>) -> Option<Job> {
    let next = waiting
        .iter()
        .position(|job| job.apart.is_none_or(|apart| !busy.contains(apart)))?;
    Some(waiting.remove(next))
}

/// The integration tests that ran longest in the runs of docs/PERFORMANCE.md ("Build time"),
/// which start first when there is no last run (a fresh clone), the doc tests after them.
const USUALLY_LONGEST: [&str; 3] = ["kernel", "kill", "postgres"];

/// The longest of the last run first, and a job it did not see before all of them; with no last
/// run, the ones that usually run longest first.
fn order_longest_first(jobs: &mut [Job], times: &BTreeMap<String, f64>) {
    let time = |job: &Job| {
        if times.is_empty() {
            let usually_long = job
                .test_target
                .as_deref()
                .is_some_and(|target| USUALLY_LONGEST.contains(&target));
            return if usually_long {
                2.0
            } else if job.name == DOC_TESTS {
                1.0
            } else {
                0.0
            };
        }
        times.get(&job.name).copied().unwrap_or(f64::INFINITY)
    };
    jobs.sort_by(|a, b| {
        time(b)
            .total_cmp(&time(a))
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// `seconds<TAB>job` lines, as `write_times` leaves them; nothing when there are none.
fn read_times(path: &Path) -> BTreeMap<String, f64> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return BTreeMap::new();
    };
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let seconds = fields.next()?.parse().ok()?;
            Some((fields.next()?.to_owned(), seconds))
        })
        .collect()
}

fn write_times(path: &Path, finished: &[Finished]) -> std::io::Result<()> {
    let text: String = finished
        .iter()
        .map(|done| format!("{:.3}\t{}\n", done.took.as_secs_f64(), done.job.name))
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

    /// A job named `name` that runs nothing.
    fn job(name: &str) -> Job {
        Job {
            name: name.to_owned(),
            program: PathBuf::new(),
            args: Vec::new(),
            dir: PathBuf::new(),
            env: Vec::new(),
            apart: None,
            test_target: None,
        }
    }

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
        let mut jobs = vec![job("short"), job("new"), job("long")];
        let times = BTreeMap::from([("short".to_owned(), 1.0), ("long".to_owned(), 30.0)]);
        order_longest_first(&mut jobs, &times);
        let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
        assert_eq!(names, ["new", "long", "short"]);
    }

    #[test]
    fn jobs_marked_apart_never_start_beside_each_other() {
        let marked = |name: &str, apart| Job { apart, ..job(name) };
        let times = BTreeMap::from([
            ("kill".to_owned(), 50.0),
            ("postgres".to_owned(), 40.0),
            ("other".to_owned(), 1.0),
        ]);
        let mut waiting = vec![
            marked("other", None),
            marked("postgres", Some(POSTGRES_STORE_TESTS)),
            marked("kill", Some(POSTGRES_STORE_TESTS)),
        ];
        order_longest_first(&mut waiting, &times);
        let mut busy = BTreeSet::new();
        let first = take_next(&mut waiting, &busy).unwrap();
        assert_eq!(first.name, "kill");
        busy.extend(first.apart);
        let second = take_next(&mut waiting, &busy).unwrap();
        assert_eq!(second.name, "other", "the longer one waits for its like");
        assert!(take_next(&mut waiting, &busy).is_none());
        busy.clear();
        assert_eq!(take_next(&mut waiting, &busy).unwrap().name, "postgres");
    }

    #[test]
    fn with_no_last_run_the_usually_longest_start_first_then_the_doc_tests() {
        let target = |name: &str, test_target: &str| Job {
            test_target: Some(test_target.to_owned()),
            ..job(name)
        };
        let mut jobs = vec![
            job("a unit tests"),
            job(DOC_TESTS),
            target("b tests", "b"),
            target("loom-kernel tests/kernel/main.rs", "kernel"),
        ];
        order_longest_first(&mut jobs, &BTreeMap::new());
        let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "loom-kernel tests/kernel/main.rs",
                DOC_TESTS,
                "a unit tests",
                "b tests"
            ]
        );
    }

    #[test]
    fn times_written_are_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("times");
        let finished = vec![Finished {
            job: job("loom-kernel tests/kernel/main.rs"),
            began: Duration::ZERO,
            took: Duration::from_millis(52_345),
            passed: true,
            counts: Counts::default(),
        }];
        write_times(&path, &finished).unwrap();
        let times = read_times(&path);
        assert_eq!(times.get("loom-kernel tests/kernel/main.rs"), Some(&52.345));
        assert_eq!(times.len(), 1);
        assert!(read_times(&dir.path().join("missing")).is_empty());
    }

    /// A job that runs `script` with `sh`.
    fn shell(script: &str) -> Job {
        Job {
            program: PathBuf::from("sh"),
            args: vec!["-c".into(), script.into()],
            dir: std::env::temp_dir(),
            ..job("shell")
        }
    }

    #[test]
    fn a_job_s_output_is_both_streams_and_its_counts_and_exit_decide() {
        let since = Instant::now();
        let (done, output) = run_job(
            shell("echo out; echo err >&2; echo 'test result: ok. 2 passed; 0 failed; 1 ignored'"),
            since,
        );
        assert!(done.passed, "{output}");
        assert!(
            output.contains("out\n") && output.contains("err\n"),
            "{output}"
        );
        assert_eq!(done.counts.passed, 2);

        let (done, _) = run_job(
            shell("echo 'test result: FAILED. 1 passed; 1 failed'"),
            since,
        );
        assert!(
            !done.passed,
            "a failed count fails the job even when it exits 0"
        );
        let (done, _) = run_job(shell("exit 3"), since);
        assert!(!done.passed, "a non-zero exit fails the job");
        let (done, output) = run_job(
            Job {
                program: PathBuf::from("/nonexistent/test-binary"),
                ..job("missing")
            },
            since,
        );
        assert!(!done.passed);
        assert!(output.contains("cannot run missing"), "{output}");
    }

    #[test]
    fn a_process_the_test_leaves_running_does_not_hold_the_job() {
        // The background sleep keeps the pipe open long after the shell has exited.
        let started = Instant::now();
        let (done, output) = run_job(shell("echo before; sleep 120 & echo after"), started);
        assert!(done.passed, "{output}");
        assert!(
            output.contains("before") && output.contains("after"),
            "{output}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the job waited for the process its test left running"
        );
    }

    #[test]
    fn long_adds_the_full_amounts_unless_the_caller_set_them() {
        let options = TestOptions {
            env: vec![("A".into(), "1".into())],
            ..TestOptions::default()
        };
        assert_eq!(options.environment(), [("A".into(), "1".into())]);
        let long = TestOptions {
            long: true,
            ..options
        }
        .environment();
        for (name, value) in LONG_RUN {
            let given = long.iter().find(|(key, _)| key == name);
            match std::env::var_os(name) {
                Some(_) => assert!(given.is_none(), "{name}: the caller's number wins"),
                None => assert_eq!(given.map(|(_, v)| v.clone()), Some(value.into())),
            }
        }
    }

    #[test]
    fn damaged_lines_of_the_times_file_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("times");
        std::fs::write(&path, "12.5\tkept\nnot a number\tx\n\n3.0\n\u{0}\t\t\n").unwrap();
        let times = read_times(&path);
        assert_eq!(times.get("kept"), Some(&12.5));
        assert_eq!(times.len(), 1, "{times:?}");
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
