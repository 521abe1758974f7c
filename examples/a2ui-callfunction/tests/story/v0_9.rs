//! An A2UI v0.9 renderer over the example's real WebSocket: it announces v0.9 in the handshake
//! (the subprotocol `a2ui.v0.9`, or `?capabilities=`), gets only v0.9 messages, each valid
//! against the v0.9 schemas, never a function call; a v1.0 session of the same execution
//! answers the calls; the v0.9 renderer's forged and malformed actions are refused and record
//! nothing; its honest click approves; a renderer that announces no version Loom speaks is
//! refused before the upgrade.

use std::time::Duration;

use a2ui_callfunction::app::Order;
use a2ui_callfunction::story::EXECUTION;
use futures::{SinkExt, StreamExt};
use loom_console::AdminClient;
use loom_plugin_a2ui::V0_9Schema;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const TOKEN: &str = "v0-9-test-admin-token-0123456789";

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn next_json(socket: &mut Socket) -> Option<Value> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(20), socket.next())
            .await
            .expect("a message in time")?
            .ok()?;
        match frame {
            Message::Text(text) => return Some(serde_json::from_str(text.as_str()).unwrap()),
            Message::Close(_) => return None,
            _ => {}
        }
    }
}

/// The next v0.9 message, checked against the v0.9 schemas.
async fn next_v0_9(socket: &mut Socket) -> Value {
    let message = next_json(socket).await.expect("a v0.9 message");
    assert_eq!(message["version"], json!("v0.9"), "{message}");
    let errors = V0_9Schema::shared()
        .unwrap()
        .server_to_client_errors(&message);
    assert!(errors.is_empty(), "{message}: {errors:?}");
    assert!(message.get("callRendererFunction").is_none());
    message
}

fn action(context: Value) -> String {
    json!({"version": "v0.9", "action": {"name": "approve", "surfaceId": format!("checkout@{EXECUTION}"),
        "sourceComponentId": "approve", "timestamp": "2026-12-03T00:00:00Z", "context": context}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v0_9_renderer_over_the_websocket_gets_v0_9_only_and_approves_through_the_binding() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, server) = crate::playground::start_with_token(dir.path(), TOKEN).await;
    let admin = AdminClient::new(&format!("http://{addr}"), TOKEN).unwrap();
    let credential = crate::support::credential(&dir.path().join("loom.redb"), EXECUTION);
    let url = format!("ws://{addr}/a2ui/{EXECUTION}/checkout?credential={credential}");

    // No version Loom speaks: refused before the upgrade.
    let mut request = url.as_str().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "a2ui.v0.8".parse().unwrap());
    assert!(tokio_tungstenite::connect_async(request).await.is_err());
    let caps = format!("{url}&capabilities=%7B%22v0.8%22%3A%7B%7D%7D");
    assert!(
        tokio_tungstenite::connect_async(caps.as_str())
            .await
            .is_err()
    );

    let mut request = url.as_str().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "a2ui.v0.9".parse().unwrap());
    let (mut lit, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(
        response.headers()["sec-websocket-protocol"],
        "a2ui.v0.9",
        "the server answers with the version it chose"
    );
    let create = next_v0_9(&mut lit).await;
    assert!(create.get("createSurface").is_some(), "{create}");
    assert!(next_v0_9(&mut lit).await.get("updateComponents").is_some());
    assert!(next_v0_9(&mut lit).await.get("updateDataModel").is_some());

    // A v1.0 renderer of the same execution answers getLocale, announced by capabilities.
    let v1 = format!("{url}&capabilities=%7B%22v1.0%22%3A%7B%7D%7D");
    let (mut functions, _) = tokio_tungstenite::connect_async(v1.as_str()).await.unwrap();
    loop {
        let message = next_json(&mut functions).await.unwrap();
        assert_eq!(message["version"], json!("v1.0"));
        if let Some(call) = message.get("callRendererFunction") {
            let reply = json!({"version": "v1.0", "rendererFunctionResponse": {
                "functionCallId": call["functionCallId"], "value": "fr-CH"}});
            functions
                .send(Message::Text(reply.to_string().into()))
                .await
                .unwrap();
            break;
        }
    }
    // The v0.9 renderer sees the flow wait for approval.
    loop {
        let update = next_v0_9(&mut lit).await;
        if update["updateDataModel"]["value"] == json!("awaiting approval") {
            break;
        }
    }
    // Forged and malformed: refused, nothing recorded, the socket stays open.
    let before = admin.show(EXECUTION).await.unwrap().events.len();
    for frame in [
        action(json!({"orderId": "order-666"})),
        action(json!({})),
        json!({"version": "v0.9", "rendererFunctionResponse": {"functionCallId": "x", "value": 1}})
            .to_string(),
        "{not json".to_owned(),
    ] {
        lit.send(Message::Text(frame.into())).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(admin.show(EXECUTION).await.unwrap().events.len(), before);

    // The honest click, with the context the button binds.
    lit.send(Message::Text(
        action(json!({"orderId": Order::demo().id})).into(),
    ))
    .await
    .unwrap();
    // The v1.0 renderer places the order; the v0.9 one sees it placed, then the deletion.
    loop {
        let message = next_json(&mut functions).await.unwrap();
        if let Some(call) = message.get("callRendererFunction") {
            let reply = json!({"version": "v1.0", "rendererFunctionResponse": {
                "functionCallId": call["functionCallId"], "value": {"confirmation": "WS-1", "placed": true}}});
            functions
                .send(Message::Text(reply.to_string().into()))
                .await
                .unwrap();
            break;
        }
    }
    loop {
        let message = next_v0_9(&mut lit).await;
        if message.get("deleteSurface").is_some() {
            break;
        }
    }
    for _ in 0..200 {
        if admin.show(EXECUTION).await.unwrap().execution.status == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        admin.show(EXECUTION).await.unwrap().execution.status,
        "completed"
    );
    server.abort();
}
