//! The web console on a store holding many executions, in headless Chromium: the first page
//! comes from the server's listing index (never the whole list), the operator pages older and
//! back to the newest, filters by status and searches by id, and the counts say how many there
//! are in all. The store is filled through its public API (`support/fill.rs`), not by running
//! flows.
//!
//! `LOOM_BROWSER_EXECUTIONS` sets how many (default 600, seconds in CI); with 1000000 it is
//! the run `docs/PERFORMANCE.md` records, and it prints the first paint and when the first
//! page's data arrived, both from the page's navigation start.

use serde_json::{Value, json};

use crate::support::cdp::Page;
use crate::support::chromium::chromium_or_skip;
use crate::support::fill::{fill, fill_events, fill_id};
use crate::support::*;
use loom_kernel::EventStore;

/// The ids of the rows the executions table shows.
const ROWS: &str =
    "Array.from(document.querySelectorAll('#executions tbody tr')).map(r => r.dataset.id)";

fn ids(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("an array of ids")
        .iter()
        .map(|id| id.as_str().expect("an id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pages_filters_and_searches_many_executions() {
    let test = "an_operator_pages_filters_and_searches_many_executions";
    let Some(browser) = chromium_or_skip(test) else {
        return;
    };
    let count: usize = std::env::var("LOOM_BROWSER_EXECUTIONS")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(600);
    assert!(count >= 200, "LOOM_BROWSER_EXECUTIONS: at least 200");
    let server = server().await;
    let filled = fill(server.runtime.store(), count).await;
    let thousands = |n: usize| loom_console::thousands(n as u64);

    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}/admin/#token={TOKEN}", server.url);
    let mut page = Page::open(browser, &dir.path().join("profile"), &url).await;
    page.until(
        "document.querySelectorAll('#executions tbody tr').length === 50",
        "the first page of 50",
    )
    .await;
    let timing = page
        .eval(
            "(() => { const paint = performance.getEntriesByName('first-contentful-paint')[0]; \
             const list = performance.getEntriesByType('resource').find(e => /v1\\/executions(\\?|$)/.test(e.name)); \
             return { paint: paint ? paint.startTime : null, listed: list ? list.responseEnd : null }; })()",
        )
        .await;
    println!(
        "{count} executions filled in {filled:.2?}; first contentful paint {} ms, first page's data in {} ms after navigation start",
        timing["paint"], timing["listed"]
    );

    // Newest first: the last filled is on top; the count says the total.
    let first = ids(&page.eval(ROWS).await);
    assert_eq!(first[0], fill_id(count - 1).to_string());
    assert_eq!(first[49], fill_id(count - 50).to_string());
    page.until(
        &format!(
            "document.getElementById('execution-count').textContent === {:?}",
            format!("(50 shown of {})", thousands(count))
        ),
        "the count of every execution",
    )
    .await;

    // A new execution: the refresh draws its row and keeps the others' rows as they were.
    page.eval("document.querySelector('#executions tbody tr')._kept = true; true")
        .await;
    server
        .runtime
        .store()
        .append(&fill_id(count), 0, &fill_events(count))
        .await
        .unwrap();
    page.eval("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'r'})); true")
        .await;
    page.until(
        &format!(
            "document.querySelector('#executions tbody tr').dataset.id === {:?}",
            fill_id(count).to_string()
        ),
        "the new execution on top",
    )
    .await;
    assert_eq!(
        page.eval("document.querySelectorAll('#executions tbody tr')[1]._kept === true")
            .await,
        json!(true),
        "the row of an execution that did not change is not drawn again"
    );
    let count = count + 1;
    let failed = count.div_ceil(100);

    // Older, twice: the next pages, each execution once, then back to the newest.
    let mut seen = ids(&page.eval(ROWS).await);
    for n in 1..=2 {
        page.eval("document.getElementById('older').click(); true")
            .await;
        let expected = fill_id(count - 1 - 50 * n).to_string();
        page.until(
            &format!("document.querySelector('#executions tbody tr').dataset.id === {expected:?}"),
            "the next older page",
        )
        .await;
        let shown = ids(&page.eval(ROWS).await);
        assert_eq!(shown.len(), 50);
        assert!(shown.iter().all(|id| !seen.contains(id)), "a page repeats");
        seen.extend(shown);
    }
    page.eval("document.getElementById('newest').click(); true")
        .await;
    page.until(
        &format!(
            "document.querySelector('#executions tbody tr').dataset.id === {:?}",
            fill_id(count - 1).to_string()
        ),
        "the newest page again",
    )
    .await;

    // Failed only: the server filters; the status menu holds the counts.
    page.eval("(() => { const f = document.getElementById('filter'); f.value = 'failed'; f.dispatchEvent(new Event('change')); return true; })()")
        .await;
    let newest_failed = fill_id((count - 1) / 100 * 100).to_string();
    page.until(
        &format!("document.querySelector('#executions tbody tr').dataset.id === {newest_failed:?}"),
        "the failed ones",
    )
    .await;
    page.until(
        &format!(
            "document.getElementById('execution-count').textContent === {:?}",
            format!("({} shown of {})", failed.min(50), thousands(failed))
        ),
        "the count of the failed ones",
    )
    .await;
    let option = page
        .eval("Array.from(document.getElementById('filter').options).find(o => o.value === 'failed').textContent")
        .await;
    assert_eq!(option, json!(format!("failed ({})", thousands(failed))));

    // Search by id: the server lists the ids starting with what is typed.
    page.eval("(() => { const f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('change')); return true; })()")
        .await;
    let wanted = fill_id(count / 2).to_string();
    let prefix = &wanted[..wanted.len() - 1];
    page.eval(&format!(
        "(() => {{ const s = document.getElementById('search'); s.value = {prefix:?}; s.dispatchEvent(new Event('input')); return true; }})()"
    ))
    .await;
    page.until(
        &format!("(() => {{ const rows = {ROWS}; return rows.length === 10 && rows.every(id => id.startsWith({prefix:?})); }})()"),
        "the ids starting with the search",
    )
    .await;
    assert_eq!(
        page.eval("document.getElementById('execution-count').textContent")
            .await,
        json!("(10 shown)"),
        "with a search the total is not known at once, and not claimed"
    );
}
