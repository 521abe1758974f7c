//! A headless renderer: keeps the surface's data model, answers `getLocale` and `submitOrder`
//! (deduplicated on the call id, in a ledger file that is the side effect), and clicks Approve.
//! It reconnects when the server goes away, and ends once the surface is deleted.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{SinkExt, StreamExt};
use loom_plugin_a2ui::AgentMessage;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::app::{APPROVE, SURFACE};
use crate::narrate;

/// How the client runs; also the `client` command's arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientOptions {
    /// The server, `ws://host:port`.
    #[arg(long)]
    pub url: String,
    /// The execution whose surface to show.
    #[arg(long, default_value = crate::story::EXECUTION)]
    pub execution: String,
    /// The renderer credential the server minted for that execution (its renderer link's
    /// `credential`, told in its `ready` note).
    #[arg(long)]
    pub credential: String,
    /// The ledger of placed orders (JSON Lines, one `{"callId", "result"}` per order).
    #[arg(long, default_value = "target/a2ui-callfunction/orders.jsonl")]
    pub ledger: PathBuf,
    /// What `getLocale` answers.
    #[arg(long, default_value = "de-CH")]
    pub locale: String,
    /// Click Approve when the order awaits it.
    #[arg(long)]
    pub approve: bool,
    /// Give up if the surface is not deleted by then (`--timeout SECONDS`).
    #[arg(long = "timeout", value_name = "SECONDS", default_value = "120", value_parser = seconds)]
    pub deadline: Duration,
}

/// A whole number of seconds.
fn seconds(text: &str) -> Result<Duration, std::num::ParseIntError> {
    text.parse().map(Duration::from_secs)
}

/// The orders placed so far, by call id: the client's dedup (ADR 0070 caveat 2).
pub fn read_ledger(path: &Path) -> Result<BTreeMap<String, Value>> {
    let mut orders = BTreeMap::new();
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(orders),
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    for line in BufReader::new(file).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let entry: Value = serde_json::from_str(&line)?;
        let call_id = entry["callId"].as_str().unwrap_or_default().to_owned();
        orders.insert(call_id, entry["result"].clone());
    }
    Ok(orders)
}

fn place_order(ledger: &Path, call_id: &str, args: &Value) -> Result<(Value, bool)> {
    let orders = read_ledger(ledger)?;
    if let Some(result) = orders.get(call_id) {
        return Ok((result.clone(), false));
    }
    let result = json!({
        "confirmation": format!("CONF-{:04}", orders.len() + 1),
        "placed": true,
    });
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .with_context(|| format!("opening {}", ledger.display()))?;
    writeln!(
        file,
        "{}",
        json!({"callId": call_id, "args": args, "result": result})
    )?;
    file.sync_all()?;
    Ok((result, true))
}

/// An RFC 3339 UTC timestamp of now (the renderer's clock; Loom records none of it).
fn timestamp() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    format!("{}Z", loom_console::utc(ms).replacen(' ', "T", 1))
}

enum End {
    /// The surface is gone: the story is over for this client.
    Deleted,
    /// The connection dropped: connect again.
    Dropped(String),
}

/// Runs the client until the surface is deleted.
pub async fn run(options: ClientOptions) -> Result<()> {
    let started = Instant::now();
    let url = format!(
        "{}/a2ui/{}/{SURFACE}?credential={}",
        options.url.trim_end_matches('/'),
        options.execution,
        options.credential
    );
    // Told without the credential: a narration is no place for it.
    let shown = url.split('?').next().unwrap_or_default().to_owned();
    let mut connected_once = false;
    loop {
        if started.elapsed() > options.deadline {
            bail!("the surface was not deleted within {:?}", options.deadline);
        }
        let socket = match tokio_tungstenite::connect_async(url.as_str()).await {
            Ok((socket, _)) => socket,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(150)).await;
                continue;
            }
        };
        narrate::say(if connected_once {
            format!("client reconnected to {shown}")
        } else {
            format!("client connected to {shown}")
        });
        connected_once = true;
        match session(&options, socket).await? {
            End::Deleted => {
                narrate::say("client: the surface is deleted; done");
                return Ok(());
            }
            End::Dropped(why) => {
                narrate::say(format!("client: connection dropped ({why}); reconnecting"));
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        }
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn session(options: &ClientOptions, mut socket: Socket) -> Result<End> {
    let mut model = Value::Null;
    let mut created = false;
    // The id the server names the surface by on the wire, from its createSurface.
    let mut surface_id = SURFACE.to_owned();
    let mut deleted = false;
    let mut clicked = false;
    loop {
        let frame = match socket.next().await {
            None => return Ok(End::Dropped("the stream ended".into())),
            Some(Err(error)) => return Ok(End::Dropped(error.to_string())),
            Some(Ok(frame)) => frame,
        };
        let text = match frame {
            Message::Text(text) => text,
            Message::Close(_) => {
                // An orderly close after the surface is deleted, or on a surface that no longer
                // exists, ends the story; any other close is a server going away.
                return Ok(if deleted || !created {
                    End::Deleted
                } else {
                    End::Dropped("the server closed the socket".into())
                });
            }
            _ => continue,
        };
        let message = match AgentMessage::parse(text.as_bytes()) {
            Ok(message) => message,
            Err(error) => {
                narrate::say(format!("client: refusing a message: {error}"));
                continue;
            }
        };
        let mut replies = Vec::new();
        match message {
            AgentMessage::CreateSurface(create) => {
                created = true;
                surface_id = create.surface_id.clone();
                model = Value::Object(create.data_model.unwrap_or_default());
                narrate::say(format!(
                    "client: surface `{}` shown, card on screen: {}",
                    create.surface_id, model["payment"]["card"]
                ));
            }
            AgentMessage::UpdateDataModel(update) => {
                // A pointer this model cannot hold is left out, as a renderer would.
                let _ = update.apply_to(&mut model);
            }
            AgentMessage::DeleteSurface(_) => deleted = true,
            AgentMessage::CallRendererFunction(call) => {
                let id = call.function_call_id.clone();
                let args = Value::Object(call.call.args.clone().unwrap_or_default());
                let reply = match call.call.name.as_str() {
                    "getLocale" => {
                        narrate::say(format!("client: getLocale {id} -> {}", options.locale));
                        json!({"functionCallId": id, "value": options.locale})
                    }
                    "submitOrder" => {
                        let (result, placed) = place_order(&options.ledger, &id, &args)?;
                        narrate::say(if placed {
                            format!(
                                "client: submitOrder {id}: ORDER PLACED {} (the side effect)",
                                result["confirmation"]
                            )
                        } else {
                            format!(
                                "client: submitOrder {id}: already placed; dedup answers the original {}",
                                result["confirmation"]
                            )
                        });
                        json!({"functionCallId": id, "value": result})
                    }
                    other => {
                        json!({"functionCallId": id, "error": {"code": "FUNCTION_NOT_FOUND", "message": format!("no function `{other}` here")}})
                    }
                };
                replies.push(json!({"version": "v1.0", "rendererFunctionResponse": reply}));
            }
            _ => {}
        }
        if options.approve
            && !clicked
            && !deleted
            && model["order"]["status"] == json!("awaiting approval")
        {
            clicked = true;
            narrate::say("client: clicking Approve");
            replies.push(json!({"version": "v1.0", "action": {
                "name": APPROVE,
                "surfaceId": surface_id,
                "sourceComponentId": "approve",
                "timestamp": timestamp(),
                "context": {"orderId": model["order"]["id"]},
            }}));
        }
        for reply in replies {
            if let Err(error) = socket.send(Message::Text(reply.to_string().into())).await {
                return Ok(End::Dropped(error.to_string()));
            }
        }
    }
}
