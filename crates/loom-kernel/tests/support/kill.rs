//! The SIGKILL harness of the crash tests: runs one test of this binary as a child process
//! (its `entry` test, which does nothing unless `env` is set), reads what it prints, and kills
//! it with SIGKILL once it has printed a given line.

use super::child::{child_test, say};

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use loom_kernel::ManualClock;

/// Runs the test `entry` of this binary (`concat!(module_path!(), "::name")`) with `env` set to
/// `store_path` until it prints the line `until`, then kills it (SIGKILL on Unix). Fails if the
/// line does not come within 60 s, or if the child ends before (it ran no test, or failed).
pub fn run_and_kill(entry: &str, env: &str, store_path: &Path, until: &str) {
    let mut child = child_test(entry)
        .env(env, store_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines, received) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    // The test harness may print its own words before the child's on the same line.
    let seen = loop {
        match received.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line == until || line.ends_with(&format!(" {until}")) => break true,
            Ok(line) => assert!(
                !line.starts_with("running 0 tests"),
                "the child process ran no test: {entry}"
            ),
            Err(_) => break false,
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        seen,
        "the child did not print '{until}' within 60 s (or ended before)"
    );
    drop(received);
    reader.join().unwrap();
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
