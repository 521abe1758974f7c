//! Who may answer a call, what a session may cost, and per-execution credentials: the edge's
//! rules against a renderer that answers what it was never asked, sends too much, opens too
//! many sessions or forges its credential. Every refusal records nothing.

use crate::edge::{World, grain_b_request, reply, world, world_for};
use crate::support::*;
use loom_kernel::{EventStoreExt, ExecutionId, StartOptions};
use loom_plugin_a2ui::{
    AgentMessage, Binding, CALL_FUNCTION_EFFECT, CREDENTIAL, Connection, CredentialKey,
    IngestError, Limits, OpenError, ProtocolVersion, Received, Refused, RendererSession,
    SignedCredentials, TooMany, unix_now,
};
use serde_json::json;

fn unknown_call(refused: &Result<Received, Refused>) -> bool {
    matches!(
        refused,
        Err(Refused::Ingest(IngestError::UnknownCallId { .. }))
    )
}

fn as_user(user: &str, execution: &str) -> Connection {
    Connection {
        execution: execution.into(),
        surface_id: SURFACE.into(),
        credentials: [("user".to_owned(), user.to_owned())].into(),
        ..Connection::default()
    }
}

#[tokio::test]
async fn a_grain_b_reply_is_taken_only_from_the_session_the_call_was_sent_to() {
    let w = world(Limits::default());
    let e = w.start_confirm("ask").await;
    let mut sent_to = w.open("alice", "ask").await.unwrap();
    let call_id = grain_b_request(&mut sent_to).await.function_call_id;
    // Another session of the same caller and binding, never sent the call.
    let mut bystander = w.open("alice", "ask").await.unwrap();
    let before = w.log_len(&e).await;
    for forged in [
        reply(&call_id, json!(false)),
        json!({"version": "v1.0", "error": {"code": "X", "message": "no", "functionCallId": call_id}})
            .to_string()
            .into_bytes(),
    ] {
        let refused = bystander.receive(&w.runtime, &forged).await;
        assert!(unknown_call(&refused), "{refused:?}");
    }
    assert_eq!(w.log_len(&e).await, before, "nothing recorded");
    assert_eq!(w.edge.calls_in_flight(), 1, "the call still waits");
    let taken = sent_to
        .receive(&w.runtime, &reply(&call_id, json!(true)))
        .await
        .unwrap();
    assert!(matches!(taken, Received::StepReply { .. }));
    let state = w.runtime.wait(&e).await.unwrap();
    assert_eq!(state.status(), loom_kernel::ExecutionStatus::Completed);
}

#[tokio::test]
async fn a_grain_a_reply_is_refused_from_a_session_that_does_not_answer_the_function() {
    let w = world(Limits::default());
    let e = w.start("checkout", "order-a").await;
    let call_id = format!("{e}:getLocale#1");
    let mut other = w
        .edge
        .open(
            &w.runtime,
            &Connection {
                answers: Some(vec!["confirm".into()]),
                ..as_user("alice", "order-a")
            },
        )
        .await
        .unwrap();
    let before = w.log_len(&e).await;
    let refused = other
        .receive(&w.runtime, &reply(&call_id, json!("fr-CH")))
        .await;
    assert!(unknown_call(&refused), "{refused:?}");
    assert_eq!(w.log_len(&e).await, before);
    let mut answers = w.open("alice", "order-a").await.unwrap();
    let taken = answers
        .receive(&w.runtime, &reply(&call_id, json!("fr-CH")))
        .await
        .unwrap();
    assert!(matches!(taken, Received::FunctionReply { .. }), "{taken:?}");
}

#[tokio::test]
async fn a_v0_9_session_answers_no_call_and_every_frame_it_sends_meets_the_v0_9_schema() {
    let w = world(Limits::default());
    let e = w.start("checkout", "order-a").await;
    let mut lit = w
        .edge
        .open_versioned(
            &w.runtime,
            &as_user("alice", "order-a"),
            ProtocolVersion::V0_9,
        )
        .await
        .unwrap();
    let before = w.log_len(&e).await;
    // An error naming getLocale's call and no surface (it once resumed the gate and failed
    // the flow), and one without its message: both refused by the v0.9 schema.
    for frame in [
        json!({"version": "v0.9", "error": {"code": "BOOM", "message": "no", "functionCallId": format!("{e}:getLocale#1")}}),
        json!({"version": "v0.9", "error": {"code": "BOOM", "surfaceId": SURFACE}}),
    ] {
        let refused = lit.receive(&w.runtime, frame.to_string().as_bytes()).await;
        assert!(
            matches!(&refused, Err(Refused::WireV0_9(error)) if error.to_string().contains("v0.9 schema")),
            "{refused:?}"
        );
    }
    assert_eq!(w.log_len(&e).await, before, "nothing recorded");
    assert_eq!(
        w.runtime.state(&e).await.unwrap().status(),
        loom_kernel::ExecutionStatus::Suspended
    );
}

#[tokio::test]
async fn replies_and_actions_over_their_bound_are_refused_before_they_are_recorded() {
    let w = world(Limits {
        max_reply_bytes: 1024,
        ..Limits::default()
    });
    let e = w.start("checkout", "order-a").await;
    let call_id = format!("{e}:getLocale#1");
    let mut session = w.open("alice", "order-a").await.unwrap();
    let before = w.log_len(&e).await;
    // getLocale declares 256 bytes; the edge allows 1 KiB for anything.
    for (value, limit) in [("x".repeat(300), 256), ("x".repeat(2000), 1024)] {
        let refused = session
            .receive(&w.runtime, &reply(&call_id, json!(value)))
            .await;
        assert!(
            matches!(&refused, Err(Refused::TooLarge { limit: l, .. }) if *l == limit),
            "{refused:?}"
        );
        assert_eq!(refused.unwrap_err().close_code(), None, "the session stays");
    }
    let big_action = json!({"version": "v1.0", "action": {"name": "approve", "surfaceId": SURFACE, "sourceComponentId": "approve", "timestamp": "2026-12-01T00:00:00Z", "context": {"pad": "y".repeat(2000)}}});
    let refused = session
        .receive(&w.runtime, big_action.to_string().as_bytes())
        .await;
    assert!(
        matches!(refused, Err(Refused::TooLarge { .. })),
        "{refused:?}"
    );
    assert_eq!(w.log_len(&e).await, before);
    session
        .receive(&w.runtime, &reply(&call_id, json!("fr-CH")))
        .await
        .unwrap();
}

#[tokio::test]
async fn sessions_past_a_limit_per_caller_per_peer_or_in_all_are_refused_with_1013() {
    let w = world(Limits {
        max_sessions: 5,
        max_sessions_per_caller: 3,
        max_sessions_per_peer: 4,
        ..Limits::default()
    });
    w.start("checkout", "order-a").await;
    w.start("checkout", "order-b").await;
    let from = |user: &str, execution: &str, peer: &str| Connection {
        peer: Some(peer.parse().unwrap()),
        ..as_user(user, execution)
    };
    let open = |connection: Connection| {
        let w: &World = &w;
        async move { w.edge.open(&w.runtime, &connection).await }
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(open(from("alice", "order-a", "10.0.0.1")).await.unwrap());
    }
    let too_many = open(from("alice", "order-a", "10.0.0.2"))
        .await
        .unwrap_err();
    assert!(
        matches!(too_many, OpenError::TooMany(TooMany::Caller { limit: 3 })),
        "{too_many}"
    );
    assert_eq!(too_many.close_code(), 1013);
    held.push(open(from("bob", "order-b", "10.0.0.1")).await.unwrap());
    let peer = open(from("bob", "order-b", "10.0.0.1")).await.unwrap_err();
    assert!(
        matches!(peer, OpenError::TooMany(TooMany::Peer { limit: 4 })),
        "{peer}"
    );
    held.push(open(from("bob", "order-b", "10.0.0.3")).await.unwrap());
    let total = open(from("bob", "order-b", "10.0.0.4")).await.unwrap_err();
    assert!(
        matches!(total, OpenError::TooMany(TooMany::Total { limit: 5 })),
        "{total}"
    );
    assert_eq!(w.edge.session_count(), 5, "nothing kept for a refusal");
    // A closed session frees its place.
    held.pop();
    open(from("bob", "order-b", "10.0.0.4")).await.unwrap();
}

#[tokio::test]
async fn a_credential_opens_its_own_execution_only_until_it_expires_and_not_once_altered() {
    let key = CredentialKey::new(&[7; 32]).unwrap();
    let w = world_for(
        Limits::default(),
        hub(),
        SignedCredentials::new(key.clone()),
    );
    let (runtime, edge) = (&w.runtime, &w.edge);
    for execution in ["order-a", "order-b"] {
        let e = ExecutionId::new(execution).unwrap();
        runtime
            .start(
                "checkout",
                &order(),
                StartOptions::new(e.clone()).grant(CALL_FUNCTION_EFFECT),
            )
            .await
            .unwrap();
        let _ = runtime.wait(&e).await;
    }
    let binding = |execution: &str| Binding::new(ExecutionId::new(execution).unwrap(), SURFACE);
    let later = unix_now() + 3600;
    let with = |execution: &str, credential: String| Connection {
        execution: execution.into(),
        surface_id: SURFACE.into(),
        credentials: [(CREDENTIAL.to_owned(), credential)].into(),
        ..Connection::default()
    };
    let good = key.mint(&binding("order-a"), later);
    let session = edge
        .open(runtime, &with("order-a", good.clone()))
        .await
        .unwrap();
    assert_eq!(session.caller().to_string(), "renderer:order-a/checkout");
    drop(session);

    let other_key = CredentialKey::new(&[8; 32]).unwrap();
    let refusals = [
        // order-a's credential, presented for order-b.
        (with("order-b", good.clone()), "may not use"),
        (
            with("order-a", key.mint(&binding("order-a"), unix_now() - 1)),
            "expired",
        ),
        (
            with(
                "order-a",
                good.replacen(&later.to_string(), &(later + 1).to_string(), 1),
            ),
            "not issued",
        ),
        (
            with("order-a", other_key.mint(&binding("order-a"), later)),
            "not issued",
        ),
        (with("order-a", "garbage".into()), "malformed"),
        (
            Connection {
                credentials: Default::default(),
                ..with("order-a", String::new())
            },
            "no renderer credential",
        ),
    ];
    for (connection, says) in refusals {
        let error = edge.open(runtime, &connection).await.unwrap_err();
        assert_eq!(error.close_code(), 1008);
        assert!(error.to_string().contains(says), "{error}");
    }
    assert_eq!(edge.session_count(), 0);
    let a = ExecutionId::new("order-a").unwrap();
    assert!(runtime.store().read_all(&a).await.is_ok());
}

/// What a renderer does in the model-based test of who may answer a grain-B call.
#[derive(Debug, Clone)]
enum Step {
    /// Opens a session on the call's binding.
    Open,
    /// Closes the `n`th live session (modulo how many are live).
    Close(usize),
    /// The `n`th live session answers the call.
    Reply(usize),
}

/// Model-based: random renderers open, close and answer one grain-B call. The reference model
/// says the call is sent to the oldest live session (again to the next oldest when that one
/// closes) and that only the session it was last sent to may answer it, once. Every reply's
/// outcome, and the session each request lands on, must match the model.
#[test]
fn only_the_session_a_grain_b_call_was_last_sent_to_answers_it_under_any_interleaving() {
    use futures::FutureExt;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let steps = prop::collection::vec(
        prop_oneof![
            2 => Just(Step::Open),
            1 => (0..4usize).prop_map(Step::Close),
            2 => (0..4usize).prop_map(Step::Reply),
        ],
        1..24,
    );
    let mut runner = TestRunner::new(Config::with_cases(256));
    runner
        .run(&steps, |steps| {
            let tokio = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap();
            tokio.block_on(async {
                let w = world(Limits::default());
                let e = w.start_confirm("ask").await;
                let call_id = format!("{e}:a2ui.callFunction#1");
                // Live sessions, oldest first, with their ids.
                let mut live: Vec<RendererSession> = Vec::new();
                // The model: the call is in flight until answered; `sent_to` is where it
                // was last written.
                let mut in_flight = true;
                let mut sent_to: Option<u64> = None;
                let settle = || async {
                    for _ in 0..20 {
                        tokio::task::yield_now().await;
                    }
                };
                for step in steps {
                    match step {
                        Step::Open => live.push(w.open("alice", "ask").await.unwrap()),
                        Step::Close(n) if !live.is_empty() => {
                            let at = n % live.len();
                            let closed = live.remove(at);
                            if sent_to == Some(closed.id()) {
                                sent_to = None;
                            }
                        }
                        Step::Reply(n) if !live.is_empty() => {
                            let at = n % live.len();
                            let session = &mut live[at];
                            let id = session.id();
                            let outcome = session
                                .receive(&w.runtime, &reply(&call_id, json!(true)))
                                .await;
                            let expected = in_flight && sent_to == Some(id);
                            prop_assert_eq!(
                                outcome.is_ok(),
                                expected,
                                "session {} answered: {:?} (sent to {:?}, in flight {})",
                                id,
                                outcome,
                                sent_to,
                                in_flight
                            );
                            if expected {
                                in_flight = false;
                            } else {
                                prop_assert!(unknown_call(&outcome), "{:?}", outcome);
                            }
                        }
                        Step::Close(_) | Step::Reply(_) => {}
                    }
                    // Renderers read what they are sent at once.
                    settle().await;
                    let oldest = live.first().map(RendererSession::id);
                    for session in &mut live {
                        while let Some(Some(out)) = session.next().now_or_never() {
                            if matches!(out.message, AgentMessage::CallRendererFunction(_)) {
                                prop_assert!(in_flight, "a request after the answer");
                                // The oldest live session gets it.
                                prop_assert_eq!(Some(session.id()), oldest);
                                sent_to = Some(session.id());
                            }
                            out.written();
                        }
                    }
                    settle().await;
                }
                let status = w.runtime.state(&e).await.unwrap().status();
                prop_assert_eq!(
                    status == loom_kernel::ExecutionStatus::Completed,
                    !in_flight,
                    "status {:?}",
                    status
                );
                Ok(())
            })
        })
        .unwrap();
}
