//! The server over a real socket: a renderer that reconnects gets the surface and the pending
//! call again (same call id), then live updates; forged and malformed frames are refused and
//! record nothing, and the socket keeps working.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use a2ui_callfunction::server::{self, ServerOptions};
use a2ui_callfunction::story::EXECUTION;
use futures::{SinkExt, StreamExt};
use loom_plugin_a2ui::AgentMessage;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

async fn connect(addr: SocketAddr, credential: &str) -> Socket {
    let url = format!("ws://{addr}/a2ui/{EXECUTION}/checkout?credential={credential}");
    for _ in 0..200 {
        if let Ok((socket, _)) = tokio_tungstenite::connect_async(url.as_str()).await {
            return socket;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the server did not come up at {addr}");
}

async fn next(socket: &mut Socket) -> AgentMessage {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a message in time")
            .expect("the socket is open")
            .unwrap();
        if let Message::Text(text) = frame {
            return AgentMessage::parse(text.as_bytes()).unwrap();
        }
    }
}

async fn send(socket: &mut Socket, value: serde_json::Value) {
    socket
        .send(Message::Text(value.to_string().into()))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_renderer_gets_the_surface_and_the_pending_call_again_then_live_updates() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let options = ServerOptions {
        addr,
        execution: EXECUTION.into(),
        ..ServerOptions::new(dir.path().join("loom.redb"))
    };
    let server = tokio::spawn(server::serve(options));
    let credential = crate::support::credential(&dir.path().join("loom.redb"), EXECUTION);

    let mut first = connect(addr, &credential).await;
    let AgentMessage::CreateSurface(create) = next(&mut first).await else {
        panic!("createSurface first")
    };
    assert_eq!(create.data_model.unwrap()["payment"]["card"], json!("***"));
    let AgentMessage::CallRendererFunction(call) = next(&mut first).await else {
        panic!("then the pending getLocale")
    };
    // Gone without answering.
    first.close(None).await.unwrap();
    drop(first);

    let mut second = connect(addr, &credential).await;
    assert!(matches!(
        next(&mut second).await,
        AgentMessage::CreateSurface(_)
    ));
    let AgentMessage::CallRendererFunction(again) = next(&mut second).await else {
        panic!("the pending call is sent again")
    };
    assert_eq!(again.function_call_id, call.function_call_id);

    // Malformed, forged and out-of-place frames change nothing; the socket stays open.
    second
        .send(Message::Text("{\"version\":".into()))
        .await
        .unwrap();
    send(
        &mut second,
        json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "someone:getLocale#9", "value": "xx"}}),
    )
    .await;
    send(
        &mut second,
        json!({"version": "v1.0", "action": {"name": "approve", "surfaceId": "checkout", "sourceComponentId": "approve", "timestamp": "2026-12-01T00:00:00Z", "context": {}}}),
    )
    .await;
    send(
        &mut second,
        json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call.function_call_id, "value": 7}}),
    )
    .await;

    // The real answer resumes the gate; live updates follow on the same socket.
    send(
        &mut second,
        json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call.function_call_id, "value": "it-IT"}}),
    )
    .await;
    let mut updates = Vec::new();
    while updates.len() < 2 {
        if let AgentMessage::UpdateDataModel(update) = next(&mut second).await {
            updates.push((update.path.unwrap(), update.value));
        }
    }
    assert_eq!(
        updates,
        vec![
            ("/order/locale".to_owned(), json!("it-IT")),
            ("/order/status".to_owned(), json!("awaiting approval")),
        ],
        "the forged, invalid and early frames recorded nothing"
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_renderer_key_is_made_owner_only_and_a_damaged_one_stops_the_start_with_a_clear_error()
{
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("loom.redb");
    let key = dir.path().join("loom.redb.renderer-key");
    // Made at the first start, 0600, and the same at the next (links survive a restart).
    a2ui_callfunction::renderer_key::load_or_create(&key).unwrap();
    let made = std::fs::read_to_string(&key).unwrap();
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    a2ui_callfunction::renderer_key::load_or_create(&key).unwrap();
    assert_eq!(std::fs::read_to_string(&key).unwrap(), made);
    // Servers starting at once on a fresh folder all read the one key that won.
    let fresh = dir.path().join("fresh.renderer-key");
    let binding = loom_plugin_a2ui::Binding::new(
        loom_kernel::ExecutionId::new(EXECUTION).unwrap(),
        "checkout",
    );
    let minted: std::collections::BTreeSet<String> = std::thread::scope(|scope| {
        let starts: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    a2ui_callfunction::renderer_key::load_or_create(&fresh)
                        .unwrap()
                        .mint(&binding, 1)
                })
            })
            .collect();
        starts.into_iter().map(|s| s.join().unwrap()).collect()
    });
    assert_eq!(minted.len(), 1, "one key: {minted:?}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.contains(".new-"))
        .collect();
    assert!(leftovers.is_empty(), "staged files left: {leftovers:?}");
    // An empty or short key is refused, naming the file and what to do; nothing is served.
    std::fs::write(&key, "short\n").unwrap();
    let options = ServerOptions {
        addr: free_addr(),
        ..ServerOptions::new(&store)
    };
    let error = tokio::time::timeout(Duration::from_secs(20), server::serve(options))
        .await
        .expect("the server stops at once")
        .unwrap_err();
    let text = format!("{error:#}");
    assert!(
        text.contains("renderer-key") && text.contains("delete it"),
        "{text}"
    );
}
