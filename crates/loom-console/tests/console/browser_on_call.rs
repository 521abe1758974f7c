//! The web console as an operator on call uses it, in headless Chromium over the DevTools
//! protocol: at 1280x800 no column of the list is cut; the queue of doubts shows five at a
//! time and folds; the address bar opens an execution (back and forward too); a verdict from
//! an execution's own detail; a resume refused field by field; an execution started from the
//! page (its input checked against the flow's schema); and a cancel by the list's filter, after
//! a confirmation that says how many. Skipped loudly when Chromium is not installed.

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

/// Whether every cell of the list's last column (and its heading) shows all of its text
/// inside the window.
const LAST_COLUMN_WHOLE: &str = "(() => { const cells = Array.from(document.querySelectorAll('#executions tr > :last-child')); return cells.length > 1 && cells.every(c => c.offsetWidth > 0 && c.scrollWidth <= c.clientWidth && c.getBoundingClientRect().right <= window.innerWidth); })()";

/// Whether the longest texts the status and last-event columns show fit them: each status
/// badge, and the widest ages, put in the first row's cells for a moment (then put back).
const WIDEST_FIT: &str = "(() => { const row = document.querySelector('#executions tbody tr'); const status = row.cells[1], last = row.cells[row.cells.length - 1]; const kept = [status.innerHTML, last.textContent]; let fits = true; for (const name of ['completed', 'suspended', 'cancelled', 'in-doubt']) { status.replaceChildren(); const b = document.createElement('span'); b.className = 'badge status-' + name; b.textContent = name; status.appendChild(b); fits = fits && status.scrollWidth <= status.clientWidth; } for (const age of ['23h59m ago', '59m59s ago', '999ms ago', '29d23h ago']) { last.textContent = age; fits = fits && last.scrollWidth <= last.clientWidth; } status.innerHTML = kept[0]; last.textContent = kept[1]; return fits; })()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_on_call_pages_doubts_navigates_by_address_gives_verdicts_starts_and_cancels_many()
 {
    let test = "an_operator_on_call_pages_doubts_navigates_by_address_gives_verdicts_starts_and_cancels_many";
    let Some(browser) = chromium_or_skip(test) else {
        return;
    };
    let server = server().await;
    let runtime = &server.runtime;
    for n in 1..=7 {
        start_order(runtime, &format!("order-{n}")).await;
    }
    let waiting = start_locale(runtime, "locale", "checkout-4").await;
    start_hello(
        runtime,
        "a-rather-long-execution-id-that-a-caller-chose-0001",
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}/admin/#token={TOKEN}", server.url);
    let mut page = Page::open(browser, &dir.path().join("profile"), &url).await;
    page.viewport(1280, 800).await;
    page.until(
        "document.querySelectorAll('#executions tbody tr').length === 9",
        "the nine executions listed",
    )
    .await;

    // 1280x800: the last column whole, in the window.
    let whole = page.eval(LAST_COLUMN_WHOLE).await;
    let cells = page
        .eval("JSON.stringify(Array.from(document.querySelectorAll('#executions tr > :last-child')).map(c => [c.textContent, c.offsetWidth, c.scrollWidth, c.clientWidth, c.getBoundingClientRect().right, window.innerWidth]))")
        .await;
    assert_eq!(whole, json!(true), "{cells}");
    assert_eq!(page.eval(WIDEST_FIT).await, json!(true));

    // The queue of doubts: five, then more on demand; folded and unfolded.
    page.until(
        "document.querySelectorAll('#doubts .card').length === 5 && !document.getElementById('doubts-more').hidden",
        "the first five doubts and a button for more",
    )
    .await;
    page.eval("document.getElementById('doubts-more').click(); true")
        .await;
    page.until(
        "document.querySelectorAll('#doubts .card').length === 7 && document.getElementById('doubts-more').hidden",
        "all seven doubts",
    )
    .await;
    page.eval("document.getElementById('doubts-toggle').click(); true")
        .await;
    assert_eq!(
        page.eval("document.getElementById('doubts-body').hidden")
            .await,
        json!(true)
    );
    page.eval("document.getElementById('doubts-toggle').click(); true")
        .await;

    // The address bar drives the page; back and forward too.
    page.eval("location.hash = 'execution=order-2'; true").await;
    page.until(
        "document.getElementById('detail-id').textContent === 'order-2'",
        "order-2 opened from the address",
    )
    .await;
    page.eval("location.hash = 'execution=checkout-4'; true")
        .await;
    page.until(
        "document.getElementById('detail-id').textContent === 'checkout-4'",
        "checkout-4 opened from the address",
    )
    .await;
    page.eval("history.back(); true").await;
    page.until(
        "document.getElementById('detail-id').textContent === 'order-2' && !document.getElementById('doubts-block').hidden",
        "back to order-2, with its step in doubt",
    )
    .await;

    // A verdict from the execution's detail: it did not happen.
    page.eval(&click("#detail-doubts button", "Failed")).await;
    page.until(
        "document.getElementById('dialog').open && !!document.querySelector('#dialog input[name=message]')",
        "the verdict dialog",
    )
    .await;
    page.eval("document.querySelector('#dialog input[name=message]').value = 'the provider has no such charge'; true")
        .await;
    page.eval("document.getElementById('dialog-confirm').click(); true")
        .await;
    page.until(
        "!document.getElementById('dialog').open",
        "the verdict recorded",
    )
    .await;
    let state = runtime.wait(&id("order-2")).await.unwrap();
    assert!(
        matches!(
            state.step("charge#1").map(|s| s.status),
            Some(StepStatus::Failed { .. })
        ),
        "{:?}",
        state.step("charge#1")
    );
    page.until(
        "document.getElementById('detail-status').textContent === 'failed'",
        "the detail following order-2 to its failure",
    )
    .await;

    // A resume refused field by field: `value` too short, said in words; nothing recorded.
    page.eval("history.forward(); true").await;
    page.until(
        "document.getElementById('detail-id').textContent === 'checkout-4'",
        "forward to checkout-4",
    )
    .await;
    page.until(
        &click("#gates button", "Resume"),
        "the gate's Resume button",
    )
    .await;
    page.until(
        "document.getElementById('dialog').open && !!document.querySelector('#dialog input[name=value]')",
        "the resume form",
    )
    .await;
    let before = runtime.store().read_all(&waiting).await.unwrap().len();
    page.eval(&click("#dialog .mode button", "JSON")).await;
    page.eval("document.querySelector('#dialog textarea[name=payload]').value = '{\"value\": \"d\"}'; true")
        .await;
    page.eval("document.getElementById('dialog-confirm').click(); true")
        .await;
    page.until(
        "document.getElementById('dialog-confirm').textContent === 'Resume'",
        "the review",
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
        .eval("document.getElementById('dialog-error').innerText")
        .await;
    let refusal = refusal.as_str().unwrap();
    assert!(
        refusal.contains("/value: ")
            && refusal.contains("Expected a string of at least 2 characters"),
        "{refusal}"
    );
    assert!(
        !refusal.contains("oneOf"),
        "no schema in the refusal: {refusal}"
    );
    assert!(
        !refusal.contains("loom resume"),
        "no command in the refusal: {refusal}"
    );
    assert_eq!(
        runtime.store().read_all(&waiting).await.unwrap().len(),
        before
    );
    if let Ok(shots) = std::env::var("LOOM_CONSOLE_SCREENSHOTS") {
        page.screenshot(&std::path::Path::new(&shots).join("console-refusal.png"))
            .await;
    }
    page.eval("document.getElementById('dialog-cancel').click(); true")
        .await;
    page.until(
        "document.getElementById('dialog').open && document.getElementById('dialog-confirm').textContent === 'Review'",
        "the form again",
    )
    .await;
    page.eval("document.getElementById('dialog-cancel').click(); true")
        .await;

    // Start an execution: greet, its input from the form its schema makes; an empty name is
    // refused in words first.
    page.until(
        "!document.getElementById('dialog').open",
        "the dialog closed",
    )
    .await;
    page.eval("document.getElementById('start').click(); true")
        .await;
    page.until(
        "document.getElementById('dialog').open && !!document.querySelector('#dialog select[name=flow]')",
        "the start dialog",
    )
    .await;
    page.eval("const f = document.querySelector('#dialog select[name=flow]'); f.value = 'greet'; f.dispatchEvent(new Event('change')); true")
        .await;
    page.until(
        "!!document.querySelector('#dialog input[name=name]')",
        "the form made from greet's input schema",
    )
    .await;
    page.eval("document.querySelector('#dialog input[name=id]').value = 'greet-web'; true")
        .await;
    page.eval(&click("#dialog .mode button", "JSON")).await;
    page.eval(
        "document.querySelector('#dialog textarea[name=payload]').value = '{\"name\": \"\"}'; true",
    )
    .await;
    page.eval("document.getElementById('dialog-confirm').click(); true")
        .await;
    page.until(
        "!document.getElementById('dialog-error').hidden && document.getElementById('dialog-error').innerText.includes('/name')",
        "the start refused, naming the field",
    )
    .await;
    page.eval(&click("#dialog .mode button", "Form")).await;
    page.eval("document.querySelector('#dialog input[name=name]').value = 'web'; true")
        .await;
    page.eval("document.getElementById('dialog-confirm').click(); true")
        .await;
    page.until(
        "!document.getElementById('dialog').open && document.getElementById('detail-id').textContent === 'greet-web'",
        "the started execution opened",
    )
    .await;
    let started = runtime.wait(&id("greet-web")).await.unwrap();
    assert_eq!(
        started.output().unwrap().to_value(),
        json!("hello, \"web\"")
    );

    // Cancel by the list's filter: the in-doubt orders left, after a confirmation that says
    // how many.
    page.eval("const s = document.getElementById('filter'); s.value = 'in-doubt'; s.dispatchEvent(new Event('change')); true")
        .await;
    page.until(
        "document.querySelectorAll('#executions tbody tr').length === 6",
        "the six executions still in doubt",
    )
    .await;
    page.eval("document.getElementById('cancel-many').click(); true")
        .await;
    page.until(
        "document.getElementById('dialog').open && document.getElementById('dialog-title').textContent === 'Cancel 6 executions?'",
        "the confirmation with the count",
    )
    .await;
    assert_eq!(
        page.eval("document.getElementById('cancel-many-list').textContent.split('\\n').length")
            .await,
        json!(6)
    );
    page.eval("document.getElementById('dialog-confirm').click(); true")
        .await;
    page.until(
        "!document.getElementById('dialog').open",
        "the cancels recorded",
    )
    .await;
    for n in [1, 3, 4, 5, 6, 7] {
        assert_eq!(
            runtime
                .state(&id(&format!("order-{n}")))
                .await
                .unwrap()
                .status(),
            ExecutionStatus::Cancelled,
            "order-{n}"
        );
    }
    assert_eq!(
        runtime.state(&waiting).await.unwrap().status(),
        ExecutionStatus::Suspended,
        "another status is left alone"
    );
    page.until(
        "document.getElementById('executions-empty').hidden === false",
        "no execution left in doubt",
    )
    .await;

    // On a phone the list keeps its last column whole too.
    page.eval("const a = document.getElementById('filter'); a.value = ''; a.dispatchEvent(new Event('change')); true")
        .await;
    page.viewport(390, 844).await;
    page.until(LAST_COLUMN_WHOLE, "the last column whole on a phone")
        .await;
    assert_eq!(page.eval(WIDEST_FIT).await, json!(true));
}
