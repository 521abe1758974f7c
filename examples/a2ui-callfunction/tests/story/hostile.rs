//! The example server as an attacker meets it, over its real WebSocket and HTTP endpoints: one
//! test per class of hostile input. Each asserts the refusal, that the execution's log is
//! unchanged, that the server still serves another session, and the story still completes.

use std::net::SocketAddr;
use std::time::Duration;

use a2ui_callfunction::server::ServerOptions;
use a2ui_callfunction::story::EXECUTION;
use futures::{SinkExt, StreamExt};
use loom_console::AdminClient;
use loom_plugin_a2ui::AgentMessage;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

pub(crate) const TOKEN: &str = "hostile-test-admin-token-0123456789";

pub(crate) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    /// A renderer credential for the served execution.
    pub(crate) credential: String,
    pub(crate) task: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub(crate) admin: AdminClient,
    pub(crate) dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) async fn start() -> Server {
    start_with(|options| options).await
}

/// [`start`] with the server's options changed by `change`.
pub(crate) async fn start_with(change: impl FnOnce(ServerOptions) -> ServerOptions) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let options = change(ServerOptions {
        admin_token: Some(TOKEN.into()),
        ..ServerOptions::new(dir.path().join("loom.redb"))
    });
    let (addr, task) = crate::playground::start_with_options(options).await;
    let admin = AdminClient::new(&format!("http://{addr}"), TOKEN).unwrap();
    Server {
        addr,
        credential: crate::support::credential(&dir.path().join("loom.redb"), EXECUTION),
        task,
        admin,
        dir,
    }
}

impl Server {
    /// A socket on `path`, with the renderer credential added to its query.
    pub(crate) async fn connect_to(&self, path: &str) -> Socket {
        let separator = if path.contains('?') { '&' } else { '?' };
        self.connect_bare(&format!("{path}{separator}credential={}", self.credential))
            .await
    }

    /// A socket on `path` as it is.
    pub(crate) async fn connect_bare(&self, path: &str) -> Socket {
        let url = format!("ws://{}{path}", self.addr);
        tokio_tungstenite::connect_async(url.as_str())
            .await
            .expect("the upgrade is answered")
            .0
    }

    /// A renderer session on the served execution's surface, past its `createSurface`.
    pub(crate) async fn renderer(&self) -> Socket {
        let mut socket = self
            .connect_to(&format!("/a2ui/{EXECUTION}/checkout"))
            .await;
        assert!(matches!(
            next(&mut socket).await,
            AgentMessage::CreateSurface(_)
        ));
        socket
    }

    /// A renderer session past its `createSurface`, and the open `getLocale` call it is sent
    /// next.
    pub(crate) async fn awaiting_locale(&self) -> (Socket, loom_plugin_a2ui::CallRendererFunction) {
        let mut socket = self.renderer().await;
        let AgentMessage::CallRendererFunction(call) = next(&mut socket).await else {
            panic!("the pending getLocale")
        };
        (socket, call)
    }

    /// How many events the execution's log holds.
    pub(crate) async fn log_len(&self) -> usize {
        self.admin.show(EXECUTION).await.unwrap().events.len()
    }

    /// The execution's status, as the admin API tells it.
    pub(crate) async fn status(&self) -> String {
        self.admin.show(EXECUTION).await.unwrap().execution.status
    }

    /// Plays the honest renderer to the end: answers the locale, clicks Approve with the
    /// context its button binds, answers `submitOrder`; the execution completes.
    pub(crate) async fn story_completes(&self) {
        let mut socket = self
            .connect_to(&format!("/a2ui/{EXECUTION}/checkout"))
            .await;
        let AgentMessage::CreateSurface(create) = next(&mut socket).await else {
            panic!("createSurface first")
        };
        let status = create.data_model.unwrap_or_default()["order"]["status"].clone();
        // A renderer that comes when the gate already waits clicks at once.
        let mut approved = status == json!("awaiting approval");
        if approved {
            send(&mut socket, approve(json!({"orderId": "order-7"}))).await;
        }
        loop {
            let message = next_or_end(&mut socket).await;
            match message {
                Some(AgentMessage::CallRendererFunction(call)) => {
                    let value = if call.call.name == "getLocale" {
                        json!("fr-CH")
                    } else {
                        json!({"confirmation": "CONF-1", "placed": true})
                    };
                    send(&mut socket, json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call.function_call_id, "value": value}})).await;
                }
                Some(AgentMessage::UpdateDataModel(update))
                    if update.path.as_deref() == Some("/order/status")
                        && update.value == json!("awaiting approval")
                        && !approved =>
                {
                    approved = true;
                    send(&mut socket, approve(json!({"orderId": "order-7"}))).await;
                }
                Some(AgentMessage::DeleteSurface(_)) | None => break,
                Some(_) => {}
            }
        }
        for _ in 0..400 {
            if self.status().await == "completed" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the story did not complete: {}", self.status().await);
    }
}

pub(crate) async fn next_or_end(socket: &mut Socket) -> Option<AgentMessage> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(20), socket.next())
            .await
            .expect("a message in time")?;
        match frame.ok()? {
            Message::Text(text) => return Some(AgentMessage::parse(text.as_bytes()).unwrap()),
            Message::Close(_) => return None,
            _ => {}
        }
    }
}

pub(crate) async fn next(socket: &mut Socket) -> AgentMessage {
    next_or_end(socket).await.expect("the socket is open")
}

/// The close code the server ends the socket with.
pub(crate) async fn close_code(socket: &mut Socket) -> Option<u16> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(20), socket.next())
            .await
            .expect("the socket ends in time");
        match frame {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return None,
        }
    }
}

pub(crate) async fn send(socket: &mut Socket, value: Value) {
    socket
        .send(Message::Text(value.to_string().into()))
        .await
        .unwrap();
}

/// Returns once the server has taken every frame sent before on `socket` (it reads a
/// socket's frames in order and answers `callAgentFunction` in band).
pub(crate) async fn synced(socket: &mut Socket) {
    send(socket, json!({"version": "v1.0", "callAgentFunction": {"surfaceId": WIRE_SURFACE, "functionCallId": "sync", "callFunction": {"@call": "sync", "args": {}}}})).await;
    loop {
        if let AgentMessage::AgentFunctionResponse(answer) = next(socket).await
            && answer.function_call_id == "sync"
        {
            return;
        }
    }
}

/// The checkout's surface id on the wire.
pub(crate) const WIRE_SURFACE: &str = "checkout@checkout-1";

/// A renderer's answer to call `call_id`.
pub(crate) fn function_reply(call_id: &str, value: Value) -> Value {
    json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call_id, "value": value}})
}

pub(crate) fn approve(context: Value) -> Value {
    json!({"version": "v1.0", "action": {"name": "approve", "surfaceId": WIRE_SURFACE,
        "sourceComponentId": "approve", "timestamp": "2026-12-01T00:00:00Z", "context": context}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_on_another_execution_or_surface_is_refused_and_nothing_is_kept() {
    let server = start().await;
    let before = server.log_len().await;
    for path in [
        "/a2ui/someone-else/checkout".to_owned(),
        format!("/a2ui/{EXECUTION}/elsewhere"),
    ] {
        let mut socket = server.connect_to(&path).await;
        assert_eq!(close_code(&mut socket).await, Some(1008), "{path}");
    }
    assert_eq!(server.log_len().await, before);
    server.story_completes().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_replies_and_actions_are_refused_and_the_session_stays_usable() {
    let server = start().await;
    let (mut socket, call) = server.awaiting_locale().await;
    let before = server.log_len().await;
    for forged in [
        // A call of another execution, an unknown call, a value off the return schema.
        json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "other:getLocale#1", "value": "xx"}}),
        json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": format!("{EXECUTION}:submitOrder#9"), "value": {}}}),
        json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call.function_call_id, "value": 7}}),
        // Actions before their gate, of an unknown component, of another surface.
        approve(json!({"orderId": "order-7"})),
        json!({"version": "v1.0", "action": {"name": "approve", "surfaceId": WIRE_SURFACE, "sourceComponentId": "ghost", "timestamp": "t", "context": {}}}),
        json!({"version": "v1.0", "action": {"name": "approve", "surfaceId": "other", "sourceComponentId": "approve", "timestamp": "t", "context": {"orderId": "order-7"}}}),
    ] {
        send(&mut socket, forged).await;
    }
    // The real answer still resumes the gate on the same socket.
    send(&mut socket, json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call.function_call_id, "value": "it-IT"}})).await;
    loop {
        if let AgentMessage::UpdateDataModel(update) = next(&mut socket).await
            && update.path.as_deref() == Some("/order/status")
        {
            assert_eq!(update.value, json!("awaiting approval"));
            break;
        }
    }
    let after_locale = server.log_len().await;
    assert!(after_locale > before);
    // Now the gate waits: a forged context is refused, and records nothing.
    send(&mut socket, approve(json!({"orderId": "order-8"}))).await;
    send(&mut socket, approve(json!({}))).await;
    synced(&mut socket).await;
    assert_eq!(server.log_len().await, after_locale);
    drop(socket);
    server.story_completes().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_agent_function_is_answered_with_an_agent_function_response() {
    let server = start().await;
    let mut socket = server.renderer().await;
    let _pending = next(&mut socket).await;
    let before = server.log_len().await;
    send(&mut socket, json!({"version": "v1.0", "callAgentFunction": {"surfaceId": WIRE_SURFACE, "functionCallId": "r-1", "callFunction": {"@call": "dropTables", "args": {}}}})).await;
    let AgentMessage::AgentFunctionResponse(answer) = next(&mut socket).await else {
        panic!("an agentFunctionResponse")
    };
    assert_eq!(answer.function_call_id, "r-1");
    let loom_plugin_a2ui::FunctionOutcome::Error(error) = answer.outcome else {
        panic!("an error")
    };
    assert_eq!(error.code, "UNKNOWN_FUNCTION");
    assert_eq!(server.log_len().await, before);
    drop(socket);
    server.story_completes().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_invalid_and_flooding_frames_close_their_own_socket_only() {
    let server = start().await;
    let mut bystander = server.renderer().await;
    let _pending = next(&mut bystander).await;
    let before = server.log_len().await;

    let mut big = server.renderer().await;
    let huge = format!(
        "{{\"version\":\"v1.0\",\"error\":{{\"code\":\"x\",\"message\":\"{}\"}}}}",
        "a".repeat(2 * 1024 * 1024)
    );
    // The server may close before the whole frame is written.
    let _ = big.send(Message::Text(huge.into())).await;
    assert_eq!(close_code(&mut big).await, Some(1009));

    let mut invalid = server.renderer().await;
    let frame = Frame::message(vec![b'"', 0xff, 0xfe, b'"'], OpCode::Data(Data::Text), true);
    invalid.send(Message::Frame(frame)).await.unwrap();
    assert_eq!(close_code(&mut invalid).await, Some(1007));

    let mut deep = server.renderer().await;
    let nested = format!("{}{}", "[".repeat(500), "]".repeat(500));
    deep.send(Message::Text(nested.into())).await.unwrap();
    // Too deep is refused, not closed: the session still answers.
    synced(&mut deep).await;
    // Gone, so that the story's grain-B call goes to the renderer that answers it.
    drop(deep.close(None).await);

    let mut flood = server.renderer().await;
    for _ in 0..500 {
        if flood.send(Message::Text("{}".into())).await.is_err() {
            break;
        }
    }
    assert_eq!(close_code(&mut flood).await, Some(1008));

    assert_eq!(server.log_len().await, before, "nothing recorded");
    drop(bystander.close(None).await);
    server.story_completes().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_socket_needs_the_admin_token() {
    let server = start().await;
    let url = format!("ws://{}/operator", server.addr);
    let refused = tokio_tungstenite::connect_async(url.as_str()).await;
    assert!(refused.is_err(), "no token, no socket");
    let mut wrong = url.as_str().into_client_request().unwrap();
    wrong
        .headers_mut()
        .insert("authorization", "Bearer not-the-token".parse().unwrap());
    assert!(tokio_tungstenite::connect_async(wrong).await.is_err());

    let mut right = url.as_str().into_client_request().unwrap();
    right
        .headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(right).await.unwrap();
    send(&mut socket, json!({"op": "list"})).await;
    let Some(Ok(Message::Text(answer))) = socket.next().await else {
        panic!("an answer")
    };
    let answer: Value = serde_json::from_str(answer.as_str()).unwrap();
    assert_eq!(answer["ok"], json!(true), "{answer}");
    server.story_completes().await;
}

/// The close frame's code and reason, and whether anything came before it.
pub(crate) async fn close_frame(socket: &mut Socket) -> (Option<u16>, String, usize) {
    let mut before = 0;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(20), socket.next())
            .await
            .expect("the socket ends in time");
        match frame {
            Some(Ok(Message::Close(frame))) => {
                return (
                    frame.as_ref().map(|f| u16::from(f.code)),
                    frame.map(|f| f.reason.to_string()).unwrap_or_default(),
                    before,
                );
            }
            Some(Ok(Message::Text(_))) => before += 1,
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return (None, String::new(), before),
        }
    }
}

fn capabilities(ids: &Value) -> String {
    let text = json!({"v1.0": {"supportedCatalogIds": ids}}).to_string();
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renderer_lacking_a_catalog_is_refused_before_create_surface_and_one_that_reconnects_gets_delete_first()
 {
    let server = start().await;
    let before = server.log_len().await;
    let basic = loom_plugin_a2ui::BASIC_CATALOG_ID;
    // The checkout shows Loom's Badge and the shop's components: the basic catalog alone, or
    // a list that is no list of ids, cannot draw it.
    for ids in [json!([basic]), json!([])] {
        let mut socket = server
            .connect_to(&format!(
                "/a2ui/{EXECUTION}/checkout?capabilities={}",
                capabilities(&ids)
            ))
            .await;
        let (code, reason, sent) = close_frame(&mut socket).await;
        assert_eq!(code, Some(1008), "{ids}");
        assert_eq!(
            sent, 0,
            "no createSurface for a renderer that cannot draw it"
        );
        assert!(
            reason.starts_with("the renderer lacks the catalogs [")
                && (ids != json!([basic]) || reason.contains(loom_plugin_a2ui::LOOM_CATALOG_ID)),
            "the reason names what is missing: {reason}"
        );
    }
    assert_eq!(server.log_len().await, before);

    // The renderer that lists every catalog the surface needs is served.
    let all = json!([
        basic,
        loom_plugin_a2ui::LOOM_CATALOG_ID,
        "urn:loom:example:shop:v1"
    ]);
    let mut listed = server
        .connect_to(&format!(
            "/a2ui/{EXECUTION}/checkout?capabilities={}",
            capabilities(&all)
        ))
        .await;
    assert!(matches!(
        next(&mut listed).await,
        AgentMessage::CreateSurface(_)
    ));
    drop(listed);

    // One that says it reconnects with its state gets the surface deleted, then created.
    let mut again = server
        .connect_to(&format!("/a2ui/{EXECUTION}/checkout?reconnect=1"))
        .await;
    assert_eq!(
        next(&mut again).await,
        AgentMessage::DeleteSurface(loom_plugin_a2ui::DeleteSurface {
            surface_id: WIRE_SURFACE.into()
        })
    );
    assert!(matches!(
        next(&mut again).await,
        AgentMessage::CreateSurface(_)
    ));
    drop(again);
    assert_eq!(server.log_len().await, before);
    server.story_completes().await;
}
