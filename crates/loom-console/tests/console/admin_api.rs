//! The admin API, directly and through `loom --admin`: the token guard, clear errors (unknown
//! execution, a step not in doubt, the same verdict twice, malformed bodies), verdicts,
//! resumes and cancels through the runtime, masking, and `tail` following a live execution.

use std::process::Output;
use std::time::Duration;

use loom_console::AdminClient;
use loom_console::ListFilter;
use loom_console::{AdminConfig, AdminConfigError, ErrorKind};
use loom_kernel::Verdict;
use loom_kernel::{ErrorInfo, EventStoreExt, ExecutionStatus, Payload};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// Sends a raw HTTP/1.1 request and returns the status line, the head and the body.
/// `GET path` with the admin token, over a raw connection.
async fn get_as_admin(url: &str, path: &str) -> (u16, String, String) {
    raw(
        url,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
        ),
    )
    .await
}

async fn raw(url: &str, request: &str) -> (u16, String, String) {
    let address = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

fn client(server: &Server) -> AdminClient {
    AdminClient::new(&server.url, TOKEN).unwrap()
}

/// `loom --admin <url> --token TOKEN <args>...`.
async fn as_admin(url: &str, args: &[&str]) -> Output {
    let mut all = vec!["--admin", url, "--token", TOKEN];
    all.extend_from_slice(args);
    loom_async(&all).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_token_is_refused_with_401_and_nothing_else_is_read() {
    let server = server().await;
    start_order(&server.runtime, "order-1").await;

    let (status, head, body) = raw(
        &server.url,
        "GET /admin/v1/executions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 401);
    assert!(
        head.to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{head}"
    );
    assert!(body.contains("Authorization: Bearer"), "{body}");
    assert!(!body.contains("order-1"));

    for token in [
        "wrong-token-0123456789abcdef",
        "test-token-0123456789abcde",
        "",
        "test-token-0123456789abcdef0",
    ] {
        let request = format!(
            "GET /admin/v1/executions/order-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        );
        let (status, _, body) = raw(&server.url, &request).await;
        assert_eq!(status, 401, "token {token:?}");
        assert!(!body.contains(CARD));
    }
    let (status, _, _) = raw(
        &server.url,
        &format!("POST /admin/v1/executions/order-1/cancel HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {TOKEN}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(
        server.runtime.state(&id("order-1")).await.unwrap().status(),
        ExecutionStatus::InDoubt,
        "a refused request changes nothing"
    );

    let wrong = AdminClient::new(&server.url, "wrong-token-0123456789abcdef").unwrap();
    let error = wrong.in_doubt().await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::Unauthorized);
    let refused = loom_async(&["--admin", &server.url, "--token", "nope", "in-doubt"]).await;
    assert_eq!(code(&refused), 5);
    assert!(
        stderr(&refused).contains("LOOM_ADMIN_TOKEN"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn a_short_or_unprintable_token_is_refused_when_configured() {
    assert_eq!(
        AdminConfig::new("short").unwrap_err(),
        AdminConfigError::TokenTooShort
    );
    assert_eq!(
        AdminConfig::new("a token with spaces in it").unwrap_err(),
        AdminConfigError::TokenNotPrintable
    );
    let token = loom_console::random_token().unwrap();
    assert_eq!(token.len(), 64);
    assert!(AdminConfig::new(token).is_ok());
    assert!(loom_console::constant_time_eq(b"abc", b"abc"));
    assert!(!loom_console::constant_time_eq(b"abc", b"abd"));
    assert!(!loom_console::constant_time_eq(b"abc", b"abcd"));
    assert!(!loom_console::constant_time_eq(b"", b"a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_execution_is_404_with_a_message_saying_so() {
    let server = server().await;
    let client = client(&server);
    let error = client.show("nope").await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::NotFound);
    assert!(
        error.message.contains("execution nope does not exist"),
        "{error}"
    );
    for error in [
        client
            .resolve("nope", "charge#1", &Verdict::Retry, None)
            .await
            .unwrap_err(),
        client
            .resume("nope", "approval", "k", &json!(1))
            .await
            .unwrap_err(),
        client.cancel("nope", None).await.unwrap_err(),
        client.events("nope", 0, Duration::ZERO).await.unwrap_err(),
    ] {
        assert_eq!(error.kind, ErrorKind::NotFound, "{error}");
    }
    let (status, _, body) = get_as_admin(&server.url, "/admin/v1/executions/nope").await;
    assert_eq!(status, 404);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["kind"], "not_found");

    let shown = as_admin(&server.url, &["show", "nope"]).await;
    assert_eq!(code(&shown), 3);
    assert!(stderr(&shown).contains("does not exist"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_go_through_the_runtime_and_the_same_verdict_twice_is_refused_clearly() {
    let server = server().await;
    let execution = start_order(&server.runtime, "order-1").await;
    let client = client(&server);

    let listed = client.in_doubt().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].idempotency_key, "order-1:charge#1");

    let error = client
        .resolve("order-1", "nope#1", &Verdict::Retry, None)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Refused);
    assert!(
        error
            .message
            .contains("step 'nope#1' of execution order-1 is not in doubt (no such step)"),
        "{error}"
    );

    // Retry through the runtime: the effect runs again (attempt 2) and is in doubt again.
    client
        .resolve("order-1", "charge#1", &Verdict::Retry, Some("ada"))
        .await
        .unwrap();
    let state = server.runtime.wait(&execution).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::InDoubt);
    assert_eq!(client.in_doubt().await.unwrap()[0].attempt, 2);

    let completed = Verdict::Completed {
        output: Payload::from_value(&json!({"charged": 42})),
    };
    client
        .resolve("order-1", "charge#1", &completed, Some("ada"))
        .await
        .unwrap();
    let twice = client
        .resolve("order-1", "charge#1", &completed, Some("ada"))
        .await
        .unwrap_err();
    assert_eq!(twice.kind, ErrorKind::Refused);
    assert!(
        twice.message.contains("is not in doubt (completed at seq"),
        "{twice}"
    );
    let state = server.runtime.wait(&execution).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Suspended, "on to the gate");

    // Resume the gate; the flow completes with the verdict's output and the payload.
    let wrong = client
        .resume("order-1", "approval", "other", &json!(true))
        .await
        .unwrap_err();
    assert_eq!(wrong.kind, ErrorKind::Refused);
    assert!(
        wrong.message.contains("pending: (approval, key 'order-1')"),
        "{wrong}"
    );
    client
        .resume("order-1", "approval", "order-1", &json!({"by": "ada"}))
        .await
        .unwrap();
    let state = server.runtime.wait(&execution).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    let shown = client.show("order-1").await.unwrap();
    let last = &shown.events.last().unwrap().event;
    assert_eq!(last["output"]["charged"]["charged"], 42);

    // The detail says what happened: input (masked) and output at the top, the step's two
    // attempts, its time running apart from its time in doubt.
    let outcome = &shown.outcome;
    assert_eq!(outcome.input.as_ref().unwrap()["card"]["number"], "***");
    assert_eq!(outcome.output.as_ref().unwrap()["charged"]["charged"], 42);
    assert_eq!(outcome.failure, None);
    assert_eq!(outcome.parent, None);
    let charge = shown
        .state
        .steps
        .iter()
        .find(|step| step.step_id == "charge#1")
        .unwrap();
    assert_eq!(charge.status, "completed");
    assert_eq!(charge.attempt, Some(2), "{charge:?}");
    assert!(charge.running_ms.is_some(), "{charge:?}");
    assert!(charge.in_doubt_ms.is_some(), "{charge:?}");
    assert_eq!(charge.in_doubt_since_ms, None, "{charge:?}");
    let text = as_admin(&server.url, &["show", "order-1"]).await;
    let text = stdout(&text);
    assert!(
        text.lines()
            .any(|line| line.starts_with("output ") && line.contains("\"charged\":42")),
        "{text}"
    );
    assert!(!text.contains(CARD), "{text}");
    assert!(
        text.lines()
            .any(|line| line.contains("charge#1") && line.contains("completed  2 ")),
        "{text}"
    );

    let ended = client.cancel("order-1", None).await.unwrap_err();
    assert_eq!(ended.kind, ErrorKind::Refused);
    assert!(
        ended.message.contains("already ended (completed)"),
        "{ended}"
    );
    let late = client
        .resume("order-1", "approval", "order-1", &json!(1))
        .await
        .unwrap_err();
    assert!(late.message.contains("already ended"), "{late}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_400_and_say_what_to_send() {
    let server = server().await;
    start_order(&server.runtime, "order-1").await;
    for body in [
        r#"{"stepId": "charge#1"}"#,
        "not json",
        r#"{"stepId": "charge#1", "verdict": {"kind": "completed"}}"#,
    ] {
        let request = format!(
            "POST /admin/v1/executions/order-1/resolve HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let (status, _, answer) = raw(&server.url, &request).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.contains("stepId"), "the shape is shown: {answer}");
    }
    let listed = client(&server)
        .executions(&ListFilter::default())
        .await
        .unwrap();
    assert_eq!(listed.executions.len(), 1, "the API still answers");
    let (status, _, answer) = get_as_admin(&server.url, "/admin/v1/executions?status=stuck").await;
    assert_eq!(status, 400);
    assert!(answer.contains("unknown status 'stuck'"), "{answer}");
    let (status, _, answer) = get_as_admin(&server.url, "/admin/v1/executions?limit=0").await;
    assert_eq!(status, 400);
    assert!(answer.contains("limit 0 is out of range"), "{answer}");
    for (query, said) in [
        ("idPrefix=order&parent=order-1", "not both"),
        ("before=no-such-cursor", "no execution no-such-cursor"),
        ("startedFromMs=soon", "bad query"),
        // A misspelt filter is refused, not ignored (which would list everything).
        ("limit=1001", "limit 1001 is out of range"),
        // A cursor cut short or altered is refused, never read as another page.
        ("before=00000000000001", "no execution"),
        ("before=0000000000000001zz", "no execution"),
        ("statu=failed", "unknown field `statu`"),
        ("status=failed&idprefix=order", "unknown field `idprefix`"),
    ] {
        let (status, _, answer) =
            get_as_admin(&server.url, &format!("/admin/v1/executions?{query}")).await;
        assert_eq!(status, 400, "{query}: {answer}");
        assert!(answer.contains(said), "{query}: {answer}");
    }
    assert_eq!(
        server.runtime.state(&id("order-1")).await.unwrap().status(),
        ExecutionStatus::InDoubt
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_goes_through_the_admin_api_while_the_server_holds_the_store() {
    let server = server().await;
    start_order(&server.runtime, "order-1").await;
    start_order(&server.runtime, "order-2").await;
    start_hello(&server.runtime, "hello-1").await;
    let url = server.url.as_str();

    // The file is held: --store says to use the admin API.
    let held = loom_async(&["--store", server.path.to_str().unwrap(), "in-doubt"]).await;
    assert_eq!(code(&held), 4);
    assert!(stderr(&held).contains("--admin"));

    let listed = json_out(&as_admin(url, &["--json", "executions", "--status", "in-doubt"]).await);
    assert_eq!(listed["executions"].as_array().unwrap().len(), 2);

    // Pages through the API as through the store: newest first, with a cursor.
    let first = json_out(&as_admin(url, &["--json", "executions", "--limit", "2"]).await);
    assert_eq!(first["total"], 3);
    assert_eq!(first["remaining"], 1);
    let cursor = first["nextBefore"].as_str().unwrap().to_owned();
    let last_shown = first["executions"][1]["id"].as_str().unwrap().to_owned();
    let second = json_out(
        &as_admin(
            url,
            &["--json", "executions", "--limit", "2", "--before", &cursor],
        )
        .await,
    );
    assert_eq!(second["executions"].as_array().unwrap().len(), 1);
    assert_eq!(second["remaining"], 0);
    assert_eq!(second["nextBefore"], serde_json::Value::Null);
    // The cursor is opaque; the id of the last execution shown works too.
    let by_id = json_out(
        &as_admin(
            url,
            &[
                "--json",
                "executions",
                "--limit",
                "2",
                "--before",
                &last_shown,
            ],
        )
        .await,
    );
    assert_eq!(by_id["executions"], second["executions"]);
    assert_eq!(first["counts"]["in-doubt"], 2);
    let children = json_out(&as_admin(url, &["--json", "executions", "--parent", "order-1"]).await);
    assert_eq!(children["executions"].as_array().unwrap().len(), 0);
    assert_eq!(children["total"], serde_json::Value::Null);
    let zero = as_admin(url, &["executions", "--limit", "0"]).await;
    assert_eq!(code(&zero), 2);

    // Masked by the server's classification.
    let shown = as_admin(url, &["show", "order-1", "--full"]).await;
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    assert!(!stdout(&shown).contains(CARD), "{}", stdout(&shown));
    assert!(stdout(&shown).contains("\"number\":\"***\""));
    assert!(stdout(&shown).contains("Ada"));
    // The CLI's own classification adds to the server's.
    let more = as_admin(url, &["--mask", "card.holder", "show", "order-1", "--full"]).await;
    assert!(
        !stdout(&more).contains("Ada") && !stdout(&more).contains(CARD),
        "{}",
        stdout(&more)
    );
    assert!(
        stdout(&more).contains("\"holder\":\"***\""),
        "{}",
        stdout(&more)
    );

    let in_doubt = as_admin(url, &["in-doubt"]).await;
    assert!(stdout(&in_doubt).contains("order-2:charge#1"));

    let failed = as_admin(
        url,
        &[
            "resolve",
            "order-2",
            "charge#1",
            "--failed",
            "refunded",
            "--code",
            "ops.refunded",
        ],
    )
    .await;
    assert_eq!(code(&failed), 0, "{}", stderr(&failed));
    let state = server.runtime.wait(&id("order-2")).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Failed);
    let twice = as_admin(
        url,
        &["resolve", "order-2", "charge#1", "--failed", "refunded"],
    )
    .await;
    assert_eq!(code(&twice), 1);

    let cancelled = as_admin(url, &["cancel", "order-1", "--reason", "test"]).await;
    assert_eq!(code(&cancelled), 0, "{}", stderr(&cancelled));
    assert_eq!(
        server.runtime.state(&id("order-1")).await.unwrap().status(),
        ExecutionStatus::Cancelled
    );
    let export = as_admin(url, &["export-log", "--out", "/nonexistent"]).await;
    // This server does not hand out unmasked logs: refused, saying how to allow it.
    assert_eq!(code(&export), 1);
    assert!(
        stderr(&export).contains("log_export(true)"),
        "{}",
        stderr(&export)
    );
    assert!(stderr(&export).contains("--store"));

    // The environment works as the flags do.
    let output = tokio::task::spawn_blocking({
        let url = url.to_owned();
        move || {
            loom_command(&["executions", "--flow", "hello"])
                .env("LOOM_ADMIN_URL", url)
                .env("LOOM_ADMIN_TOKEN", TOKEN)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("hello-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_follows_a_live_execution_until_it_ends() {
    use std::io::BufRead;
    let server = server().await;
    let execution = start_order(&server.runtime, "order-1").await;
    let mut child = loom_command(&[
        "--admin",
        &server.url,
        "--token",
        TOKEN,
        "--json",
        "tail",
        "order-1",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_in, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = lines_in.send(line.unwrap());
        }
    });
    // Everything recorded so far is printed first; the step in doubt is the last of it.
    let mut types = Vec::new();
    while types.last().map(String::as_str) != Some("EFFECT_INDOUBT") {
        let line = lines.recv().await.expect("tail prints the log so far");
        types.push(
            serde_json::from_str::<Value>(&line).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    // Then it follows: move the execution on to its end.
    let verdict = Verdict::Failed {
        error: ErrorInfo::new("ops.refunded", "refunded by hand"),
    };
    server
        .runtime
        .resolve(&execution, "charge#1", verdict, Some("ada".into()))
        .await
        .unwrap();
    let mut printed = String::new();
    while let Some(line) = lines.recv().await {
        types.push(
            serde_json::from_str::<Value>(&line).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
        printed.push_str(&line);
    }
    reader.join().unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(
        status.success(),
        "tail stops by itself once the execution has ended"
    );
    assert_eq!(types.first().map(String::as_str), Some("EXECUTION_STARTED"));
    assert!(types.contains(&"EFFECT_RESOLVED".to_owned()), "{types:?}");
    assert_eq!(types.last().map(String::as_str), Some("EXECUTION_FAILED"));
    assert!(!printed.contains(CARD));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_with_slashes_spaces_and_hashes_reach_their_execution() {
    let server = server().await;
    start_hello(&server.runtime, "team a/hello#1?x=1").await;
    let shown = client(&server).show("team a/hello#1?x=1").await.unwrap();
    assert_eq!(shown.execution.id, "team a/hello#1?x=1");
    assert_eq!(shown.execution.status, "completed");
    let page = client(&server)
        .events("team a/hello#1?x=1", 1, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(page.ended);
    assert_eq!(page.events.first().map(|event| event.seq), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_console_page_is_served_without_data_and_with_a_strict_policy() {
    let server = server().await;
    start_order(&server.runtime, "order-1").await;
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");

    let (status, head, body) = raw(&server.url, &get("/admin/")).await;
    assert_eq!(status, 200);
    let head = head.to_ascii_lowercase();
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(
        head.contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{head}"
    );
    assert!(head.contains("frame-ancestors 'none'"), "{head}");
    assert!(body.contains("<script src=\"console.js\" defer></script>"));
    assert!(!body.contains("order-1"), "the page holds no data");

    let (status, head, script) = raw(&server.url, &get("/admin/console.js")).await;
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/javascript")
    );
    assert!(script.contains("Authorization: \"Bearer \" + token"));
    assert!(
        !script.contains("innerHTML"),
        "server values go in as text only"
    );
    let (status, _, _) = raw(&server.url, &get("/admin/console.css")).await;
    assert_eq!(status, 200);

    let (status, head, _) = raw(&server.url, &get("/admin")).await;
    assert_eq!(status, 308);
    assert!(
        head.to_ascii_lowercase().contains("location: admin/"),
        "{head}"
    );

    let (status, _, _) = raw(&server.url, &get("/admin/v1/in-doubt")).await;
    assert_eq!(status, 401, "the API still wants the token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_verdicts_at_once_record_one_and_refuse_the_other() {
    let server = server().await;
    let execution = start_order(&server.runtime, "order-1").await;
    let client = client(&server);
    let completed = Verdict::Completed {
        output: Payload::from_value(&json!({"charged": 42})),
    };
    let failed = Verdict::Failed {
        error: ErrorInfo::new("ops.refunded", "refunded"),
    };
    let (first, second) = tokio::join!(
        client.resolve("order-1", "charge#1", &completed, Some("ada")),
        client.resolve("order-1", "charge#1", &failed, Some("bob")),
    );
    let refused: Vec<_> = [first, second]
        .into_iter()
        .filter_map(Result::err)
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "exactly one verdict is refused: {refused:?}"
    );
    assert_eq!(refused[0].kind, ErrorKind::Refused);
    server.runtime.wait(&execution).await.unwrap();
    let shown = client.show("order-1").await.unwrap();
    let verdicts = shown
        .events
        .iter()
        .filter(|event| event.event_type == "EFFECT_RESOLVED")
        .count();
    assert_eq!(verdicts, 1, "one verdict in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_log_and_tail_go_through_the_admin_api_of_a_live_server() {
    let server = exporting_server().await;
    start_order(&server.runtime, "order-1").await;
    start_order(&server.runtime, "order-2").await;
    start_hello(&server.runtime, "hello-1").await;
    let url = server.url.as_str();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("logs");
    let dir_arg = dir.to_str().unwrap();

    let all = as_admin(url, &["export-log", "--out", dir_arg]).await;
    assert_eq!(code(&all), 0, "{}", stderr(&all));
    assert!(
        stdout(&all).contains("wrote 3 executions"),
        "{}",
        stdout(&all)
    );
    // True values, as replay-check needs them, read back as the store holds them.
    let path = loom_replay_check::path_for(&dir, &id("order-1"));
    let exported = loom_replay_check::read_log(&path).unwrap();
    let stored = server
        .runtime
        .store()
        .read_all(&id("order-1"))
        .await
        .unwrap();
    assert_eq!(exported, stored);
    assert!(std::fs::read_to_string(&path).unwrap().contains(CARD));

    let one_dir = out.path().join("one");
    let one = as_admin(
        url,
        &[
            "export-log",
            "--out",
            one_dir.to_str().unwrap(),
            "--execution",
            "hello-1",
        ],
    )
    .await;
    assert_eq!(code(&one), 0, "{}", stderr(&one));
    assert_eq!(std::fs::read_dir(&one_dir).unwrap().count(), 1);
    let unknown = as_admin(
        url,
        &["export-log", "--out", dir_arg, "--execution", "nope"],
    )
    .await;
    assert_eq!(code(&unknown), 3, "{}", stderr(&unknown));
    // A misspelt parameter is refused: `executon=` must not export every log instead of one.
    for (path, said) in [
        (
            "/admin/v1/export?executon=hello-1",
            "unknown field `executon`",
        ),
        (
            "/admin/v1/executions/hello-1/events?form=2",
            "unknown field `form`",
        ),
    ] {
        let (status, _, answer) = get_as_admin(&server.url, path).await;
        assert_eq!(status, 400, "{path}: {answer}");
        assert!(answer.contains(said), "{path}: {answer}");
        assert!(!answer.contains(CARD), "{path}: {answer}");
    }

    // tail --admin prints the log, masked, and stops at an ended execution's end.
    let tailed = as_admin(url, &["tail", "hello-1"]).await;
    assert_eq!(code(&tailed), 0, "{}", stderr(&tailed));
    assert!(
        stdout(&tailed).contains("EXECUTION_COMPLETED"),
        "{}",
        stdout(&tailed)
    );
    let masked = as_admin(url, &["tail", "order-1", "--no-follow"]).await;
    assert!(!stdout(&masked).contains(CARD), "{}", stdout(&masked));
}

/// An execution of a flow this server does not register (retired, or another service's) is
/// listed and shown as such through the admin API and the CLI: it does not move because
/// nothing here drives it. Ended ones and registered ones are not marked; a store read
/// directly knows no flows and marks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_whose_flow_the_server_does_not_register_is_marked_as_such() {
    use loom_kernel::EventStore;
    let server = server().await;
    start_order(&server.runtime, "order-1").await;
    let orphan = id("orphan-1");
    server
        .runtime
        .store()
        .append(&orphan, 0, &[loom_kernel::conformance::started("retired")])
        .await
        .unwrap();
    let listed = client(&server)
        .executions(&ListFilter::default())
        .await
        .unwrap();
    let marked: Vec<(&str, bool)> = listed
        .executions
        .iter()
        .map(|view| (view.id.as_str(), view.flow_not_registered))
        .collect();
    assert!(marked.contains(&("orphan-1", true)), "{marked:?}");
    assert!(marked.contains(&("order-1", false)), "{marked:?}");
    assert!(
        client(&server)
            .show("orphan-1")
            .await
            .unwrap()
            .execution
            .flow_not_registered
    );

    let shown = as_admin(&server.url, &["show", "orphan-1"]).await;
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    assert!(
        stdout(&shown).contains("not registered here"),
        "{}",
        stdout(&shown)
    );
    assert!(stdout(&shown).contains("waits for"), "{}", stdout(&shown));
    let listed = as_admin(&server.url, &["executions"]).await;
    assert!(
        stdout(&listed).contains("retired (not registered here)"),
        "{}",
        stdout(&listed)
    );
}
