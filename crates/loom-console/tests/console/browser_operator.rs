//! The web console as an operator uses it, in headless Chromium driven over the DevTools
//! protocol: filter the executions, open a failed one (its failure first), resume a gate
//! through the form made from its schema (a wrong shape typed as JSON is refused and nothing
//! is recorded; the form's answer is recorded and the flow completes), and give a verdict on a
//! step in doubt, each through the page's own dialogs. With `LOOM_CONSOLE_SCREENSHOTS=DIR` it
//! also writes the screenshots `docs/CONSOLE.md` shows (1280x800 and a phone's 390x844).
//! Skipped loudly when Chromium is not installed (see `browser.rs`).

use std::path::PathBuf;

use loom_kernel::{EventStoreExt, ExecutionStatus, StepStatus};
use serde_json::json;

use crate::support::cdp::Page;
use crate::support::chromium::chromium_or_skip;
use crate::support::*;

/// Clicks the first element matching `selector` whose text contains `text`.
fn click(selector: &str, text: &str) -> String {
    format!(
        "(() => {{ const el = Array.from(document.querySelectorAll({selector:?})).find(e => e.textContent.includes({text:?})); if (!el) return false; el.click(); return true; }})()"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_filters_opens_a_failure_resumes_through_the_form_and_gives_a_verdict() {
    let test = "an_operator_filters_opens_a_failure_resumes_through_the_form_and_gives_a_verdict";
    let Some(browser) = chromium_or_skip(test) else {
        return;
    };
    let shots = std::env::var_os("LOOM_CONSOLE_SCREENSHOTS").map(PathBuf::from);
    let server = server().await;
    let runtime = &server.runtime;
    let order = start_order(runtime, "order-1").await;
    start_hello(runtime, "hello-1").await;
    // The trap of issue 26, taken by a caller that checks nothing: the flow fails for good.
    let failed = start_locale(runtime, "locale", "checkout-3").await;
    runtime
        .resume(
            &failed,
            LOCALE_GATE,
            &locale_key("checkout-3"),
            json!("de-CH").into(),
        )
        .await
        .unwrap();
    assert_eq!(
        runtime.wait(&failed).await.unwrap().status(),
        ExecutionStatus::Failed
    );
    let waiting = start_locale(runtime, "locale", "checkout-4").await;

    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}/admin/#token={TOKEN}", server.url);
    let mut page = Page::open(browser, &dir.path().join("profile"), &url).await;
    page.viewport(1280, 800).await;
    page.until(
        "document.querySelectorAll('#executions tbody tr').length === 4",
        "the four executions listed",
    )
    .await;

    // Filter: failed executions only.
    page.eval("const f = document.getElementById('filter'); f.value = 'failed'; f.dispatchEvent(new Event('change')); true")
        .await;
    page.until(
        "(() => { const rows = Array.from(document.querySelectorAll('#executions tbody tr')); return rows.length === 1 && rows[0].dataset.id === 'checkout-3'; })()",
        "the filter leaving the failed execution alone",
    )
    .await;
    // The total comes from a count of its own, which may answer after the rows (under load,
    // seconds after).
    page.until(
        "document.getElementById('execution-count').textContent.includes(' of ')",
        "the count of the filter's executions",
    )
    .await;
    let count = page
        .eval("document.getElementById('execution-count').textContent")
        .await;
    assert_eq!(count, json!("(1 shown of 1)"));

    // Open it: the failure comes first.
    page.eval("document.querySelector('#executions tbody tr').click(); true")
        .await;
    page.until(
        "document.getElementById('outcome').textContent.includes('neither `value` nor `error`')",
        "the failure at the top of the detail",
    )
    .await;
    let outcome = page
        .eval("document.getElementById('outcome').textContent")
        .await;
    assert!(
        outcome.as_str().unwrap().starts_with("a2ui.call: "),
        "{outcome}"
    );
    let events = page
        .eval("document.getElementById('events').innerText")
        .await;
    assert!(
        events.as_str().unwrap().contains("EXECUTION_FAILED"),
        "{events}"
    );
    if let Some(shots) = &shots {
        page.screenshot(&shots.join("console.png")).await;
    }

    // The waiting one: resume it through the form made from its schema.
    page.eval("const g = document.getElementById('filter'); g.value = ''; g.dispatchEvent(new Event('change')); true")
        .await;
    page.until(
        "!!document.querySelector('#executions tr[data-id=\"checkout-4\"]')",
        "the waiting execution listed",
    )
    .await;
    page.eval("document.querySelector('#executions tr[data-id=\"checkout-4\"]').click(); true")
        .await;
    page.until(
        &click("#gates button", "Resume"),
        "the gate's Resume button",
    )
    .await;
    page.until(
        "document.getElementById('dialog').open && !!document.querySelector('#dialog input[name=value]')",
        "the resume form with a field for the value",
    )
    .await;
    if let Some(shots) = &shots {
        page.screenshot(&shots.join("console-resume.png")).await;
    }
    let before = runtime.store().read_all(&waiting).await.unwrap().len();

    // The obvious guess, typed as JSON: refused, with what is expected; nothing recorded.
    page.eval(&click("#dialog .mode button", "JSON")).await;
    page.eval("document.querySelector('#dialog textarea[name=payload]').value = '\"de-CH\"'; true")
        .await;
    page.eval("document.getElementById('dialog-confirm').click(); true")
        .await;
    page.until(
        "document.getElementById('dialog-confirm').textContent === 'Resume'",
        "the review of the payload",
    )
    .await;
    page.eval("document.getElementById('dialog-confirm').click(); true")
        .await;
    page.until(
        "!document.getElementById('dialog-error').hidden",
        "the refusal in the dialog",
    )
    .await;
    let refusal = page
        .eval("document.getElementById('dialog-error').textContent")
        .await;
    let refusal = refusal.as_str().unwrap();
    // Said in words, field by field: neither the schema nor a command line.
    assert!(
        refusal.contains("the whole value: ")
            && refusal.contains("Expected one of: an object with value (a string of at least 2 characters); or an object with error"),
        "{refusal}"
    );
    assert!(refusal.contains("Nothing was recorded"), "{refusal}");
    assert_eq!(
        runtime.store().read_all(&waiting).await.unwrap().len(),
        before,
        "the refused resume recorded nothing"
    );

    // Back to the form: the value in its field, reviewed, resumed; the flow completes.
    page.eval("document.getElementById('dialog-cancel').click(); true")
        .await;
    page.until(
        "document.getElementById('dialog').open && document.getElementById('dialog-confirm').textContent === 'Review'",
        "the form again",
    )
    .await;
    page.eval(&click("#dialog .mode button", "Form")).await;
    page.eval(
        "const v = document.querySelector('#dialog input[name=value]'); v.value = 'de-CH'; true",
    )
    .await;
    page.eval("document.getElementById('dialog-confirm').click(); true")
        .await;
    page.until(
        "document.getElementById('dialog-confirm').textContent === 'Resume' && document.querySelector('#dialog .preview').textContent.includes('de-CH')",
        "the review of the form's payload",
    )
    .await;
    page.eval("document.getElementById('dialog-confirm').click(); true")
        .await;
    page.until(
        "!document.getElementById('dialog').open",
        "the dialog closing",
    )
    .await;
    let done = runtime.wait(&waiting).await.unwrap();
    assert_eq!(done.status(), ExecutionStatus::Completed);
    assert_eq!(
        done.output().unwrap().to_value(),
        json!({"locale": "de-CH"})
    );
    page.until(
        "document.getElementById('detail-status').textContent === 'completed'",
        "the detail following the execution to its end",
    )
    .await;

    // A verdict on the step in doubt: it happened, with the receiver's answer.
    page.until(
        &click(
            "#doubts .card[data-execution=\"order-1\"] button",
            "Completed",
        ),
        "the doubt's Completed button",
    )
    .await;
    page.until(
        "document.getElementById('dialog').open",
        "the verdict dialog",
    )
    .await;
    page.eval("document.querySelector('#dialog textarea[name=output]').value = '{\"id\": \"ch_1\"}'; true")
        .await;
    page.eval("document.getElementById('dialog-confirm').click(); true")
        .await;
    page.until(
        "!document.getElementById('dialog').open",
        "the verdict recorded",
    )
    .await;
    let state = runtime.wait(&order).await.unwrap();
    assert!(
        matches!(
            state.step("charge#1").map(|s| s.status),
            Some(StepStatus::Completed { .. })
        ),
        "{:?}",
        state.step("charge#1")
    );
    page.until(
        "document.getElementById('doubt-count').textContent === '(0)'",
        "the queue of doubts emptied",
    )
    .await;
    let text = page.eval("document.body.innerText").await;
    assert!(
        !text.as_str().unwrap().contains(CARD),
        "the card number reached the page"
    );
    assert!(
        !text.as_str().unwrap().contains(TOKEN),
        "the token is shown"
    );

    if let Some(shots) = &shots {
        page.eval("document.querySelector('#executions tr[data-id=\"checkout-3\"]').click(); true")
            .await;
        page.until(
            "document.getElementById('detail-id').textContent === 'checkout-3'",
            "the failed execution again",
        )
        .await;
        page.viewport(390, 844).await;
        page.eval("document.getElementById('detail').scrollIntoView(); true")
            .await;
        page.screenshot(&shots.join("console-phone.png")).await;
    }
}
