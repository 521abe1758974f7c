//! A soak of the example's server over its real WebSocket: renderer sessions opening, calling
//! and closing for a while, with the server's resident memory sampled from outside.
//!
//! The program starts the example's server as a child process (itself, re-run as the server,
//! on a fresh embedded store in a temporary folder, one checkout waiting for `getLocale`), then
//! WORKERS concurrent renderers each connect to the checkout's surface, read `createSurface`
//! and the open call, send a `callAgentFunction` (answered in band with
//! `agentFunctionResponse`) and a forged reply (refused, nothing recorded), and close; again
//! and again until SECONDS are up. Every 10 s it prints the sessions completed and the
//! server's resident memory (`VmRSS` of `/proc/<pid>/status`).
//!
//! `cargo run --release -p a2ui-callfunction --example socket_soak -- [SECONDS] [WORKERS]`
//!
//! With `hold N` it measures instead what open sessions cost: the server allows N sessions per
//! renderer credential; N renderers connect with the same credential, read `createSurface` (the
//! open call waits unread in their sockets) and stay; the server's resident memory is printed idle and with the N held,
//! and one more session with the same credential must be refused with 1013.
//!
//! `cargo run --release -p a2ui-callfunction --example socket_soak -- hold 1000`

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use a2ui_callfunction::narrate::CHILD_ENV;
use a2ui_callfunction::server::{self, ServerOptions};
use anyhow::{Context, Result, bail};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// Set in the child: the folder of the store it serves.
const SERVER_ENV: &str = "A2UI_SOCKET_SOAK_SERVER";
const EXECUTION: &str = "soak-1";
const SURFACE: &str = "checkout";
/// Set in the child: the sessions it allows per caller (and per peer), for `hold`.
const LIMIT_ENV: &str = "A2UI_SOCKET_SOAK_LIMIT";

fn main() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if let Some(dir) = std::env::var_os(SERVER_ENV) {
        let dir = std::path::PathBuf::from(dir);
        let limit: Option<usize> = std::env::var(LIMIT_ENV).ok().and_then(|n| n.parse().ok());
        let defaults = ServerOptions::new(dir.join("loom.redb"));
        return runtime.block_on(server::serve(ServerOptions {
            execution: EXECUTION.into(),
            // The cycling soak's workers share one credential and one address.
            max_sessions_per_caller: limit.unwrap_or(defaults.max_sessions),
            max_sessions_per_peer: limit.map_or(defaults.max_sessions, |n| n + 1),
            ..defaults
        }));
    }
    let mut args = std::env::args().skip(1).peekable();
    let hold: Option<usize> = if args.peek().map(String::as_str) == Some("hold") {
        args.next();
        Some(args.next().and_then(|s| s.parse().ok()).unwrap_or(1000))
    } else {
        None
    };
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(60);
    let workers: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    let dir = tempfile::tempdir()?;
    let mut command = Command::new(std::env::current_exe()?);
    command
        .env(SERVER_ENV, dir.path())
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(n) = hold {
        command.env(LIMIT_ENV, n.to_string());
    }
    let mut child = command.spawn().context("starting the server")?;
    let outcome = (|| {
        let (url, credential) = ready_url(&mut child)?;
        let endpoint = format!(
            "{}/a2ui/{EXECUTION}/{SURFACE}?credential={credential}&answers=",
            url.trim_end_matches('/')
        );
        match hold {
            Some(n) => runtime.block_on(hold_sessions(&endpoint, child.id(), n)),
            None => runtime.block_on(soak(&endpoint, child.id(), seconds, workers)),
        }
    })();
    let _ = child.kill();
    let _ = child.wait();
    outcome
}

/// The server's URL and renderer credential from its `ready` note; the rest of its notes are
/// read and dropped so that it never blocks on a full pipe.
fn ready_url(child: &mut Child) -> Result<(String, String)> {
    let stdout = child.stdout.take().context("the server's stdout")?;
    let mut lines = std::io::BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let note: Value = serde_json::from_str(&line?).unwrap_or(Value::Null);
        if note["note"] == "ready"
            && let (Some(url), Some(credential)) =
                (note["url"].as_str(), note["credential"].as_str())
        {
            let found = (url.to_owned(), credential.to_owned());
            std::thread::spawn(move || for _ in lines {});
            return Ok(found);
        }
    }
    bail!("the server ended before it was ready")
}

/// The server's resident memory in KiB.
fn resident_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn report(elapsed: Duration, cycles: u64, failures: u64, pid: u32) {
    say(format!(
        "{:>4} s: {cycles:>8} sessions opened, called and closed ({failures} failed), server resident {:>7} KiB",
        elapsed.as_secs(),
        resident_kib(pid)
    ));
}

async fn soak(endpoint: &str, pid: u32, seconds: u64, workers: usize) -> Result<()> {
    let endpoint = endpoint.to_owned();
    // The checkout is waiting for its renderer once one session sees the call.
    let cycles = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    report(Duration::ZERO, 0, 0, pid);
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (endpoint, cycles, failures) = (endpoint.clone(), cycles.clone(), failures.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                match cycle(&endpoint).await {
                    Ok(()) => cycles.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failures.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(10),
        Duration::from_secs(10),
    );
    while Instant::now() + Duration::from_secs(10) <= deadline {
        tick.tick().await;
        report(
            start.elapsed(),
            cycles.load(Ordering::Relaxed),
            failures.load(Ordering::Relaxed),
            pid,
        );
    }
    for task in tasks {
        task.await?;
    }
    report(
        start.elapsed(),
        cycles.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
        pid,
    );
    // Closed sessions give back what they held: the server settles.
    tokio::time::sleep(Duration::from_secs(2)).await;
    report(
        start.elapsed(),
        cycles.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
        pid,
    );
    if failures.load(Ordering::Relaxed) > 0 {
        bail!("some sessions failed");
    }
    Ok(())
}

/// `n` sessions held open at once, the server's memory idle and with them, and the refusal of
/// one more.
async fn hold_sessions(endpoint: &str, pid: u32, n: usize) -> Result<()> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = resident_kib(pid);
    say(format!("no session open: server resident {idle} KiB"));
    let (mut first, _) = open_session(endpoint).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    say(format!(
        "one session open: server resident {} KiB",
        resident_kib(pid)
    ));
    let mut held = vec![];
    while held.len() + 1 < n {
        let batch: Vec<_> = (0..(n - 1 - held.len()).min(100))
            .map(|_| tokio::spawn(open_session(endpoint.to_owned())))
            .collect();
        for task in batch {
            held.push(task.await??.0);
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let loaded = resident_kib(pid);
    say(format!(
        "{n} sessions open: server resident {loaded} KiB, {} KiB above the idle server, {:.1} KiB a session",
        loaded.saturating_sub(idle),
        loaded.saturating_sub(idle) as f64 / n as f64
    ));
    let (mut extra, _) = tokio_tungstenite::connect_async(endpoint).await?;
    let refused = loop {
        match extra.next().await {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => continue,
            other => bail!("session {} was not refused: {other:?}", n + 1),
        }
    };
    let code = refused.as_ref().map(|f| u16::from(f.code));
    say(format!(
        "session {}: closed with {code:?}: {}",
        n + 1,
        refused.map(|f| f.reason.to_string()).unwrap_or_default()
    ));
    if code != Some(1013) {
        bail!("session {} should be refused with 1013", n + 1);
    }
    // Every held session is still served.
    for socket in held.iter_mut().chain(std::iter::once(&mut first)) {
        socket.send(Message::Ping(Vec::new().into())).await?;
    }
    Ok(())
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A session past its `createSurface`, and that message.
async fn open_session(endpoint: impl AsRef<str>) -> Result<(Socket, Value)> {
    let (mut socket, _) = tokio_tungstenite::connect_async(endpoint.as_ref()).await?;
    let first = next_json(&mut socket).await?;
    if first.get("createSurface").is_none() {
        bail!("the session did not start with createSurface: {first}");
    }
    Ok((socket, first))
}

fn say(line: String) {
    // An example program reports on standard output.
    #[allow(clippy::print_stdout)]
    {
        println!("{line}");
    }
}

/// One renderer: connect, read `createSurface`, call an agent function and get its answer, send
/// a forged reply, close.
async fn cycle(endpoint: &str) -> Result<()> {
    let (mut socket, first) = open_session(endpoint).await?;
    let wire_id = first["createSurface"]["surfaceId"].clone();
    let call = json!({"version": "v1.0", "callAgentFunction": {"surfaceId": wire_id, "functionCallId": "soak", "callFunction": {"@call": "nothing", "args": {}}}});
    socket.send(Message::Text(call.to_string().into())).await?;
    loop {
        let message = next_json(&mut socket).await?;
        if message.get("agentFunctionResponse").is_some() {
            break;
        }
    }
    let forged = json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "nobody:getLocale#1", "value": "xx"}});
    socket
        .send(Message::Text(forged.to_string().into()))
        .await?;
    socket.close(None).await?;
    // Until the server's close: the session is over on both sides.
    while let Some(Ok(_)) = socket.next().await {}
    Ok(())
}

async fn next_json<S>(socket: &mut S) -> Result<Value>
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match socket.next().await.context("the server closed")?? {
            Message::Text(text) => return Ok(serde_json::from_str(&text)?),
            Message::Close(frame) => bail!("closed: {frame:?}"),
            _ => {}
        }
    }
}
