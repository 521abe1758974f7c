//! `RUST_LOG=info` on the server says what it serves, without colour codes off a terminal.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn info_logs_say_what_the_server_serves() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_a2ui-callfunction"))
        .arg("server")
        .arg("--store")
        .arg(dir.path().join("loom.redb"))
        .args(["--addr", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let done = line.contains("serving the admin API");
        seen.push(line);
        if done {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let text = seen.join("\n");
    assert!(!text.contains('\x1b'), "colour codes in:\n{text}");
    let serving = seen
        .iter()
        .find(|line| line.contains("serving execution"))
        .unwrap_or_else(|| panic!("no serving line:\n{text}"));
    assert!(serving.contains("renderers=ws://127.0.0.1:"), "{serving}");
    let admin = seen.last().unwrap();
    assert!(admin.contains("console=http://127.0.0.1:"), "{admin}");
    assert!(admin.contains("/admin/v1"), "{admin}");
}
