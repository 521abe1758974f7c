//! The attacks of the threat model (docs/A2UI.md, "Threat model") over the example's real
//! endpoints, one test per class: a page of another origin, a renderer without its own
//! execution's credential, a second session answering a call it was never sent, a v0.9
//! session answering a function call, binary frames, too many sessions, a reply too big. Each
//! is refused, records nothing, and the story still completes afterwards.

use a2ui_callfunction::story::EXECUTION;
use futures::SinkExt;
use loom_kernel::ExecutionId;
use loom_plugin_a2ui::{AgentMessage, Binding, CredentialKey, unix_now};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::hostile::{
    Server, TOKEN, WIRE_SURFACE, approve, close_code, close_frame, function_reply, next, send,
    start, start_with, synced,
};

const EVIL: &str = "https://evil.example";

/// The upgrade's HTTP status when the server refuses it, `None` when it upgrades.
async fn upgrade_status(
    server: &Server,
    path: &str,
    headers: &[(&'static str, String)],
) -> Option<u16> {
    let mut request = format!("ws://{}{path}", server.addr)
        .into_client_request()
        .unwrap();
    for (name, value) in headers {
        request.headers_mut().insert(*name, value.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok(_) => None,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Some(response.status().as_u16())
        }
        Err(other) => panic!("the upgrade failed otherwise: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_origin_is_refused_with_403_before_anything_is_read() {
    let server = start().await;
    let before = server.log_len().await;
    let renderer = format!(
        "/a2ui/{EXECUTION}/checkout?credential={}",
        server.credential
    );
    let evil = [("origin", EVIL.to_owned())];
    // The renderer socket, even with a good credential; the operator's, even with the token.
    assert_eq!(upgrade_status(&server, &renderer, &evil).await, Some(403));
    let operator = [
        ("origin", EVIL.to_owned()),
        ("authorization", format!("Bearer {TOKEN}")),
    ];
    assert_eq!(
        upgrade_status(&server, "/operator", &operator).await,
        Some(403)
    );
    // A form or fetch POST to the playground and to the admin API, with the token.
    for path in [
        "/playground/v1/executions".to_owned(),
        format!("/admin/v1/executions/{EXECUTION}/cancel"),
    ] {
        let (status, body) = crate::playground::http(
            server.addr,
            &format!(
                "POST {path} HTTP/1.1\r\nHost: {}\r\nOrigin: {EVIL}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                server.addr
            ),
        )
        .await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body.contains("not allowed"), "{body}");
    }
    // `Origin: null` (a sandboxed frame, a local file) is no better.
    let null = [("origin", "null".to_owned())];
    assert_eq!(upgrade_status(&server, &renderer, &null).await, Some(403));
    assert_eq!(server.log_len().await, before, "nothing recorded");
    assert_eq!(server.status().await, "suspended", "nothing cancelled");
    // The server's own origin is let in.
    let own = [("origin", format!("http://{}", server.addr))];
    assert_eq!(upgrade_status(&server, &renderer, &own).await, None);
    server.story_completes().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renderer_without_a_credential_for_this_execution_is_refused_even_on_loopback() {
    let server = start().await;
    let before = server.log_len().await;
    let key = crate::support::renderer_key(&server.dir.path().join("loom.redb"));
    let binding = |execution: &str| Binding::new(ExecutionId::new(execution).unwrap(), "checkout");
    let tampered = {
        let mut c = server.credential.clone();
        let last = c.pop().unwrap();
        c.push(if last == '0' { '1' } else { '0' });
        c
    };
    let other_key = CredentialKey::new(&[9; 32]).unwrap();
    for (credential, says) in [
        (None, "no renderer credential"),
        (
            Some(key.mint(&binding("checkout-2"), unix_now() + 60)),
            "may not use",
        ),
        (
            Some(key.mint(&binding(EXECUTION), unix_now() - 1)),
            "expired",
        ),
        (Some(tampered), "not issued"),
        (
            Some(other_key.mint(&binding(EXECUTION), unix_now() + 60)),
            "not issued",
        ),
    ] {
        let path = match &credential {
            Some(c) => format!("/a2ui/{EXECUTION}/checkout?credential={c}"),
            None => format!("/a2ui/{EXECUTION}/checkout"),
        };
        let mut socket = server.connect_bare(&path).await;
        let (code, reason, sent) = close_frame(&mut socket).await;
        assert_eq!(code, Some(1008), "{path}");
        assert_eq!(sent, 0, "nothing shown");
        assert!(reason.contains(says), "{reason}");
    }
    // Another execution's credential opens that execution only: checkout-1 stays closed to it.
    let mut socket = server
        .connect_bare(&format!(
            "/a2ui/checkout-2/checkout?credential={}",
            server.credential
        ))
        .await;
    assert_eq!(close_code(&mut socket).await, Some(1008));
    assert_eq!(server.log_len().await, before);
    server.story_completes().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_session_cannot_answer_the_grain_b_call_sent_to_the_first() {
    let server = start().await;
    let (mut honest, locale) = server.awaiting_locale().await;
    // The attacker holds the same link and opens a session of the same binding.
    let mut attacker = server.renderer().await;
    send(
        &mut honest,
        function_reply(&locale.function_call_id, json!("fr-CH")),
    )
    .await;
    let submit = loop {
        match next(&mut honest).await {
            AgentMessage::UpdateDataModel(update)
                if update.path.as_deref() == Some("/order/status")
                    && update.value == json!("awaiting approval") =>
            {
                send(&mut honest, approve(json!({"orderId": "order-7"}))).await;
            }
            AgentMessage::CallRendererFunction(call) if call.call.name == "submitOrder" => {
                break call;
            }
            _ => {}
        }
    };
    let before = server.log_len().await;
    // It knows the call id (the strongest attacker) and answers first, with a forged receipt,
    // then with an error that would fail the order.
    send(
        &mut attacker,
        function_reply(
            &submit.function_call_id,
            json!({"confirmation": "FORGED", "placed": true}),
        ),
    )
    .await;
    send(&mut attacker, json!({"version": "v1.0", "error": {"code": "BOOM", "message": "no", "functionCallId": submit.function_call_id}})).await;
    synced(&mut attacker).await;
    assert_eq!(server.log_len().await, before, "nothing recorded");
    send(
        &mut honest,
        function_reply(
            &submit.function_call_id,
            json!({"confirmation": "CONF-REAL", "placed": true}),
        ),
    )
    .await;
    for _ in 0..400 {
        if server.status().await == "completed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(server.status().await, "completed");
    let log = serde_json::to_string(&server.admin.show(EXECUTION).await.unwrap().events).unwrap();
    assert!(
        log.contains("CONF-REAL") && !log.contains("FORGED"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v0_9_session_answers_no_function_call() {
    let server = start().await;
    let (mut functions, locale) = server.awaiting_locale().await;
    let mut request = format!(
        "ws://{}/a2ui/{EXECUTION}/checkout?credential={}",
        server.addr, server.credential
    )
    .into_client_request()
    .unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "a2ui.v0.9".parse().unwrap());
    let (mut lit, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let before = server.log_len().await;
    for error in [
        // The frame that once failed the flow: no surfaceId, as v0.9 requires.
        json!({"code": "BOOM", "message": "no", "functionCallId": locale.function_call_id}),
        json!({"code": "BOOM", "message": "no", "surfaceId": WIRE_SURFACE, "functionCallId": locale.function_call_id}),
    ] {
        lit.send(Message::Text(
            json!({"version": "v0.9", "error": error})
                .to_string()
                .into(),
        ))
        .await
        .unwrap();
    }
    // The v1.0 session's in-band answer proves the server has read the v0.9 frames before.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    synced(&mut functions).await;
    assert_eq!(server.log_len().await, before, "nothing recorded");
    assert_eq!(server.status().await, "suspended");
    drop(lit);
    drop(functions);
    server.story_completes().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_frame_closes_its_session_with_1003() {
    let server = start().await;
    let mut socket = server.renderer().await;
    let _pending = next(&mut socket).await;
    let before = server.log_len().await;
    let reply = function_reply(&format!("{EXECUTION}:getLocale#1"), json!("fr-CH"));
    socket
        .send(Message::Binary(reply.to_string().into_bytes().into()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut socket).await, Some(1003));
    assert_eq!(server.log_len().await, before);
    server.story_completes().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_past_the_limit_per_credential_are_refused_with_1013() {
    let server = start_with(|options| a2ui_callfunction::server::ServerOptions {
        max_sessions_per_caller: 2,
        ..options
    })
    .await;
    let first = server.renderer().await;
    let second = server.renderer().await;
    let mut third = server
        .connect_to(&format!("/a2ui/{EXECUTION}/checkout"))
        .await;
    let (code, reason, sent) = close_frame(&mut third).await;
    assert_eq!(code, Some(1013), "{reason}");
    assert_eq!(sent, 0);
    assert!(reason.contains("limit"), "{reason}");
    // A closed session gives its place back.
    drop(first);
    drop(second);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    server.story_completes().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_over_its_functions_bound_is_refused_and_recorded_nowhere() {
    let server = start().await;
    let (mut socket, locale) = server.awaiting_locale().await;
    let before = server.log_len().await;
    // A locale of a megabyte once rode along every later createSurface.
    for value in ["x".repeat(600), "x".repeat(900 * 1024)] {
        send(
            &mut socket,
            function_reply(&locale.function_call_id, json!(value)),
        )
        .await;
    }
    synced(&mut socket).await;
    assert_eq!(server.log_len().await, before, "nothing recorded");
    drop(socket);
    server.story_completes().await;
}
