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

fn main() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if let Some(dir) = std::env::var_os(SERVER_ENV) {
        let dir = std::path::PathBuf::from(dir);
        return runtime.block_on(server::serve(ServerOptions {
            store: dir.join("loom.redb"),
            schema: a2ui_callfunction::store::DEFAULT_SCHEMA.into(),
            addr: "127.0.0.1:0".parse()?,
            execution: EXECUTION.into(),
            crash_after_submit: false,
            exit_when_done: false,
            admin_token: None,
            renderer_token: None,
        }));
    }
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(60);
    let workers: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    let dir = tempfile::tempdir()?;
    let mut child = Command::new(std::env::current_exe()?)
        .env(SERVER_ENV, dir.path())
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the server")?;
    let outcome = (|| {
        let url = ready_url(&mut child)?;
        runtime.block_on(soak(&url, child.id(), seconds, workers))
    })();
    let _ = child.kill();
    let _ = child.wait();
    outcome
}

/// The server's URL from its `ready` note; the rest of its notes are read and dropped so that
/// it never blocks on a full pipe.
fn ready_url(child: &mut Child) -> Result<String> {
    let stdout = child.stdout.take().context("the server's stdout")?;
    let mut lines = std::io::BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let note: Value = serde_json::from_str(&line?).unwrap_or(Value::Null);
        if note["note"] == "ready"
            && let Some(url) = note["url"].as_str()
        {
            let url = url.to_owned();
            std::thread::spawn(move || for _ in lines {});
            return Ok(url);
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
    let line = format!(
        "{:>4} s: {cycles:>8} sessions opened, called and closed ({failures} failed), server resident {:>7} KiB",
        elapsed.as_secs(),
        resident_kib(pid)
    );
    // An example program reports on standard output.
    #[allow(clippy::print_stdout)]
    {
        println!("{line}");
    }
}

async fn soak(url: &str, pid: u32, seconds: u64, workers: usize) -> Result<()> {
    let endpoint = format!(
        "{}/a2ui/{EXECUTION}/{SURFACE}?answers=",
        url.trim_end_matches('/')
    );
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

/// One renderer: connect, read `createSurface`, call an agent function and get its answer, send
/// a forged reply, close.
async fn cycle(endpoint: &str) -> Result<()> {
    let (mut socket, _) = tokio_tungstenite::connect_async(endpoint).await?;
    let first = next_json(&mut socket).await?;
    if first.get("createSurface").is_none() {
        bail!("the session did not start with createSurface: {first}");
    }
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
