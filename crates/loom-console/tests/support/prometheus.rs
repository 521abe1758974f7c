//! The official Python client's parser of the Prometheus text format
//! (`prometheus_client.parser.text_string_to_metric_families`), run on an exposition: the
//! metrics endpoint must be read by a parser that Prometheus's own project keeps, not only by
//! this crate's tests. `cargo xtask test` installs it in `target/metrics-venv`; without it the
//! test is skipped loudly (recorded for the test command's summary), or fails with
//! `LOOM_REQUIRE_PROMETHEUS_PARSER` set.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

/// The variable that makes a missing parser a failure instead of a skip.
pub const REQUIRE_VAR: &str = "LOOM_REQUIRE_PROMETHEUS_PARSER";

/// Reads the exposition on stdin, prints one JSON object per family: its name, type and
/// samples (`[name, labels, value]`). A line the parser refuses fails the script.
const PARSE: &str = r#"
import json, math, sys
from prometheus_client.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    samples = [[s.name, s.labels, None if math.isnan(s.value) else s.value] for s in family.samples]
    print(json.dumps({"name": family.name, "type": family.type, "samples": samples}))
"#;

fn can_import(python: &str) -> bool {
    Command::new(python)
        .args(["-c", "import prometheus_client.parser"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A Python that has `prometheus_client`: the one `LOOM_PROMETHEUS_PYTHON` names, the test
/// command's venv, or the machine's `python3`. Without one, says on stderr that `test` is
/// skipped and returns `None`; with [`REQUIRE_VAR`] set, fails instead.
pub fn parser_or_skip(test: &str) -> Option<String> {
    let venv =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/metrics-venv/bin/python");
    let candidates = [
        std::env::var("LOOM_PROMETHEUS_PYTHON").ok(),
        venv.to_str().map(str::to_owned),
        Some("python3".to_owned()),
    ];
    let found = candidates
        .into_iter()
        .flatten()
        .find(|python| can_import(python));
    if found.is_none() {
        assert!(
            std::env::var_os(REQUIRE_VAR).is_none(),
            "{REQUIRE_VAR} is set and no Python with prometheus_client was found (cargo xtask test installs it in target/metrics-venv)"
        );
        eprintln!(
            "\n*** SKIPPED {test}: no Python with prometheus_client (cargo xtask test installs it in target/metrics-venv; or pip install prometheus-client)\n"
        );
        loom_store_postgres::record_skipped_test("prometheus_client", test);
    }
    found
}

/// The families `python`'s `prometheus_client` parses out of `exposition`; panics with the
/// parser's message if it refuses it.
pub fn parse(python: &str, exposition: &str) -> Vec<Value> {
    let mut child = Command::new(python)
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(exposition.as_bytes())
        .expect("the exposition is written");
    let output = child.wait_with_output().expect("python ends");
    assert!(
        output.status.success(),
        "prometheus_client refused the exposition: {}\n{exposition}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}
