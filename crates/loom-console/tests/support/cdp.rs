//! A page in headless Chromium driven over the DevTools protocol: evaluate script, wait for a
//! condition, size the window, take a screenshot. The browser runs with a fresh profile and is
//! killed when the page is dropped.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A browser with one page open.
pub struct Page {
    socket: Socket,
    next_id: u64,
    browser: Child,
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = self.browser.kill();
        let _ = self.browser.wait();
    }
}

/// `GET path` on the browser's DevTools server: the body, read by its length (the browser
/// keeps the connection open), or empty when it cannot be read in time.
async fn get(addr: SocketAddr, path: &str) -> String {
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return String::new();
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let read =
            match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk)).await {
                Ok(Ok(read)) => read,
                _ => return String::new(),
            };
        answer.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&answer);
        let whole = text.split_once("\r\n\r\n").and_then(|(head, body)| {
            let length = head.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())
                    .flatten()
            })?;
            (body.len() >= length).then(|| body.to_owned())
        });
        if let Some(body) = whole {
            return body;
        }
        if read == 0 {
            return text
                .split_once("\r\n\r\n")
                .map(|(_, body)| body.to_owned())
                .unwrap_or_default();
        }
    }
}

impl Page {
    /// Starts `browser` headless on `url` with a fresh profile in `profile`, and connects to
    /// the page.
    pub async fn open(browser: &str, profile: &Path, url: &str) -> Page {
        let child = Command::new(browser)
            .args(super::chromium::HEADLESS_FLAGS)
            .args([
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--window-size=1280,800",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the browser runs");
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
        let devtools = SocketAddr::from(([127, 0, 0, 1], port.expect("the DevTools port")));
        let mut target = None;
        for _ in 0..400 {
            let pages: Value =
                serde_json::from_str(&get(devtools, "/json/list").await).unwrap_or(Value::Null);
            target = pages.as_array().and_then(|pages| {
                pages
                    .iter()
                    .find(|p| p["type"] == json!("page"))
                    .and_then(|p| p["webSocketDebuggerUrl"].as_str().map(str::to_owned))
            });
            if target.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let target = target.expect("the page DevTools target");
        let (socket, _) = tokio_tungstenite::connect_async(target.as_str())
            .await
            .expect("the DevTools socket opens");
        Page {
            socket,
            next_id: 0,
            browser: child,
        }
    }

    /// Sends a DevTools command and returns its result.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"id": id, "method": method, "params": params});
        self.socket
            .send(Message::Text(request.to_string().into()))
            .await
            .expect("the browser takes the command");
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), self.socket.next())
                .await
                .expect("the browser answers")
                .expect("the DevTools socket is open")
                .expect("a frame");
            if let Message::Text(text) = frame {
                let answer: Value = serde_json::from_str(text.as_str()).expect("JSON");
                if answer["id"] == json!(id) {
                    assert!(answer.get("error").is_none(), "{method}: {answer}");
                    return answer["result"].clone();
                }
            }
        }
    }

    /// The value of `expression` in the page.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression}: {result}"
        );
        result["result"]["value"].clone()
    }

    /// Evaluates `expression` until it is `true`; fails with the page's text if it never is.
    pub async fn until(&mut self, expression: &str, what: &str) {
        for _ in 0..400 {
            if self.eval(expression).await == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let text = self.eval("document.body.innerText").await;
        panic!("{what} never happened; the page shows:\n{text}");
    }

    /// Lays the page out as on a screen `width` x `height` CSS pixels (a phone when narrow).
    pub async fn viewport(&mut self, width: u32, height: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}),
        )
        .await;
    }

    /// A PNG of what the page shows now, written to `file`.
    pub async fn screenshot(&mut self, file: &Path) {
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let data = shot["data"].as_str().expect("base64 PNG");
        std::fs::write(file, decode_base64(data)).expect("the screenshot is written");
    }
}

/// Standard base64 (with padding), as DevTools sends binary data.
fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => 0,
        }
    };
    let bytes: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().filter(|c| **c == b'=').count();
        let n = chunk.iter().fold(0u32, |acc, c| {
            (acc << 6) | if *c == b'=' { 0 } else { value(*c) }
        });
        let n = n << (6 * (4 - chunk.len()));
        let three = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&three[..3 - pad.min(2)]);
    }
    out
}

#[test]
fn base64_decodes_what_it_should() {
    assert_eq!(decode_base64("TG9vbQ=="), b"Loom");
    assert_eq!(decode_base64("TG9vbXM="), b"Looms");
    assert_eq!(decode_base64("TG9vbXMh"), b"Looms!");
}
