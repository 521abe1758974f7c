//! Resumes checked against what the gate declared it expects (LD-031), before anything is
//! recorded: `loom resume` on a store and through `--admin`, and the admin API itself. A
//! payload of the wrong shape (the bare `"de-CH"` an A2UI function-result gate does not take)
//! is refused with the schema and an example and leaves the log as it was; the right shape is
//! recorded and the flow goes on; a gate recorded without a schema takes any payload, as
//! before. `show` prints the shape in its hint.

use loom_kernel::{DiskStore, EventStoreExt, ExecutionStatus};
use serde_json::{Value, json};

use crate::support::*;

/// A closed store file holding `locale-1` (a gate that declares its payload) and `old-1` (the
/// same gate, recorded without a schema).
async fn locale_store(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("loom.redb");
    let runtime = compose(DiskStore::open(&path).unwrap());
    start_locale(&runtime, "locale", "locale-1").await;
    start_locale(&runtime, "locale_unchecked", "old-1").await;
    start_locale(&runtime, "locale_broken_schema", "broken-1").await;
    runtime.shutdown().await;
    path
}

async fn log_len(path: &std::path::Path, execution: &str) -> usize {
    let store = DiskStore::open(path).unwrap();
    store.read_all(&id(execution)).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_store_a_wrong_shape_is_refused_with_the_schema_and_the_right_one_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = locale_store(dir.path()).await;
    let file = path.to_str().unwrap();
    let key = locale_key("locale-1");

    let shown = loom_async(&["--store", file, "show", "locale-1"]).await;
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    let text = stdout(&shown);
    assert!(
        text.contains("<json> must fit The result of A2UI function `getLocale`, the JSON Schema {"),
        "{text}"
    );
    assert!(
        text.contains(r#"for example: '{"value":"text"}'"#),
        "{text}"
    );
    let json = json_out(&loom_async(&["--store", file, "--json", "show", "locale-1"]).await);
    let expects = &json["state"]["pendingGates"][0]["expects"];
    assert_eq!(expects["schema"], locale_schema());
    assert_eq!(expects["gateId"], "A2UIFunctionResult#1");

    let before = log_len(&path, "locale-1").await;
    for wrong in [
        r#""de-CH""#,
        r#"{"value": "d"}"#,
        "{}",
        r#"{"locale": "de-CH"}"#,
    ] {
        let refused = loom_async(&[
            "--store",
            file,
            "resume",
            "locale-1",
            LOCALE_GATE,
            &key,
            wrong,
        ])
        .await;
        assert_eq!(code(&refused), 2, "{wrong}: {}", stderr(&refused));
        let message = stderr(&refused);
        assert!(
            message.contains("does not fit what gate 'A2UIFunctionResult#1'"),
            "{message}"
        );
        assert!(message.contains("nothing was recorded"), "{message}");
        assert!(message.contains("It expects (JSON Schema): {"), "{message}");
        assert!(
            message.contains("For example: loom resume locale-1 A2UIFunctionResult"),
            "{message}"
        );
        assert_eq!(
            log_len(&path, "locale-1").await,
            before,
            "{wrong}: the log is unchanged"
        );
    }

    let right = loom_async(&[
        "--store",
        file,
        "resume",
        "locale-1",
        LOCALE_GATE,
        &key,
        r#"{"value": "de-CH"}"#,
    ])
    .await;
    assert_eq!(code(&right), 0, "{}", stderr(&right));
    assert_eq!(log_len(&path, "locale-1").await, before + 1);

    // The server that runs the flow drives it on: it completes with the locale.
    let runtime = compose(DiskStore::open(&path).unwrap());
    runtime.recover().await.unwrap();
    let done = runtime.wait(&id("locale-1")).await.unwrap();
    assert_eq!(done.status(), ExecutionStatus::Completed);
    assert_eq!(
        done.output().unwrap().to_value(),
        json!({"locale": "de-CH"})
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_recorded_without_a_schema_is_resumed_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = locale_store(dir.path()).await;
    let file = path.to_str().unwrap();
    let shown = stdout(&loom_async(&["--store", file, "show", "old-1"]).await);
    assert!(!shown.contains("must fit"), "{shown}");
    assert!(shown.contains("<json>"), "{shown}");
    let key = locale_key("old-1");
    let resumed = loom_async(&[
        "--store",
        file,
        "resume",
        "old-1",
        LOCALE_GATE,
        &key,
        r#""de-CH""#,
    ])
    .await;
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_schema_that_does_not_compile_does_not_lock_its_gate() {
    let dir = tempfile::tempdir().unwrap();
    let path = locale_store(dir.path()).await;
    let file = path.to_str().unwrap();
    let key = locale_key("broken-1");
    let resumed = loom_async(&[
        "--store",
        file,
        "resume",
        "broken-1",
        LOCALE_GATE,
        &key,
        r#"{"value": "fr"}"#,
    ])
    .await;
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    assert!(
        stderr(&resumed).contains("does not compile"),
        "the operator is told the check was skipped: {}",
        stderr(&resumed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_refuses_a_wrong_shape_with_the_schema_and_an_example_and_records_nothing() {
    let server = server().await;
    let e = start_locale(&server.runtime, "locale", "locale-2").await;
    let before = server.runtime.store().read_all(&e).await.unwrap().len();
    let client = post_resume(
        &server.url,
        "locale-2",
        json!({
            "eventType": LOCALE_GATE, "correlationKey": locale_key("locale-2"), "payload": "de-CH"
        }),
    )
    .await;
    assert_eq!(client.0, 400, "{}", client.1);
    let body: Value = serde_json::from_str(&client.1).unwrap();
    assert_eq!(body["error"]["kind"], "bad_request");
    assert_eq!(body["error"]["expected"]["schema"], locale_schema());
    assert_eq!(body["error"]["expected"]["gateId"], "A2UIFunctionResult#1");
    let example = body["error"]["expected"]["example"].clone();
    assert!(
        example["value"].as_str().is_some_and(|v| v.len() >= 2),
        "{example}"
    );
    assert_eq!(
        server.runtime.store().read_all(&e).await.unwrap().len(),
        before
    );
    assert_eq!(
        server.runtime.state(&e).await.unwrap().status(),
        ExecutionStatus::Suspended
    );

    // Through `loom --admin`: the same refusal, exit 2, nothing recorded.
    let key = locale_key("locale-2");
    let refused = loom_async(&[
        "--admin",
        &server.url,
        "--token",
        TOKEN,
        "resume",
        "locale-2",
        LOCALE_GATE,
        &key,
        "\"de-CH\"",
    ])
    .await;
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("It expects (JSON Schema)"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        server.runtime.store().read_all(&e).await.unwrap().len(),
        before
    );

    // The example itself is accepted, and the flow completes with it.
    let accepted = post_resume(
        &server.url,
        "locale-2",
        json!({
            "eventType": LOCALE_GATE, "correlationKey": key, "payload": example
        }),
    )
    .await;
    assert_eq!(accepted.0, 200, "{}", accepted.1);
    let done = server.runtime.wait(&e).await.unwrap();
    assert_eq!(done.status(), ExecutionStatus::Completed);
}

/// `POST /admin/v1/executions/{id}/resume` with `body`: the status and the body.
async fn post_resume(url: &str, execution: &str, body: Value) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = body.to_string();
    let request = format!(
        "POST /admin/v1/executions/{execution}/resume HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
        .await
        .unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}
