//! What the console's tests share: a flow that parks on a step in doubt and then on a gate, a
//! runtime over a disk store in a temp dir, an admin server on loopback, and the `loom` binary.

#![allow(dead_code)]

pub mod cdp;
pub mod chromium;
pub mod fill;
pub mod prometheus;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use loom_console::{AdminConfig, admin_router, bind_loopback};
use loom_kernel::DataClassification;
use loom_kernel::{DiskStore, ErrorInfo, ExecutionId, ExecutionStatus};
use loom_kernel::{EffectOutcome, FlowCtx, FlowError, FnEffect, Runtime, StartOptions, flow_fn};
use serde_json::{Value, json};

/// The admin token of the test servers.
pub const TOKEN: &str = "test-token-0123456789abcdef";

/// The card number the `order` flow's input carries: classified (`card.number`), it must
/// never be printed.
pub const CARD: &str = "4111111111111111";

/// `order` v1: charges (a non-idempotent effect whose receiver never answers, so the step is
/// in doubt), then waits for `approval` with the execution id as key, then returns both.
/// `hello` v1: returns at once.
pub fn compose(store: DiskStore) -> Runtime<DiskStore> {
    Runtime::builder(store)
        .flow(flow_fn("order", 1, order))
        .flow(flow_fn("hello", 1, |_ctx: FlowCtx, name: String| async move {
            Ok::<_, FlowError>(format!("hello, {name}"))
        }))
        .flow(
            flow_fn("greet", 1, |_ctx: FlowCtx, input: Value| async move {
                Ok::<_, FlowError>(format!("hello, {}", input["name"]))
            })
            .with_input_schema(greet_schema()),
        )
        .flow(flow_fn("locale", 1, locale))
        .flow(flow_fn("locale_unchecked", 1, locale_unchecked))
        .flow(flow_fn("locale_broken_schema", 1, locale_broken_schema))
        .effect(
            "charge",
            FnEffect::new(false, |_call| async {
                EffectOutcome::in_doubt(ErrorInfo::new(
                    "test.no_answer",
                    "the payment provider did not answer",
                ))
            }),
        )
        .classification(classification())
        .build()
        .expect("the test runtime composes")
}

/// What the `greet` flow declares its input must be: `{"name": <a non-empty string>}`.
pub fn greet_schema() -> Value {
    json!({"type": "object", "required": ["name"],
           "properties": {"name": {"type": "string", "minLength": 1}}})
}

async fn order(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let charged: Value = ctx.call("charge", &input).await?;
    let key = ctx.execution_id().to_string();
    let approval = ctx.suspend("approval", &key).await?;
    Ok(json!({"charged": charged, "approval": approval.to_value()}))
}

/// The gate type and key of the `locale` flows: what an A2UI function call's gate uses.
pub const LOCALE_GATE: &str = "A2UIFunctionResult";

/// The key of `execution`'s locale gate.
pub fn locale_key(execution: &str) -> String {
    format!("{execution}:getLocale#1")
}

/// What the `locale` flow's gate expects, as an A2UI function-result gate declares it:
/// `{"value": <a string of 2 or more>}` or `{"error": {"code", "message"}}`.
pub fn locale_schema() -> Value {
    json!({
        "title": "The result of A2UI function `getLocale`",
        "oneOf": [
            {"type": "object", "required": ["value"],
             "properties": {"value": {"type": "string", "minLength": 2}}},
            {"type": "object", "required": ["error"],
             "properties": {"error": {"type": "object", "required": ["code", "message"],
               "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}}
        ]
    })
}

/// `locale` v1: waits for a function result that declares its shape, and fails for good
/// on a payload with neither `value` nor `error` (what an unchecked resume could do).
async fn locale(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let key = locale_key(ctx.execution_id().as_str());
    let answer = ctx
        .suspend_expecting(LOCALE_GATE, &key, &locale_schema())
        .await?
        .to_value();
    answered(answer)
}

/// `locale_unchecked` v1: the same gate opened by code that declares nothing (a log recorded
/// before gates could).
async fn locale_unchecked(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let key = locale_key(ctx.execution_id().as_str());
    answered(ctx.suspend(LOCALE_GATE, &key).await?.to_value())
}

/// `locale_broken_schema` v1: the gate declares a schema no validator compiles (`type` 12).
async fn locale_broken_schema(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let key = locale_key(ctx.execution_id().as_str());
    let schema = json!({"type": 12});
    answered(
        ctx.suspend_expecting(LOCALE_GATE, &key, &schema)
            .await?
            .to_value(),
    )
}

fn answered(answer: Value) -> Result<Value, FlowError> {
    match (answer.get("value"), answer.get("error")) {
        (Some(value), _) => Ok(json!({"locale": value})),
        (None, Some(error)) => Err(FlowError::new("a2ui.function_error", error.to_string())),
        (None, None) => Err(FlowError::new(
            "a2ui.call",
            "the resume is not a function result: neither `value` nor `error`",
        )),
    }
}

/// Starts `flow` (`locale` or `locale_unchecked`) as `name` and waits until it parks.
pub async fn start_locale(runtime: &Runtime<DiskStore>, flow: &str, name: &str) -> ExecutionId {
    let execution = id(name);
    runtime
        .start(flow, &json!({}), StartOptions::new(execution.clone()))
        .await
        .expect("locale starts");
    let state = runtime.wait(&execution).await.expect("locale parks");
    assert_eq!(state.status(), ExecutionStatus::Suspended);
    execution
}

pub fn classification() -> DataClassification {
    DataClassification::mask_paths(["card.number"]).expect("the path parses")
}

pub fn id(text: &str) -> ExecutionId {
    ExecutionId::new(text).expect("a valid id")
}

/// Starts `order` as `name` and waits until it parks on its step in doubt.
pub async fn start_order(runtime: &Runtime<DiskStore>, name: &str) -> ExecutionId {
    let execution = id(name);
    let input = json!({"sku": "A1", "card": {"number": CARD, "holder": "Ada"}});
    runtime
        .start(
            "order",
            &input,
            StartOptions::new(execution.clone()).grant("charge"),
        )
        .await
        .expect("order starts");
    let state = runtime.wait(&execution).await.expect("order parks");
    assert_eq!(state.status(), ExecutionStatus::InDoubt);
    execution
}

/// Starts `hello` as `name` and waits until it completes.
pub async fn start_hello(runtime: &Runtime<DiskStore>, name: &str) -> ExecutionId {
    let execution = id(name);
    runtime
        .start("hello", "ada", StartOptions::new(execution.clone()))
        .await
        .expect("hello starts");
    let state = runtime.wait(&execution).await.expect("hello ends");
    assert_eq!(state.status(), ExecutionStatus::Completed);
    execution
}

/// A store file in `dir` holding `order-1` (in doubt), `order-2` (in doubt) and `hello-1`
/// (completed), closed again so that `loom --store` may open it.
pub async fn seeded_store(dir: &Path) -> PathBuf {
    let path = dir.join("loom.redb");
    let runtime = compose(DiskStore::open(&path).expect("the store opens"));
    start_order(&runtime, "order-1").await;
    start_order(&runtime, "order-2").await;
    start_hello(&runtime, "hello-1").await;
    drop(runtime);
    path
}

/// A store file seeded as by [`seeded_store`], in a temp dir that lives as long as this, and
/// `loom --store` on it.
pub struct Seeded {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Seeded {
    pub async fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = seeded_store(dir.path()).await;
        Self { dir, path }
    }

    /// The store file's path, as `--store` takes it.
    pub fn store(&self) -> &str {
        self.path.to_str().expect("a UTF-8 path")
    }

    /// Runs `loom --store <this store>` with `args`.
    pub fn loom(&self, args: &[&str]) -> Output {
        let mut all = vec!["--store", self.store()];
        all.extend_from_slice(args);
        loom(&all)
    }
}

/// A running admin server over a runtime on a fresh store.
pub struct Server {
    pub runtime: Runtime<DiskStore>,
    pub url: String,
    pub path: PathBuf,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn server() -> Server {
    server_with(false).await
}

/// A server whose admin API exports whole logs (`AdminConfig::log_export`).
pub async fn exporting_server() -> Server {
    server_with(true).await
}

async fn server_with(log_export: bool) -> Server {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("loom.redb");
    let runtime = compose(DiskStore::open(&path).expect("the store opens"));
    let config = AdminConfig::new(TOKEN)
        .expect("the token is long enough")
        .classification(classification())
        .log_export(log_export);
    let router = admin_router(runtime.clone(), config);
    let listener = bind_loopback(0).await.expect("a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .await
            .expect("the server runs");
    });
    Server {
        runtime,
        url,
        path,
        _dir: dir,
        task,
    }
}

/// Runs `loom` with `args`, with no LOOM_* variable from the environment.
pub fn loom(args: &[&str]) -> Output {
    loom_command(args).output().expect("loom runs")
}

pub fn loom_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_loom"));
    command.args(args);
    for name in [
        "LOOM_STORE",
        "LOOM_ADMIN_URL",
        "LOOM_ADMIN_TOKEN",
        "LOOM_MASK_FILE",
        "LOOM_OPERATOR",
    ] {
        command.env_remove(name);
    }
    command
}

/// Runs `loom` off the async runtime's threads (it may call the test's own server).
pub async fn loom_async(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        loom(&args)
    })
    .await
    .expect("loom ran")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

pub fn json_out(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "stdout is not JSON ({error}): {}\nstderr: {}",
            stdout(output),
            stderr(output)
        )
    })
}
