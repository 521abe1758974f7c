//! `loom`: the operator's command line. See `docs/CONSOLE.md`.
//!
//! It works on a store directly (`--store FILE` when no process holds the file, or
//! `--store postgres://...` while workers run) or through the admin API of the process that
//! runs the flows (`--admin URL --token TOKEN`). Errors go to stderr and say what to do; the
//! exit code says what kind of failure it was (see `EXIT_CODES`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use futures::TryStreamExt;
use loom_console::AdminClient;
use loom_console::ConsoleError;
use loom_console::{
    EventView, EventsPage, ExecutionView, InDoubtView, ShowView, mask_events, parse_status,
    shell_word, utc,
};
use loom_console::{ExecutionList, ExportPage, ListFilter, thousands};
use loom_kernel::DataClassification;
use loom_kernel::Verdict;
use loom_kernel::{
    DiskStore, DiskStoreConfig, ErrorInfo, EventStore, EventStoreExt, ExecutionId, OpenError,
    Payload,
};
use loom_store_postgres::{PostgresStoreConfig, ShardedStore};
use serde_json::Value;

const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  refused by the execution's state (step not in doubt, no such gate, already ended); nothing recorded
  2  bad usage or input (unknown option, malformed JSON, invalid id)
  3  no such execution
  4  store or admin API unavailable (file held by another process, missing, unreachable) or failed
  5  the admin API refused the token

Where: --store FILE opens the embedded store only when no process holds it; while the server
that runs the flows holds it, use its admin API: --admin http://127.0.0.1:PORT --token TOKEN
(or LOOM_ADMIN_URL and LOOM_ADMIN_TOKEN). See docs/CONSOLE.md.";

/// Operate Loom executions: list them, look inside, follow them, give verdicts on steps in
/// doubt, resume gates, cancel.
#[derive(Debug, Parser)]
#[command(name = "loom", version, after_help = EXIT_CODES)]
struct Cli {
    /// The store: an embedded store file (opened only when no process holds it) or a
    /// postgres:// URL (several, comma-separated: the shard map of a sharded store, in its
    /// order; a URL may name the hosts of a replicated database, h1:5432,h2:5432, and the
    /// writable one is used). Default: $LOOM_STORE.
    #[arg(long, global = true, value_name = "FILE|URL")]
    store: Option<String>,
    /// The PostgreSQL schema holding Loom's tables (with a postgres:// store).
    #[arg(long, global = true, value_name = "NAME", default_value = "loom")]
    schema: String,
    /// The admin API of the process that runs the flows, e.g. http://127.0.0.1:7171.
    /// Default: $LOOM_ADMIN_URL (when --store is not given).
    #[arg(long, global = true, value_name = "URL")]
    admin: Option<String>,
    /// The admin API's bearer token. Default: $LOOM_ADMIN_TOKEN.
    #[arg(long, global = true, value_name = "TOKEN")]
    token: Option<String>,
    /// Mask the value at this dot-path in every payload shown (K10-R6); repeatable. Added to
    /// the server's own classification when going through --admin.
    #[arg(long = "mask", global = true, value_name = "PATH")]
    masks: Vec<String>,
    /// A file of classified dot-paths, one per line (`#` starts a comment).
    /// Default: $LOOM_MASK_FILE, else `<store file>.masks` when it exists.
    #[arg(long, global = true, value_name = "FILE")]
    mask_file: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Open a store file whose journal was cut short (by a copy, a restore, a file system) as of
    /// the cut, losing the commits written after it, instead of refusing it. Only once a copy
    /// of the whole journal is known to be gone: a write command then makes the loss
    /// permanent.
    #[arg(long, global = true)]
    accept_cut_journal: bool,
    #[command(subcommand)]
    command: Command,
}

/// `loom store ...`.
#[derive(Debug, Subcommand)]
enum StoreCommand {
    /// Check the store file for damage without writing to it: every page (redb's checksums
    /// and allocator state, in memory), then every log read and folded, with progress on
    /// stderr. Exits 4 when anything is damaged, naming it.
    Check,
    /// Export every log still readable from a store file that no longer opens (a damaged
    /// root or branch page), its journal included, reading its pages directly and writing
    /// nothing to it: one JSON Lines file per execution in DIR, as export-log writes them and
    /// replay-check reads them.
    Salvage {
        /// The directory to write `<execution id>.jsonl` files into (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List executions newest first, a page at a time, with status, flow, length and times.
    Executions {
        /// Only this status: running, suspended, in-doubt, completed, failed, cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Only executions of this flow.
        #[arg(long)]
        flow: Option<String>,
        /// At most this many, 1 to 1000 (default 50).
        #[arg(long)]
        limit: Option<usize>,
        /// The next page: the cursor the summary line names (an execution id also works:
        /// the executions listed after it).
        #[arg(long, value_name = "CURSOR")]
        before: Option<String>,
        /// Only executions started within this age: 1h, 30m, 7d.
        #[arg(long, value_name = "AGE")]
        since: Option<String>,
        /// Only executions that ended within this age: 1h, 30m, 7d.
        #[arg(long, value_name = "AGE")]
        ended_since: Option<String>,
        /// Only executions whose id starts with this.
        #[arg(long, value_name = "TEXT", conflicts_with = "parent")]
        id_prefix: Option<String>,
        /// Only the children of this execution.
        #[arg(long, value_name = "ID")]
        parent: Option<String>,
    },
    /// Show one execution: its folded state (steps, gates, doubts), then its event log.
    Show {
        /// The execution id.
        id: String,
        /// Print each event whole instead of cut to one line.
        #[arg(long)]
        full: bool,
    },
    /// Print an execution's events and follow it live until it ends.
    Tail {
        /// The execution id.
        id: String,
        /// Start at this seq.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Print what is there and stop, instead of following.
        #[arg(long)]
        no_follow: bool,
    },
    /// List the steps in doubt, with each one's idempotency key and how long it has waited.
    InDoubt,
    /// Give a verdict on a step in doubt: it completed (with its output), it failed, or run
    /// it again.
    Resolve {
        /// The execution id.
        id: String,
        /// The step id (as `loom in-doubt` lists it).
        step: String,
        #[command(flatten)]
        verdict: VerdictArgs,
        /// The error code recorded with --failed.
        #[arg(long, default_value = "loom.operator_verdict", requires = "failed")]
        code: String,
        /// Who gives the verdict, recorded with it. Default: $LOOM_OPERATOR, then $USER.
        #[arg(long)]
        operator: Option<String>,
    },
    /// Resume a pending gate with a JSON payload.
    Resume {
        /// The execution id.
        id: String,
        /// The event type the gate waits for.
        event_type: String,
        /// The gate's correlation key.
        key: String,
        /// The payload, as JSON (`'{"approved": true}'`, `null`, `'"text"'`).
        #[arg(value_name = "JSON")]
        payload: String,
        /// Through --admin: who resumes, shown to the server's resume authenticator as the
        /// `operator` attribute of the caller. Default: $LOOM_OPERATOR.
        #[arg(long)]
        operator: Option<String>,
    },
    /// Cancel an execution.
    Cancel {
        /// The execution id.
        id: String,
        /// Why, recorded with the cancel.
        #[arg(long)]
        reason: Option<String>,
    },
    /// List the flows the server runs (through --admin), with the input schema each declares.
    Flows,
    /// Start an execution of a flow the server runs (through --admin: only the process with
    /// the flows can); the input is checked against the flow's input schema when it declares
    /// one.
    Start {
        /// The flow's name (`loom flows` lists them); its newest version runs.
        flow: String,
        /// The input, as JSON (`'{"sku": "A1"}'`, `'"text"'`).
        #[arg(long, value_name = "JSON", default_value = "null")]
        input: String,
        /// The execution id. Default: made up by the server (`<flow>-<12 hex digits>`).
        #[arg(long)]
        id: Option<String>,
    },
    /// Cancel every execution that has not ended and that a filter matches (through --admin),
    /// up to --limit a run; --dry-run counts and lists them, cancelling nothing.
    CancelMany {
        /// Only this status: running, suspended or in-doubt.
        #[arg(long)]
        status: Option<String>,
        /// Only executions of this flow.
        #[arg(long)]
        flow: Option<String>,
        /// Only executions whose id starts with this.
        #[arg(long, value_name = "TEXT")]
        id_prefix: Option<String>,
        /// Only executions started within this age: 1h, 30m, 7d.
        #[arg(long, value_name = "AGE")]
        since: Option<String>,
        /// With no filter: cancel every execution that has not ended (refused without it).
        #[arg(long)]
        all: bool,
        /// Only count and list what would be cancelled; cancel nothing.
        #[arg(long)]
        dry_run: bool,
        /// At most this many, 1 to 10000 (default 1000).
        #[arg(long)]
        limit: Option<usize>,
        /// Why, recorded with each cancel.
        #[arg(long)]
        reason: Option<String>,
    },
    /// The store file itself (--store FILE): check it for damage, or salvage the logs of one
    /// that no longer opens.
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Write executions as JSON Lines files, one per execution, for `replay-check --logs`.
    /// The files hold true values (unmasked): keep them where the store's data may be.
    ExportLog {
        /// The directory to write `<execution id>.jsonl` files into (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Only these executions (repeatable).
        #[arg(long = "execution", value_name = "ID")]
        executions: Vec<String>,
    },
    /// Delete ended executions (completed, failed, cancelled) that ended before a cutoff, in
    /// bounded batches, printing each one deleted. Running, suspended and in-doubt executions
    /// are never deleted.
    Purge {
        /// Delete those that ended longer ago than this age: 30d, 12h, 90m, 45s, 2w.
        #[arg(long, value_name = "AGE", required_unless_present = "ended_before_ms")]
        ended_before: Option<String>,
        /// Or: those that ended before this instant, in milliseconds since the Unix epoch.
        #[arg(long, value_name = "UNIX_MS", conflicts_with = "ended_before")]
        ended_before_ms: Option<u64>,
        /// How many executions one batch (one commit of the store) deletes, 1 to 10000.
        #[arg(long, value_name = "N", default_value_t = loom_console::DEFAULT_BATCH)]
        batch: usize,
        /// Only list what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct VerdictArgs {
    /// The step completed with this output (JSON).
    #[arg(long, value_name = "JSON")]
    completed: Option<String>,
    /// The step failed, with this message.
    #[arg(long, value_name = "MESSAGE")]
    failed: Option<String>,
    /// Run the effect again (needs --admin: only the process with the flows can).
    #[arg(long)]
    retry: bool,
}

/// `println!` for the console's output, except that a reader that went away (`loom show | head`)
/// ends the program quietly with success instead of a panic: nobody is left to read the rest.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(error) = writeln!(std::io::stdout().lock(), $($arg)*) {
            if error.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            eprintln!("loom: cannot write the output: {error}");
            std::process::exit(4);
        }
    }};
}

fn main() -> ExitCode {
    // The stores' warnings on stderr (RUST_LOG chooses how much); colour codes only for a
    // terminal.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("loom: cannot start: {error}");
            return ExitCode::from(4);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("loom: {error}");
            ExitCode::from(error.kind.exit_code())
        }
    }
}

/// Where the console reads and writes.
enum Backend {
    /// An embedded store file, opened per command.
    File(StoreFile),
    /// A PostgreSQL store (reads).
    // One database is a shard map of one.
    Postgres(ShardedStore),
    /// The admin API of the process that runs the flows.
    Admin(AdminClient),
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

async fn backend(cli: &Cli) -> Result<Backend, ConsoleError> {
    if cli.store.is_some() && cli.admin.is_some() {
        return Err(ConsoleError::bad_request(
            "give --store or --admin, not both",
        ));
    }
    let admin = match &cli.store {
        Some(_) => None,
        None => cli.admin.clone().or_else(|| env("LOOM_ADMIN_URL")),
    };
    if let Some(url) = admin {
        let token = cli
            .token
            .clone()
            .or_else(|| env("LOOM_ADMIN_TOKEN"))
            .unwrap_or_default();
        return Ok(Backend::Admin(AdminClient::new(&url, &token)?));
    }
    let Some(store) = cli.store.clone().or_else(|| env("LOOM_STORE")) else {
        return Err(ConsoleError::bad_request(
            "no store given: use --store FILE (when no process holds the file), or --admin http://127.0.0.1:PORT --token TOKEN (the admin API of the process that runs the flows)",
        ));
    };
    if store.starts_with("postgres://") || store.starts_with("postgresql://") {
        // A comma may also separate the hosts of one replicated database.
        let shards = loom_store_postgres::shard_urls(&store)
            .into_iter()
            .map(|url| {
                PostgresStoreConfig::new(url)
                    .schema(&cli.schema)
                    .check_only()
            })
            .collect();
        let connected = ShardedStore::connect(shards).await.map_err(|error| {
            ConsoleError::unavailable(format!(
                "cannot open the PostgreSQL store: {error} (the schema is chosen with --schema, default loom)"
            ))
        })?;
        return Ok(Backend::Postgres(connected));
    }
    Ok(Backend::File(StoreFile {
        path: PathBuf::from(store),
        accept_cut_journal: cli.accept_cut_journal,
    }))
}

/// A store file and how to open it.
#[derive(Debug)]
struct StoreFile {
    path: PathBuf,
    accept_cut_journal: bool,
}

fn held_elsewhere(path: &Path) -> ConsoleError {
    ConsoleError::unavailable(format!(
        "store file {} is held by another process (the server that runs the flows, most likely), so it cannot be opened here: go through that server's admin API instead: loom --admin http://127.0.0.1:PORT --token TOKEN ... (or set LOOM_ADMIN_URL and LOOM_ADMIN_TOKEN)",
        path.display()
    ))
}

/// Opens the store file: read-only unless `write`.
fn open_file(file: &StoreFile, write: bool) -> Result<DiskStore, ConsoleError> {
    let path = file.path.as_path();
    // The default open: in proportion to the journal, not to the file (LD-039). The store's own
    // checks refuse a damaged value where a command reads it; `loom store check` reads every
    // page and row when asked.
    let config = DiskStoreConfig {
        cache_size_bytes: 16 << 20,
        // One command, then the file is closed: no scrub.
        scrub_after_open: false,
        accept_cut_journal: file.accept_cut_journal,
        ..DiskStoreConfig::default()
    };
    let opened = match write {
        true => DiskStore::open_existing(path, config),
        false => DiskStore::open_read_only(path, config),
    };
    opened.map_err(|error| match error {
        OpenError::AlreadyOpen { .. } => held_elsewhere(path),
        OpenError::Missing { .. } => ConsoleError::unavailable(format!(
            "store file {} does not exist: check the path given to --store",
            path.display()
        )),
        other => ConsoleError::unavailable(other.to_string()),
    })
}

fn classification(cli: &Cli) -> Result<DataClassification, ConsoleError> {
    let mut paths = cli.masks.clone();
    // A store file may carry its classification beside it (`<file>.masks`, written by the
    // process that runs the flows), so that reading the file directly masks what that process
    // masks without the operator having to know the paths.
    let beside_store = cli
        .store
        .clone()
        .or_else(|| env("LOOM_STORE"))
        .filter(|store| !store.starts_with("postgres://") && !store.starts_with("postgresql://"))
        .map(|store| PathBuf::from(format!("{store}.masks")))
        .filter(|file| file.is_file());
    let file = cli
        .mask_file
        .clone()
        .or_else(|| env("LOOM_MASK_FILE").map(PathBuf::from))
        .or(beside_store);
    if let Some(file) = file {
        let text = std::fs::read_to_string(&file).map_err(|error| {
            ConsoleError::bad_request(format!(
                "cannot read the mask file {}: {error}",
                file.display()
            ))
        })?;
        paths.extend(loom_kernel::mask_file_paths(&text).map(str::to_owned));
    }
    DataClassification::mask_paths(paths)
        .map_err(|error| ConsoleError::bad_request(error.to_string()))
}

async fn run(cli: Cli) -> Result<(), ConsoleError> {
    let classification = classification(&cli)?;
    let backend = backend(&cli).await?;
    let json = cli.json;
    match cli.command {
        Command::Executions {
            status,
            flow,
            limit,
            before,
            since,
            ended_since,
            id_prefix,
            parent,
        } => {
            // Refused here too, before any store is read: `--limit 0` is a mistake.
            loom_console::list_limit(limit)?;
            let within = |age: Option<String>| -> Result<Option<u64>, ConsoleError> {
                age.map(|age| loom_console::parse_age(&age).map(loom_console::cutoff_ms))
                    .transpose()
            };
            let filter = ListFilter {
                status: status.as_deref().map(parse_status).transpose()?,
                flow,
                limit,
                before,
                id_prefix,
                parent,
                started_from_ms: within(since)?,
                ended_from_ms: within(ended_since)?,
                ..ListFilter::default()
            };
            let listed = match &backend {
                Backend::File(path) => {
                    let store = open_file(path, false)?;
                    loom_console::list_executions(&store, &filter).await?
                }
                Backend::Postgres(store) => loom_console::list_executions(store, &filter).await?,
                Backend::Admin(client) => client.executions(&filter).await?,
            };
            print_executions(&listed, json);
        }
        Command::Show { id, full } => {
            let execution = loom_console::execution_id(&id)?;
            let mut shown = match &backend {
                Backend::File(path) => {
                    let store = open_file(path, false)?;
                    loom_console::show(&store, &execution, &classification).await?
                }
                Backend::Postgres(store) => {
                    loom_console::show(store, &execution, &classification).await?
                }
                Backend::Admin(client) => client.show(&id).await?,
            };
            mask_events(&classification, &mut shown.events);
            for payload in [&mut shown.outcome.input, &mut shown.outcome.output]
                .into_iter()
                .flatten()
            {
                *payload = classification.mask_message_value(payload);
            }
            for gate in &mut shown.state.pending_gates {
                if let Some(request) = &mut gate.request {
                    *request = classification.mask_message_value(request);
                }
            }
            print_show(&shown, json, full);
        }
        Command::Tail {
            id,
            from,
            no_follow,
        } => tail(&backend, &id, from, !no_follow, &classification, json).await?,
        Command::InDoubt => {
            let listed = match &backend {
                Backend::File(path) => {
                    let store = open_file(path, false)?;
                    loom_console::in_doubt(&store, loom_console::now_ms()).await?
                }
                Backend::Postgres(store) => {
                    loom_console::in_doubt(store, loom_console::now_ms()).await?
                }
                Backend::Admin(client) => client.in_doubt().await?,
            };
            print_in_doubt(&listed, json);
        }
        Command::Resolve {
            id,
            step,
            verdict,
            code,
            operator,
        } => {
            let execution = loom_console::execution_id(&id)?;
            let verdict = match verdict {
                VerdictArgs {
                    completed: Some(output),
                    ..
                } => Verdict::Completed {
                    output: parse_payload(&output, "--completed")?,
                },
                VerdictArgs {
                    failed: Some(message),
                    ..
                } => Verdict::Failed {
                    error: ErrorInfo::new(code, message),
                },
                _ => Verdict::Retry,
            };
            let operator = operator
                .or_else(|| env("LOOM_OPERATOR"))
                .or_else(|| env("USER"));
            let note = match &backend {
                Backend::File(path) => {
                    let store = open_file(path, true)?;
                    loom_console::resolve(&store, &execution, &step, verdict, operator).await?;
                    Some(loom_console::GOES_ON_WHEN_RECOVERED)
                }
                Backend::Postgres(store) => {
                    loom_console::resolve(store, &execution, &step, verdict, operator).await?;
                    give_back(store).await;
                    Some(loom_console::GOES_ON_WHEN_RECOVERED_POSTGRES)
                }
                Backend::Admin(client) => {
                    client
                        .resolve(&id, &step, &verdict, operator.as_deref())
                        .await?;
                    None
                }
            };
            done(
                json,
                &format!("verdict recorded on step '{step}' of execution {id}"),
                note,
            );
        }
        Command::Resume {
            id,
            event_type,
            key,
            payload,
            operator,
        } => {
            let operator = operator.or_else(|| env("LOOM_OPERATOR"));
            let execution = loom_console::execution_id(&id)?;
            let payload = parse_payload(&payload, "the payload")?;
            let note = match &backend {
                Backend::File(path) => {
                    let store = open_file(path, true)?;
                    loom_console::resume(&store, &execution, &event_type, &key, payload).await?;
                    Some(loom_console::GOES_ON_WHEN_RECOVERED)
                }
                Backend::Postgres(store) => {
                    loom_console::resume(store, &execution, &event_type, &key, payload).await?;
                    give_back(store).await;
                    Some(loom_console::GOES_ON_WHEN_RECOVERED_POSTGRES)
                }
                Backend::Admin(client) => {
                    client
                        .resume_by(
                            &id,
                            &event_type,
                            &key,
                            &payload.to_value(),
                            operator.as_deref(),
                        )
                        .await?;
                    None
                }
            };
            done(
                json,
                &format!("execution {id} resumed ({event_type}, key '{key}')"),
                note,
            );
        }
        Command::Cancel { id, reason } => {
            let execution = loom_console::execution_id(&id)?;
            match &backend {
                Backend::File(path) => {
                    let store = open_file(path, true)?;
                    loom_console::cancel(&store, &execution, reason).await?;
                }
                Backend::Postgres(store) => {
                    loom_console::cancel(store, &execution, reason).await?;
                    give_back(store).await;
                }
                Backend::Admin(client) => client.cancel(&id, reason.as_deref()).await?,
            }
            done(json, &format!("execution {id} cancelled"), None);
        }
        Command::Flows => {
            let flows = admin_only(&backend, "list the flows")?.flows().await?;
            if json {
                print_json(&flows);
            } else {
                for flow in &flows {
                    let input = flow.input_schema.as_ref().map_or_else(
                        || "any JSON".to_owned(),
                        |schema| loom_console::describe(schema, 0),
                    );
                    out!("{} v{}  input: {input}", flow.name, flow.version);
                }
            }
        }
        Command::Start { flow, input, id } => {
            let client = admin_only(&backend, "start an execution")?;
            let input = parse_payload(&input, "the input")?.to_value();
            let started = client.start(&flow, &input, id.as_deref()).await?;
            if json {
                print_json(&started);
            } else {
                out!(
                    "started execution {} ({} v{})",
                    started.execution,
                    started.flow,
                    started.version
                );
            }
        }
        Command::CancelMany {
            status,
            flow,
            id_prefix,
            since,
            all,
            dry_run,
            limit,
            reason,
        } => {
            let client = admin_only(&backend, "cancel by filter")?;
            let request = loom_console::CancelManyRequest {
                status,
                flow,
                id_prefix,
                started_from_ms: since
                    .map(|age| loom_console::parse_age(&age).map(loom_console::cutoff_ms))
                    .transpose()?,
                all,
                dry_run,
                limit,
                reason,
                ..loom_console::CancelManyRequest::default()
            };
            let answer = client.cancel_many(&request).await?;
            print_cancel_many(&answer, json);
        }
        Command::Store { command } => {
            let Backend::File(file) = &backend else {
                return Err(ConsoleError::bad_request(
                    "`loom store` works on a store file: give --store FILE (not --admin or a postgres:// URL)",
                ));
            };
            match command {
                StoreCommand::Check => store_check(file, json).await?,
                StoreCommand::Salvage { out } => store_salvage(&file.path, &out, json)?,
            }
        }
        Command::ExportLog { out, executions } => {
            let only = executions
                .iter()
                .map(|id| loom_console::execution_id(id))
                .collect::<Result<Vec<_>, _>>()?;
            let written = match &backend {
                Backend::File(path) => {
                    let store = open_file(path, false)?;
                    export(&store, &out, &only).await?
                }
                Backend::Postgres(store) => export(store, &out, &only).await?,
                Backend::Admin(client) => export_admin(client, &out, &executions).await?,
            };
            done(
                json,
                &format!("wrote {written} executions to {}", out.display()),
                None,
            );
        }
        Command::Purge {
            ended_before,
            ended_before_ms,
            batch,
            dry_run,
        } => {
            let cutoff = match (ended_before_ms, ended_before) {
                (Some(at), _) => at,
                (None, Some(age)) => loom_console::cutoff_ms(loom_console::parse_age(&age)?),
                (None, None) => {
                    return Err(ConsoleError::bad_request(
                        "give --ended-before AGE (30d, 12h) or --ended-before-ms UNIX_MS",
                    ));
                }
            };
            purge(&backend, cutoff, batch, dry_run, json).await?;
        }
    }
    Ok(())
}

/// `loom purge`: deletes (or, with `dry_run`, lists) the executions that ended before the
/// cutoff, a batch at a time, printing each id as its batch is committed.
async fn purge(
    backend: &Backend,
    ended_before_ms: u64,
    batch: usize,
    dry_run: bool,
    json: bool,
) -> Result<(), ConsoleError> {
    if batch == 0 || batch > loom_console::MAX_BATCH {
        return Err(ConsoleError::bad_request(format!(
            "--batch {batch} is out of range: 1 to {}",
            loom_console::MAX_BATCH
        )));
    }
    let verb = if dry_run { "would delete" } else { "deleted" };
    let mut listed: Vec<String> = Vec::new();
    let mut print = |ids: &[String]| {
        if !json {
            for id in ids {
                out!("{verb} {id}");
            }
        }
        listed.extend_from_slice(ids);
    };
    match backend {
        Backend::File(path) => {
            let store = open_file(path, !dry_run)?;
            if dry_run {
                let found = loom_console::would_purge(&store, ended_before_ms).await?;
                print(&found.iter().map(|id| id.to_string()).collect::<Vec<_>>());
            } else {
                loom_console::purge(&store, ended_before_ms, batch, |ids| {
                    print(&ids.iter().map(|id| id.to_string()).collect::<Vec<_>>())
                })
                .await?;
            }
        }
        Backend::Postgres(store) => {
            // Ended executions hold no lease: deleting them races no worker.
            if dry_run {
                let found = loom_console::would_purge(store, ended_before_ms).await?;
                print(&found.iter().map(|id| id.to_string()).collect::<Vec<_>>());
            } else {
                loom_console::purge(store, ended_before_ms, batch, |ids| {
                    print(&ids.iter().map(|id| id.to_string()).collect::<Vec<_>>())
                })
                .await?;
            }
        }
        Backend::Admin(client) => {
            if dry_run {
                print(&client.would_delete_ended(ended_before_ms).await?);
            } else {
                loop {
                    let ids = client.delete_ended(ended_before_ms, batch).await?;
                    print(&ids);
                    if ids.len() < batch {
                        break;
                    }
                }
            }
        }
    }
    let cutoff = utc(ended_before_ms);
    if json {
        print_json(&serde_json::json!({
            "dryRun": dry_run,
            "endedBeforeMs": ended_before_ms,
            "count": listed.len(),
            "executions": listed,
        }));
    } else {
        out!(
            "{verb} {} execution{} that ended before {cutoff}",
            listed.len(),
            if listed.len() == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// Gives back the lease a write on PostgreSQL took, so that any worker's `recover()` drives
/// the execution at once; a lease left behind would only run out later.
async fn give_back(store: &ShardedStore) {
    if let Err(error) = store.release_leases().await {
        tracing::warn!(%error, "the lease taken for this write runs out by itself");
    }
}

fn parse_payload(text: &str, what: &str) -> Result<Payload, ConsoleError> {
    let value: Value = serde_json::from_str(text).map_err(|error| {
        ConsoleError::bad_request(format!(
            "{what} is not JSON ({error}): quote it for the shell, e.g. '{{\"ok\": true}}', or '\"text\"' for a string"
        ))
    })?;
    Payload::try_from_value(&value)
        .map_err(|error| ConsoleError::bad_request(format!("{what} cannot be recorded: {error}")))
}

/// The admin API's client, for a command that only the process with the flows can carry out.
fn admin_only<'a>(backend: &'a Backend, what: &str) -> Result<&'a AdminClient, ConsoleError> {
    match backend {
        Backend::Admin(client) => Ok(client),
        _ => Err(ConsoleError::refused(format!(
            "only the process that runs the flows can {what}: go through its admin API (loom --admin http://127.0.0.1:PORT --token TOKEN ...)"
        ))),
    }
}

fn print_cancel_many(answer: &loom_console::CancelManyAnswer, json: bool) {
    if json {
        print_json(answer);
        return;
    }
    let more = if answer.more {
        " (more match: run it again)"
    } else {
        ""
    };
    if answer.dry_run {
        for id in &answer.executions {
            out!("would cancel {id}");
        }
        out!(
            "{} executions would be cancelled{more}; nothing was cancelled",
            thousands(answer.matched as u64)
        );
        return;
    }
    for id in &answer.cancelled {
        out!("cancelled {id}");
    }
    for skipped in &answer.skipped {
        out!("skipped {}: {}", skipped.execution, skipped.reason);
    }
    out!(
        "cancelled {} executions ({} skipped){more}",
        thousands(answer.cancelled.len() as u64),
        answer.skipped.len()
    );
}

/// `loom store check`: the file's pages (redb's check, in memory), then every log read and
/// folded, with progress on stderr; damage is reported and exits 4.
async fn store_check(file: &StoreFile, json: bool) -> Result<(), ConsoleError> {
    use futures::TryStreamExt;
    let path = file.path.as_path();
    eprintln!("checking the pages of {} ...", path.display());
    let pages = match DiskStore::check_pages(path) {
        Ok(true) => "ok".to_owned(),
        Ok(false) => {
            "ok; the allocator state needed repair (space leaked, no data lost: the next open for writing repairs it)".to_owned()
        }
        Err(OpenError::AlreadyOpen { .. }) => return Err(held_elsewhere(path)),
        Err(error) => format!("damaged: {error}"),
    };
    let store = open_file(file, false)?;
    let mut listed = store.executions();
    let (mut read, mut events, mut damaged) = (0u64, 0u64, Vec::new());
    while let Some(summary) = listed
        .try_next()
        .await
        .map_err(|error| ConsoleError::unavailable(error.to_string()))?
    {
        match store.read_all(&summary.id).await {
            Ok(log) => {
                events += log.len() as u64;
                if let Err(error) = loom_kernel::ExecutionState::fold(&log) {
                    damaged.push(format!("{}: its log does not fold: {error}", summary.id));
                }
            }
            Err(error) => damaged.push(format!("{}: {error}", summary.id)),
        }
        read += 1;
        if read % 10_000 == 0 {
            eprintln!("  {} executions read", thousands(read));
        }
    }
    let logs = format!(
        "{} executions, {} events read and folded",
        thousands(read),
        thousands(events)
    );
    let whole = !pages.starts_with("damaged") && damaged.is_empty();
    if json {
        out!(
            "{}",
            serde_json::json!({"ok": whole, "pages": pages, "executions": read, "events": events, "damaged": damaged})
        );
    } else {
        out!("pages     {pages}");
        out!("logs      {logs}");
        for line in &damaged {
            out!("damaged   {line}");
        }
    }
    if whole {
        Ok(())
    } else {
        Err(ConsoleError::unavailable(format!(
            "store file {} is damaged ({} logs unreadable{}): `loom --store FILE store salvage --out DIR` exports every log still readable",
            path.display(),
            damaged.len(),
            if pages.starts_with("damaged") {
                ", pages damaged"
            } else {
                ""
            }
        )))
    }
}

/// `loom store salvage`: every log readable from the file's pages and journal, without redb,
/// written to `out` as JSON Lines.
fn store_salvage(path: &Path, out: &Path, json: bool) -> Result<(), ConsoleError> {
    eprintln!("salvaging {} ...", path.display());
    let salvaged = DiskStore::salvage(path, |done, total| {
        eprintln!("  {} of {} MiB read", done >> 20, total >> 20);
    })
    .map_err(|error| ConsoleError::unavailable(error.to_string()))?;
    std::fs::create_dir_all(out).map_err(|error| {
        ConsoleError::unavailable(format!("cannot create {}: {error}", out.display()))
    })?;
    let mut events = 0;
    for log in &salvaged.logs {
        events += log.len();
        loom_replay_check::write_log(out, log)
            .map_err(|error| ConsoleError::unavailable(error.to_string()))?;
    }
    if json {
        let gaps: Vec<_> = salvaged
            .gaps
            .iter()
            .map(|(execution, kept, beyond)| serde_json::json!({"execution": execution.as_str(), "kept": kept, "leftOut": beyond}))
            .collect();
        out!(
            "{}",
            serde_json::json!({"ok": true, "logs": salvaged.logs.len(), "events": events, "fromJournal": salvaged.from_journal, "gaps": gaps, "conflicts": salvaged.conflicts, "journalError": salvaged.journal_error})
        );
        return Ok(());
    }
    out!(
        "salvaged {} logs ({} events; {} from the journal) to {}",
        thousands(salvaged.logs.len() as u64),
        thousands(events as u64),
        thousands(salvaged.from_journal),
        out.display()
    );
    for (execution, kept, beyond) in &salvaged.gaps {
        out!("gap       {execution}: {kept} events kept, {beyond} past a missing one left out");
    }
    if salvaged.conflicts > 0 {
        out!(
            "conflicts {} events found twice with different records (an id deleted and started again): the journal's or the first found kept",
            salvaged.conflicts
        );
    }
    if let Some(error) = &salvaged.journal_error {
        out!("journal   not read: {error}");
    }
    out!(
        "check them with `replay-check --logs {}`; a log deleted by retention may come back if its pages were never reused",
        out.display()
    );
    Ok(())
}

fn done(json: bool, message: &str, note: Option<&str>) {
    if json {
        let value = serde_json::json!({"ok": true, "message": message, "note": note});
        out!("{value}");
    } else {
        out!("{message}");
        if let Some(note) = note {
            out!("{note}");
        }
    }
}

async fn export<S: EventStore>(
    store: &S,
    out: &Path,
    only: &[ExecutionId],
) -> Result<usize, ConsoleError> {
    std::fs::create_dir_all(out).map_err(|error| {
        ConsoleError::bad_request(format!("cannot create {}: {error}", out.display()))
    })?;
    let ids = if only.is_empty() {
        store
            .executions()
            .map_ok(|summary| summary.id)
            .try_collect::<Vec<_>>()
            .await?
    } else {
        only.to_vec()
    };
    // One execution that cannot be exported stops none of the others: each failure is said,
    // and the command fails once all were tried.
    let mut written = 0;
    let mut failed = Vec::new();
    for id in ids {
        match export_one(store, out, &id).await {
            Ok(true) => written += 1,
            Ok(false) => {}
            Err(error) => failed.push(error.message),
        }
    }
    if failed.is_empty() {
        return Ok(written);
    }
    Err(ConsoleError::internal(format!(
        "wrote {written} executions to {}; {} could not be exported: {}",
        out.display(),
        failed.len(),
        failed.join("; ")
    )))
}

async fn export_one<S: EventStore>(
    store: &S,
    out: &Path,
    id: &ExecutionId,
) -> Result<bool, ConsoleError> {
    let log = store.read_all(id).await?;
    if log.is_empty() {
        return Err(ConsoleError::unknown_execution(id.as_str()));
    }
    let path = loom_replay_check::write_log(out, &log).map_err(|error| {
        ConsoleError::internal(format!("cannot write the log of {id}: {error}"))
    })?;
    Ok(path.is_some())
}

/// `export-log --admin`: the logs of a live server, a page at a time, written as `export`
/// writes them.
async fn export_admin(
    client: &AdminClient,
    out: &Path,
    only: &[String],
) -> Result<usize, ConsoleError> {
    std::fs::create_dir_all(out).map_err(|error| {
        ConsoleError::bad_request(format!("cannot create {}: {error}", out.display()))
    })?;
    let mut written = 0;
    let mut write = |page: ExportPage| -> Result<(), ConsoleError> {
        for text in page.logs {
            let log = text
                .lines()
                .map(loom_kernel::EventEnvelope::from_json)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| {
                    ConsoleError::internal(format!(
                        "the admin API sent a log this client cannot read ({error}): is it the same version?"
                    ))
                })?;
            let path = loom_replay_check::write_log(out, &log).map_err(|error| {
                ConsoleError::internal(format!("cannot write an exported log: {error}"))
            })?;
            if path.is_some() {
                written += 1;
            }
        }
        Ok(())
    };
    if !only.is_empty() {
        for id in only {
            write(client.export_page(Some(id), None, 1).await?)?;
        }
        return Ok(written);
    }
    let mut after: Option<String> = None;
    loop {
        let page = client.export_page(None, after.as_deref(), 100).await?;
        let next = page.next.clone();
        write(page)?;
        match next {
            Some(next) => after = Some(next),
            None => return Ok(written),
        }
    }
}

/// How often `tail` looks at a store file or PostgreSQL again.
const POLL: Duration = Duration::from_millis(500);

async fn tail(
    backend: &Backend,
    id: &str,
    mut from: u64,
    follow: bool,
    classification: &DataClassification,
    json: bool,
) -> Result<(), ConsoleError> {
    let execution = loom_console::execution_id(id)?;
    let mut first = true;
    loop {
        let mut page: EventsPage = match backend {
            Backend::File(path) => {
                // Opened and closed at each look, so the file is never held for long: the
                // server may start meanwhile (and then this says to use --admin).
                let store = open_file(path, false)?;
                loom_console::events_from(&store, &execution, from, 4096, classification).await?
            }
            Backend::Postgres(store) => {
                loom_console::events_from(store, &execution, from, 4096, classification).await?
            }
            Backend::Admin(client) => {
                let wait = if follow && !first {
                    Duration::from_secs(25)
                } else {
                    Duration::ZERO
                };
                client.events(id, from, wait).await?
            }
        };
        first = false;
        mask_events(classification, &mut page.events);
        for event in &page.events {
            print_event(event, json, false);
            from = event.seq + 1;
        }
        let caught_up = from >= page.head;
        if !follow || (page.ended && caught_up) {
            return Ok(());
        }
        if caught_up && !matches!(backend, Backend::Admin(_)) {
            tokio::time::sleep(POLL).await;
        }
    }
}

// ---- text output ----

fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => out!("{text}"),
        Err(error) => eprintln!("loom: cannot print JSON: {error}"),
    }
}

/// Prints rows under headers, columns as wide as their widest cell.
fn print_table(indent: &str, headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::from(indent);
        let last = cells.len().saturating_sub(1);
        for (index, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if index == last {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        out!("{}", text.trim_end());
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

fn print_executions(page: &ExecutionList, json: bool) {
    if json {
        return print_json(page);
    }
    let listed = &page.executions;
    if listed.is_empty() {
        match page.total {
            Some(0) | None => out!("no executions"),
            Some(total) => out!(
                "no executions on this page ({} match, none after the cursor)",
                thousands(total)
            ),
        }
        return;
    }
    let now = loom_console::now_ms();
    let rows: Vec<Vec<String>> = listed
        .iter()
        .map(|view| {
            vec![
                view.id.clone(),
                view.status.clone(),
                flow_label(view),
                view.events.to_string(),
                view.started_at_ms.map_or("-".into(), utc),
                view.last_event_at_ms.map_or("-".into(), |ms| ago(now, ms)),
            ]
        })
        .collect();
    print_table(
        "",
        &[
            "ID",
            "STATUS",
            "FLOW",
            "EVENTS",
            "STARTED (UTC)",
            "LAST EVENT",
        ],
        &rows,
    );
    let counts: Vec<String> = loom_console::STATUSES
        .into_iter()
        .map(loom_console::status_name)
        .filter_map(|status| {
            let count = listed.iter().filter(|view| view.status == status).count();
            (count > 0).then(|| format!("{count} {status}"))
        })
        .collect();
    // Never "5 executions" when 5,000 match: what is shown, of how many, and how to go on.
    let of = match page.total {
        Some(total) => format!(" of {}", thousands(total)),
        None => String::new(),
    };
    out!(
        "\n{} shown{of} (newest first): {}",
        thousands(listed.len() as u64),
        counts.join(", ")
    );
    if let Some(next) = &page.next_before {
        match page.remaining {
            Some(remaining) => out!("{} more: --before {next}", thousands(remaining)),
            None => out!("more: --before {next}"),
        }
    }
}

fn flow_label(view: &ExecutionView) -> String {
    let label = match (&view.flow, view.flow_version) {
        (Some(flow), Some(version)) => format!("{flow} v{version}"),
        (Some(flow), None) => flow.clone(),
        _ => "-".into(),
    };
    if view.flow_not_registered {
        format!("{label} (not registered here)")
    } else {
        label
    }
}

fn print_show(shown: &ShowView, json: bool, full: bool) {
    if json {
        return print_json(shown);
    }
    let view = &shown.execution;
    let state = &shown.state;
    let now = loom_console::now_ms();
    let outcome = &shown.outcome;
    out!("execution     {}", view.id);
    out!("flow          {}", flow_label(view));
    out!("status        {}", view.status);
    if view.flow_not_registered {
        out!(
            "waits for     a server that registers this flow and version: the one answering here does not, so nothing drives it"
        );
    }
    // How it ended first: the question `show` is asked.
    if let Some(failure) = &outcome.failure {
        out!("failure       {}: {}", failure.code, failure.message);
    }
    if let Some(output) = &outcome.output {
        out!("output        {}", cut(&output.to_string(), full));
    }
    if view.status == "cancelled" {
        out!(
            "cancelled     {}",
            outcome
                .cancel_reason
                .as_deref()
                .unwrap_or("(no reason given)")
        );
    }
    if let Some(input) = &outcome.input {
        out!("input         {}", cut(&input.to_string(), full));
    }
    if let Some(parent) = &outcome.parent {
        out!("parent        {parent}  (loom show {})", shell_word(parent));
    }
    for child in &outcome.children {
        out!(
            "child         {}  ({})",
            child.id,
            if child.ended { "ended" } else { "not ended" }
        );
    }
    out!("events        {}", view.events);
    if let Some(started) = view.started_at_ms {
        out!("started       {} UTC", utc(started));
    }
    if let Some(last) = view.last_event_at_ms {
        out!("last event    {} UTC ({})", utc(last), ago(now, last));
    }
    match state.budget {
        Some(budget) => out!("budget        {} spent of {budget}", state.budget_spent),
        None => out!("budget        {} spent, no limit", state.budget_spent),
    }
    if !state.capabilities.is_empty() {
        out!("capabilities  {}", state.capabilities.join(", "));
    }
    if state.steps_in_flight > 0 {
        out!(
            "in flight     {} step(s) started with no outcome",
            state.steps_in_flight
        );
    }
    if let Some(lease) = &shown.lease {
        out!("lease         {}", lease.summary());
    }
    out!();
    if state.steps.is_empty() {
        out!("steps: none");
    } else {
        out!("steps");
        let rows: Vec<Vec<String>> = state
            .steps
            .iter()
            .map(|step| {
                let running = match (step.status.as_str(), step.running_ms) {
                    // The attempt running now counts up from its start.
                    ("started", _) => match (step.started_at_ms, now) {
                        (Some(start), Some(now)) => {
                            format!("{} so far", duration(now.saturating_sub(start)))
                        }
                        _ => "-".into(),
                    },
                    (_, Some(ms)) => duration_precise(ms),
                    (_, None) => "-".into(),
                };
                let in_doubt = match (step.in_doubt_since_ms, step.in_doubt_ms, now) {
                    (Some(since), closed, Some(now)) => format!(
                        "{} so far",
                        duration(closed.unwrap_or(0) + now.saturating_sub(since))
                    ),
                    (_, Some(ms), _) => duration_precise(ms),
                    _ => "-".into(),
                };
                vec![
                    step.step_id.clone(),
                    step.effect.clone(),
                    step.status.clone(),
                    step.attempt.map_or("-".into(), |a| a.to_string()),
                    step.seq.to_string(),
                    running,
                    in_doubt,
                    step.waiting_ms.map_or("-".into(), duration_precise),
                ]
            })
            .collect();
        print_table(
            "  ",
            &[
                "STEP", "EFFECT", "STATUS", "ATTEMPTS", "SEQ", "RUNNING", "IN DOUBT", "WAITING",
            ],
            &rows,
        );
    }
    if !state.pending_gates.is_empty() {
        out!("pending gates");
        let rows: Vec<Vec<String>> = state
            .pending_gates
            .iter()
            .map(|gate| {
                let waiting = match (gate.opened_at_ms, now) {
                    (Some(opened), Some(now)) => duration(now.saturating_sub(opened)),
                    _ => "-".into(),
                };
                vec![
                    gate.gate_id.clone(),
                    gate.event_type.clone(),
                    gate.correlation_key.clone(),
                    gate.seq.to_string(),
                    waiting,
                ]
            })
            .collect();
        print_table(
            "  ",
            &["GATE", "EVENT TYPE", "KEY", "SEQ", "WAITING"],
            &rows,
        );
        for gate in &state.pending_gates {
            if let Some(request) = &gate.request {
                let mut text = request.to_string();
                if !full && text.chars().count() > 100 {
                    text = text.chars().take(99).collect::<String>() + "…";
                }
                out!("  {} asks: {text}", gate.gate_id);
            }
        }
    }
    if !state.decisions.is_empty() {
        let decisions: Vec<String> = state
            .decisions
            .iter()
            .map(|d| format!("{} (seq {})", d.step_id, d.seq))
            .collect();
        out!("decisions     {}", decisions.join(", "));
    }
    let mut next = Vec::new();
    for step in &state.steps_in_doubt {
        next.push(format!(
            "loom resolve {} {} --completed <json> | --failed <message> | --retry",
            shell_word(&view.id),
            shell_word(step)
        ));
    }
    // A timer's or a child's gate (`loom.` types) is the runtime's to resume, not the operator's.
    for gate in state
        .pending_gates
        .iter()
        .filter(|gate| !gate.event_type.starts_with("loom."))
    {
        next.push(format!(
            "loom resume {} {} {} <json>",
            shell_word(&view.id),
            shell_word(&gate.event_type),
            shell_word(&gate.correlation_key)
        ));
        // What <json> must be, when the gate declared it (LD-031).
        if let Some(expects) = &gate.expects {
            let title = expects
                .schema
                .get("title")
                .and_then(Value::as_str)
                .map(|title| format!("{title}, "))
                .unwrap_or_default();
            next.push(format!(
                "  <json> must fit {title}the JSON Schema {}",
                cut(&expects.schema.to_string(), full)
            ));
            next.push(format!(
                "  for example: {}",
                shell_word(&expects.example.to_string())
            ));
        }
    }
    if !next.is_empty() {
        out!();
        out!("waiting for you:");
        for line in next {
            out!("  {line}");
        }
    }
    out!();
    out!("events");
    for event in &shown.events {
        print_event(event, false, full);
    }
}

/// A payload on one line, cut to 100 characters unless `full`.
fn cut(text: &str, full: bool) -> String {
    if full || text.chars().count() <= 100 {
        return text.to_owned();
    }
    text.chars().take(99).collect::<String>() + "…"
}

fn print_event(event: &EventView, json: bool, full: bool) {
    if json {
        match serde_json::to_string(event) {
            Ok(text) => out!("{text}"),
            Err(error) => eprintln!("loom: cannot print JSON: {error}"),
        }
        return;
    }
    let mut detail = event.event.clone();
    if let Value::Object(fields) = &mut detail {
        fields.remove("type");
    }
    let mut detail = detail.to_string();
    if !full && detail.chars().count() > 120 {
        detail = detail.chars().take(119).collect::<String>() + "…";
    }
    out!(
        "  {:>4}  {:<19}  {:<19}  {detail}",
        event.seq,
        event.recorded_at_ms.map_or("-".into(), utc),
        event.event_type
    );
}

fn print_in_doubt(listed: &[InDoubtView], json: bool) {
    if json {
        return print_json(&listed);
    }
    if listed.is_empty() {
        out!("no step is in doubt");
        return;
    }
    // The lease column only on a store with leases.
    let leased = listed.iter().any(|step| step.lease.is_some());
    let rows: Vec<Vec<String>> = listed
        .iter()
        .map(|step| {
            vec![
                match step.cancelled {
                    true => format!("{} (cancelled)", step.execution),
                    false => step.execution.clone(),
                },
                step.step_id.clone(),
                step.effect.clone(),
                step.attempt.to_string(),
                step.idempotency_key.clone(),
                step.waiting_ms.map_or("-".into(), duration),
                step.reason.as_ref().map_or("-".into(), |reason| {
                    format!("{}: {}", reason.code, reason.message)
                }),
            ]
            .into_iter()
            .chain(leased.then(|| {
                step.lease.as_ref().map_or("-".into(), |lease| {
                    let liveness = if lease.live { "live" } else { "not live" };
                    format!("{} #{} {liveness}", lease.holder, lease.token)
                })
            }))
            .collect()
        })
        .collect();
    let mut headers = vec![
        "EXECUTION",
        "STEP",
        "EFFECT",
        "ATTEMPT",
        "IDEMPOTENCY KEY",
        "WAITING",
        "REASON",
    ];
    if leased {
        headers.push("LAST LEASE HOLDER");
    }
    print_table("", &headers, &rows);
    out!();
    if listed
        .iter()
        .any(|step| step.lease.as_ref().is_some_and(|l| l.live))
    {
        out!(
            "A live lease: its worker may be paused, not dead, and may still send the step's call. Before --retry, read docs/EFFECTS.md, \"Paused workers\"."
        );
    }
    out!("Look the idempotency key up at the effect's receiver, then give a verdict:");
    out!("  loom resolve <execution> <step> --completed <json> | --failed <message> | --retry");
    if listed.iter().any(|step| step.cancelled) {
        out!(
            "A step of a cancelled execution takes no verdict (its log is closed), but its effect may have happened: settle it with the receiver."
        );
    }
}

/// A word as a shell would need it: quoted when it holds anything but plain characters.
fn ago(now: Option<u64>, ms: u64) -> String {
    match now {
        Some(now) => format!("{} ago", duration(now.saturating_sub(ms))),
        None => utc(ms),
    }
}

/// A short duration to the millisecond: `12ms`, `1.250s`, or [`duration`] past a minute.
fn duration_precise(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{}.{:03}s", ms / 1000, ms % 1000),
        _ => duration(ms),
    }
}

/// A duration for people: `45s`, `3m12s`, `2h05m`, `4d03h`.
fn duration(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86_400 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_people_write_them() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_796_083_200_000 + 3_723_000), "2026-12-01 01:02:03");
        assert_eq!(duration(59_999), "59s");
        assert_eq!(duration(192_000), "3m12s");
        assert_eq!(duration(7_500_000), "2h05m");
        assert_eq!(duration(356_400_000), "4d03h");
        assert_eq!(duration_precise(12), "12ms");
        assert_eq!(duration_precise(1250), "1.250s");
        assert_eq!(duration_precise(192_000), "3m12s");
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn shell_words_are_quoted_when_needed() {
        assert_eq!(shell_word("charge#1"), "'charge#1'");
        assert_eq!(shell_word("order-1"), "order-1");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}
