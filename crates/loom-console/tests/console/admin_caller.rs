//! Resumes through the admin API carry a caller (LD-019): the holder of the bearer token is
//! the subject (`admin-token`), the operator's declared name an attribute; the runtime's
//! authenticator decides with both, and a refusal records nothing.

use std::sync::{Arc, Mutex};

use loom_console::{ADMIN_CALLER, AdminConfig, admin_router, bind_loopback};
use loom_kernel::*;
use loom_kernel::{EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{TOKEN, code, loom_async, stderr};

/// Lets only a named operator resume; remembers every caller it saw.
#[derive(Clone, Default)]
struct NamedOperators(Arc<Mutex<Vec<Caller>>>);

impl ResumeAuthenticator for NamedOperators {
    fn authorize(&self, request: &ResumeRequest<'_>) -> Result<(), String> {
        self.0.lock().unwrap().push(request.caller.clone());
        match request.caller.attribute("operator") {
            Some(_) => Ok(()),
            None => Err("name yourself".into()),
        }
    }
}

async fn wait_for_approval(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.suspend("approval", "k").await?.to_value())
}

async fn post(url: &str, path: &str, body: &Value) -> (u16, String) {
    let body = body.to_string();
    raw_post(
        url,
        path,
        "Host: x\r\nContent-Type: application/json\r\n",
        &body,
    )
    .await
}

/// A POST with the admin token, `headers` (each line ending in CRLF) and `body`: the status
/// and the body of the answer.
async fn raw_post(url: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let address = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\n{headers}Authorization: Bearer {TOKEN}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.to_owned(),
    )
}

/// `w1` waiting for its approval on a memory store (with `operators` deciding resumes), and
/// the admin API over it served on loopback: the runtime, the execution, the address and the
/// server's task.
async fn serving(
    operators: Option<NamedOperators>,
) -> (
    Runtime<MemoryStore>,
    ExecutionId,
    std::net::SocketAddr,
    tokio::task::JoinHandle<()>,
) {
    let mut builder =
        Runtime::builder(MemoryStore::new()).flow(flow_fn("wait", 1, wait_for_approval));
    if let Some(operators) = operators {
        builder = builder.resume_authenticator(operators);
    }
    let runtime = builder.build().unwrap();
    let e = ExecutionId::new("w1").unwrap();
    runtime
        .start("wait", &json!(null), StartOptions::new(e.clone()))
        .await
        .unwrap();
    runtime.wait(&e).await.unwrap();
    let router = admin_router(runtime.clone(), AdminConfig::new(TOKEN).unwrap());
    let listener = bind_loopback(0).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (runtime, e, addr, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_holder_is_the_caller_and_the_operator_name_an_attribute() {
    let seen = NamedOperators::default();
    let (runtime, e, addr, server) = serving(Some(seen.clone())).await;
    let url = format!("http://{addr}");

    let before = runtime.store().read_all(&e).await.unwrap().len();
    let path = "/admin/v1/executions/w1/resume";
    let (status, body) = post(
        &url,
        path,
        &json!({"eventType": "approval", "correlationKey": "k", "payload": 1}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("name yourself"), "{body}");
    assert_eq!(runtime.store().read_all(&e).await.unwrap().len(), before);

    // A name that could forge a log line is refused before the authenticator is asked.
    let (status, body) = post(
        &url,
        path,
        &json!({"eventType": "approval", "correlationKey": "k", "payload": 1, "operator": "ada\nroot"}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(seen.0.lock().unwrap().len(), 1);

    // `loom resume --operator` names the operator.
    let resumed = loom_async(&[
        "--admin",
        &url,
        "--token",
        TOKEN,
        "resume",
        "w1",
        "approval",
        "k",
        "2",
        "--operator",
        "ada",
    ])
    .await;
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let callers = seen.0.lock().unwrap().clone();
    assert_eq!(callers.len(), 2);
    for caller in &callers {
        assert_eq!(caller.subject(), Some(ADMIN_CALLER));
        assert_eq!(caller.attribute("via"), Some("admin-api"));
    }
    assert_eq!(callers[0].attribute("operator"), None);
    assert_eq!(callers[1].attribute("operator"), Some("ada"));
    let done = runtime.wait(&e).await.unwrap();
    assert_eq!(done.status(), ExecutionStatus::Completed);
    server.abort();
}

/// A request as a browser page sends it: `Origin` and `Host` as given, the admin token.
async fn post_from(url: &str, path: &str, host: &str, origin: &str) -> (u16, String) {
    raw_post(
        url,
        path,
        &format!("Host: {host}\r\nOrigin: {origin}\r\n"),
        "",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_origin_is_refused_with_403_even_with_the_token() {
    let (runtime, e, addr, server) = serving(None).await;
    let url = format!("http://{addr}");
    let host = addr.to_string();
    let cancel = "/admin/v1/executions/w1/cancel";
    for origin in ["https://evil.example", "null", "http://127.0.0.1:1"] {
        let (status, body) = post_from(&url, cancel, &host, origin).await;
        assert_eq!(status, 403, "{origin}: {body}");
        assert!(body.contains("refused"), "{body}");
    }
    assert_eq!(
        runtime.state(&e).await.unwrap().status(),
        ExecutionStatus::Suspended,
        "nothing cancelled"
    );
    // The console's own page, on the same origin, is served.
    let (status, body) = post_from(&url, cancel, &host, &url).await;
    assert_eq!(status, 200, "{body}");
    server.abort();
}
