//! Loom quickstart: runs the `checkout` and `greet` flows of this crate on the embedded disk
//! store (or on PostgreSQL, with `--store postgres://...`), through the runtime.
//!
//! Three checkouts start and park on their approval gate; two are approved, each awaits a child
//! flow that sleeps on a durable timer, and they complete; the third keeps waiting. Then every execution of the store is listed, folded from its log, and one
//! log is shown event by event. The store is a file: run again, and the same starts return the
//! executions of the first run (start is idempotent on the id) and the checkout it left waiting
//! is resumed and completes. A third run finds everything completed.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use loom_kernel::Runtime;
use loom_kernel::{
    DiskStore, Event, EventStore, EventStoreExt, ExecutionId, ExecutionState, ExecutionStatus,
};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig};
use quickstart::{APPROVAL_EVENT, Order, Receipt, approval_key};
use serde::de::DeserializeOwned;
use serde_json::json;

#[derive(Debug, Parser)]
#[command(about = "Runs checkout and greet flows durably on the embedded store or PostgreSQL.")]
struct Args {
    /// The store: a file path (the embedded store, created with its directory if missing),
    /// or a PostgreSQL URL (`postgres://user@host:port/db`).
    #[arg(
        long,
        value_name = "PATH|URL",
        default_value = "target/quickstart/loom.redb"
    )]
    store: String,
    /// The PostgreSQL schema to use (with a `postgres://` store).
    #[arg(long, value_name = "NAME", default_value = "loom_quickstart")]
    schema: String,
}

/// What each execution may spend; the effects report their cost.
const BUDGET: u64 = 10;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // The runtime's logs on stderr: warnings by default, more with RUST_LOG (for example
    // `RUST_LOG=loom_kernel=debug`); see the README's "Logs and tracing".
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        // Colour codes only for a terminal: redirected to a file, they are noise.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match quickstart(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One sentence with its causes, not Rust's debug form.
            eprintln!("error: {}", loom_replay_check::error_sentence(&*error));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn quickstart(args: Args) -> Result<()> {
    if args.store.starts_with("postgres://") || args.store.starts_with("postgresql://") {
        // A stable worker id: run again after a crash, and this process takes its executions
        // back at once instead of waiting for their leases to run out.
        let config = PostgresStoreConfig::new(&args.store)
            .schema(&args.schema)
            .worker_id("quickstart")
            .lease(Duration::from_secs(10));
        let store = PostgresStore::connect(config)
            .await
            .context("connecting to PostgreSQL")?;
        let label = format!("PostgreSQL schema {}", args.schema);
        return run(store, &label).await;
    }
    let path = PathBuf::from(&args.store);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the directory {}", dir.display()))?;
    }
    let store = DiskStore::open(&path)
        .with_context(|| format!("opening the store at {}", path.display()))?;
    let label = store.path().display().to_string();
    run(store, &label).await
}

/// The quick start's job on any store; `label` names the store in what is printed.
async fn run<S: EventStore>(store: S, label: &str) -> Result<()> {
    println!("Loom quickstart, store {label}\n");
    let rt = quickstart::compose(Runtime::builder(store))
        .build()
        .context("composing the runtime")?;

    // Executions a crashed process left mid-flight are driven on; parked ones wait for a resume.
    let recovered = rt.recover().await.context("recovering the store")?;
    let earlier = rt
        .store()
        .list_all_executions()
        .await
        .context("listing executions")?;
    if earlier.is_empty() {
        println!("The store is empty: this is the first run.");
    } else {
        println!(
            "recover() drove on {recovered} execution(s) a stopped process left mid-flight; \
             the store holds {} from earlier runs.",
            earlier.len()
        );
    }
    let existed = |id: &ExecutionId| earlier.iter().any(|summary| summary.id == *id);

    // The same ids on every run: `start` is idempotent on the id, so a second run gets the
    // executions of the first (same flow, same input) and runs nothing again.
    let options = |id: &ExecutionId| quickstart::start_options(id).budget(BUDGET);
    let mut checkouts = Vec::new();
    for (n, (sku, qty)) in (1..).zip([("A1", 1), ("B2", 2), ("C3", 3)]) {
        let id = ExecutionId::new(format!("checkout-{n}"))?;
        let order = Order {
            sku: sku.into(),
            qty,
        };
        rt.start("checkout", &order, options(&id)).await?;
        checkouts.push(id);
    }
    let greet_id = ExecutionId::new("greet-1")?;
    rt.start("greet", "ada", options(&greet_id)).await?;

    println!(
        "\nStarted (or found, from an earlier run) {} executions:",
        checkouts.len() + 1
    );
    let mut to_approve = Vec::new();
    // Checkouts on their way that wait for no approval (an operator resumed the gate with
    // `loom resume` while no process ran): this run drives them to their end.
    let mut to_finish = Vec::new();
    for (n, id) in checkouts.iter().enumerate() {
        let state = rt.wait(id).await?;
        let origin = if existed(id) { "earlier run" } else { "new" };
        if state.pending_gates().is_empty() {
            println!("  {id} ({origin}): {}", state.status());
        } else {
            println!(
                "  {id} ({origin}): {}, at {}",
                state.status(),
                gates(&state)
            );
        }
        if awaits_approval(&state) {
            // This run approves two new checkouts and leaves the third waiting; a checkout an
            // earlier run left waiting is approved now: the next run resumes what this one left.
            if existed(id) || n < 2 {
                to_approve.push(id);
            }
        } else if !state.status().is_terminal() {
            to_finish.push(id);
        }
    }
    let state = rt.wait(&greet_id).await?;
    let greeting: String = output(&state, &greet_id)?;
    let origin = if existed(&greet_id) {
        "earlier run"
    } else {
        "new"
    };
    println!(
        "  {greet_id} ({origin}): {}, \"{greeting}\"",
        state.status()
    );

    if to_approve.is_empty() {
        println!("\nNothing waits for an approval.");
    } else {
        println!("\nApproving:");
    }
    for id in &to_approve {
        if existed(id) {
            println!("  {id}, left waiting by an earlier run: resumed now");
        } else {
            println!("  {id}");
        }
        let payload = json!({"action": "approve", "by": "alice"}).into();
        rt.resume(id, APPROVAL_EVENT, &approval_key(id), payload)
            .await?;
    }
    for id in &to_finish {
        println!("  {id}, resumed while no process ran: driven on now");
    }
    for id in to_approve.iter().chain(&to_finish) {
        // Through its parks: the checkout waits for its child `notify`, which sleeps.
        let state = rt.wait_ended(id).await?;
        if state.status() != ExecutionStatus::Completed {
            println!("  {id}: {}", state.status());
            continue;
        }
        let receipt: Receipt = output(&state, id)?;
        println!(
            "  {id}: {}, reservation {}, charged {} cents with key {}, \"{}\"",
            state.status(),
            receipt.reservation,
            receipt.charged,
            receipt.payment_key,
            receipt.message
        );
    }

    println!("\nEvery execution in the store, each folded from its log:");
    println!(
        "(spent/budget: cost units of the execution's budget (K3), reserve costs 1 and charge 2; \
         not money, which `charge` counts in cents)"
    );
    println!(
        "  {:<19} {:>6}  {:<10} {:<11} {:>12}  pending gates",
        "id", "events", "status", "flow", "spent/budget"
    );
    let all = rt.store().list_all_executions().await?;
    for summary in &all {
        let state = fold(&rt, &summary.id).await?;
        let flow = state
            .flow()
            .map_or("-".into(), |(f, v)| format!("{f} v{v}"));
        let budget = state.budget().map_or("-".into(), |b| b.to_string());
        let spent = format!("{}/{budget}", state.budget_spent());
        println!(
            "  {:<19} {:>6}  {:<10} {flow:<11} {spent:>12}  {}",
            summary.id.as_str(), // ExecutionId's Display ignores width
            summary.head,
            state.status(),
            gates(&state)
        );
    }

    let shown = &checkouts[1];
    println!("\nThe log of {shown}, one line per event (seq, type, step):");
    for envelope in rt.store().read_all(shown).await? {
        let (seq, event) = (envelope.seq, &envelope.event);
        let line = format!("  {seq:>3}  {:<20} {}", event.type_name(), step(event));
        println!("{}", line.trim_end());
    }

    // The operator's queue (K9): a crash while `payments.charge` ran would leave the step here,
    // never charged twice, until a verdict (`Runtime::resolve`).
    let in_doubt = loom_effect_runtime::steps_in_doubt(rt.store()).await?;
    println!(
        "\nSteps in doubt, waiting for an operator's verdict: {}",
        in_doubt.len()
    );
    for step in &in_doubt {
        println!(
            "  {} {} (effect {}, key {})",
            step.execution,
            step.step_id,
            step.effect,
            step.idempotency_key()
        );
    }

    let mut still_waiting = Vec::new();
    let mut ended_otherwise = Vec::new();
    for id in &checkouts {
        let state = fold(&rt, id).await?;
        if awaits_approval(&state) {
            still_waiting.push(id);
        } else if state.status() != ExecutionStatus::Completed {
            ended_otherwise.push(format!("{id} is {}", state.status()));
        }
    }
    match still_waiting.as_slice() {
        // Only what is true: a checkout an operator cancelled has not completed.
        [] if ended_otherwise.is_empty() => println!(
            "\nStore: {label}. Every checkout has completed; delete the store to start over."
        ),
        [] => println!(
            "\nStore: {label}. No checkout waits for its approval ({}); delete the store to \
             start over.",
            ended_otherwise.join(", ")
        ),
        ids => {
            let ids: Vec<_> = ids.iter().map(|id| id.as_str()).collect();
            println!(
                "\nStore: {label}. Run again: the same starts return these executions, and {} \
                 (waiting for its approval) is resumed.",
                ids.join(", ")
            )
        }
    }
    Ok(())
}

/// Whether the checkout waits at its approval gate (not at its child's or a timer's).
fn awaits_approval(state: &ExecutionState) -> bool {
    state.status() == ExecutionStatus::Suspended
        && state
            .pending_gates()
            .values()
            .any(|gate| &*gate.event_type == APPROVAL_EVENT)
}

async fn fold<S: EventStore>(rt: &Runtime<S>, id: &ExecutionId) -> Result<ExecutionState> {
    rt.state(id).await.with_context(|| format!("folding {id}"))
}

/// The output of a completed execution, decoded.
fn output<T: DeserializeOwned>(state: &ExecutionState, id: &ExecutionId) -> Result<T> {
    match state.output() {
        Some(output) => output
            .decode()
            .with_context(|| format!("decoding the output of {id}")),
        None => bail!("{id} has not completed: it is {}", state.status()),
    }
}

/// The pending gates of an execution, or `-`.
fn gates(state: &ExecutionState) -> String {
    let gates = state.pending_gates().iter();
    let gates = gates.map(|(gate, p)| format!("{gate} (key {})", p.correlation_key));
    let gates = gates.collect::<Vec<_>>().join(", ");
    if gates.is_empty() { "-".into() } else { gates }
}

/// The step, gate or decision an event is about, if any.
fn step(event: &Event) -> String {
    match event {
        Event::ExecutionStarted(e) => format!("{} v{}", e.flow, e.flow_version),
        Event::StepStarted(e) => format!("{} ({})", e.step_id, e.effect),
        Event::StepCompleted(e) => format!("{} ({}, cost {})", e.step_id, e.effect, e.cost),
        Event::DecisionRecorded(e) => format!("{} = {}", e.step_id, e.value),
        Event::SurfacePatch(e) => e.step_id.clone(),
        Event::ExecutionSuspended(e) => format!("{} (key {})", e.gate_id, e.correlation_key),
        Event::ExecutionResumed(e) => format!("{} with {}", e.gate_id, e.payload),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_error_prints_as_one_sentence_with_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::IsADirectory, "Is a directory");
        let opened = anyhow::Error::new(loom_kernel::OpenError::Io {
            path: "/tmp".into(),
            source: io,
        });
        let error = opened.context("opening the store at /tmp");
        assert_eq!(
            loom_replay_check::error_sentence(&*error),
            "opening the store at /tmp: cannot open store file /tmp: Is a directory"
        );
    }
}
