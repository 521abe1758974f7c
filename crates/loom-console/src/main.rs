//! `loom`: the operator's command line. See `docs/CONSOLE.md`.
//!
//! It works on a store directly (`--store FILE` when no process holds the file, or
//! `--store postgres://...` while workers run) or through the admin API of the process that
//! runs the flows (`--admin URL --token TOKEN`). Errors go to stderr and say what to do; the
//! exit code says what kind of failure it was (see `EXIT_CODES`).

mod cli;

use std::process::ExitCode;

use clap::Parser;
use loom_console::ConsoleError;

use cli::args::{Cli, Command};
use cli::backend::{backend, classification};
use cli::{export, purge, reads, store_file, through_admin, writes};

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

/// Carries out the command the command line names.
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
            reads::executions(
                &backend,
                status,
                flow,
                limit,
                before,
                since,
                ended_since,
                id_prefix,
                parent,
                json,
            )
            .await
        }
        Command::Show { id, full } => reads::show(&backend, &classification, &id, full, json).await,
        Command::Tail {
            id,
            from,
            no_follow,
        } => reads::tail(&backend, &id, from, !no_follow, &classification, json).await,
        Command::InDoubt => reads::in_doubt(&backend, json).await,
        Command::Resolve {
            id,
            step,
            verdict,
            code,
            operator,
        } => writes::resolve(&backend, id, step, verdict, code, operator, json).await,
        Command::Resume {
            id,
            event_type,
            key,
            payload,
            operator,
        } => writes::resume(&backend, id, event_type, key, payload, operator, json).await,
        Command::Cancel { id, reason } => writes::cancel(&backend, id, reason, json).await,
        Command::Flows => through_admin::flows(&backend, json).await,
        Command::Start { flow, input, id } => {
            through_admin::start(&backend, flow, input, id, json).await
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
            through_admin::cancel_many(
                &backend, status, flow, id_prefix, since, all, dry_run, limit, reason, json,
            )
            .await
        }
        Command::Store { command } => store_file::store(&backend, command, json).await,
        Command::ExportLog { out, executions } => {
            export::export_log(&backend, out, executions, json).await
        }
        Command::Purge {
            ended_before,
            ended_before_ms,
            batch,
            dry_run,
        } => {
            let cutoff = purge::cutoff(ended_before, ended_before_ms)?;
            purge::purge(&backend, cutoff, batch, dry_run, json).await
        }
    }
}
