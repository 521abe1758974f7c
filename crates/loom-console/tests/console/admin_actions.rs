//! Starting executions and cancelling by filter through the admin API and `loom --admin`:
//! the flows listed with their input schemas, a start checked against its flow's schema (an
//! unknown flow, a wrong input, a malformed body: refused, nothing started), and a cancel by
//! filter that counts first, refuses a filter that names nothing, a limit out of range and a
//! count that is no longer true, and cancels what it matched.

use loom_console::{AdminClient, CancelManyRequest, ErrorKind};
use loom_kernel::{EventStore, ExecutionStatus};
use serde_json::json;

use crate::support::*;

fn client(server: &Server) -> AdminClient {
    AdminClient::new(&server.url, TOKEN).unwrap()
}

async fn as_admin(url: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["--admin", url, "--token", TOKEN];
    all.extend_from_slice(args);
    loom_async(&all).await
}

async fn executions(server: &Server) -> usize {
    server
        .runtime
        .store()
        .list_executions(None, 1000)
        .await
        .unwrap()
        .executions
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_are_listed_and_a_start_is_checked_against_its_flow_s_input_schema() {
    let server = server().await;
    let client = client(&server);

    let flows = client.flows().await.unwrap();
    let greet = flows.iter().find(|flow| flow.name == "greet").unwrap();
    assert_eq!(greet.input_schema, Some(greet_schema()));
    assert_eq!(greet.example, Some(json!({"name": "text"})));
    assert!(
        flows
            .iter()
            .any(|flow| flow.name == "order" && flow.input_schema.is_none())
    );

    let started = client
        .start("greet", &json!({"name": "ada"}), Some("greet-1"))
        .await
        .unwrap();
    assert_eq!(started.execution, "greet-1");
    let state = server.runtime.wait(&id("greet-1")).await.unwrap();
    assert_eq!(state.output().unwrap().to_value(), json!("hello, \"ada\""));

    // An id made up by the server.
    let made_up = client.start("hello", &json!("bob"), None).await.unwrap();
    assert!(made_up.execution.starts_with("hello-"), "{made_up:?}");
    let before = executions(&server).await;

    // Hostile or mistaken starts: refused, nothing started.
    let unknown = client.start("gret", &json!({}), None).await.unwrap_err();
    assert_eq!(unknown.kind, ErrorKind::BadRequest);
    assert!(
        unknown.message.contains("no flow named 'gret'"),
        "{unknown}"
    );
    assert!(unknown.message.contains("greet"), "{unknown}");

    let wrong = client
        .start("greet", &json!({"name": 7}), None)
        .await
        .unwrap_err();
    assert_eq!(wrong.kind, ErrorKind::BadRequest);
    assert_eq!(wrong.violations.len(), 1, "{wrong:?}");
    assert_eq!(wrong.violations[0].field, "/name");
    assert_eq!(
        wrong.violations[0].expected,
        "a string of at least 1 character"
    );
    let missing = client.start("greet", &json!({}), None).await.unwrap_err();
    assert_eq!(missing.violations[0].field, "/name");
    assert_eq!(missing.violations[0].problem, "missing");
    assert!(missing.message.contains("nothing was started"), "{missing}");

    let bad_id = client
        .start("greet", &json!({"name": "x"}), Some(""))
        .await
        .unwrap_err();
    assert_eq!(bad_id.kind, ErrorKind::BadRequest);

    // The same id with another input: the runtime's conflict, 409.
    let conflict = client
        .start("greet", &json!({"name": "eve"}), Some("greet-1"))
        .await
        .unwrap_err();
    assert_eq!(conflict.kind, ErrorKind::Refused, "{conflict}");

    for body in [
        "{",
        r#"{"input": {}}"#,
        r#"{"flow": "greet", "inptu": {}}"#,
        r#"{"flow": "greet", "version": -1}"#,
    ] {
        let error = client
            .request(
                "POST",
                "/admin/v1/executions",
                Some(body.as_bytes().to_vec()),
                std::time::Duration::ZERO,
            )
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::BadRequest, "{body}: {error}");
    }
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let error = client
        .request(
            "POST",
            "/admin/v1/executions",
            Some(format!(r#"{{"flow": "hello", "input": {deep}}}"#).into_bytes()),
            std::time::Duration::ZERO,
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::BadRequest, "{error}");
    assert_eq!(
        executions(&server).await,
        before,
        "a refused start started nothing"
    );

    // Without the token: 401, nothing started.
    let stranger = AdminClient::new(&server.url, "wrong-token-0123456789abcdef").unwrap();
    let refused = stranger
        .start("hello", &json!("x"), None)
        .await
        .unwrap_err();
    assert_eq!(refused.kind, ErrorKind::Unauthorized);
    assert_eq!(
        stranger.flows().await.unwrap_err().kind,
        ErrorKind::Unauthorized
    );
    assert_eq!(executions(&server).await, before);

    // The command line: a start, a wrong input (exit 2), and no --admin (exit 1).
    let out = as_admin(
        &server.url,
        &[
            "start",
            "greet",
            "--input",
            r#"{"name": "cli"}"#,
            "--id",
            "greet-cli",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("started execution greet-cli (greet v1)"));
    let out = as_admin(
        &server.url,
        &["start", "greet", "--input", r#"{"name": ""}"#],
    )
    .await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("at /name"), "{}", stderr(&out));
    let out = as_admin(&server.url, &["start"]).await;
    assert_eq!(code(&out), 2, "a usage error: {}", stderr(&out));
    let out = loom_async(&["--store", "x.redb", "start", "greet"]).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("--admin"), "{}", stderr(&out));
    let out = as_admin(&server.url, &["flows"]).await;
    assert!(
        stdout(&out)
            .contains("greet v1  input: an object with name (a string of at least 1 character)"),
        "{}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_by_filter_counts_first_refuses_what_would_cancel_everything_and_cancels_what_it_matched()
 {
    let server = server().await;
    let client = client(&server);
    for name in ["order-1", "order-2", "order-3"] {
        start_order(&server.runtime, name).await;
    }
    start_locale(&server.runtime, "locale", "checkout-1").await;
    start_hello(&server.runtime, "hello-1").await;

    // Hostile or mistaken requests: refused, nothing cancelled.
    let everything = client
        .cancel_many(&CancelManyRequest::default())
        .await
        .unwrap_err();
    assert_eq!(everything.kind, ErrorKind::BadRequest);
    assert!(everything.message.contains("\"all\": true"), "{everything}");
    for request in [
        CancelManyRequest {
            status: Some("in-doubt".into()),
            all: true,
            ..CancelManyRequest::default()
        },
        CancelManyRequest {
            status: Some("completed".into()),
            ..CancelManyRequest::default()
        },
        CancelManyRequest {
            status: Some("stuck".into()),
            ..CancelManyRequest::default()
        },
        CancelManyRequest {
            status: Some("in-doubt".into()),
            limit: Some(0),
            ..CancelManyRequest::default()
        },
        CancelManyRequest {
            status: Some("in-doubt".into()),
            limit: Some(10_001),
            ..CancelManyRequest::default()
        },
        CancelManyRequest {
            flow: Some("   ".into()),
            ..CancelManyRequest::default()
        },
    ] {
        let error = client.cancel_many(&request).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::BadRequest, "{request:?}: {error}");
    }
    let unknown_field = client
        .request(
            "POST",
            "/admin/v1/cancel-many",
            Some(br#"{"stauts": "in-doubt"}"#.to_vec()),
            std::time::Duration::ZERO,
        )
        .await
        .unwrap_err();
    assert_eq!(unknown_field.kind, ErrorKind::BadRequest);

    // Count first: three in doubt, nothing cancelled.
    let in_doubt = CancelManyRequest {
        status: Some("in-doubt".into()),
        flow: Some("order".into()),
        dry_run: true,
        ..CancelManyRequest::default()
    };
    let counted = client.cancel_many(&in_doubt).await.unwrap();
    assert_eq!(counted.matched, 3);
    assert!(!counted.more);
    assert!(counted.cancelled.is_empty());
    assert_eq!(
        server.runtime.state(&id("order-1")).await.unwrap().status(),
        ExecutionStatus::InDoubt
    );
    let limited = client
        .cancel_many(&CancelManyRequest {
            limit: Some(2),
            ..in_doubt.clone()
        })
        .await
        .unwrap();
    assert_eq!((limited.matched, limited.more), (2, true));

    // A count confirmed that is no longer true: nothing cancelled.
    let stale = client
        .cancel_many(&CancelManyRequest {
            dry_run: false,
            expect: Some(2),
            ..in_doubt.clone()
        })
        .await
        .unwrap_err();
    assert_eq!(stale.kind, ErrorKind::Refused);
    assert!(stale.message.contains("matches 3"), "{stale}");

    // The command line's dry run, then the cancel itself.
    let out = as_admin(
        &server.url,
        &["cancel-many", "--status", "in-doubt", "--dry-run"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("3 executions would be cancelled; nothing was cancelled"),
        "{}",
        stdout(&out)
    );
    let out = as_admin(&server.url, &["cancel-many"]).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let out = as_admin(
        &server.url,
        &[
            "cancel-many",
            "--status",
            "in-doubt",
            "--reason",
            "batch test",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("cancelled 3 executions (0 skipped)"),
        "{}",
        stdout(&out)
    );
    for name in ["order-1", "order-2", "order-3"] {
        assert_eq!(
            server.runtime.state(&id(name)).await.unwrap().status(),
            ExecutionStatus::Cancelled
        );
    }
    assert_eq!(
        server
            .runtime
            .state(&id("checkout-1"))
            .await
            .unwrap()
            .status(),
        ExecutionStatus::Suspended,
        "another status is left alone"
    );

    // Everything left, said explicitly: the suspended one; the completed one stays.
    let all = client
        .cancel_many(&CancelManyRequest {
            all: true,
            ..CancelManyRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(all.cancelled, ["checkout-1"]);
    assert_eq!(
        server.runtime.state(&id("hello-1")).await.unwrap().status(),
        ExecutionStatus::Completed
    );
}
