//! Tests that run one test of their own binary as a child process (the SIGKILL tests): the
//! command that runs exactly that test, checked to exist first. Without the check, a renamed or
//! moved entry test would make the child run no test at all, silently; and what a child uses to
//! run and to tell its parent how far it got. Std and tokio only, so that the other crates' test
//! support includes this file too (`#[path]`).

use std::io::Write;
use std::process::Command;

/// The name the test harness gives the test at `path`, a `module_path!()` joined with the test
/// function's name: the path without the test binary's crate name.
pub fn test_name(path: &str) -> &str {
    path.split_once("::").map_or(path, |(_, rest)| rest)
}

/// The command that runs the test at `path` (`concat!(module_path!(), "::entry")`) of this test
/// binary alone, its output not captured. Panics unless this binary has exactly that test.
pub fn child_test(path: &str) -> Command {
    let name = test_name(path);
    let exe = std::env::current_exe().expect("the test binary's path");
    let listed = Command::new(&exe)
        .args([name, "--exact", "--list", "--format=terse"])
        .output()
        .expect("listing the test binary's tests");
    let listed = String::from_utf8_lossy(&listed.stdout);
    let found = listed
        .lines()
        .filter(|line| *line == format!("{name}: test"))
        .count();
    assert_eq!(
        found, 1,
        "this test binary has no test named '{name}' to run as a child process: {listed}"
    );
    let mut command = Command::new(exe);
    command.args([name, "--exact", "--nocapture", "--test-threads=1"]);
    command
}

/// The runtime a child process drives its flows on: two worker threads.
pub fn child_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the child's runtime")
}

/// Prints `line` on standard output at once: the parent reads it while the child runs.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout");
    out.flush().expect("stdout");
}
