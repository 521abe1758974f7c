//! `loom show` prints what a pending gate asks for (LD-018), masked like every payload.

use crate::support::*;
use loom_kernel::DiskStore;
use loom_kernel::*;
use serde_json::{Value, json};

async fn ask(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let request = json!({"card": {"number": input["card"]["number"]}, "sum": 12});
    Ok(ctx
        .suspend_with_request("Approval", "ask-1", &request)
        .await?
        .to_value())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_prints_the_request_of_a_pending_gate_masked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    {
        let runtime = Runtime::builder(DiskStore::open(&path).unwrap())
            .flow(flow_fn("ask", 1, ask))
            .build()
            .unwrap();
        let e = id("ask-1");
        runtime
            .start(
                "ask",
                &json!({"card": {"number": CARD}}),
                StartOptions::new(e.clone()),
            )
            .await
            .unwrap();
        runtime.wait(&e).await.unwrap();
        runtime.shutdown().await;
    }
    let file = path.to_str().unwrap();
    let shown = loom_async(&["--store", file, "--mask", "card.number", "show", "ask-1"]).await;
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    let text = stdout(&shown);
    assert!(
        text.contains("Approval#1 asks: {\"card\":{\"number\":\"***\"},\"sum\":12}"),
        "{text}"
    );
    assert!(!text.contains(CARD), "{text}");

    let json = loom_async(&[
        "--store",
        file,
        "--mask",
        "card.number",
        "--json",
        "show",
        "ask-1",
    ])
    .await;
    let answer = json_out(&json);
    assert_eq!(
        answer["state"]["pendingGates"][0]["request"],
        json!({"card": {"number": "***"}, "sum": 12})
    );
    assert!(!stdout(&json).contains(CARD));
}
