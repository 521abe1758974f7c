//! The README's "Logs and tracing" table, asserted: with `RUST_LOG=debug` the quickstart prints
//! one line per step, per effect attempt and per group commit, each under its span with the
//! fields the table names; no execution's span is nested in another's; no colour codes reach a
//! stderr that is not a terminal.

use std::process::{Command, Stdio};

fn quickstart_stderr(rust_log: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("loom.redb");
    let output = Command::new(env!("CARGO_BIN_EXE_quickstart"))
        .arg("--store")
        .arg(&store)
        .env("RUST_LOG", rust_log)
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "the quickstart failed:\n{stderr}");
    stderr
}

fn lines_with<'a>(stderr: &'a str, needles: &[&str]) -> Vec<&'a str> {
    stderr
        .lines()
        .filter(|line| needles.iter().all(|needle| line.contains(needle)))
        .collect()
}

#[test]
fn debug_logs_a_line_per_step_attempt_and_group_commit_with_the_readme_fields() {
    let stderr = quickstart_stderr("debug");

    let steps = lines_with(
        &stderr,
        &[
            "execution{execution=",
            "}:step{step=",
            " effect=",
            " attempt=",
            "step completed",
        ],
    );
    let attempts = lines_with(
        &stderr,
        &[
            "}:effect{effect=",
            " step=",
            " key=",
            " attempt=",
            " dispatch=",
            "attempt ended",
        ],
    );
    let commits = lines_with(
        &stderr,
        &["group_commit{requests=", " events=", "group committed"],
    );
    // Three checkouts each reserve inventory; two are approved and charge: at least five
    // steps, each with one attempt.
    assert!(steps.len() >= 5, "step lines:\n{stderr}");
    assert_eq!(
        steps.len(),
        attempts.len(),
        "one attempt per step here:\n{stderr}"
    );
    assert!(!commits.is_empty(), "group commit lines:\n{stderr}");
    for line in &attempts {
        assert!(line.contains("execution{execution="), "{line}");
    }
}

#[test]
fn spans_name_one_execution_and_no_colour_reaches_a_file() {
    let stderr = quickstart_stderr("debug");
    assert!(!stderr.contains('\x1b'), "colour codes in:\n{stderr}");
    for line in stderr.lines() {
        assert!(
            line.matches("execution{").count() <= 1,
            "one execution's span inside another's: {line}"
        );
        assert!(!line.contains("timers:execution{"), "{line}");
    }
    // The timer task's lines carry no execution: it serves all of them.
    assert!(
        stderr
            .lines()
            .any(|line| line.contains(" timers: ") && !line.contains("execution{")),
        "a timer line:\n{stderr}"
    );
}
