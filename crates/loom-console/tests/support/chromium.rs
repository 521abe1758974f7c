//! Tests that drive a real browser: the Chromium on this machine, or a loud skip (recorded for
//! `cargo xtask test`'s summary). The example's tests include this file too (`#[path]`).

use std::process::Command;

/// How every browser test starts Chromium: headless, as root, and with nothing that reaches
/// the network on its own (this machine's closed network refuses it, many times at a start).
pub const HEADLESS_FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

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
        loom_store_postgres::record_skipped_test("chromium", test);
    }
    found
}
