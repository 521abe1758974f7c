//! The interop check against the reference renderer (`cargo xtask interop` runs it).
//!
//! Drives `a2ui-core` 0.4.0's `MessageProcessor` (STRICT) in a Python child process with
//! message streams the plugin produced from real flows: every message must be accepted, the
//! renderer's data model must equal the bridge's masked fold, and the renderer's function
//! responses and actions must parse back and resume the right gates. One more stream comes
//! from 1,000 random surface ops (proptest-generated) and is checked from a file.
//!
//! `cargo run -p loom-plugin-a2ui --example interop -- PYTHON RENDERER_PY OUT_DIR`

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::BoxFuture;
use loom_agent_surface::{SurfaceExt, SurfaceOp, SurfacePath};
use loom_effect_runtime::EffectRegistry;
use loom_kernel::DataClassification;
use loom_kernel::MemoryStore;
use loom_kernel::conformance::id;
use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, flow_fn};
use loom_plugin_a2ui::{
    A2UISurfaceBridge, CallFunctionInput, CallFunctionOptions, SurfaceSubscription, Transport,
    TransportError, register_a2ui_call_function,
};
use loom_plugin_a2ui::{AgentMessage, LOOM_CATALOG_ID, project_v0_9};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Value, json};
use support::*;
use tokio_util::sync::CancellationToken;

type Result<T> = std::result::Result<T, String>;

struct Renderer {
    io: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
    child: Mutex<Child>,
}

impl Renderer {
    fn start(python: &Path, script: &Path, catalogs: &Path) -> Result<Self> {
        let mut child = Command::new(python)
            .arg(script)
            .arg("serve")
            .arg(catalogs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", python.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Self {
            io: Mutex::new((stdin, stdout)),
            child: Mutex::new(child),
        })
    }

    fn ask(&self, request: Value) -> Result<Value> {
        let mut io = self.io.lock().map_err(|_| "renderer lock poisoned")?;
        writeln!(io.0, "{request}").map_err(|e| e.to_string())?;
        io.0.flush().map_err(|e| e.to_string())?;
        let mut line = String::new();
        io.1.read_line(&mut line).map_err(|e| e.to_string())?;
        let answer: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        if answer["ok"] != json!(true) {
            return Err(format!(
                "the renderer refused {request}: {}",
                answer["error"]
            ));
        }
        Ok(answer)
    }

    /// Sends one agent message; gives the renderer's replies and models.
    fn send(&self, message: &AgentMessage) -> Result<Value> {
        self.ask(json!({"message": message.to_value()}))
    }
}

impl Drop for Renderer {
    fn drop(&mut self) {
        if let Ok(mut child) = self.child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Grain B over the child process: the request goes to the renderer, its reply comes back.
struct RendererTransport(Arc<Renderer>);

impl Transport for RendererTransport {
    fn call(
        &self,
        request: AgentMessage,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, std::result::Result<Vec<u8>, TransportError>> {
        let renderer = self.0.clone();
        async move {
            let answer = renderer
                .send(&request)
                .map_err(TransportError::NotDelivered)?;
            let reply = answer["responses"]
                .get(0)
                .cloned()
                .ok_or_else(|| TransportError::Lost("no reply".into()))?;
            Ok(reply.to_string().into_bytes())
        }
        .boxed()
    }
}

/// Sends every waiting live message and checks the renderer's model against the hub's masked
/// fold once the stream is drained. Returns the renderer's function responses.
fn pump(
    renderer: &Renderer,
    sub: &mut SurfaceSubscription,
    expected: &Value,
    surface: &str,
    sent: &mut usize,
) -> Result<Vec<Value>> {
    let mut responses = Vec::new();
    let mut last = None;
    while let Some(message) = sub.try_next() {
        let answer = renderer.send(&message)?;
        *sent += 1;
        responses.extend(answer["responses"].as_array().cloned().unwrap_or_default());
        last = Some(answer);
    }
    if let Some(answer) = last {
        let model = &answer["model"][surface];
        if model != expected {
            return Err(format!(
                "renderer model {model} differs from the masked fold {expected}"
            ));
        }
    }
    Ok(responses)
}

async fn confirm_flow(ctx: FlowCtx, _input: Value) -> std::result::Result<Value, FlowError> {
    let ui = ctx.surface("confirm");
    ui.set("question", "Ship it?")?;
    ctx.suspend("A2UIAction", "go").await?;
    let answer: Value = ctx
        .call(
            "a2ui.callFunction",
            &CallFunctionInput {
                surface_id: "confirm".into(),
                catalog_id: Some(TEST_CATALOG.into()),
                name: "confirm".into(),
                args: Map::from_iter([("question".to_owned(), json!("Ship it?"))]),
            },
        )
        .await?;
    ui.set("answer", &answer)?;
    // The flow shows the answer: a component added and the root changed, through the log.
    loom_plugin_a2ui::update_components(
        &ctx,
        &catalogs(),
        "confirm",
        vec![
            json!({"id": "done", "component": "Text", "text": "Answered"}),
            json!({"id": "root", "component": "Column", "children": ["q", "go", "done"]}),
        ],
    )?;
    Ok(answer)
}

async fn flows(renderer: Arc<Renderer>) -> Result<usize> {
    let store = MemoryStore::new();
    let hub = loom_plugin_a2ui::SurfaceHub::new(
        catalogs(),
        classification(),
        [
            (
                SURFACE.to_owned(),
                loom_plugin_a2ui::SurfaceSpec {
                    components: components(),
                },
            ),
            (
                "confirm".to_owned(),
                loom_plugin_a2ui::SurfaceSpec {
                    components: vec![
                        json!({"id": "root", "component": "Column", "children": ["q", "go"]}),
                        json!({"id": "q", "component": "Text", "text": {"@path": "/question"}}),
                        json!({"id": "go_label", "component": "Text", "text": "Go"}),
                        json!({"id": "go", "component": "Button", "child": "go_label", "action": {"event": {"name": "go"}}}),
                    ],
                },
            ),
        ],
    );
    let mut effects = EffectRegistry::new();
    register_a2ui_call_function(
        &mut effects,
        Arc::new(RendererTransport(renderer.clone())),
        CallFunctionOptions::new(catalogs()),
    )
    .map_err(|e| e.to_string())?;
    let runtime: Runtime<MemoryStore> = Runtime::builder(store.clone())
        .flow(flow_fn("checkout", 1, checkout))
        .flow(flow_fn("confirm", 1, confirm_flow))
        .plugin(&hub)
        .plugin(&effects)
        .build()
        .map_err(|e| e.to_string())?;
    let mut sent = 0;

    // Grain A and an action, on the checkout flow.
    let e = id("interop-checkout");
    runtime
        .start("checkout", &order(), StartOptions::new(e.clone()))
        .await
        .map_err(|e| e.to_string())?;
    let _ = runtime.wait(&e).await;
    let mut sub = hub
        .subscribe(&store, &e, SURFACE)
        .await
        .map_err(|e| e.to_string())?;
    let mut responses = Vec::new();
    for message in &sub.initial {
        let answer = renderer.send(message)?;
        sent += 1;
        responses.extend(answer["responses"].as_array().cloned().unwrap_or_default());
        if let AgentMessage::CreateSurface(_) = message {
            let expected = hub.masked_model(&e, SURFACE).ok_or("no model")?;
            if answer["model"][SURFACE] != expected {
                return Err(format!(
                    "after createSurface: {} != {expected}",
                    answer["model"][SURFACE]
                ));
            }
        }
    }
    if responses.len() != 1 {
        return Err(format!("expected one function response, got {responses:?}"));
    }
    hub.deliver_function_response(&runtime, SURFACE, responses[0].to_string().as_bytes())
        .await
        .map_err(|e| format!("the renderer's reply does not resume the gate: {e}"))?;
    let _ = runtime.wait(&e).await;
    let expected = hub.masked_model(&e, SURFACE).ok_or("no model")?;
    pump(&renderer, &mut sub, &expected, SURFACE, &mut sent)?;
    if expected["order"]["locale"] != json!("fr-CH") {
        return Err(format!("the locale did not arrive: {expected}"));
    }
    let actions = renderer.ask(json!({"action": {"surfaceId": SURFACE, "componentId": "approve", "action": {"event": {"name": "approve", "context": {"total": 42}}}}}))?;
    let action = actions["actions"]
        .get(0)
        .ok_or("the renderer sent no action")?;
    hub.deliver_action(&runtime, &e, SURFACE, action.to_string().as_bytes())
        .await
        .map_err(|e| format!("the renderer's action does not resume the gate: {e}"))?;
    let state = runtime.wait(&e).await.map_err(|e| e.to_string())?;
    if !format!("{:?}", state.status()).contains("Completed") {
        return Err(format!("checkout did not complete: {:?}", state.status()));
    }
    let expected = hub.masked_model(&e, SURFACE).ok_or("no model")?;
    pump(&renderer, &mut sub, &expected, SURFACE, &mut sent)?;

    // Grain B: the a2ui.callFunction effect answered by the renderer.
    let c = id("interop-confirm");
    runtime
        .start(
            "confirm",
            &json!({}),
            StartOptions::new(c.clone()).grant("a2ui.callFunction"),
        )
        .await
        .map_err(|e| e.to_string())?;
    let _ = runtime.wait(&c).await;
    let mut sub = hub
        .subscribe(&store, &c, "confirm")
        .await
        .map_err(|e| e.to_string())?;
    for message in &sub.initial {
        renderer.send(message)?;
        sent += 1;
    }
    let actions = renderer.ask(json!({"action": {"surfaceId": "confirm", "componentId": "go", "action": {"event": {"name": "go"}}}}))?;
    let action = actions["actions"]
        .get(0)
        .ok_or("the renderer sent no action")?;
    hub.deliver_action(&runtime, &c, "confirm", action.to_string().as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let state = runtime.wait(&c).await.map_err(|e| e.to_string())?;
    if !format!("{:?}", state.status()).contains("Completed") {
        return Err(format!("confirm did not complete: {:?}", state.status()));
    }
    let expected = hub.masked_model(&c, "confirm").ok_or("no model")?;
    pump(&renderer, &mut sub, &expected, "confirm", &mut sent)?;
    if expected["answer"] != json!(true) {
        return Err(format!("grain B gave no answer: {expected}"));
    }
    Ok(sent + 1)
}

fn random_op() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec!["a", "b", "c", "secret", "items", "n"]);
    let path = prop::collection::vec(key, 1..=3).prop_map(|k| k.join("."));
    let leaf = prop_oneof![
        any::<i32>().prop_map(Value::from),
        "[a-z]{0,6}".prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        Just(json!({})),
        Just(json!([])),
    ];
    let value = leaf.prop_recursive(2, 8, 3, |inner| {
        prop::collection::btree_map("[a-c]", inner, 0..3)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    });
    prop_oneof![
        (path.clone(), value.clone()).prop_map(|(p, v)| json!({"op": "set", "path": p, "value": v})),
        (path.clone(), value.clone()).prop_map(|(p, v)| json!({"op": "append", "path": p, "value": v})),
        path.clone().prop_map(|p| json!({"op": "remove", "path": p})),
        (path.clone(), -5i64..5).prop_map(|(p, by)| json!({"op": "increment", "path": p, "by": by})),
        (path, prop::collection::btree_map("[a-c]", any::<i8>().prop_map(Value::from), 1..3))
            .prop_map(|(p, m)| json!({"op": "merge", "path": p, "value": Value::Object(m.into_iter().collect())})),
    ]
}

/// 1,000 random ops through a bridge, written as a stream with the masked model expected
/// after each batch.
/// The v0.9 lines for one v1.0 message (`expect` on its last frame when given).
fn v0_9_lines(message: &AgentMessage, expect: &Value, surface: &str) -> Result<Vec<Value>> {
    let frames = project_v0_9(message).map_err(|e| e.to_string())?;
    let count = frames.len();
    Ok(frames
        .into_iter()
        .enumerate()
        .map(|(i, frame)| {
            let expect = if i + 1 == count {
                expect.clone()
            } else {
                Value::Null
            };
            json!({"message": frame, "expect": expect, "surfaceId": surface})
        })
        .collect())
}

/// Writes the random-ops stream (v1.0) to `path` and its v0.9 projection, preceded by the test
/// checkout's surface created and deleted (every component kind, Loom's Badge as a caption), to
/// `path_v0_9`. Gives both line counts.
fn random_stream(path: &Path, path_v0_9: &Path) -> Result<(usize, usize)> {
    let mut v09 = Vec::new();
    let mut checkout = A2UISurfaceBridge::new("checkout-v09", catalogs(), classification());
    let create = checkout
        .create_surface(
            components(),
            json!({"order": order(), "customer": {"name": "Ada", "card": "4111"}}),
        )
        .map_err(|e| e.to_string())?;
    v09.extend(v0_9_lines(
        &create,
        &checkout.masked_model(),
        "checkout-v09",
    )?);
    let ops = [
        json!({"op": "remove", "path": "order.title"}),
        json!({"op": "set", "path": "order.status", "value": "placed"}),
    ]
    .iter()
    .map(SurfaceOp::from_value)
    .collect::<std::result::Result<Vec<_>, _>>()
    .map_err(|e| e.to_string())?;
    let messages = checkout.apply_ops(&ops).map_err(|e| e.to_string())?;
    let count = messages.len();
    for (i, message) in messages.iter().enumerate() {
        let expect = if i + 1 == count {
            checkout.masked_model()
        } else {
            Value::Null
        };
        v09.extend(v0_9_lines(message, &expect, "checkout-v09")?);
    }
    let changed = checkout
        .update_components(vec![
            json!({"id": "title", "component": "Text", "text": "Placed"}),
            json!({"id": "placed_badge", "component": "Badge", "catalogId": LOOM_CATALOG_ID, "text": "placed", "tone": "success"}),
            json!({"id": "root", "component": "Column", "children": ["title", "status", "badge", "approve", "placed_badge"]}),
        ])
        .map_err(|e| e.to_string())?;
    v09.extend(v0_9_lines(&changed, &Value::Null, "checkout-v09")?);
    let delete = checkout.delete_surface().map_err(|e| e.to_string())?;
    v09.extend(v0_9_lines(&delete, &Value::Null, "checkout-v09")?);
    let classification = DataClassification::mask_paths(["secret", "a.secret", "b.*.secret"])
        .map_err(|e| e.to_string())?;
    let mut bridge = A2UISurfaceBridge::new("random", catalogs(), classification);
    let mut lines = Vec::new();
    let create = bridge
        .create_surface(
            vec![json!({"id": "root", "component": "Text", "text": {"@path": "/a"}})],
            json!({}),
        )
        .map_err(|e| e.to_string())?;
    lines.push(json!({"message": create.to_value(), "expect": bridge.masked_model(), "surfaceId": "random"}));
    v09.extend(v0_9_lines(&create, &bridge.masked_model(), "random")?);
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let strategy = prop::collection::vec(random_op(), 1..=3);
    let mut applied = 0;
    let mut attempts = 0;
    while applied < 1000 && attempts < 200_000 {
        attempts += 1;
        let batch = strategy
            .new_tree(&mut runner)
            .map_err(|e| e.to_string())?
            .current();
        let Ok(ops) = batch
            .iter()
            .map(SurfaceOp::from_value)
            .collect::<std::result::Result<Vec<_>, _>>()
        else {
            continue;
        };
        let Ok(messages) = bridge.apply_ops(&ops) else {
            continue; // refused as a whole: the model is unchanged
        };
        applied += ops.len();
        let count = messages.len();
        for (i, message) in messages.into_iter().enumerate() {
            let expect = if i + 1 == count {
                bridge.masked_model()
            } else {
                Value::Null
            };
            v09.extend(v0_9_lines(&message, &expect, "random")?);
            lines.push(
                json!({"message": message.to_value(), "expect": expect, "surfaceId": "random"}),
            );
        }
    }
    if applied < 1000 {
        return Err(format!("only {applied} random ops applied"));
    }
    let _ = SurfacePath::root();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).map_err(|e| e.to_string())?;
    let text: String = v09.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path_v0_9, text).map_err(|e| e.to_string())?;
    Ok((lines.len(), v09.len()))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [python, script, out] = args.as_slice() else {
        eprintln!("usage: interop PYTHON RENDERER_PY OUT_DIR");
        return std::process::ExitCode::from(2);
    };
    match run(python, script, out).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("interop: FAILED: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(python: &Path, script: &Path, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| e.to_string())?;
    let catalogs_path = out.join("catalogs.json");
    let documents: Vec<Value> = catalogs().definitions().map(|d| d.to_document()).collect();
    std::fs::write(&catalogs_path, Value::Array(documents).to_string())
        .map_err(|e| e.to_string())?;

    let stream = out.join("random-ops.jsonl");
    let stream_v0_9 = out.join("random-ops-v0_9.jsonl");
    let (lines, lines_v0_9) = random_stream(&stream, &stream_v0_9)?;
    println!(
        "interop: wrote {lines} messages from 1,000 random ops to {}",
        stream.display()
    );
    let status = Command::new(python)
        .arg(script)
        .arg("check")
        .arg(&catalogs_path)
        .arg(&stream)
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err("the reference renderer refused the random-ops stream".into());
    }
    // The same ops projected onto A2UI v0.9, to the SDK's v0.9 basic catalog (STRICT).
    println!(
        "interop: wrote {lines_v0_9} A2UI v0.9 messages (a checkout surface, then the random ops) to {}",
        stream_v0_9.display()
    );
    let status = Command::new(python)
        .arg(script)
        .arg("check-v0_9")
        .arg(&stream_v0_9)
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err("the reference renderer refused the v0.9 stream".into());
    }

    let renderer = Arc::new(Renderer::start(python, script, &catalogs_path)?);
    let sent = flows(renderer).await?;
    println!(
        "interop: flows: the reference renderer accepted {sent} messages; replies and actions resumed their gates"
    );
    println!("interop: ok");
    Ok(())
}
