//! Loom quickstart: executions of an imaginary `checkout` flow on the embedded disk store.
//!
//! It writes the events a runtime would write, through the plain [`EventStore`] API: start,
//! record a decision, run a step, patch the surface, park on a gate, and (for two of three runs)
//! resume and complete. Then it shows the two guards of the log (the append fence and the fold's
//! refusal of an invalid log) and lists every execution of the store with its folded state.
//! The store is a file: run it again and the earlier executions are still there.

use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use loom_kernel::event::{
    DecisionRecorded, ExecutionCompleted, ExecutionResumed, ExecutionStarted, ExecutionSuspended,
    StepCompleted, StepStarted, SurfacePatch,
};
use loom_kernel::{
    AppendError, DiskStore, EVENT_SCHEMA, Event, EventEnvelope, EventStore, EventStoreExt,
    ExecutionId, ExecutionState, ExecutionSummary,
};
use serde_json::{Value, json};

#[derive(Debug, Parser)]
#[command(about = "Starts checkout executions on the embedded store and folds them.")]
struct Args {
    /// The store file, created (with its directory) if missing.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "target/quickstart/loom.redb"
    )]
    store: PathBuf,
}

/// The approval gate every checkout parks on, and the event type that resumes it.
const GATE: &str = "approve#1";
const GATE_EVENT: &str = "A2UIAction";

/// Small on purpose, so that listing the store really goes page by page.
const LIST_PAGE: usize = 2;

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if let Some(dir) = args.store.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let store = DiskStore::open(&args.store)
        .with_context(|| format!("opening the store at {}", args.store.display()))?;
    println!("Loom quickstart, store {}\n", store.path().display());

    // Ids of earlier runs are taken: continue after the highest, so earlier logs stay intact.
    let taken = list_all(&store).await?;
    let highest = taken
        .iter()
        .filter_map(|s| s.id.as_str().strip_prefix("checkout-")?.parse().ok())
        .max();
    let first = highest.unwrap_or(0) + 1;
    if !taken.is_empty() {
        println!(
            "The store already holds {} executions from earlier runs.",
            taken.len()
        );
    }
    println!("Starting checkout-{first}..checkout-{}:", first + 2);
    let mut parked_at = Vec::new();
    for n in first..first + 3 {
        let id = ExecutionId::new(format!("checkout-{n}"))?;
        // The middle one is left waiting for its approval.
        let (parked, head) = run_checkout(&store, &id, n, n != first + 1).await?;
        let state = fold(&store, &id).await?;
        println!("  {id}: {head} events appended, now {}", state.status());
        parked_at.push((id, n, parked));
    }

    // The fence: a second worker, which read the log before the resume, resumes it too. Its
    // expected seq is stale, so the store refuses the whole batch instead of forking the log.
    let (id, n, stale) = &parked_at[0];
    let before = store.head(id).await?;
    println!("\nA second worker, which read {id} before its resume, resumes it at seq {stale}:");
    match store.append(id, *stale, &[resume(*n)]).await {
        Err(err @ AppendError::Conflict { .. }) => println!("  refused: {err}"),
        other => bail!("expected a conflict, got {other:?}"),
    }
    ensure!(store.head(id).await? == before, "refused, yet written");
    println!("  {id} still has {before} events: nothing was written");

    // The fold refuses a log that breaks an invariant, naming the seq: here, a resume of a gate
    // that was never opened. Built in memory, since a store only keeps what its callers append.
    let bad = ExecutionId::new("checkout-invalid")?;
    let envelope = |(seq, event)| {
        let execution_id = bad.clone();
        EventEnvelope {
            execution_id,
            seq,
            schema: EVENT_SCHEMA,
            recorded_at_ms: None,
            event,
        }
    };
    let log: Vec<EventEnvelope> = (0..).zip([started(0), resume(0)]).map(envelope).collect();
    println!("\nFolding an invalid log (EXECUTION_STARTED, then EXECUTION_RESUMED with no gate):");
    match ExecutionState::fold(&log) {
        Err(err) => println!("  refused: {err}"),
        Ok(state) => bail!("the fold accepted an invalid log: {state:?}"),
    }

    println!(
        "\nEvery execution in the store (listed {LIST_PAGE} per page, each folded from its log):"
    );
    println!(
        "  {:<14} {:>6}  {:<10} {:<11} {:>12}  pending gates",
        "id", "events", "status", "flow", "spent/budget"
    );
    for summary in list_all(&store).await? {
        let state = fold(&store, &summary.id).await?;
        let flow = state
            .flow()
            .map_or("-".into(), |(f, v)| format!("{f} v{v}"));
        let budget = state.budget().map_or("-".into(), |b| b.to_string());
        let spent = format!("{}/{budget}", state.budget_spent());
        let gates = state
            .pending_gates()
            .iter()
            .map(|(gate, p)| format!("{gate} ({}, key {})", p.event_type, p.correlation_key));
        let gates = gates.collect::<Vec<_>>().join(", ");
        let status = state.status().to_string(); // its Display ignores width too
        println!(
            "  {:<14} {:>6}  {status:<10} {flow:<11} {spent:>12}  {}",
            summary.id.as_str(), // ExecutionId's Display ignores width
            summary.head,
            if gates.is_empty() { "-" } else { &gates }
        );
    }
    println!(
        "\nStore: {}. Run again: the executions above will still be there.",
        store.path().display()
    );
    Ok(())
}

/// Folds a stored execution page by page (the log is never held whole in memory).
async fn fold(store: &DiskStore, id: &ExecutionId) -> Result<ExecutionState> {
    let state = store.fold(id).await;
    state.with_context(|| format!("folding {id}"))
}

/// Every execution of the store, in id order, read a page of [`LIST_PAGE`] at a time.
async fn list_all(store: &DiskStore) -> Result<Vec<ExecutionSummary>> {
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

/// One writer of one execution's log. `head` is the seq it believes comes next: every append is
/// fenced by it, so a writer that fell behind is refused instead of forking the log.
struct Writer<'a> {
    store: &'a DiskStore,
    id: &'a ExecutionId,
    head: u64,
}

impl Writer<'_> {
    async fn append(&mut self, events: &[Event]) -> Result<()> {
        let context = || format!("appending to {} at seq {}", self.id, self.head);
        self.head = self
            .store
            .append(self.id, self.head, events)
            .await
            .with_context(context)?;
        Ok(())
    }

    /// Runs one step: its intent is made durable alone, before the effect runs, so that a
    /// crash in the effect leaves a trace (K9); then its outcome, with what it cost (K3).
    async fn step(&mut self, step: &str, effect: &str, output: Value, cost: u64) -> Result<()> {
        let intent = StepStarted {
            step_id: step.into(),
            effect: effect.into(),
            // A real runtime records a digest of the step's canonical input; a label stands in.
            input_digest: format!("demo:{step}"),
            attempt: 1,
        };
        let outcome = StepCompleted {
            step_id: intent.step_id.clone(),
            effect: intent.effect.clone(),
            input_digest: intent.input_digest.clone(),
            output: output.into(),
            cost,
        };
        self.append(&[Event::StepStarted(intent)]).await?;
        self.append(&[Event::StepCompleted(outcome)]).await
    }
}

/// Checkout `n`: reserve stock, show the order as pending and park on the approval gate; if
/// `approve`, resume, charge the card and complete. Returns the head at the gate and at the end.
async fn run_checkout(
    store: &DiskStore,
    id: &ExecutionId,
    n: u64,
    approve: bool,
) -> Result<(u64, u64)> {
    let mut log = Writer { store, id, head: 0 };
    // The flow read the clock: recorded, so that a replay sees the same time.
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let value = json!(u64::try_from(now_ms.as_millis())?).into();
    let now = DecisionRecorded {
        step_id: "now#1".into(),
        kind: "now".into(),
        value,
    };
    log.append(&[started(n), Event::DecisionRecorded(now)])
        .await?;
    log.step("reserve#1", "stock.reserve", json!({"hold": n}), 5)
        .await?;
    let gate = ExecutionSuspended {
        gate_id: GATE.into(),
        event_type: GATE_EVENT.into(),
        correlation_key: format!("order-{n}"),
    };
    log.append(&[patch("show#1", "pending"), Event::ExecutionSuspended(gate)])
        .await?;
    let parked = log.head;
    if approve {
        log.append(&[resume(n)]).await?;
        log.step("charge#1", "payments.charge", json!({"charge": n}), 30)
            .await?;
        let output = json!({"order": format!("order-{n}"), "status": "paid"}).into();
        let done = Event::ExecutionCompleted(ExecutionCompleted { output });
        log.append(&[patch("show#2", "paid"), done]).await?;
    }
    Ok((parked, log.head))
}

fn started(n: u64) -> Event {
    Event::ExecutionStarted(ExecutionStarted {
        flow: "checkout".into(),
        flow_version: 1,
        input: json!({"order": format!("order-{n}"), "sku": "A1", "qty": 2}).into(),
        capabilities: ["payments.charge", "stock.reserve"]
            .map(String::from)
            .into(),
        budget: Some(100),
    })
}

/// The approval of order `n`: the UI action the approval gate of its checkout waits for.
fn resume(n: u64) -> Event {
    Event::ExecutionResumed(ExecutionResumed {
        gate_id: GATE.into(),
        event_type: GATE_EVENT.into(),
        correlation_key: format!("order-{n}"),
        payload: json!({"action": "approve", "by": "alice"}).into(),
    })
}

/// Shows the order's status on the checkout surface (ops are opaque JSON to the kernel).
fn patch(step: &str, status: &str) -> Event {
    let ops = json!([{"op": "set", "path": "order.status", "value": status}]).into();
    Event::SurfacePatch(SurfacePatch {
        step_id: step.into(),
        surface_id: "checkout".into(),
        ops,
    })
}
