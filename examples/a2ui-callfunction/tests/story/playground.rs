//! The example server's operator surfaces: the console's admin API (what `loom --admin` and the
//! web console use) answers on the server's loopback listener; the playground's POST route
//! refuses a wrong token and a malformed message, recording nothing; and, in a real headless
//! Chromium driven over its DevTools protocol, the playground renders the surface from the
//! A2UI wire, its Approve button resumes the gate, and the execution completes. The browser
//! test is skipped loudly when Chromium is not installed (`apt-get install chromium`; `.ci/run`
//! installs it and sets `LOOM_REQUIRE_CHROMIUM`, which turns the skip into a failure).

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use a2ui_callfunction::server::{self, ServerOptions};
use a2ui_callfunction::story::EXECUTION;
use futures::{SinkExt, StreamExt};
use loom_console::{AdminClient, ErrorKind};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use crate::support::chromium::chromium_or_skip;

const TOKEN: &str = "playground-test-token-0123456789";

fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// Starts the example server on a fresh store in `dir`, with `TOKEN` as its admin token;
/// answers once its listener is up.
async fn start(dir: &Path) -> (SocketAddr, tokio::task::JoinHandle<anyhow::Result<()>>) {
    start_with_token(dir, TOKEN).await
}

/// [`start`] with `token` as the admin token (the hostile-client tests start it too).
pub(crate) async fn start_with_token(
    dir: &Path,
    token: &str,
) -> (SocketAddr, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let addr = free_addr();
    let server = tokio::spawn(server::serve(ServerOptions {
        store: dir.join("loom.redb"),
        schema: a2ui_callfunction::store::DEFAULT_SCHEMA.into(),
        addr,
        execution: EXECUTION.into(),
        crash_after_submit: false,
        exit_when_done: false,
        admin_token: Some(token.into()),
        renderer_token: None,
    }));
    for _ in 0..400 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return (addr, server);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the server did not come up at {addr}");
}

/// One HTTP/1.1 request; the status and the body.
async fn http(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    // Read until the body is whole: by its length when given (the browser keeps the
    // connection open), else to the end.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut chunk))
            .await
            .expect("an answer in time")
            .unwrap();
        answer.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&answer);
        if read == 0 {
            break;
        }
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())
                    .flatten()
            });
            if length.is_some_and(|length| body.len() >= length) {
                break;
            }
        }
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn post(addr: SocketAddr, path: &str, token: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_answers_on_the_example_server() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, server) = start(dir.path()).await;
    let client = AdminClient::new(&format!("http://{addr}"), TOKEN).unwrap();
    let mut shown = None;
    for _ in 0..200 {
        let show = client.show(EXECUTION).await.unwrap();
        if show.execution.status == "suspended" {
            shown = Some(show);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let show = shown.expect("the execution waits for its renderer");
    assert_eq!(show.execution.flow.as_deref(), Some("checkout"));
    let listed = client.executions(&Default::default()).await.unwrap();
    assert!(
        listed.executions.iter().any(|e| e.id == EXECUTION),
        "{listed:?}"
    );
    // The card number is masked on the way out.
    let text = serde_json::to_string(&show.events).unwrap();
    assert!(!text.contains("4111 1111 1111 1111"), "{text}");

    let wrong = AdminClient::new(&format!("http://{addr}"), "not-the-token-at-all-000")
        .unwrap()
        .show(EXECUTION)
        .await
        .unwrap_err();
    assert_eq!(wrong.kind, ErrorKind::Unauthorized);
    let (status, page) = http(
        addr,
        &format!("GET /admin/ HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(page.contains("console.js"), "{page}");
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playground_refuses_a_wrong_token_and_a_message_of_no_session_recording_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, server) = start(dir.path()).await;
    let client = AdminClient::new(&format!("http://{addr}"), TOKEN).unwrap();
    let path = format!("/playground/v1/{EXECUTION}/checkout/messages");
    let approve = json!({"version": "v1.0", "action": {
        "name": "approve", "surfaceId": "checkout", "sourceComponentId": "approve",
        "timestamp": "2026-01-01T00:00:00Z", "context": {"orderId": "order-7"}}})
    .to_string();

    let (status, _) = http(
        addr,
        &post(addr, &path, "wrong-token-wrong-token", &approve),
    )
    .await;
    assert_eq!(status, 401);
    // A message belongs to an open session of the playground: with none, it goes nowhere.
    let (status, body) = http(addr, &post(addr, &path, TOKEN, "{not json")).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = http(
        addr,
        &format!("GET /playground/v1/{EXECUTION}/checkout/stream?token=wrong HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    // Nothing resumed: the refused messages recorded nothing.
    let show = client.show(EXECUTION).await.unwrap();
    assert!(
        show.events
            .iter()
            .all(|e| e.event_type != "EXECUTION_RESUMED"),
        "{:?}",
        show.events
    );
    server.abort();
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A page driven over the DevTools protocol.
struct Page {
    socket: Socket,
    next_id: u64,
}

impl Page {
    async fn eval(&mut self, expression: &str) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"id": id, "method": "Runtime.evaluate",
            "params": {"expression": expression, "returnByValue": true}});
        self.socket
            .send(Message::Text(request.to_string().into()))
            .await
            .unwrap();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), self.socket.next())
                .await
                .expect("the browser answers")
                .expect("the DevTools socket is open")
                .unwrap();
            if let Message::Text(text) = frame {
                let answer: Value = serde_json::from_str(text.as_str()).unwrap();
                if answer["id"] == json!(id) {
                    return answer["result"]["result"]["value"].clone();
                }
            }
        }
    }

    /// Evaluates `expression` until it is `true`; the page's text if it never is.
    async fn until(&mut self, expression: &str, what: &str) {
        for _ in 0..600 {
            if self.eval(expression).await == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let text = self.eval("document.body.innerText").await;
        panic!("{what} never happened; the page shows:\n{text}");
    }
}

/// The browser, killed when the test ends.
struct Browser(std::process::Child);

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playground_renders_the_surface_and_its_approve_button_completes_the_checkout() {
    let test = "the_playground_renders_the_surface_and_its_approve_button_completes_the_checkout";
    let Some(browser) = chromium_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (addr, server) = start(dir.path()).await;
    let profile = dir.path().join("chromium");
    let url = format!("http://{addr}/playground/#token={TOKEN}&execution={EXECUTION}");
    let _browser = Browser(
        Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(&url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the browser runs"),
    );
    // The browser writes the port it listens on into its profile.
    let mut port = None;
    for _ in 0..1200 {
        if let Ok(text) = std::fs::read_to_string(profile.join("DevToolsActivePort"))
            && let Some(p) = text.lines().next().and_then(|l| l.parse::<u16>().ok())
        {
            port = Some(p);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let devtools = SocketAddr::from(([127, 0, 0, 1], port.expect("the browser's DevTools port")));
    let mut target = None;
    for _ in 0..200 {
        let (_, body) = http(
            devtools,
            &format!("GET /json/list HTTP/1.1\r\nHost: {devtools}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        let pages: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        target = pages.as_array().and_then(|pages| {
            pages
                .iter()
                .find(|p| {
                    p["type"] == json!("page")
                        && p["url"]
                            .as_str()
                            .is_some_and(|u| u.contains("/playground/"))
                })
                .and_then(|p| p["webSocketDebuggerUrl"].as_str().map(str::to_owned))
        });
        if target.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let target = target.expect("the playground's page target");
    let (socket, _) = tokio_tungstenite::connect_async(target.as_str())
        .await
        .unwrap();
    let mut page = Page { socket, next_id: 0 };

    // The page answered getLocale (grain A) through its POST route; the surface shows the order
    // waiting for approval, drawn from the wire messages.
    page.until(
        "!!document.querySelector('button[data-component-id=approve]') && document.getElementById('surface').innerText.includes('awaiting approval')",
        "the rendered surface waiting for approval",
    )
    .await;
    let surface = page
        .eval("document.getElementById('surface').innerText")
        .await;
    let surface = surface.as_str().unwrap_or_default().to_owned();
    assert!(surface.contains("Checkout order-7"), "{surface}");
    assert!(surface.contains("2 x Loom mug"), "{surface}");
    assert!(surface.contains("Total 29.00"), "{surface}");

    // A click on the rendered button: the action goes up, the gate resumes, the page answers
    // submitOrder (grain B) on its session, and the execution completes.
    page.eval("document.querySelector('button[data-component-id=approve]').click(); true")
        .await;
    page.until(
        "document.getElementById('last-event').textContent === 'EXECUTION_COMPLETED' && document.getElementById('surface').innerText.includes('deleted the surface')",
        "the execution's completion",
    )
    .await;
    let wire = page.eval("document.getElementById('wire').innerText").await;
    let wire = wire.as_str().unwrap_or_default().to_owned();
    let at = |needle: &str| {
        wire.find(needle)
            .unwrap_or_else(|| panic!("`{needle}` is not in the wire pane:\n{wire}"))
    };
    assert!(at("createSurface") < at("\"action\""), "{wire}");
    assert!(at("\"action\"") < at("submitOrder"), "{wire}");
    assert!(at("submitOrder") < at("deleteSurface"), "{wire}");
    let patches = page
        .eval("document.getElementById('patches').children.length")
        .await;
    assert!(patches.as_u64().unwrap_or(0) >= 3, "{patches}");
    let text = page.eval("document.body.innerText").await;
    let text = text.as_str().unwrap_or_default();
    assert!(
        !text.contains("4111 1111 1111 1111"),
        "the card number reached the page: {text}"
    );
    assert!(!text.contains(TOKEN), "the token is shown: {text}");

    let client = AdminClient::new(&format!("http://{addr}"), TOKEN).unwrap();
    let show = client.show(EXECUTION).await.unwrap();
    assert_eq!(show.execution.status, "completed");
    let resumed = show
        .events
        .iter()
        .filter(|e| e.event_type == "EXECUTION_RESUMED")
        .count();
    assert_eq!(resumed, 2, "getLocale's gate and Approve's gate");
    server.abort();
}
