//! The kill test: three worker processes on one database start and drive `order` executions
//! (an idempotent step, a non-idempotent step, a durable timer, a gate, another idempotent step)
//! while the test SIGKILLs one of them per round and, now and then, stops one with SIGSTOP for
//! longer than the lease before it goes on. An ordinary run does 6 rounds and 1 pause (kills,
//! restarts and a take-over; about 15 s a test); `cargo xtask test --long` and CI do the full 30
//! rounds and 5 pauses (about 55 s a test); `LOOM_KILL_ROUNDS` and `LOOM_KILL_PAUSES` set any
//! other number. The workers resume each other's gates. An operator in the test process gives
//! verdicts to steps in doubt, after checking the receiver as `docs/EFFECTS.md` says.
//!
//! Every effect call is written by the handler, on a connection of its own (not through the
//! store), to a ledger (`calls`): the worker, the lease token the handler was given, and, read
//! by the server in the same statement, the execution's lease at that moment. The
//! non-idempotent receiver fences: it keeps the highest token seen per execution and refuses a
//! lower one (its row says `accepted = false`; an accepted row is a receipt). At the end:
//! - no acknowledged start, resume or verdict is lost, every execution stored completed, and
//!   its start, approval and end are recorded once each;
//! - a non-idempotent call always carried a token, each token of an execution belongs to one
//!   worker, and a call made after another worker took the execution over (the lease's token
//!   at the call is newer than the call's) is on a step the log records in doubt;
//! - no idempotency key has two receipts unless its step was in doubt and got a verdict;
//! - an idempotent step ran at most twice;
//! - every log replays: the library's checker, and `replay-check` on the schema.
//!
//! The same test runs on one database (each worker a `PostgresStore`) and on two shards (each
//! worker a `ShardedStore` over two databases of the server; every ledger table lives on the
//! shard of its execution, so the lease it reads is that shard's). The two never overlap.
//!
//! The workers are this test binary run again with `LOOM_KILL_WORKER` set (`workers.rs`); the
//! ledger is `ledger.rs`. The same harness runs the failover test (`failover.rs`), with the
//! database's primary killed instead of the workers.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use loom_kernel::{
    Event, EventStoreExt, ExecutionId, ExecutionStatus, FlowCtx, FlowError, FlowSet, flow_fn,
};
use loom_store_postgres::{PostgresStore, ShardedStore, fresh_schema, server_url};
use serde_json::{Value, json};

use crate::ledger::{LEDGER, Ledgers, count_by_status, rows_of_all, until_answered};
use crate::workers::{WorkerStore, Workers, operator_pass, runtime_on};

/// How many rounds of kills (`cargo xtask test --long` sets 30).
const ROUNDS_VAR: &str = "LOOM_KILL_ROUNDS";
/// How many of the rounds also pause a worker past its lease (`--long` sets 5).
const PAUSES_VAR: &str = "LOOM_KILL_PAUSES";
const WORKERS: usize = 3;
/// Long enough that a worker on a loaded machine renews it in time (every third of it).
const LEASE: Duration = Duration::from_secs(2);
/// Clearly longer than the lease: the paused worker's executions are taken over.
const PAUSE: Duration = Duration::from_millis(5_000);
/// Between rounds: enough for a restarted worker to take its executions back.
const ROUND_GAP: Duration = Duration::from_millis(900);
/// How often each worker starts an execution while the rounds last.
pub(crate) const START_EVERY: Duration = Duration::from_millis(120);
pub(crate) const APPROVAL: &str = "Approval";

pub(crate) fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

async fn order(ctx: FlowCtx, input: Value) -> Result<Value, FlowError> {
    let quote = ctx.execute("quote", &input).await?;
    let receipt = ctx.execute("charge", &input).await?;
    // A durable timer: whichever worker holds the execution when it is due fires it.
    ctx.sleep(Duration::from_millis(150)).await?;
    // A gate: any worker resumes it.
    let approval = ctx.suspend(APPROVAL, ctx.execution_id().as_str()).await?;
    let shipped = ctx.execute("ship", &input).await?;
    Ok(json!([
        quote.to_value(),
        receipt.to_value(),
        approval.to_value(),
        shipped.to_value()
    ]))
}

pub(crate) fn flows() -> FlowSet {
    FlowSet::new().with(flow_fn("order", 1, order))
}

/// The two kill tests take turns: two at once on two cores would starve each other's workers.
pub(crate) static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_and_paused_past_their_lease_lose_no_start_and_run_no_stale_effect() {
    let Some(url) = server_url("kill_rounds") else {
        return;
    };
    kill_test::<PostgresStore>(vec![url], Disruption::kills()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_test_on_two_shards() {
    let Some(url) = server_url("kill_rounds_sharded") else {
        return;
    };
    let second = crate::support::second_database(&url).await;
    kill_test::<ShardedStore>(vec![url, second], Disruption::kills()).await;
}

/// What the test does to the workers' world while they run.
pub(crate) enum Disruption {
    /// A SIGKILL of a worker per round (restarted at once), and now and then a worker paused
    /// past its lease.
    Kills { rounds: usize, pauses: usize },
    /// The database's primary killed and its synchronous standby promoted, a new standby made
    /// each time (see `failover`).
    Failovers {
        count: usize,
        pairs: Vec<crate::failover::SharedPair>,
    },
}

impl Disruption {
    fn kills() -> Self {
        let rounds = knob(ROUNDS_VAR, 6);
        let pauses = knob(PAUSES_VAR, 1).min(rounds);
        Self::Kills { rounds, pauses }
    }

    /// The workers' lease, and how long the disruptions are expected to take.
    fn plan(&self) -> (Duration, Duration) {
        match self {
            Self::Kills { rounds, pauses } => {
                (LEASE, ROUND_GAP * *rounds as u32 + PAUSE * *pauses as u32)
            }
            Self::Failovers { count, .. } => crate::failover::plan(*count),
        }
    }
}

pub(crate) async fn kill_test<S: WorkerStore>(urls: Vec<String>, disruption: Disruption) {
    let _turn = ONE_AT_A_TIME.lock().await;
    // `RUST_LOG=...` shows what the operator's runtime does (the workers' output is dropped).
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let (lease, planned) = disruption.plan();
    let schema = fresh_schema("kill_rounds");
    let store = S::open(&urls, &schema, "operator", lease, false)
        .await
        .expect("connect");
    let admin = Ledgers::connect(&urls, &schema, "kill-test-admin").await;
    for database in admin.all() {
        let database = database.get().await.expect("ledger connection");
        database.batch_execute(LEDGER).await.expect("ledger tables");
    }
    let operator_ledger = Ledgers::connect(&urls, &schema, "ledger-operator").await;
    let operator = Arc::new(runtime_on(store.clone(), "operator", &operator_ledger));

    // Starts stop when the test says so (`control`), once the disruptions are over, or at the
    // latest when they were planned to be over; the drain follows.
    let starts_until = (SystemTime::now() + planned)
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let mut workers = Workers {
        children: Vec::new(),
        generations: vec![0; WORKERS],
        schema: schema.clone(),
        urls: urls.clone(),
        starts_until,
        lease,
    };
    for index in 0..WORKERS {
        workers.spawn(index);
    }
    let verdicts = Arc::new(tokio::sync::Mutex::new(BTreeMap::new()));
    let operating = {
        let (operator, admin, verdicts) =
            (Arc::clone(&operator), admin.clone(), Arc::clone(&verdicts));
        tokio::spawn(async move {
            loop {
                operator_pass(&operator, &admin, &mut *verdicts.lock().await).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };

    let started = Instant::now();
    // Borrowed, not taken: the replicated pairs live until the checks are done.
    let disrupted = match &disruption {
        &Disruption::Kills { rounds, pauses } => {
            // The rounds: one SIGKILL each, the victim restarted at once under its worker id;
            // every `rounds / pauses` rounds, another worker stopped for longer than the lease.
            let pause_every = rounds.checked_div(pauses).unwrap_or(usize::MAX).max(1);
            let mut paused = 0;
            for round in 0..rounds {
                tokio::time::sleep(ROUND_GAP).await;
                let victim = round % WORKERS;
                workers.kill(victim);
                workers.spawn(victim);
                if paused < pauses && round % pause_every == pause_every - 1 {
                    let sleeper = (round + 1) % WORKERS;
                    workers.signal(sleeper, "-STOP");
                    tokio::time::sleep(PAUSE).await;
                    workers.signal(sleeper, "-CONT");
                    paused += 1;
                }
            }
            assert!(paused == pauses, "every pause happened");
            format!("{rounds} kills and {paused} pauses of {PAUSE:?}")
        }
        Disruption::Failovers { count, pairs } => {
            crate::failover::failovers(pairs, *count, &schema).await
        }
    };
    let rounds_took = started.elapsed();
    for database in admin.all() {
        until_answered(database, "UPDATE control SET starts_over = true", &[]).await;
    }
    // A start already under way when the workers were told lands meanwhile.
    tokio::time::sleep(START_EVERY * 8).await;

    // The drain: no more kills; every execution must complete (gates resumed by the workers,
    // doubts settled by the operator).
    let give_up = Instant::now() + Duration::from_secs(180);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = count_by_status(&admin).await;
        let open: i64 = now
            .iter()
            .filter(|(status, _)| **status != 4)
            .map(|(_, n)| n)
            .sum();
        if open == 0 {
            break;
        }
        assert!(Instant::now() < give_up, "stuck: statuses {now:?}");
    }
    drop(workers);
    operating.abort();
    let verdicts = verdicts.lock().await.clone();

    // No acknowledged start lost; everything stored completed.
    let acked: BTreeSet<String> = rows_of_all(&admin, "SELECT execution FROM acks")
        .await
        .iter()
        .map(|row| row.get(0))
        .collect();
    let stored: Vec<ExecutionId> = {
        let mut ids = Vec::new();
        let mut after = None;
        loop {
            let page = store
                .list_executions(after.as_ref(), 500)
                .await
                .expect("list");
            ids.extend(page.executions.into_iter().map(|s| s.id));
            match page.next {
                Some(next) => after = Some(next),
                None => break ids,
            }
        }
    };
    let stored_names: BTreeSet<String> = stored.iter().map(|id| id.as_str().to_owned()).collect();
    let lost: Vec<_> = acked.difference(&stored_names).collect();
    assert!(lost.is_empty(), "acknowledged starts lost: {lost:?}");
    let logs = store.read_logs(&stored).await.expect("logs");
    // Per step key: whether the log records it in doubt, and whether a verdict followed.
    let mut doubted = BTreeSet::new();
    let mut resolved = BTreeSet::new();
    // Per execution, the payload its gate was resumed with.
    let mut resumed: BTreeMap<String, Value> = BTreeMap::new();
    for (id, log) in stored.iter().zip(&logs) {
        let state = store.fold(id).await.expect("fold");
        assert_eq!(state.status(), ExecutionStatus::Completed, "{id}");
        for record in log {
            match &record.event {
                Event::EffectInDoubt(d) => {
                    doubted.insert(loom_kernel::idempotency_key(id, &d.step_id));
                }
                Event::EffectResolved(r) => {
                    resolved.insert(loom_kernel::idempotency_key(id, &r.step_id));
                }
                // The durable timer resumes its own gate; the approval is the workers'.
                Event::ExecutionResumed(r) if r.event_type == APPROVAL => {
                    resumed.insert(id.as_str().to_owned(), r.payload.to_value());
                }
                _ => {}
            }
        }
        // An append committed twice (its answer lost, then sent again) shows as an event
        // that happens once in a run recorded twice.
        let once = |what: &str, is: fn(&Event) -> bool| {
            let count = log.iter().filter(|record| is(&record.event)).count();
            assert_eq!(count, 1, "{id}: {what} recorded {count} times");
        };
        once("its start", |e| matches!(e, Event::ExecutionStarted(_)));
        once(
            "its approval",
            |e| matches!(e, Event::ExecutionResumed(r) if r.event_type == APPROVAL),
        );
        once("its end", |e| matches!(e, Event::ExecutionCompleted(_)));
    }
    // No acknowledged resume or verdict lost: each is the one its log records.
    let acked_resumes = rows_of_all(&admin, "SELECT execution, payload FROM resumes").await;
    for row in &acked_resumes {
        let (execution, payload): (String, String) = (row.get(0), row.get(1));
        let payload: Value = serde_json::from_str(&payload).expect("a payload");
        assert_eq!(
            resumed.get(&execution),
            Some(&payload),
            "{execution}: an acknowledged resume is not the one its log records"
        );
    }
    for key in verdicts.keys() {
        assert!(
            resolved.contains(key),
            "{key}: an acknowledged verdict is not in its log"
        );
    }

    struct Call {
        effect: String,
        execution: String,
        key: String,
        worker: String,
        token: Option<i64>,
        holder_token: Option<i64>,
        live: bool,
        accepted: bool,
    }
    let calls: Vec<Call> = rows_of_all(
        &admin,
        "SELECT effect, execution, key, worker, token, holder_token, live, accepted \
         FROM calls ORDER BY id",
    )
    .await
    .iter()
    .map(|row| Call {
        effect: row.get(0),
        execution: row.get(1),
        key: row.get(2),
        worker: row.get(3),
        token: row.get(4),
        holder_token: row.get(5),
        live: row.get(6),
        accepted: row.get(7),
    })
    .collect();

    // Each token of an execution belongs to one worker.
    let mut holders: BTreeMap<(&str, i64), &str> = BTreeMap::new();
    for call in &calls {
        if let Some(token) = call.token {
            let holder = holders
                .entry((&call.execution, token))
                .or_insert(&call.worker);
            assert_eq!(
                *holder, call.worker,
                "token {token} of {} used by two workers",
                call.execution
            );
        }
    }
    // Non-idempotent calls: under a token; one made after a take-over is on a step in doubt.
    let (mut stale_calls, mut refused, mut not_live) = (0, 0, 0);
    for call in calls.iter().filter(|call| call.effect == "charge") {
        let token = call
            .token
            .expect("a non-idempotent call carries the lease's token");
        refused += usize::from(!call.accepted);
        not_live += usize::from(!call.live);
        if call.holder_token.is_some_and(|holder| holder > token) {
            stale_calls += 1;
            assert!(
                doubted.contains(&call.key),
                "{} called {} under token {token} after the execution was taken over \
                 (token {:?}), and its log has no doubt for it",
                call.worker,
                call.key,
                call.holder_token
            );
        }
    }
    // Receipts: two for one key only where the log has a doubt and a verdict.
    let mut receipts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut runs: BTreeMap<&str, usize> = BTreeMap::new();
    for call in &calls {
        match call.effect.as_str() {
            "charge" if call.accepted => *receipts.entry(&call.key).or_default() += 1,
            "charge" => {}
            _ => *runs.entry(&call.key).or_default() += 1,
        }
    }
    for (key, count) in &receipts {
        assert!(
            *count <= 1 || (doubted.contains(*key) && resolved.contains(*key)),
            "{key} has {count} receipts without a doubt and a verdict"
        );
    }
    let doubles = receipts.values().filter(|count| **count > 1).count();
    // Every completed execution charged: one receipt at least.
    for id in &stored {
        let key = loom_kernel::idempotency_key(id, "charge#1");
        assert!(
            receipts.contains_key(key.as_str()),
            "{id} completed without a receipt"
        );
    }
    // Idempotent steps ran at most twice.
    for (key, count) in &runs {
        assert!(*count <= 2, "idempotent step {key} ran {count} times");
    }
    let reruns = runs.values().filter(|count| **count > 1).count();

    // Every log replays: the library's checker, then replay-check on the schema.
    let checker = loom_replay_check::Checker::new(&flows()).expect("checker");
    for (id, log) in stored.iter().zip(logs) {
        let outcome = checker.check(log);
        assert!(
            matches!(outcome.finding, loom_replay_check::Finding::Deterministic),
            "{id}: {:?}",
            outcome.finding
        );
    }
    let store_count = urls.len();
    let exit = tokio::task::spawn_blocking(move || {
        loom_replay_check::check_store_command(&flows(), ["replay-check"], "kill test", || async {
            S::open(&urls, &schema, "replay-check", lease, true)
                .await
                .map_err(Into::into)
        })
    })
    .await
    .expect("replay-check");
    assert_eq!(exit, 0, "replay-check on the schema");

    let retried = verdicts.values().filter(|said| **said == "retry").count();
    // Past the test harness's capture: the figures show in `cargo xtask test`'s output.
    let _ = writeln!(
        std::io::stderr(),
        "kill test on {store_count} database(s): {disrupted} (lease {lease:?}) in \
         {rounds_took:?}; {} executions ({} acknowledged), {} steps in doubt, verdicts: {} \
         completed, {retried} retry; non-idempotent calls: {stale_calls} after a take-over, \
         {refused} refused by the receiver's fence, {not_live} outside a live lease, {doubles} \
         keys with two receipts; {reruns} idempotent steps ran twice",
        stored.len(),
        acked.len(),
        doubted.len(),
        verdicts.len() - retried,
    );
    // How many kills and pauses landed on a step in flight is chance (a few steps in doubt a
    // run, as the line above says), so it is reported, not asserted.
}
