//! The web console in a real browser (headless Chromium): the page logs in with the token from
//! its link, lists the steps in doubt and the executions, and shows one execution's events with
//! classified values masked. Skipped loudly when Chromium is not installed (`.ci/run` installs
//! Debian's `chromium` when it is missing and sets `LOOM_REQUIRE_CHROMIUM`, which turns the skip
//! into a failure; elsewhere, `apt-get install chromium`).

use std::process::Command;

use crate::support::chromium::chromium_or_skip;
use crate::support::*;

/// The page's DOM once its scripts have run and its requests have been answered. A browser
/// that has not finished after two minutes is killed and the test fails, rather than hanging.
fn dump_dom(browser: &str, profile: &std::path::Path, url: &str) -> String {
    let mut child = Command::new(browser)
        .args(crate::support::chromium::HEADLESS_FLAGS)
        .args(["--virtual-time-budget=3000", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the browser runs");
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut dom = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut dom).map(|_| dom)
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("the browser can be waited for") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the browser did not finish loading the page");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(status.success(), "the browser failed: {status}");
    reader
        .join()
        .expect("the reader ends")
        .expect("the DOM is text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_console_lists_doubts_and_shows_an_execution_masked() {
    let test = "the_web_console_lists_doubts_and_shows_an_execution_masked";
    let Some(browser) = chromium_or_skip(test) else {
        return;
    };
    let server = server().await;
    start_order(&server.runtime, "order-1").await;
    let ended = start_order(&server.runtime, "order-2").await;
    server.runtime.cancel(&ended, None).await.unwrap();
    let url = server.url.clone();
    let profile = tempfile::tempdir().unwrap();
    let profile_path = profile.path().to_owned();

    let page = tokio::task::spawn_blocking(move || {
        dump_dom(
            browser,
            &profile_path,
            &format!("{url}/admin/#token={TOKEN}&execution=order-2"),
        )
    })
    .await
    .unwrap();
    assert!(
        page.contains("<code class=\"key\">order-1:charge#1</code>"),
        "{page}"
    );
    // The cancelled order's charge is still in doubt: listed, marked, with no verdict to give.
    assert!(page.contains("id=\"doubt-count\">(2)<"), "{page}");
    // The header's figures, from the metrics endpoint, count the same two (nothing is parked:
    // no age is shown).
    assert!(page.contains("2 in doubt</span>"), "{page}");
    assert!(
        page.contains("class=\"card doubt cancelled\" data-execution=\"order-2\""),
        "{page}"
    );
    assert!(
        page.contains("cancelled: settle it with the receiver"),
        "{page}"
    );
    assert!(page.contains("data-id=\"order-2\""), "{page}");
    assert!(
        page.contains("EXECUTION_CANCELLED"),
        "the selected execution's events: {page}"
    );
    assert!(page.contains(r#""number":"***""#), "{page}");
    assert!(
        !page.contains(CARD),
        "the card number reached the page: {page}"
    );
    assert!(
        !page.contains(TOKEN),
        "the token stays out of the page: {page}"
    );
}
