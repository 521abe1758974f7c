//! Loom quickstart: runs the `checkout` and `greet` flows of this crate on the embedded disk
//! store (or on PostgreSQL, with `--store postgres://...`), through the runtime.
//!
//! Three checkouts start and park on their approval gate; two are approved and complete, the
//! third keeps waiting. Then every execution of the store is listed, folded from its log, and one
//! log is shown event by event. The store is a file: run again, and the waiting checkout is
//! still there, still waiting, next to the new ones.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use loom_kernel::runtime::Runtime;
use loom_kernel::{
    DiskStore, Event, EventStore, EventStoreExt, ExecutionId, ExecutionState, ExecutionStatus,
    ExecutionSummary,
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

/// Small on purpose, so that listing the store really goes page by page.
const LIST_PAGE: usize = 2;

/// What each execution may spend; the effects report their cost.
const BUDGET: u64 = 10;

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
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
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
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
    let earlier = list_all(rt.store()).await?;
    println!(
        "recover() picked up {recovered} execution(s); the store holds {} from earlier runs.",
        earlier.len()
    );
    for summary in &earlier {
        let state = fold(&rt, &summary.id).await?;
        if state.status() == ExecutionStatus::Suspended {
            println!("  {} is still suspended at {}", summary.id, gates(&state));
        }
    }

    // Ids of earlier runs are taken: continue after the highest, so earlier logs stay intact.
    let first = next_number(&earlier, "checkout-");
    let greet_id = ExecutionId::new(format!("greet-{}", next_number(&earlier, "greet-")))?;
    let options = |id: &ExecutionId| quickstart::start_options(id).budget(BUDGET);
    let mut checkouts = Vec::new();
    for (n, (sku, qty)) in (first..).zip([("A1", 1), ("B2", 2), ("C3", 3)]) {
        let id = ExecutionId::new(format!("checkout-{n}"))?;
        let order = Order {
            sku: sku.into(),
            qty,
        };
        rt.start("checkout", &order, options(&id)).await?;
        checkouts.push(id);
    }
    rt.start("greet", "ada", options(&greet_id)).await?;

    println!("\nStarted {} executions:", checkouts.len() + 1);
    for id in &checkouts {
        let state = rt.wait(id).await?;
        ensure!(
            state.status() == ExecutionStatus::Suspended,
            "{id} should wait for its approval, but it is {}",
            state.status()
        );
        println!("  {id}: {}, at {}", state.status(), gates(&state));
    }
    let state = rt.wait(&greet_id).await?;
    let greeting: String = output(rt.store(), &greet_id).await?;
    println!("  {greet_id}: {}, \"{greeting}\"", state.status());

    let (approved, waiting) = checkouts.split_at(2);
    println!("\nApproving {} and {}:", approved[0], approved[1]);
    for id in approved {
        let payload = json!({"action": "approve", "by": "alice"}).into();
        rt.resume(id, APPROVAL_EVENT, &approval_key(id), payload)
            .await?;
    }
    for id in approved {
        let state = rt.wait(id).await?;
        let receipt: Receipt = output(rt.store(), id).await?;
        println!(
            "  {id}: {}, reservation {}, charged {} with key {}",
            state.status(),
            receipt.reservation,
            receipt.charged,
            receipt.payment_key
        );
    }

    println!(
        "\nEvery execution in the store (listed {LIST_PAGE} per page, each folded from its log):"
    );
    println!(
        "  {:<13} {:>6}  {:<10} {:<11} {:>12}  pending gates",
        "id", "events", "status", "flow", "spent/budget"
    );
    for summary in list_all(rt.store()).await? {
        let state = fold(&rt, &summary.id).await?;
        let flow = state
            .flow()
            .map_or("-".into(), |(f, v)| format!("{f} v{v}"));
        let budget = state.budget().map_or("-".into(), |b| b.to_string());
        let spent = format!("{}/{budget}", state.budget_spent());
        println!(
            "  {:<13} {:>6}  {:<10} {flow:<11} {spent:>12}  {}",
            summary.id.as_str(), // ExecutionId's Display ignores width
            summary.head,
            state.status(),
            gates(&state)
        );
    }

    let shown = &approved[1];
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

    println!(
        "\nStore: {label}. Run again: recover() drives on whatever a crash left mid-flight, and \
         {} is still listed as suspended, waiting for its approval.",
        waiting[0]
    );
    Ok(())
}

async fn fold<S: EventStore>(rt: &Runtime<S>, id: &ExecutionId) -> Result<ExecutionState> {
    rt.state(id).await.with_context(|| format!("folding {id}"))
}

/// Every execution of the store, in id order, read a page of [`LIST_PAGE`] at a time.
async fn list_all<S: EventStore>(store: &S) -> Result<Vec<ExecutionSummary>> {
    let (mut all, mut after) = (Vec::new(), None);
    loop {
        let page = store
            .list_executions(after.as_ref(), LIST_PAGE)
            .await
            .context("listing executions")?;
        all.extend(page.executions);
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(all),
        }
    }
}

/// One more than the highest `<prefix>N` among `taken`, or 1.
fn next_number(taken: &[ExecutionSummary], prefix: &str) -> u64 {
    let highest = taken
        .iter()
        .filter_map(|s| s.id.as_str().strip_prefix(prefix)?.parse::<u64>().ok())
        .max();
    highest.map_or(1, |n| n + 1)
}

/// The pending gates of an execution, or `-`.
fn gates(state: &ExecutionState) -> String {
    let gates = state.pending_gates().iter();
    let gates = gates.map(|(gate, p)| format!("{gate} (key {})", p.correlation_key));
    let gates = gates.collect::<Vec<_>>().join(", ");
    if gates.is_empty() { "-".into() } else { gates }
}

/// The output a completed execution recorded, from the last event of its log.
async fn output<T: DeserializeOwned, S: EventStore>(store: &S, id: &ExecutionId) -> Result<T> {
    let head = store.head(id).await?;
    let last = store.read(id, head.saturating_sub(1), 1).await?;
    match last.first().map(|envelope| &envelope.event) {
        Some(Event::ExecutionCompleted(done)) => {
            let output = done.output.decode();
            output.with_context(|| format!("decoding the output of {id}"))
        }
        other => bail!("{id} has not completed: its last event is {other:?}"),
    }
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
