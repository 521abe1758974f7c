//! `a2ui-callfunction`: with no arguments, tells the whole story as real processes (server,
//! renderer, crash, restart, in-doubt, verdict, completion, replay-check). Its subcommands are
//! the story's parts, usable on their own.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{ArgGroup, Parser, Subcommand};

use a2ui_callfunction::client::{self, ClientOptions};
use a2ui_callfunction::operator::{self, Target, VerdictArg};
use a2ui_callfunction::server::{self, ServerOptions};
use a2ui_callfunction::story::{self, StoryOptions};

#[derive(Debug, Parser)]
#[command(
    about = "A checkout flow on an A2UI surface over WebSocket: both function-call grains, a real crash, an operator's verdict."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Writes every A2UI message, both directions, as JSON Lines in wire order.
    #[arg(long, value_name = "FILE")]
    wire_log: Option<PathBuf>,
    /// Writes the catalogs the example uses as v1.0 catalog documents into DIR.
    #[arg(long, value_name = "DIR")]
    export_catalogs: Option<PathBuf>,
    /// Where the story keeps its store and the renderer's ledger (emptied first).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "target/a2ui-callfunction",
        global = true
    )]
    dir: PathBuf,
    /// Runs the story on PostgreSQL instead of the embedded store: a `postgres://` URL. The
    /// story's schema (--schema) is emptied first, as its folder is.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// The PostgreSQL schema holding Loom's tables (with a `postgres://` store).
    #[arg(long, value_name = "NAME", default_value = a2ui_callfunction::store::DEFAULT_SCHEMA)]
    schema: String,
    /// Also runs the reference renderer (a2ui-core) as a second client: a Python interpreter
    /// with a2ui-core and websockets installed, and the script (interop/renderer_client.py).
    #[arg(long, num_args = 2, value_names = ["PYTHON", "SCRIPT"])]
    reference_renderer: Option<Vec<PathBuf>>,
    /// The whole story must end within this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Tells the story, then keeps a server up on its store (until Ctrl-C) and prints the links
    /// of the A2UI playground and the web console: the story's checkout, ended, with its log;
    /// new checkouts start from the playground.
    Serve {
        /// Where the server listens (loopback: the playground and the console are served on
        /// loopback only).
        #[arg(long, default_value = "127.0.0.1:7272")]
        addr: std::net::SocketAddr,
        /// Skips the story: serves the store a previous run left in --dir.
        #[arg(long)]
        no_story: bool,
    },
    /// Runs Loom with the checkout flow and serves its surface over WebSocket.
    Server(ServerOptions),
    /// A headless renderer: answers getLocale and submitOrder (dedup on the call id), clicks
    /// Approve, reconnects when the server goes away, ends when the surface is deleted.
    Client(ClientOptions),
    /// The operator's queue: steps in doubt.
    Indoubt {
        #[command(subcommand)]
        command: IndoubtCmd,
    },
    /// Records an operator's verdict on a step in doubt.
    #[command(group(ArgGroup::new("verdict").required(true).args(["completed", "retry", "failed"])))]
    Resolve {
        /// The execution, as `indoubt list` shows it.
        execution: String,
        /// The step in doubt, as `indoubt list` shows it (`a2ui.callFunction#1`).
        step: String,
        /// The call did run: this JSON is its result.
        #[arg(long, value_name = "JSON")]
        completed: Option<String>,
        /// Send the call again with the same call id (the renderer dedups).
        #[arg(long)]
        retry: bool,
        /// The call did not run: the step fails with this message.
        #[arg(long, value_name = "MESSAGE")]
        failed: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        schema: SchemaArg,
    },
    /// Writes the catalogs as v1.0 catalog documents into DIR.
    ExportCatalogs { dir: PathBuf },
}

#[derive(Debug, Subcommand)]
enum IndoubtCmd {
    /// Lists every step in doubt.
    List {
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        schema: SchemaArg,
    },
}

#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
struct TargetArgs {
    /// Through the running server, `ws://host:port`.
    #[arg(long)]
    server: Option<String>,
    /// On the store file, when no server holds it; or on PostgreSQL, a `postgres://` URL
    /// (servers may run meanwhile).
    #[arg(long)]
    store: Option<PathBuf>,
}

/// The PostgreSQL schema for the operator's commands.
#[derive(Debug, clap::Args)]
struct SchemaArg {
    /// The PostgreSQL schema holding Loom's tables (with a `postgres://` store).
    #[arg(long, default_value = a2ui_callfunction::store::DEFAULT_SCHEMA)]
    schema: String,
}

impl TargetArgs {
    fn target(self, schema: SchemaArg) -> Target {
        match (self.server, self.store) {
            (Some(url), _) => Target::Server(url),
            (None, Some(path)) => match a2ui_callfunction::store::as_url(&path) {
                Some(url) => Target::Postgres {
                    url: url.to_owned(),
                    schema: schema.schema,
                },
                None => Target::Store(path),
            },
            (None, None) => Target::Store(PathBuf::from("target/a2ui-callfunction/loom.redb")),
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        // Colour codes only for a terminal: redirected to a file, they are noise.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Cmd::Serve { addr, no_story }) => {
            let told = if no_story {
                Ok(())
            } else {
                story::run(&StoryOptions {
                    dir: cli.dir.clone(),
                    wire_log: cli.wire_log,
                    export_catalogs: cli.export_catalogs,
                    reference_renderer: None,
                    timeout: Duration::from_secs(cli.timeout),
                    postgres: None,
                })
                .map(|_| ())
            };
            told.and_then(|()| {
                println!("\nServing the story's store at http://{addr} (Ctrl-C stops it):");
                tokio_main(Cmd::Server(ServerOptions {
                    schema: cli.schema,
                    addr,
                    admin_token: std::env::var("LOOM_ADMIN_TOKEN").ok(),
                    ..ServerOptions::new(cli.dir.join("loom.redb"))
                }))
            })
        }
        None => story::run(&StoryOptions {
            dir: cli.dir,
            wire_log: cli.wire_log,
            export_catalogs: cli.export_catalogs,
            reference_renderer: cli
                .reference_renderer
                .and_then(|v| Some((v.first()?.clone(), v.get(1)?.clone()))),
            timeout: Duration::from_secs(cli.timeout),
            postgres: cli.store.map(|url| (url, cli.schema)),
        })
        .map(|_| ()),
        Some(command) => tokio_main(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One sentence with each cause once (`{:#}` repeats a cause its message already shows).
            eprintln!(
                "a2ui-callfunction: {}",
                loom_replay_check::error_sentence(&*error)
            );
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn tokio_main(command: Cmd) -> Result<()> {
    match command {
        Cmd::Server(options) => server::serve(options).await,
        Cmd::Client(options) => client::run(options).await,
        Cmd::Indoubt {
            command: IndoubtCmd::List { target, schema },
        } => operator::list(&target.target(schema)).await.map(|_| ()),
        Cmd::Resolve {
            execution,
            step,
            completed,
            retry,
            failed,
            target,
            schema,
        } => {
            let verdict = match (completed, retry, failed) {
                (Some(json), _, _) => VerdictArg::Completed {
                    output: serde_json::from_str(&json)?,
                },
                (None, true, _) => VerdictArg::Retry,
                (None, false, Some(message)) => VerdictArg::Failed { message },
                (None, false, None) => {
                    anyhow::bail!("give a verdict: --completed, --retry or --failed")
                }
            };
            operator::resolve(&target.target(schema), &execution, &step, verdict).await
        }
        Cmd::Serve { .. } => anyhow::bail!("`serve` is run from main"),
        Cmd::ExportCatalogs { dir } => {
            for path in story::export_catalogs(&dir)? {
                println!("{}", path.display());
            }
            Ok(())
        }
    }
}
