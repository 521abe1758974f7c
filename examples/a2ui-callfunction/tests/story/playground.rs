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
    start_with_options(ServerOptions {
        admin_token: Some(token.into()),
        ..ServerOptions::new(dir.join("loom.redb"))
    })
    .await
}

/// The server with `options`, on a free port (its `addr` is replaced), serving [`EXECUTION`].
pub(crate) async fn start_with_options(
    options: ServerOptions,
) -> (SocketAddr, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let addr = free_addr();
    let server = tokio::spawn(server::serve(ServerOptions {
        addr,
        execution: EXECUTION.into(),
        ..options
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
pub(crate) async fn http(addr: SocketAddr, request: &str) -> (u16, String) {
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

/// Opens a playground stream on `query` and reads it up to its `session` event: the stream
/// (kept open) and the session's id, with every line read before it.
async fn stream_session(addr: SocketAddr, query: &str) -> (tokio::net::TcpStream, u64, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /playground/v1/{EXECUTION}/checkout/stream?{query} HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut read = String::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(at) = read.find("event: session\ndata: ")
            && let Some(line) = read[at..].lines().nth(1)
            && let Ok(data) = serde_json::from_str::<Value>(line.trim_start_matches("data: "))
        {
            let id = data["session"].as_u64().unwrap();
            return (stream, id, read);
        }
        let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut chunk))
            .await
            .expect("the stream speaks in time")
            .unwrap();
        assert!(n > 0, "the stream ended before its session: {read}");
        read.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renderer_stream_posts_only_with_its_own_credential_and_carries_no_log() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, server) = start(dir.path()).await;
    let store = dir.path().join("loom.redb");
    let mine = crate::support::credential(&store, EXECUTION);
    let (_stream, session, read) = stream_session(addr, &format!("credential={mine}")).await;
    assert!(
        !read.contains("event: event"),
        "no log for a renderer: {read}"
    );
    let path = format!("/playground/v1/{EXECUTION}/checkout/messages?session={session}");
    let other = crate::support::credential(&store, "checkout-2");
    // Another execution's credential, none, or a session that does not exist: all 401, so
    // that session ids cannot be probed.
    for (path, bearer) in [
        (path.clone(), other.as_str()),
        (path.clone(), ""),
        (
            format!("/playground/v1/{EXECUTION}/checkout/messages?session=999"),
            mine.as_str(),
        ),
    ] {
        let (status, body) = http(addr, &post(addr, &path, bearer, "{}")).await;
        assert_eq!(status, 401, "{path} with {bearer:?}: {body}");
    }
    // Its own credential, and the operator's token, reach the session (which refuses a
    // message that is no A2UI message, with the reason).
    for bearer in [mine.as_str(), TOKEN] {
        let (status, body) = http(addr, &post(addr, &path, bearer, "{}")).await;
        assert_eq!(status, 422, "{body}");
    }
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
    /// One DevTools command; its result.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"id": id, "method": method, "params": params});
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
                    return answer["result"].clone();
                }
            }
        }
    }

    async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            )
            .await;
        result["result"]["value"].clone()
    }

    async fn text(&mut self, expression: &str) -> String {
        self.eval(expression)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Evaluates `expression` until it is `true`; the page's text if it never is.
    async fn until(&mut self, expression: &str, what: &str) {
        for _ in 0..600 {
            if self.eval(expression).await == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let text = self
            .eval("document.body.innerText + '\\n' + (window.loomPlayground ? loomPlayground.surfaceText() : '')")
            .await;
        panic!("{what} never happened; the page shows:\n{text}");
    }

    /// A real click: the mouse moves to the middle of the box `expression` gives
    /// (`[x, y, width, height]` in the viewport), presses and releases its left button.
    async fn mouse_click(&mut self, expression: &str) {
        let rect = self.eval(expression).await;
        let at = |i: usize| rect[i].as_f64().unwrap_or_else(|| panic!("no box: {rect}"));
        let (x, y) = (at(0) + at(2) / 2.0, at(1) + at(3) / 2.0);
        assert!(at(2) > 0.0 && at(3) > 0.0, "an empty box: {rect}");
        for (kind, buttons) in [("mouseMoved", 0), ("mousePressed", 1), ("mouseReleased", 0)] {
            let mut params = json!({"type": kind, "x": x, "y": y, "buttons": buttons});
            if kind != "mouseMoved" {
                params["button"] = json!("left");
                params["clickCount"] = json!(1);
            }
            self.call("Input.dispatchMouseEvent", params).await;
        }
    }

    /// With `LOOM_SCREENSHOT_DIR` set, a PNG of the page as `name` there.
    async fn screenshot(&mut self, name: &str) {
        let Some(dir) = std::env::var_os("LOOM_SCREENSHOT_DIR") else {
            return;
        };
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let data = shot["data"].as_str().expect("a screenshot");
        std::fs::write(Path::new(&dir).join(name), base64_decode(data)).unwrap();
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut count) = (0u32, 0);
    for byte in text.bytes().filter(|b| *b != b'=') {
        let value = ALPHABET.iter().position(|a| *a == byte).expect("base64") as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    out
}

/// The browser, killed when the test ends.
struct Browser(std::process::Child);

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Chromium on `url` (Debian's, headless, a fresh profile in `dir`) and its page.
async fn open_browser(browser: &str, dir: &Path, url: &str) -> (Browser, Page) {
    let profile = dir.join("chromium");
    let child = Browser(
        Command::new(browser)
            .args(crate::support::chromium::HEADLESS_FLAGS)
            .args(["--window-size=1600,1000", "--remote-debugging-port=0"])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
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
    (child, Page { socket, next_id: 0 })
}

/// The example's server as a process of its own (so that it can die), on `addr`.
struct ServerProcess(std::process::Child);

impl ServerProcess {
    async fn start(dir: &Path, addr: SocketAddr) -> Self {
        // Killed and waited for on drop, however the test ends.
        let server = Self(
            Command::new(env!("CARGO_BIN_EXE_a2ui-callfunction"))
                .args(["server", "--addr", &addr.to_string(), "--store"])
                .arg(dir.join("loom.redb"))
                .env("LOOM_ADMIN_TOKEN", TOKEN)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the server runs"),
        );
        for _ in 0..400 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the server did not come up at {addr}");
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

const SURFACE_TEXT: &str = "loomPlayground.surfaceText()";
const RESULT_SHOWN: &str = "!document.getElementById('result').hidden && document.getElementById('result').innerText.includes('confirmation PG-order-7') && document.getElementById('last-event').textContent === 'EXECUTION_COMPLETED'";

/// Every v0.9 message the page received validates against the v0.9 schemas; how many.
async fn v0_9_messages_validate(page: &mut Page) -> usize {
    let received = page.eval("JSON.stringify(loomPlayground.received)").await;
    let received: Value = serde_json::from_str(received.as_str().unwrap_or("[]")).unwrap();
    let schema = loom_plugin_a2ui::V0_9Schema::shared().unwrap();
    let mut count = 0;
    for data in received.as_array().unwrap() {
        let message = &data["message"];
        if message["version"] == json!("v0.9") {
            let errors = schema.server_to_client_errors(message);
            assert!(
                errors.is_empty(),
                "{message} fails the v0.9 schema: {errors:?}"
            );
            count += 1;
        }
    }
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_lit_renderer_draws_the_surface_and_a_mouse_click_on_approve_completes_the_checkout()
 {
    let test = "the_official_lit_renderer_draws_the_surface_and_a_mouse_click_on_approve_completes_the_checkout";
    let Some(browser) = chromium_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let mut server = ServerProcess::start(dir.path(), addr).await;
    let url = format!("http://{addr}/playground/#token={TOKEN}&execution={EXECUTION}&renderer=lit");
    let (_browser, mut page) = open_browser(browser, dir.path(), &url).await;

    // @a2ui/lit draws the surface from v0.9 messages; the page answered getLocale (grain A) on
    // its v1.0 functions session.
    page.until(
        &format!("loomPlayground.renderer === 'lit' && !!document.querySelector('a2ui-surface') && loomPlayground.buttons().length === 1 && {SURFACE_TEXT}.includes('awaiting approval')"),
        "the surface drawn by @a2ui/lit, waiting for approval",
    )
    .await;
    let surface = page.text(SURFACE_TEXT).await;
    assert!(surface.contains("Checkout order-7"), "{surface}");
    assert!(surface.contains("2 x Loom mug"), "{surface}");
    assert!(surface.contains("Total 29.00"), "{surface}");
    let label = page
        .text("loomPlayground.textOf(loomPlayground.buttons()[0])")
        .await;
    assert!(label.contains("Approve"), "{label}");
    assert!(v0_9_messages_validate(&mut page).await >= 3);
    page.screenshot("playground-lit.png").await;

    // The server dies: a banner, and the surface takes no clicks until it is back.
    server.kill();
    page.until(
        "!document.getElementById('offline').hidden && document.getElementById('surface').inert",
        "the lost-connection banner",
    )
    .await;
    let mut server = ServerProcess::start(dir.path(), addr).await;
    page.until(
        &format!("document.getElementById('offline').hidden && !document.getElementById('surface').inert && loomPlayground.buttons().length === 1 && {SURFACE_TEXT}.includes('awaiting approval')"),
        "the page back on the restarted server",
    )
    .await;

    // A real mouse click at the button's box: the v0.9 action goes up, the gate resumes, the
    // page answers submitOrder (grain B) on its v1.0 session, and the execution completes.
    page.mouse_click("(() => { const r = loomPlayground.buttons()[0].getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()").await;
    page.until(RESULT_SHOWN, "the confirmation").await;
    // The result and the session's `deleteSurface` come on two streams, in either order.
    page.until(
        "document.getElementById('wire').innerText.includes('deleteSurface')",
        "deleteSurface on the wire",
    )
    .await;
    let surface = page.text(SURFACE_TEXT).await;
    assert!(
        surface.contains("placed"),
        "the final surface as last drawn: {surface}"
    );
    assert!(page.eval("document.getElementById('surface').inert").await == json!(true));
    let wire = page.text("document.getElementById('wire').innerText").await;
    let at = |needle: &str| {
        wire.find(needle)
            .unwrap_or_else(|| panic!("`{needle}` is not in the wire pane:\n{wire}"))
    };
    assert!(
        at("createSurface") < at("\"version\":\"v0.9\",\"action\""),
        "{wire}"
    );
    assert!(wire.contains("\"version\":\"v0.9\"}"), "{wire}");
    assert!(at("\"action\"") < at("submitOrder"), "{wire}");
    assert!(at("submitOrder") < at("deleteSurface"), "{wire}");
    assert!(v0_9_messages_validate(&mut page).await >= 5);
    let text = page.text("document.body.innerText").await;
    assert!(
        !text.contains("4111 1111 1111 1111"),
        "the card number reached the page: {text}"
    );
    assert!(!text.contains(TOKEN), "the token is shown: {text}");
    page.screenshot("playground-lit-completed.png").await;

    let client = AdminClient::new(&format!("http://{addr}"), TOKEN).unwrap();
    let show = client.show(EXECUTION).await.unwrap();
    assert_eq!(show.execution.status, "completed");
    let resumed = show
        .events
        .iter()
        .filter(|e| e.event_type == "EXECUTION_RESUMED")
        .count();
    assert_eq!(resumed, 2, "getLocale's gate and Approve's gate");

    // A reload of the ended execution shows its result, its final surface and its log.
    page.eval("location.reload(); true").await;
    page.until(
        &format!("{RESULT_SHOWN} && {SURFACE_TEXT}.includes('placed') && document.getElementById('events').children.length > 10"),
        "the ended execution after a reload",
    )
    .await;

    // An unknown execution says so, and draws nothing.
    page.eval("location.hash = 'execution=nope&renderer=lit'; location.reload(); true")
        .await;
    page.until(
        &format!("{SURFACE_TEXT}.includes('No execution nope on this server') && loomPlayground.buttons().length === 0"),
        "the unknown execution's notice",
    )
    .await;

    // A new checkout from the page: listed beside the first, drawn, waiting for approval. The
    // list of executions loads on its own after the reload and may move the button: the click
    // waits for it (under load it used to land where the button had been).
    page.until(
        "document.getElementById('executions').options.length === 2 && !document.getElementById('new-checkout').disabled",
        "the executions listed beside the unknown one",
    )
    .await;
    page.mouse_click("(() => { const r = document.getElementById('new-checkout').getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()").await;
    page.until(
        &format!("location.hash.includes('execution=checkout-2') && loomPlayground.buttons().length === 1 && {SURFACE_TEXT}.includes('awaiting approval') && document.getElementById('executions').options.length === 2"),
        "a second checkout started from the page",
    )
    .await;
    server.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_own_renderer_on_a_v1_0_session_completes_the_checkout_on_a_mouse_click() {
    let test = "the_pages_own_renderer_on_a_v1_0_session_completes_the_checkout_on_a_mouse_click";
    let Some(browser) = chromium_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (addr, server) = start(dir.path()).await;
    let url =
        format!("http://{addr}/playground/#token={TOKEN}&execution={EXECUTION}&renderer=loom");
    let (_browser, mut page) = open_browser(browser, dir.path(), &url).await;
    page.until(
        &format!("loomPlayground.renderer === 'loom' && !!document.querySelector('button[data-component-id=approve]') && {SURFACE_TEXT}.includes('awaiting approval')"),
        "the surface drawn by the page's renderer, waiting for approval",
    )
    .await;
    let surface = page.text(SURFACE_TEXT).await;
    assert!(surface.contains("Checkout order-7"), "{surface}");
    assert!(surface.contains("2 x Loom mug"), "{surface}");
    page.screenshot("playground-v1.png").await;
    page.mouse_click("(() => { const r = document.querySelector('button[data-component-id=approve]').getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()").await;
    page.until(RESULT_SHOWN, "the confirmation").await;
    let wire = page.text("document.getElementById('wire').innerText").await;
    assert!(wire.contains("createSurface"), "{wire}");
    assert!(wire.contains("\"version\":\"v1.0\"}"), "{wire}");
    assert!(!wire.contains("\"v0.9\""), "{wire}");
    let patches = page
        .eval("document.getElementById('patches').children.length")
        .await;
    assert!(patches.as_u64().unwrap_or(0) >= 3, "{patches}");
    let client = AdminClient::new(&format!("http://{addr}"), TOKEN).unwrap();
    assert_eq!(
        client.show(EXECUTION).await.unwrap().execution.status,
        "completed"
    );
    server.abort();
}

/// The ready checkout in renderer mode: the surface and the wire only.
const RENDERER_RESULT_SHOWN: &str = "!document.getElementById('result').hidden && document.getElementById('result').innerText.includes('confirmation PG-order-7')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renderer_link_with_its_credential_draws_with_lit_and_approves_and_shows_no_operator_view()
 {
    let test = "a_renderer_link_with_its_credential_draws_with_lit_and_approves_and_shows_no_operator_view";
    let Some(browser) = chromium_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let _server = ServerProcess::start(dir.path(), addr).await;
    let credential = crate::support::credential(&dir.path().join("loom.redb"), EXECUTION);
    let url = format!(
        "http://{addr}/playground/#credential={credential}&execution={EXECUTION}&renderer=lit"
    );
    let (_browser, mut page) = open_browser(browser, dir.path(), &url).await;
    page.until(
        &format!("loomPlayground.renderer === 'lit' && loomPlayground.buttons().length === 1 && {SURFACE_TEXT}.includes('awaiting approval')"),
        "the surface drawn by @a2ui/lit from a renderer link",
    )
    .await;
    // The operator's views are neither sent nor shown.
    assert_eq!(
        page.eval("document.getElementById('events').children.length === 0 && document.getElementById('model').textContent === '' && document.getElementById('executions').closest('label').hidden")
            .await,
        json!(true)
    );
    page.mouse_click("(() => { const r = loomPlayground.buttons()[0].getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()").await;
    page.until(RENDERER_RESULT_SHOWN, "the confirmation").await;
    let client = AdminClient::new(&format!("http://{addr}"), TOKEN).unwrap();
    assert_eq!(
        client.show(EXECUTION).await.unwrap().execution.status,
        "completed"
    );
    let text = page.text("document.body.innerText").await;
    assert!(!text.contains(TOKEN), "the admin token is shown: {text}");

    // Another execution's link, or an altered one, opens nothing.
    let other = format!(
        "http://{addr}/playground/#credential={credential}x&execution={EXECUTION}&renderer=lit"
    );
    page.eval(&format!(
        "location.href = {}; location.reload(); true",
        json!(other)
    ))
    .await;
    page.until(
        &format!("{SURFACE_TEXT}.includes('The session was refused') && loomPlayground.buttons().length === 0"),
        "the refusal of an altered link",
    )
    .await;
}
