//! The command line: its options, its commands, and the exit codes its help explains.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use loom_console::ConsoleError;
use loom_kernel::Payload;
use serde_json::Value;

pub(crate) const EXIT_CODES: &str = "\
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
pub(crate) struct Cli {
    /// The store: an embedded store file (opened only when no process holds it) or a
    /// postgres:// URL (several, comma-separated: the shard map of a sharded store, in its
    /// order; a URL may name the hosts of a replicated database, h1:5432,h2:5432, and the
    /// writable one is used). Default: $LOOM_STORE.
    #[arg(long, global = true, value_name = "FILE|URL")]
    pub(crate) store: Option<String>,
    /// The PostgreSQL schema holding Loom's tables (with a postgres:// store).
    #[arg(long, global = true, value_name = "NAME", default_value = "loom")]
    pub(crate) schema: String,
    /// The admin API of the process that runs the flows, e.g. http://127.0.0.1:7171.
    /// Default: $LOOM_ADMIN_URL (when --store is not given).
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) admin: Option<String>,
    /// The admin API's bearer token. Default: $LOOM_ADMIN_TOKEN.
    #[arg(long, global = true, value_name = "TOKEN")]
    pub(crate) token: Option<String>,
    /// Mask the value at this dot-path in every payload shown (K10-R6); repeatable. Added to
    /// the server's own classification when going through --admin.
    #[arg(long = "mask", global = true, value_name = "PATH")]
    pub(crate) masks: Vec<String>,
    /// A file of classified dot-paths, one per line (`#` starts a comment).
    /// Default: $LOOM_MASK_FILE, else `<store file>.masks` when it exists.
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) mask_file: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Open a store file whose journal was cut short (by a copy, a restore, a file system) as of
    /// the cut, losing the commits written after it, instead of refusing it. Only once a copy
    /// of the whole journal is known to be gone: a write command then makes the loss
    /// permanent.
    #[arg(long, global = true)]
    pub(crate) accept_cut_journal: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// `loom store ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
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
pub(crate) enum Command {
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
pub(crate) struct VerdictArgs {
    /// The step completed with this output (JSON).
    #[arg(long, value_name = "JSON")]
    pub(crate) completed: Option<String>,
    /// The step failed, with this message.
    #[arg(long, value_name = "MESSAGE")]
    pub(crate) failed: Option<String>,
    /// Run the effect again (needs --admin: only the process with the flows can).
    #[arg(long)]
    pub(crate) retry: bool,
}

pub(crate) fn parse_payload(text: &str, what: &str) -> Result<Payload, ConsoleError> {
    let value: Value = serde_json::from_str(text).map_err(|error| {
        ConsoleError::bad_request(format!(
            "{what} is not JSON ({error}): quote it for the shell, e.g. '{{\"ok\": true}}', or '\"text\"' for a string"
        ))
    })?;
    Payload::try_from_value(&value)
        .map_err(|error| ConsoleError::bad_request(format!("{what} cannot be recorded: {error}")))
}
