//! A soak of the A2UI edge: sessions opening, sending and closing for a while, with what the
//! edge, the hub and the process hold measured before and after.
//!
//! 200 concurrent workers each open a session on one of the executions, answer nothing, send
//! one `callAgentFunction` (answered in band) and one forged reply (refused), and close; again
//! and again until the time is up. The edge's sessions, the hub's subscriptions and the
//! process's resident memory are printed at the start, midway and at the end.
//!
//! `cargo run --release -p loom-plugin-a2ui --example soak -- [SECONDS] [WORKERS]`

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use loom_kernel::{Caller, ExecutionId, MemoryStore, Runtime, StartOptions, flow_fn};
use loom_plugin_a2ui::{Binding, Connection, Grant, RendererEdge, SessionAuthenticator};
use serde_json::json;
use support::*;

const EXECUTIONS: usize = 20;

/// Grants every connection the surface it asks for.
struct Everyone;

impl SessionAuthenticator for Everyone {
    fn authenticate<'a>(
        &'a self,
        connection: &'a Connection,
    ) -> BoxFuture<'a, Result<Grant, String>> {
        async move {
            let execution =
                ExecutionId::new(connection.execution.clone()).map_err(|e| e.to_string())?;
            Ok(Grant {
                caller: Caller::new("soak").map_err(|e| e.to_string())?,
                bindings: vec![Binding::new(execution, connection.surface_id.clone())],
            })
        }
        .boxed()
    }
}

/// The process's resident memory, in KiB (Linux; 0 elsewhere).
fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4)
}

fn report(when: &str, edge: &RendererEdge, hub: &loom_plugin_a2ui::SurfaceHub, cycles: u64) {
    tracing::info!(when, cycles, "soak");
    let line = format!(
        "{when:>6}: {cycles:>9} sessions opened and closed, {:>3} open, {:>3} subscriptions, resident {:>7} KiB",
        edge.session_count(),
        hub.subscriber_count(),
        resident_kib()
    );
    // An example program reports on standard output.
    #[allow(clippy::print_stdout)]
    {
        println!("{line}");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(60);
    let workers: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);

    let store = MemoryStore::new();
    let hub = hub();
    let edge = RendererEdge::new(hub.clone(), Everyone);
    let runtime = Runtime::builder(store)
        .flow(flow_fn("checkout", 1, checkout))
        .plugin(&hub)
        .plugin(&edge)
        .resume_authenticator(edge.clone())
        .build()
        .map_err(|e| e.to_string())?;
    for n in 0..EXECUTIONS {
        let e = ExecutionId::new(format!("soak-{n}")).map_err(|e| e.to_string())?;
        runtime
            .start("checkout", &order(), StartOptions::new(e.clone()))
            .await
            .map_err(|e| e.to_string())?;
        let _ = runtime.wait(&e).await;
    }

    let cycles = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let half = Instant::now() + Duration::from_secs(seconds / 2);
    report("start", &edge, &hub, 0);
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let (edge, runtime, cycles) = (edge.clone(), runtime.clone(), cycles.clone());
        tasks.push(tokio::spawn(async move {
            let call = json!({"version": "v1.0", "callAgentFunction": {"surfaceId": SURFACE, "functionCallId": "c", "callFunction": {"@call": "x", "args": {}}}}).to_string();
            let forged = json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "nobody:getLocale#1", "value": "xx"}}).to_string();
            let mut n = worker;
            while Instant::now() < deadline {
                let connection = Connection {
                    execution: format!("soak-{}", n % EXECUTIONS),
                    surface_id: SURFACE.into(),
                    ..Connection::default()
                };
                n += 1;
                let mut session = match edge.open(&runtime, &connection).await {
                    Ok(session) => session,
                    Err(error) => return Err(error.to_string()),
                };
                let _ = session.take_initial();
                // Every worker's session is open at once before any is used.
                tokio::task::yield_now().await;
                let _ = session.receive(&runtime, call.as_bytes()).await;
                let _ = session.receive(&runtime, forged.as_bytes()).await;
                drop(session);
                cycles.fetch_add(1, Ordering::Relaxed);
                // A cycle may never wait on anything: let the reporter run too.
                tokio::task::yield_now().await;
            }
            Ok::<(), String>(())
        }));
    }
    tokio::time::sleep_until(half.into()).await;
    report("middle", &edge, &hub, cycles.load(Ordering::Relaxed));
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    report("end", &edge, &hub, cycles.load(Ordering::Relaxed));
    Ok(())
}
