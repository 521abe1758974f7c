//! Tests that drive a real browser: the Chromium on this machine, or a loud skip. Std only, so
//! that the example's tests include this file too (`#[path]`).

use std::process::Command;

/// The Chromium (or Chrome) installed here. Without one, says on stderr that `test` is skipped
/// and returns `None`; with `LOOM_REQUIRE_CHROMIUM` set (`.ci/run` installs Chromium and sets
/// it), fails instead.
pub fn chromium_or_skip(test: &str) -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|output| output.status.success())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("LOOM_REQUIRE_CHROMIUM").is_none(),
            "LOOM_REQUIRE_CHROMIUM is set and no Chromium is installed"
        );
        eprintln!("\n*** SKIPPED {test}: no Chromium (apt-get install chromium)\n");
        record_skip(test);
    }
    found
}

/// Appends `chromium\t<test>` to the file `LOOM_SKIPPED_TESTS_FILE` names (`cargo xtask test`
/// sets it and sums the skipped tests up at the end, since cargo hides a passing test's stderr).
fn record_skip(test: &str) {
    use std::io::Write;
    let Some(path) = std::env::var_os("LOOM_SKIPPED_TESTS_FILE") else {
        return;
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path);
    if let Ok(mut file) = file {
        let _ = file.write_all(format!("chromium\t{test}\n").as_bytes());
    }
}
