//! The whole story as real processes: a server that crashes after sending `submitOrder`, a
//! renderer that keeps going, a restarted server that parks the step in doubt, an operator's
//! verdict through the running server, completion, then replay-check over the store.
//!
//! Each process is this program with a subcommand; it writes its notes as JSON lines, which are
//! printed here as they come, with the wire messages also written to the wire log.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use loom_kernel::EventStoreExt;
use loom_kernel::{DiskStore, EventStore, ExecutionId};
use loom_replay_check::{Checker, Finding, Outcome};
use serde_json::{Value, json};

use crate::app::{self, CARD_NUMBER, SURFACE};
use crate::narrate::{self, CHILD_ENV, Note, Style};

/// The execution the story runs.
pub const EXECUTION: &str = "checkout-1";

/// How the story runs.
#[derive(Debug, Clone)]
pub struct StoryOptions {
    /// Where the store, the ledger and the logs go (emptied first).
    pub dir: PathBuf,
    /// Writes every A2UI message, both directions, as JSON Lines in wire order.
    pub wire_log: Option<PathBuf>,
    /// Writes the catalogs as v1.0 catalog documents.
    pub export_catalogs: Option<PathBuf>,
    /// The reference renderer as a second client: a Python interpreter and the script.
    pub reference_renderer: Option<(PathBuf, PathBuf)>,
    /// The whole story must end within this.
    pub timeout: Duration,
    /// Runs on PostgreSQL instead of the embedded store: the URL and the schema (emptied
    /// first, as `dir` is).
    pub postgres: Option<(String, String)>,
}

enum Line {
    Out(String, String),
    Exited(String, ExitStatus),
}

struct Proc {
    label: String,
    child: Child,
    exited: bool,
}

/// The processes the story started, killed if it fails half-way (only those, by handle).
struct Cast {
    procs: Vec<Proc>,
    lines: mpsc::Receiver<(String, String)>,
    sender: mpsc::Sender<(String, String)>,
    queue: VecDeque<Line>,
    deadline: Instant,
    style: Style,
    wire_log: Option<BufWriter<File>>,
    wire_count: usize,
    renderer_models: Vec<Value>,
    /// How each process ended, by label, until a process of the same label starts again.
    exits: std::collections::BTreeMap<String, ExitStatus>,
    /// How many times each process told it connected.
    connects: std::collections::BTreeMap<String, usize>,
    /// The admin token every process of the story is given: the server requires it of the
    /// operator's commands that go through it.
    admin_token: String,
}

impl Drop for Cast {
    fn drop(&mut self) {
        for proc in &mut self.procs {
            if !proc.exited {
                let _ = proc.child.kill();
                let _ = proc.child.wait();
            }
        }
    }
}

impl Cast {
    fn spawn(&mut self, label: &str, program: &Path, args: &[String]) -> Result<()> {
        let mut child = Command::new(program)
            .args(args)
            .env(CHILD_ENV, "1")
            .env(crate::operator::ADMIN_TOKEN_ENV, &self.admin_token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {label}: {}", program.display()))?;
        self.exits.remove(label);
        let stdout = child.stdout.take().context("no stdout")?;
        let sender = self.sender.clone();
        let name = label.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send((name.clone(), line)).is_err() {
                    break;
                }
            }
        });
        self.procs.push(Proc {
            label: label.to_owned(),
            child,
            exited: false,
        });
        Ok(())
    }

    /// Takes what the processes said and which of them ended, in the order it happened (as
    /// far as this process can tell).
    fn poll(&mut self) -> Result<()> {
        ensure!(
            Instant::now() < self.deadline,
            "the story did not end in time"
        );
        match self.lines.recv_timeout(Duration::from_millis(50)) {
            Ok((label, line)) => self.queue.push_back(Line::Out(label, line)),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {}
        }
        for proc in &mut self.procs {
            if !proc.exited
                && let Some(status) = proc.child.try_wait()?
            {
                proc.exited = true;
                // What it printed before it ended comes first.
                std::thread::sleep(Duration::from_millis(50));
                while let Ok((label, line)) = self.lines.try_recv() {
                    self.queue.push_back(Line::Out(label, line));
                }
                self.queue
                    .push_back(Line::Exited(proc.label.clone(), status));
            }
        }
        Ok(())
    }

    /// Prints and logs one line; returns its note if it is one.
    fn show(&mut self, label: &str, line: &str) -> Result<Option<Note>> {
        if let Some(model) = line.strip_prefix("RENDERER_MODEL ") {
            self.renderer_models.push(serde_json::from_str(model)?);
            return Ok(None);
        }
        let note = match serde_json::from_str::<Note>(line) {
            Ok(note) => note,
            Err(_) => Note::Say {
                text: line.to_owned(),
            },
        };
        if let (
            Note::Wire {
                direction, message, ..
            },
            Some(log),
        ) = (&note, self.wire_log.as_mut())
        {
            writeln!(
                log,
                "{}",
                json!({"direction": direction, "message": message})
            )?;
        }
        if matches!(note, Note::Wire { .. }) {
            self.wire_count += 1;
        }
        if let Note::Say { text } = &note
            && text.contains("connected to")
        {
            *self.connects.entry(label.to_owned()).or_default() += 1;
        }
        println!("{}", narrate::render(Some(label), &note, self.style));
        Ok(Some(note))
    }

    /// Runs until `want` picks something out of what the processes say or how they end.
    fn until<T>(&mut self, mut want: impl FnMut(&Line, Option<&Note>) -> Option<T>) -> Result<T> {
        loop {
            while let Some(line) = self.queue.pop_front() {
                let note = match &line {
                    Line::Out(label, text) => self.show(&label.clone(), &text.clone())?,
                    Line::Exited(label, status) => {
                        self.exits.insert(label.clone(), *status);
                        println!(
                            "{}",
                            narrate::render(
                                Some(label),
                                &Note::Say {
                                    text: format!("process ended: {}", describe(status)),
                                },
                                self.style
                            )
                        );
                        None
                    }
                };
                if let Some(found) = want(&line, note.as_ref()) {
                    return Ok(found);
                }
            }
            self.poll()?;
        }
    }

    fn until_exit(&mut self, who: &str) -> Result<ExitStatus> {
        if let Some(status) = self.exits.get(who) {
            return Ok(*status);
        }
        self.until(|line, _| match line {
            Line::Exited(label, status) if label == who => Some(*status),
            _ => None,
        })
    }

    /// The server's URL and a renderer credential for its execution, once it is ready.
    fn until_ready(&mut self, who: &str) -> Result<(String, String)> {
        self.until(|line, note| match (line, note) {
            (Line::Out(label, _), Some(Note::Ready { url, credential })) if label == who => {
                Some(Ok((url.clone(), credential.clone())))
            }
            (Line::Exited(label, status), _) if label == who => Some(Err(anyhow::anyhow!(
                "{who} ended before it was ready: {}",
                describe(status)
            ))),
            _ => None,
        })?
    }

    fn chapter(&self, text: &str) {
        println!();
        println!("{}", self.style.paint("1;4", text));
    }
}

fn describe(status: &ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            let name = if signal == 6 { " (SIGABRT)" } else { "" };
            return format!("killed by signal {signal}{name}");
        }
    }
    match status.code() {
        Some(0) => "exit 0".into(),
        Some(code) => format!("exit {code}"),
        None => "no exit code".into(),
    }
}

fn s(text: impl AsRef<str>) -> String {
    text.as_ref().to_owned()
}

/// Writes the catalogs the example uses as v1.0 catalog documents, one file each.
pub fn export_catalogs(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for definition in app::catalogs().definitions() {
        let name: String = definition
            .id()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let path = dir.join(format!("{name}.json"));
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&definition.to_document())?,
        )?;
        written.push(path);
    }
    Ok(written)
}

/// What the story found, for its caller.
#[derive(Debug, Clone)]
pub struct StoryReport {
    /// The store file the story's server wrote.
    pub store: PathBuf,
    /// The renderer's ledger: the orders its `submitOrder` placed, by call id (its dedup).
    pub ledger: PathBuf,
    /// How many A2UI messages went over the wire.
    pub wire_messages: usize,
    /// How many orders the ledger holds (one: the call ran once for all its attempts).
    pub orders: usize,
    /// The masked model Loom's fold gives for the surface (what a renderer holds).
    pub masked_model: Value,
    /// The models the reference renderer reported, last one last.
    pub renderer_models: Vec<Value>,
}

/// Runs the story. Fails if any part of it does not happen as told.
pub fn run(options: &StoryOptions) -> Result<StoryReport> {
    let style = Style::detect();
    let program = std::env::current_exe().context("finding this program")?;
    if options.dir.exists() {
        std::fs::remove_dir_all(&options.dir)
            .with_context(|| format!("emptying {}", options.dir.display()))?;
    }
    std::fs::create_dir_all(&options.dir)?;
    let store = options.dir.join("loom.redb");
    let ledger = options.dir.join("orders.jsonl");
    if let Some(dir) = &options.export_catalogs {
        for path in export_catalogs(dir)? {
            println!("catalog document written: {}", path.display());
        }
    }
    // The reference renderer loads the catalogs from their documents.
    let catalog_dir = options.dir.join("catalogs");
    if options.reference_renderer.is_some() {
        export_catalogs(&catalog_dir)?;
    }
    let wire_log = match &options.wire_log {
        Some(path) => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)?;
            }
            Some(BufWriter::new(File::create(path).with_context(|| {
                format!("creating the wire log {}", path.display())
            })?))
        }
        None => None,
    };
    let (sender, lines) = mpsc::channel();
    let mut cast = Cast {
        procs: Vec::new(),
        lines,
        sender,
        queue: VecDeque::new(),
        deadline: Instant::now() + options.timeout,
        style,
        wire_log,
        wire_count: 0,
        renderer_models: Vec::new(),
        exits: Default::default(),
        connects: Default::default(),
        admin_token: match std::env::var(crate::operator::ADMIN_TOKEN_ENV) {
            Ok(token) => token,
            Err(_) => loom_console::random_token().context("making the admin token")?,
        },
    };
    let (store_arg, schema_args) = match &options.postgres {
        Some((url, schema)) => {
            empty_schema(url, schema)?;
            println!("the story runs on PostgreSQL, schema {schema} (emptied first)");
            // The renderer key in the story's folder, not beside the working directory.
            let key = options.dir.join("renderer-key");
            (
                url.clone(),
                vec![
                    s("--schema"),
                    schema.clone(),
                    s("--renderer-key-file"),
                    key.display().to_string(),
                ],
            )
        }
        None => (store.display().to_string(), Vec::new()),
    };

    cast.chapter(
        "1. The server starts the checkout flow (scripted to crash after sending submitOrder)",
    );
    // The server's command line on this store, with `extra` arguments.
    let server_args = |extra: &[String]| {
        [
            &[s("server"), s("--store"), store_arg.clone()],
            extra,
            schema_args.as_slice(),
        ]
        .concat()
    };
    cast.spawn(
        "server",
        &program,
        &server_args(&[s("--crash-after-submit"), s("--exit-when-done")]),
    )?;
    let (url, credential) = cast.until_ready("server")?;

    if let Some((python, script)) = &options.reference_renderer {
        cast.chapter("2a. The reference renderer (a2ui-core 0.4.0, STRICT) connects as a second client; it answers getLocale");
        cast.spawn(
            "renderer",
            python,
            &[
                script.display().to_string(),
                url.clone(),
                s(EXECUTION),
                catalog_dir.display().to_string(),
                credential.clone(),
            ],
        )?;
        cast.until(|line, note| match (line, note) {
            (Line::Out(label, _), Some(Note::Say { text }))
                if label == "renderer" && text.contains("connected to") =>
            {
                Some(Ok(()))
            }
            (Line::Exited(label, status), _) if label == "renderer" => Some(Err(anyhow::anyhow!(
                "the reference renderer ended: {}",
                describe(status)
            ))),
            _ => None,
        })??;
    }

    cast.chapter("2. A headless renderer connects: it answers getLocale (grain A), clicks Approve, answers submitOrder (grain B)");
    cast.spawn(
        "client",
        &program,
        &[
            s("client"),
            s("--url"),
            url.clone(),
            s("--credential"),
            credential.clone(),
            s("--ledger"),
            ledger.display().to_string(),
            s("--approve"),
        ],
    )?;
    let crashed = cast.until_exit("server")?;
    let renderer_connects = cast.connects.get("renderer").copied().unwrap_or(0);
    ensure!(
        !crashed.success(),
        "the server was to crash after sending submitOrder, but it ended with {}",
        describe(&crashed)
    );

    cast.chapter("3. The server restarts on the same store and address: recovery parks the submitOrder step in doubt; the renderer reconnects");
    cast.spawn(
        "server",
        &program,
        &server_args(&[
            s("--addr"),
            s(url.trim_start_matches("ws://")),
            s("--exit-when-done"),
        ]),
    )?;
    let (url, _) = cast.until_ready("server")?;
    cast.until(|line, note| match (line, note) {
        (Line::Out(label, _), Some(Note::InDoubt { .. })) if label == "server" => Some(()),
        _ => None,
    })?;
    // The reference renderer is to see the rest of the story: wait for it to be back too.
    if options.reference_renderer.is_some() {
        while cast.connects.get("renderer").copied().unwrap_or(0) <= renderer_connects {
            cast.until(|_, _| Some(()))?;
        }
    }

    cast.chapter("4. The operator lists the steps in doubt, through the running server");
    cast.spawn(
        "operator",
        &program,
        &[s("indoubt"), s("list"), s("--server"), url.clone()],
    )?;
    let mut in_doubt = Vec::new();
    let listed = cast.until(|line, note| match (line, note) {
        (
            Line::Out(label, _),
            Some(Note::InDoubt {
                execution, step, ..
            }),
        ) if label == "operator" => {
            in_doubt.push((execution.clone(), step.clone()));
            None
        }
        (Line::Exited(label, status), _) if label == "operator" => Some(*status),
        _ => None,
    })?;
    ensure!(
        listed.success(),
        "`indoubt list` failed: {}",
        describe(&listed)
    );
    let [(execution, step)] = in_doubt.as_slice() else {
        bail!("one step should be in doubt, {} are", in_doubt.len());
    };

    cast.chapter("5. The operator retries with the same call id: the renderer's dedup answers with the original result; the flow updates the surface, deletes it and completes");
    cast.spawn(
        "operator",
        &program,
        &[
            s("resolve"),
            execution.clone(),
            step.clone(),
            s("--retry"),
            s("--server"),
            url.clone(),
        ],
    )?;
    let resolved = cast.until_exit("operator")?;
    ensure!(
        resolved.success(),
        "`resolve` failed: {}",
        describe(&resolved)
    );

    cast.chapter("6. The server and the renderers end");
    let done = cast.until_exit("server")?;
    ensure!(
        done.success(),
        "the restarted server ended with {}",
        describe(&done)
    );
    let client = cast.until_exit("client")?;
    ensure!(
        client.success(),
        "the client ended with {}",
        describe(&client)
    );
    if options.reference_renderer.is_some() {
        let renderer = cast.until_exit("renderer")?;
        ensure!(
            renderer.success(),
            "the reference renderer ended with {}",
            describe(&renderer)
        );
    }
    if let Some(log) = cast.wire_log.as_mut() {
        log.flush()?;
    }

    cast.chapter("7. replay-check over the store");
    let masked_model = match &options.postgres {
        Some((url, schema)) => check_postgres(url, schema, style)?,
        None => check_store(&store, style)?,
    };
    let orders = crate::client::read_ledger(&ledger)?;
    println!(
        "orders placed by the renderer (its ledger): {} {}",
        orders.len(),
        serde_json::to_string(&orders)?
    );
    ensure!(
        orders.len() == 1,
        "submitOrder's side effect happened {} times",
        orders.len()
    );
    ensure!(
        !masked_model.to_string().contains(CARD_NUMBER),
        "the card number is in the masked model"
    );
    if options.reference_renderer.is_some() {
        let last = cast
            .renderer_models
            .last()
            .context("the reference renderer reported no data model")?;
        ensure!(
            *last == masked_model,
            "the reference renderer holds {last}, Loom's masked fold is {masked_model}"
        );
        println!("the reference renderer's data model equals Loom's masked fold");
    }
    println!(
        "{}",
        style.paint(
            "32;1",
            &format!(
                "The story is complete: {} A2UI messages on the wire, the order placed once, the log replays deterministically.",
                cast.wire_count
            )
        )
    );
    println!(
        "See it in a browser: `cargo run -p a2ui-callfunction -- serve` tells this story, then keeps a server up on its store and prints the links of the A2UI playground (the surface drawn by the official renderer @a2ui/lit, the wire, the log; start new checkouts there) and of the web console."
    );
    Ok(StoryReport {
        store,
        ledger,
        wire_messages: cast.wire_count,
        orders: orders.len(),
        masked_model,
        renderer_models: std::mem::take(&mut cast.renderer_models),
    })
}

/// replay-check (as a library) over every execution of the store; gives the surface's masked
/// model as Loom's fold has it.
pub fn check_store(store: &Path, style: Style) -> Result<Value> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = DiskStore::open_read_only(store, Default::default())?;
        let checker = Checker::new(&app::flows())?;
        let ids = all_ids(&store).await?;
        let outcomes = store
            .read_stored_logs(&ids)
            .await?
            .iter()
            .map(|stored| checker.check_stored(stored))
            .collect::<Vec<_>>();
        report_and_model(&store, &outcomes, style).await
    })
}

/// Drops the story's schema on PostgreSQL, as the story empties its folder.
fn empty_schema(url: &str, schema: &str) -> Result<()> {
    ensure!(
        crate::store::is_postgres(url),
        "--store takes a postgres:// URL (the embedded store's story keeps its store in --dir)"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connecting to {url}"))?;
        let connection = tokio::spawn(connection);
        client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
                schema.replace('"', "\"\"")
            ))
            .await
            .with_context(|| format!("emptying schema {schema}"))?;
        drop(client);
        let _ = connection.await;
        Ok(())
    })
}

/// replay-check (as a library) over every execution of the PostgreSQL schema; gives the
/// surface's masked model as Loom's fold has it.
pub fn check_postgres(url: &str, schema: &str, style: Style) -> Result<Value> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let config = loom_store_postgres::PostgresStoreConfig::new(url)
            .schema(schema)
            .check_only();
        let store = loom_store_postgres::PostgresStore::connect(config).await?;
        let checker = Checker::new(&app::flows())?;
        let mut outcomes = Vec::new();
        for id in all_ids(&store).await? {
            outcomes.push(checker.check(store.read_all(&id).await?));
        }
        report_and_model(&store, &outcomes, style).await
    })
}

/// Every execution the store holds, in id order.
async fn all_ids<S: EventStore>(store: &S) -> Result<Vec<ExecutionId>> {
    Ok(store
        .list_all_executions()
        .await?
        .into_iter()
        .map(|summary| summary.id)
        .collect())
}

/// Prints each execution's replay-check outcome and the summary, fails unless there is one and
/// every one replays as recorded, then gives the surface's masked model as the fold has it.
async fn report_and_model<S: EventStore>(
    store: &S,
    outcomes: &[Outcome],
    style: Style,
) -> Result<Value> {
    let (mut deterministic, mut other) = (0, 0);
    for outcome in outcomes {
        let verdict = match &outcome.finding {
            Finding::Deterministic => {
                deterministic += 1;
                style.paint("32", "deterministic")
            }
            finding => {
                other += 1;
                style.paint("31", &format!("{finding:?}"))
            }
        };
        println!(
            "  {} ({} events): {verdict}",
            outcome.execution, outcome.events
        );
    }
    println!(
        "replay-check: {} execution(s) checked, {deterministic} deterministic, {other} not",
        outcomes.len()
    );
    ensure!(
        other == 0 && deterministic > 0,
        "replay-check found a problem"
    );
    let hub = app::hub();
    let execution = ExecutionId::new(EXECUTION)?;
    hub.catch_up(store, &execution).await?;
    hub.masked_model(&execution, SURFACE)
        .context("the store holds no checkout surface")
}
