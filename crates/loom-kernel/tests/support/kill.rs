//! The SIGKILL harness of the crash tests: runs one test of this binary as a child process
//! (its `entry` test, which does nothing unless `env` is set), reads what it prints, and kills
//! it with SIGKILL once it has printed a given line; then checks what the store it wrote holds.
//! In the child: a runtime over that store whose manual clock ticks until the process is killed.

use super::child::{child_runtime, child_test, say};

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use loom_kernel::{DiskStore, EventStore, ExecutionId, ManualClock, Runtime};

/// A child process running one test of this binary, what it prints read line by line on a
/// thread of its own.
pub struct Child {
    process: std::process::Child,
    /// The lines the child printed that the filter kept, as they come.
    pub lines: mpsc::Receiver<String>,
    reader: JoinHandle<()>,
}

impl Child {
    /// Starts the test `entry` of this binary (`concat!(module_path!(), "::name")`) with `env`
    /// set to `store_path`; of what it prints, passes on the lines `keep` accepts.
    pub fn start(entry: &str, env: &str, store_path: &Path, keep: fn(&str) -> bool) -> Self {
        let mut process = child_test(entry)
            .env(env, store_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = process.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if keep(&line) && sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            process,
            lines,
            reader,
        }
    }

    /// Kills the child (SIGKILL on Unix) and waits for it and its reader: the lines it kept
    /// that were not received yet.
    pub fn kill(mut self) -> Vec<String> {
        self.process.kill().unwrap();
        self.process.wait().unwrap();
        self.reader.join().unwrap();
        self.lines.try_iter().collect()
    }
}

/// Runs the test `entry` of this binary (`concat!(module_path!(), "::name")`) with `env` set to
/// `store_path` until it prints the line `until`, then kills it (SIGKILL on Unix). Fails if the
/// line does not come within 60 s, or if the child ends before (it ran no test, or failed).
pub fn run_and_kill(entry: &str, env: &str, store_path: &Path, until: &str) {
    let child = Child::start(entry, env, store_path, |_| true);
    // The test harness may print its own words before the child's on the same line.
    let seen = loop {
        match child.lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line == until || line.ends_with(&format!(" {until}")) => break true,
            Ok(line) => assert!(
                !line.starts_with("running 0 tests"),
                "the child process ran no test: {entry}"
            ),
            Err(_) => break false,
        }
    };
    child.kill();
    assert!(
        seen,
        "the child did not print '{until}' within 60 s (or ended before)"
    );
}

/// For each line of `untils`: runs the child `entry` on a fresh store file (`file` in a temp
/// dir) until it prints that line and kills it, then runs `check` with the line and the store
/// file it left, on a tokio runtime of this process.
pub fn after_each_kill(
    entry: &str,
    env: &str,
    file: &str,
    untils: &[&str],
    check: impl AsyncFn(&str, DiskStore),
) {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    for until in untils {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file);
        run_and_kill(entry, env, &path, until);
        tokio.block_on(check(until, DiskStore::open(&path).unwrap()));
    }
}

/// A child process's entry test, ticking: when `env` names a store file, builds the runtime
/// `build` makes over that store with a manual clock at `t0`, lets `start` start its
/// executions, and then ticks as [`tick_until_killed`] does (`step` every `pause`) until the
/// parent kills the process. Does nothing when `env` is not set (an ordinary test run).
pub fn ticking_child(
    env: &str,
    t0: u64,
    (step, pause): (Duration, Duration),
    build: fn(DiskStore, ManualClock) -> Runtime<DiskStore>,
    start: impl AsyncFnOnce(&Runtime<DiskStore>),
) {
    let Ok(path) = std::env::var(env) else {
        return;
    };
    child_runtime().block_on(async move {
        let clock = ManualClock::new(t0);
        let runtime = build(DiskStore::open(&path).unwrap(), clock.clone());
        start(&runtime).await;
        tick_until_killed(&clock, step, pause).await;
    });
}

/// In a child process: says `started`, then moves `clock` on by `step` and says `tick N` every
/// `pause`, until the parent kills the process.
pub async fn tick_until_killed(clock: &ManualClock, step: Duration, pause: Duration) {
    say("started");
    for tick in 1.. {
        clock.advance(step);
        say(&format!("tick {tick}"));
        tokio::time::sleep(pause).await;
    }
}

/// Moves `clock` on by `step`, letting the runtime's tasks run a moment after each move, until
/// every one of `executions` has ended, at most `rounds` times: whether they all did.
pub async fn advance_until_ended<S: EventStore>(
    runtime: &Runtime<S>,
    clock: &ManualClock,
    step: Duration,
    executions: &[ExecutionId],
    rounds: usize,
) -> bool {
    for _ in 0..rounds {
        let mut ended = 0;
        for e in executions {
            if runtime.state(e).await.unwrap().status().is_terminal() {
                ended += 1;
            }
        }
        if ended == executions.len() {
            return true;
        }
        clock.advance(step);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    false
}
