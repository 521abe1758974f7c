//! A server that runs flows and mounts the admin API and the web console, to try the console
//! on: `cargo run -p loom-console --example console_demo`, then open the printed address, or
//! run `loom --admin URL --token TOKEN in-doubt`.
//!
//! It runs the quickstart's flows (two checkouts wait for approval) and a `transfer` flow whose
//! bank never answers, so its step is in doubt until an operator gives a verdict, and a `review`
//! flow whose gate declares the payload it expects (LD-031), which the console's Resume... form
//! is made from. Card numbers (`card.number`) are classified: the console shows them masked.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use loom_console::{AdminConfig, admin_router, bind_loopback, random_token};
use loom_kernel::DataClassification;
use loom_kernel::{DiskStore, ErrorInfo, ExecutionId};
use loom_kernel::{EffectOutcome, FlowCtx, FlowError, FnEffect, Runtime, StartOptions, flow_fn};
use serde_json::{Value, json};

#[derive(Debug, Parser)]
struct Args {
    /// The store file (created if missing).
    #[arg(long, default_value = "target/console-demo/loom.redb")]
    store: PathBuf,
    /// The loopback port of the admin API.
    #[arg(long, default_value_t = 7171)]
    port: u16,
}

async fn transfer(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let receipt: Value = ctx.call("bank.transfer", &input).await?;
    Ok(json!({"receipt": receipt}))
}

/// Waits for a reviewer: `{"approve": true}`, or `{"approve": false, "why": ...}`.
async fn review(ctx: FlowCtx, document: Value) -> Result<Value, FlowError> {
    let expects = json!({
        "title": "A review",
        "type": "object",
        "properties": {
            "approve": {"type": "boolean"},
            "why": {"type": "string", "description": "why not, when not approved"},
            "reviewer": {"type": "string", "minLength": 2},
        },
        "required": ["approve", "reviewer"],
    });
    let key = format!("review:{}", document["id"].as_str().unwrap_or("?"));
    let answer = ctx.suspend_expecting("Review", &key, &expects).await?;
    Ok(json!({"document": document, "review": answer.to_value()}))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    // What the runtime and the store say (RUST_LOG chooses how much; `info` by default).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Some(dir) = args.store.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let store = DiskStore::open(&args.store).context("opening the store")?;
    let classification = DataClassification::mask_paths(["card.number"])?;
    let runtime = quickstart::compose(Runtime::builder(store))
        .flow(flow_fn("transfer", 1, transfer))
        .flow(flow_fn("review", 1, review))
        .effect(
            "bank.transfer",
            FnEffect::new(false, |_call| async {
                EffectOutcome::in_doubt(ErrorInfo::new(
                    "bank.timeout",
                    "the bank did not answer within 30 s",
                ))
            }),
        )
        .classification(classification.clone())
        .build()?;
    runtime.recover().await?;
    for n in 1..=2 {
        let id = ExecutionId::new(format!("checkout-{n}"))?;
        let order = quickstart::Order {
            sku: format!("SKU-{n}"),
            qty: n,
        };
        runtime
            .start("checkout", &order, quickstart::start_options(&id))
            .await?;
        let id = ExecutionId::new(format!("transfer-{n}"))?;
        let input =
            json!({"amount": 100 * n, "card": {"number": "4111111111111111", "holder": "Ada"}});
        runtime
            .start(
                "transfer",
                &input,
                StartOptions::new(id).grant("bank.transfer"),
            )
            .await?;
    }
    let review = ExecutionId::new("review-1")?;
    runtime
        .start(
            "review",
            &json!({"id": "doc-1", "title": "Refund policy"}),
            StartOptions::new(review),
        )
        .await?;
    let greet = ExecutionId::new("greet-1")?;
    runtime
        .start("greet", "ada", quickstart::start_options(&greet))
        .await?;

    let token = match std::env::var("LOOM_ADMIN_TOKEN") {
        Ok(token) if !token.is_empty() => token,
        _ => random_token()?,
    };
    let config = AdminConfig::new(token.clone())?.classification(classification);
    let app = admin_router(runtime.clone(), config);
    let listener = bind_loopback(args.port).await?;
    let url = format!("http://{}", listener.local_addr()?);
    println!("admin API:   {url}");
    println!("web console: {url}/admin/#token={token}");
    println!("CLI:         loom --admin {url} --token {token} in-doubt");
    axum::serve(listener, app).await?;
    Ok(())
}
