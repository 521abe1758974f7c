//! `GET /admin/v1/metrics`: refused without the token; the figures after a few executions, a
//! step in doubt and its verdict; and an exposition that the official Python client's parser
//! reads back to the same figures.

use loom_kernel::{ExecutionStatus, Verdict};
use serde_json::{Value, json};

use crate::support::prometheus;
use crate::support::*;

/// `GET /admin/v1/metrics` with the token: the status, the head and the exposition.
async fn scrape(server: &Server) -> (u16, String, String) {
    let address = server.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "GET /admin/v1/metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

/// The value of the sample named `name` with exactly `labels` (`name value` or
/// `name{labels} value`).
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let key = match labels {
        "" => name.to_owned(),
        labels => format!("{name}{{{labels}}}"),
    };
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            (series == key).then(|| value.parse().expect("a number"))
        })
}

fn value(text: &str, name: &str) -> f64 {
    sample(text, name, "").unwrap_or_else(|| panic!("{name} missing in\n{text}"))
}

fn executions(text: &str, status: &str) -> f64 {
    sample(text, "loom_executions", &format!("status=\"{status}\""))
        .unwrap_or_else(|| panic!("loom_executions of {status} missing in\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_are_refused_without_the_token() {
    let server = server().await;
    start_order(&server.runtime, "order-1").await;
    let address = server.url.trim_start_matches("http://");
    for authorization in ["", "Authorization: Bearer wrong-token-0123456789abcdef\r\n"] {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let request = format!(
            "GET /admin/v1/metrics HTTP/1.1\r\nHost: x\r\n{authorization}Connection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(!answer.contains("loom_"), "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_figures_follow_executions_a_step_in_doubt_and_its_verdict() {
    let server = server().await;
    let order = start_order(&server.runtime, "order-1").await;
    start_hello(&server.runtime, "hello-1").await;
    start_hello(&server.runtime, "hello-2").await;
    start_locale(&server.runtime, "locale", "locale-1").await;

    let (status, head, text) = scrape(&server).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert_eq!(executions(&text, "in-doubt"), 1.0);
    assert_eq!(executions(&text, "completed"), 2.0);
    assert_eq!(executions(&text, "suspended"), 1.0);
    assert_eq!(executions(&text, "running"), 0.0);
    assert_eq!(value(&text, "loom_steps_in_doubt"), 1.0);
    // The `charge` effect was invoked once; it answered in doubt, so no step has ended.
    assert_eq!(value(&text, "loom_steps_started_total"), 1.0);
    assert_eq!(value(&text, "loom_steps_completed_total"), 0.0);
    assert_eq!(value(&text, "loom_steps_failed_total"), 0.0);
    let age = value(&text, "loom_oldest_parked_age_seconds");
    assert!((0.0..600.0).contains(&age), "{age}");

    // The disk store's figures, as the store itself counts them.
    let stats = server.runtime.store().stats();
    let commits = stats.commits.expect("commits");
    assert!(commits >= 4, "four executions started: {commits} commits");
    assert_eq!(value(&text, "loom_store_commits_total"), commits as f64);
    assert_eq!(
        value(&text, "loom_store_appends_total"),
        stats.appends.expect("appends") as f64
    );
    for histogram in [
        "loom_store_commit_duration_seconds",
        "loom_store_fsync_duration_seconds",
    ] {
        assert!(
            text.contains(&format!("# TYPE {histogram} histogram")),
            "{text}"
        );
        assert_eq!(value(&text, &format!("{histogram}_count")), commits as f64);
        let all = sample(&text, &format!("{histogram}_bucket"), "le=\"+Inf\"");
        assert_eq!(all, Some(commits as f64), "{text}");
    }
    // The disk store has no leases: the figure is left out, not written as 0.
    assert!(!text.contains("lease_takeovers"), "{text}");

    // An operator's `completed` verdict ends the step; the order then waits for approval.
    server
        .runtime
        .resolve(
            &order,
            "charge#1",
            Verdict::Completed {
                output: loom_kernel::Payload::try_from_value(&json!({"id": "ch_1"})).unwrap(),
            },
            Some("ops".into()),
        )
        .await
        .unwrap();
    let state = server.runtime.wait(&order).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Suspended);
    let (_, _, text) = scrape(&server).await;
    assert_eq!(value(&text, "loom_steps_in_doubt"), 0.0);
    assert_eq!(value(&text, "loom_steps_completed_total"), 1.0);
    assert_eq!(executions(&text, "in-doubt"), 0.0);
    assert_eq!(executions(&text, "suspended"), 2.0);
    assert!(value(&text, "loom_store_commits_total") > commits as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_parser_reads_the_exposition_back() {
    let Some(python) =
        prometheus::parser_or_skip("metrics::the_official_python_parser_reads_the_exposition_back")
    else {
        return;
    };
    let server = server().await;
    start_order(&server.runtime, "order-1").await;
    start_hello(&server.runtime, "hello-1").await;
    start_locale(&server.runtime, "locale", "locale-1").await;
    let (_, _, text) = scrape(&server).await;

    let families = prometheus::parse(&python, &text);
    let family = |name: &str| -> &Value {
        families
            .iter()
            .find(|family| family["name"] == name)
            .unwrap_or_else(|| panic!("the parser found no family {name} in\n{text}"))
    };
    // The parser names a counter's family without `_total`.
    for (name, kind) in [
        ("loom_executions", "gauge"),
        ("loom_steps_started", "counter"),
        ("loom_steps_completed", "counter"),
        ("loom_steps_failed", "counter"),
        ("loom_steps_in_doubt", "gauge"),
        ("loom_oldest_parked_age_seconds", "gauge"),
        ("loom_store_commits", "counter"),
        ("loom_store_appends", "counter"),
        ("loom_store_commit_duration_seconds", "histogram"),
        ("loom_store_fsync_duration_seconds", "histogram"),
    ] {
        assert_eq!(family(name)["type"], kind, "{name}");
    }
    let in_doubt = family("loom_executions")["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|sample| sample[1]["status"] == "in-doubt")
        .expect("an in-doubt sample");
    assert_eq!(in_doubt[2], 1.0);
    assert_eq!(family("loom_steps_in_doubt")["samples"][0][2], 1.0);
    assert_eq!(family("loom_steps_started")["samples"][0][2], 1.0);
    // A histogram's samples: its buckets (15 bounds and +Inf), its count and its sum.
    let fsync = family("loom_store_fsync_duration_seconds")["samples"]
        .as_array()
        .unwrap();
    assert_eq!(fsync.len(), 16 + 2, "{fsync:?}");
}
