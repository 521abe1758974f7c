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
//! - no acknowledged start is lost, and every execution stored completed;
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
//! The workers are this test binary run again with `LOOM_KILL_WORKER` set (see
//! `worker_process_entry`); in an ordinary run that entry does nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use deadpool_postgres::Pool;
use futures::future::BoxFuture;
use loom_kernel::{
    EffectCall, EffectOutcome, ErrorInfo, Event, EventStore, EventStoreExt, ExecutionId,
    ExecutionStatus, FlowCtx, FlowError, FlowSet, FnEffect, Payload, Runtime, StartOptions,
    StatusFilter, Verdict, flow_fn,
};
use loom_store_postgres::{
    ConnectError, PostgresStore, PostgresStoreConfig, ShardedStore, fresh_schema, server_url,
    shard_of,
};
use serde_json::{Value, json};

use crate::support::child::{child_runtime, child_test};

const WORKER_ENV: &str = "LOOM_KILL_WORKER";
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
const START_EVERY: Duration = Duration::from_millis(120);
const APPROVAL: &str = "Approval";

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

fn flows() -> FlowSet {
    FlowSet::new().with(flow_fn("order", 1, order))
}

/// The ledger, on the store's schema but written on connections of its own.
const LEDGER: &str = "
    CREATE TABLE calls (
        id bigserial PRIMARY KEY,
        effect text NOT NULL,
        execution text NOT NULL,
        step text NOT NULL,
        key text NOT NULL,
        worker text NOT NULL,
        token bigint,
        attempt int NOT NULL,
        holder_token bigint,
        live boolean NOT NULL,
        accepted boolean NOT NULL
    );
    CREATE TABLE fences (execution text PRIMARY KEY, token bigint NOT NULL);
    CREATE TABLE acks (execution text PRIMARY KEY, worker text NOT NULL);
    CREATE TABLE resumes (execution text NOT NULL, payload text NOT NULL);
    CREATE TABLE control (starts_over boolean NOT NULL);
    INSERT INTO control VALUES (false);
";

/// A non-idempotent call at the fencing receiver, in one statement: the fence rises to the
/// call's token unless a higher one was seen (then the call is refused), and the lease the
/// server holds for the execution at that moment is written beside it.
const FENCED_CALL: &str = "
    WITH fence AS (
        INSERT INTO fences AS f (execution, token) VALUES ($2, $6)
        ON CONFLICT (execution) DO UPDATE SET token = excluded.token
            WHERE f.token <= excluded.token
        RETURNING token
    ), lease AS (
        SELECT lease_token,
               lease_owner = $5 AND lease_token = $6 AND lease_expires_at > clock_timestamp()
                   AS live
        FROM loom_executions WHERE execution_id = $2
    )
    INSERT INTO calls (effect, execution, step, key, worker, token, attempt, holder_token,
                       live, accepted)
    SELECT $1, $2, $3, $4, $5, $6, $7, (SELECT lease_token FROM lease),
           coalesce((SELECT live FROM lease), false), EXISTS (SELECT 1 FROM fence)
    RETURNING accepted";

/// An idempotent call: written as it comes, with the token the worker's store remembers.
const PLAIN_CALL: &str = "
    INSERT INTO calls (effect, execution, step, key, worker, token, attempt, holder_token,
                       live, accepted)
    SELECT $1, $2, $3, $4, $5, $6, $7, e.lease_token,
           coalesce(e.lease_owner = $5 AND e.lease_expires_at > clock_timestamp(), false), true
    FROM (SELECT 1) AS one LEFT JOIN loom_executions e ON e.execution_id = $2
    RETURNING accepted";

/// An effect whose every call goes to the ledger. The work (a short sleep) comes before the
/// call reaches the receiver, so that kills and pauses land between the runtime's lease check
/// and the receiver.
fn ledger_effect<S: WorkerStore>(
    idempotent: bool,
    worker: String,
    store: S,
    ledgers: Ledgers,
) -> FnEffect<impl Fn(EffectCall) -> BoxFuture<'static, EffectOutcome> + Send + Sync> {
    FnEffect::new(idempotent, move |call: EffectCall| {
        let (ledger, worker) = (ledgers.of(&call.execution_id), worker.clone());
        let remembered = store.remembered_token(&call.execution_id);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let key = call.idempotency_key();
            let token = match idempotent {
                true => remembered,
                false => call.lease_token.map(|t| t as i64),
            };
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
                &call.effect,
                &call.execution_id.as_str(),
                &call.step_id,
                &key,
                &worker,
                &token,
                &(call.attempt as i32),
            ];
            let statement = if idempotent { PLAIN_CALL } else { FENCED_CALL };
            let ledger = match ledger.get().await {
                Ok(ledger) => ledger,
                Err(err) => {
                    return EffectOutcome::in_doubt(ErrorInfo::new("test.ledger", err.to_string()));
                }
            };
            match ledger.query_opt(statement, &params).await {
                Ok(Some(row)) if row.get::<_, bool>(0) => EffectOutcome::ok(
                    json!({ "effect": call.effect, "key": key, "token": token }).into(),
                ),
                Ok(_) => EffectOutcome::in_doubt(ErrorInfo::new(
                    "test.stale_token",
                    format!("the receiver has seen a token above {token:?}"),
                )),
                Err(err) => EffectOutcome::in_doubt(ErrorInfo::new("test.ledger", err.to_string())),
            }
        }) as BoxFuture<'static, EffectOutcome>
    })
}

/// The ledger's connections, one pool per database of the shard map, in its order: a pool, so
/// that the ledger reaches the new primary after a failover.
#[derive(Clone)]
pub(crate) struct Ledgers(Arc<Vec<Pool>>);

impl Ledgers {
    pub(crate) async fn connect(urls: &[String], schema: &str, name: &str) -> Self {
        let pools = urls
            .iter()
            .map(|url| ledger_pool(url, schema, name))
            .collect();
        Self(Arc::new(pools))
    }

    /// The connections to the database that holds `execution`.
    fn of(&self, execution: &ExecutionId) -> Pool {
        self.0[shard_of(execution, self.0.len())].clone()
    }

    pub(crate) fn all(&self) -> &[Pool] {
        &self.0
    }
}

/// Runs `sql` on `pool` until it answers (a failover may be under way), for a minute at most.
pub(crate) async fn until_answered(
    pool: &Pool,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Vec<tokio_postgres::Row> {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let error = match pool.get().await {
            Ok(client) => match client.query(sql, params).await {
                Ok(rows) => return rows,
                Err(error) => error.to_string(),
            },
            Err(error) => error.to_string(),
        };
        assert!(Instant::now() < give_up, "{sql}: {error}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the test needs of a worker's store beyond `EventStore`: the one-database store and the
/// sharded one.
pub(crate) trait WorkerStore: EventStore + Clone {
    /// The lease token this worker's store remembers for `execution`.
    fn remembered_token(&self, execution: &ExecutionId) -> Option<i64>;
    /// A store on `urls` (one, or the shard map) as worker `worker`; `check_only` for
    /// replay-check.
    fn open(
        urls: &[String],
        schema: &str,
        worker: &str,
        lease: Duration,
        check_only: bool,
    ) -> impl std::future::Future<Output = Result<Self, ConnectError>> + Send;
}

fn configs(
    urls: &[String],
    schema: &str,
    worker: &str,
    lease: Duration,
    check_only: bool,
) -> Vec<PostgresStoreConfig> {
    urls.iter()
        .map(|url| {
            let config = PostgresStoreConfig::new(url)
                .schema(schema)
                .worker_id(worker)
                .lease(lease);
            if check_only {
                config.check_only()
            } else {
                config
            }
        })
        .collect()
}

impl WorkerStore for PostgresStore {
    fn remembered_token(&self, execution: &ExecutionId) -> Option<i64> {
        self.lease_token(execution)
    }

    async fn open(
        urls: &[String],
        schema: &str,
        worker: &str,
        lease: Duration,
        check_only: bool,
    ) -> Result<Self, ConnectError> {
        let config = configs(urls, schema, worker, lease, check_only).remove(0);
        PostgresStore::connect(config).await
    }
}

impl WorkerStore for ShardedStore {
    fn remembered_token(&self, execution: &ExecutionId) -> Option<i64> {
        self.lease_token(execution)
    }

    async fn open(
        urls: &[String],
        schema: &str,
        worker: &str,
        lease: Duration,
        check_only: bool,
    ) -> Result<Self, ConnectError> {
        ShardedStore::connect(configs(urls, schema, worker, lease, check_only)).await
    }
}

fn ledger_pool(url: &str, schema: &str, name: &str) -> Pool {
    let mut config: tokio_postgres::Config = url.parse().expect("ledger URL");
    config
        .application_name(name)
        .options(format!("-c search_path={schema}"));
    let manager = deadpool_postgres::Manager::from_config(
        config,
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(4)
        .build()
        .expect("ledger pool")
}

fn runtime_on<S: WorkerStore>(store: S, worker: &str, ledgers: &Ledgers) -> Runtime<S> {
    let effect = |idempotent: bool| {
        ledger_effect(
            idempotent,
            worker.to_owned(),
            store.clone(),
            ledgers.clone(),
        )
    };
    Runtime::builder(store.clone())
        .flows(&flows())
        .effect("quote", effect(true))
        .effect("charge", effect(false))
        .effect("ship", effect(true))
        .build()
        .expect("runtime")
}

/// Every execution with `status`, through the store's status index.
async fn listed(store: &impl EventStore, status: ExecutionStatus) -> Vec<ExecutionId> {
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let Ok(page) = store
            .list_by_status(StatusFilter::Status(status), after.as_ref(), 200)
            .await
        else {
            return ids;
        };
        ids.extend(page.executions.into_iter().map(|summary| summary.id));
        match page.next {
            Some(next) => after = Some(next),
            None => return ids,
        }
    }
}

/// Resumes every `Approval` gate pending, each with a payload of its own (`by`: who, and a
/// number), written to the ledger's `resumes` once acknowledged; a gate another worker resumed
/// first is refused, which is fine.
async fn approve_pending<S: WorkerStore>(rt: &Runtime<S>, by: &str, ledgers: &Ledgers) {
    static RESUMES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    for id in listed(rt.store(), ExecutionStatus::Suspended).await {
        let Ok(state) = rt.store().fold(&id).await else {
            continue;
        };
        let keys: Vec<String> = state
            .pending_gates()
            .values()
            .filter(|gate| &*gate.event_type == APPROVAL)
            .map(|gate| gate.correlation_key.clone())
            .collect();
        for key in keys {
            let n = RESUMES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let payload = json!({ "approved": true, "by": by, "n": n });
            if rt
                .resume(&id, APPROVAL, &key, Payload::from(payload.clone()))
                .await
                .is_ok()
            {
                until_answered(
                    &ledgers.of(&id),
                    "INSERT INTO resumes (execution, payload) VALUES ($1, $2)",
                    &[&id.as_str(), &payload.to_string()],
                )
                .await;
            }
        }
    }
}

#[test]
fn worker_process_entry() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.splitn(6, '|').collect();
    let [worker, generation, schema, starts_until, lease_ms, urls] = parts[..] else {
        panic!("bad worker spec {spec}");
    };
    let starts_until: u128 = starts_until.parse().expect("deadline");
    let lease = Duration::from_millis(lease_ms.parse().expect("lease"));
    // Space-separated: a URL of a replicated pair has commas.
    let urls: Vec<String> = urls.split(' ').map(str::to_owned).collect();
    let life = Life {
        worker,
        generation,
        schema,
        starts_until,
        lease,
    };
    child_runtime().block_on(async move {
        match urls.len() {
            1 => work::<PostgresStore>(&urls, life).await,
            _ => work::<ShardedStore>(&urls, life).await,
        }
    });
}

/// Who a worker process is and how long it starts executions.
struct Life<'a> {
    worker: &'a str,
    generation: &'a str,
    schema: &'a str,
    starts_until: u128,
    lease: Duration,
}

/// A worker's life: recover and resume gates now and then, start executions until
/// `starts_until`, then go on until killed.
async fn work<S: WorkerStore>(urls: &[String], life: Life<'_>) {
    let Life {
        worker,
        generation,
        schema,
        starts_until,
        lease,
    } = life;
    {
        let store = S::open(urls, schema, worker, lease, false)
            .await
            .expect("connect");
        let ledgers = Ledgers::connect(urls, schema, &format!("ledger-{worker}")).await;
        let rt = Arc::new(runtime_on(store, worker, &ledgers));
        let background = {
            let (rt, ledgers) = (Arc::clone(&rt), ledgers.clone());
            let by = format!("{worker}-{generation}");
            tokio::spawn(async move {
                loop {
                    let _ = rt.recover().await;
                    approve_pending(&rt, &by, &ledgers).await;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        let mut n = 0;
        let control = &ledgers.all()[0];
        while SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_millis()
            < starts_until
            && !until_answered(control, "SELECT starts_over FROM control", &[]).await[0]
                .get::<_, bool>(0)
        {
            let id = ExecutionId::new(format!("o-{worker}-{generation}-{n:04}")).expect("id");
            n += 1;
            let options = StartOptions::new(id.clone())
                .grant("quote")
                .grant("charge")
                .grant("ship");
            if rt.start("order", &json!({ "n": n }), options).await.is_ok() {
                // Acknowledged: the caller was told the execution exists.
                until_answered(
                    &ledgers.of(&id),
                    "INSERT INTO acks (execution, worker) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    &[&id.as_str(), &worker],
                )
                .await;
            }
            tokio::time::sleep(START_EVERY).await;
        }
        // Runs until the test kills it.
        let _ = background.await;
    }
}

/// The worker processes, killed however the test ends.
struct Workers {
    children: Vec<Child>,
    generations: Vec<usize>,
    schema: String,
    urls: Vec<String>,
    starts_until: u128,
    lease: Duration,
}

impl Workers {
    fn spawn(&mut self, index: usize) {
        let generation = self.generations[index];
        self.generations[index] += 1;
        let child = child_test(concat!(module_path!(), "::worker_process_entry"))
            .env(
                WORKER_ENV,
                format!(
                    "w{index}|{generation}|{}|{}|{}|{}",
                    self.schema,
                    self.starts_until,
                    self.lease.as_millis(),
                    self.urls.join(" ")
                ),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn worker");
        match index < self.children.len() {
            true => self.children[index] = child,
            false => self.children.push(child),
        }
    }

    fn kill(&mut self, index: usize) {
        let child = &mut self.children[index];
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }

    fn signal(&self, index: usize, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.children[index].id().to_string()])
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill {signal} failed");
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.children {
            // A stopped worker is let go on first, so that nothing of it outlives the test.
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The operator: for each step in doubt, raises the receiver's fence to the execution's
/// current lease token (any call still on its way from a worker that lost the execution is
/// refused from then on), then looks the idempotency key up: a receipt gets `completed` with
/// it, none gets `retry` (no earlier call can land any more).
async fn operator_pass<S: WorkerStore>(
    operator: &Runtime<S>,
    admins: &Ledgers,
    verdicts: &mut BTreeMap<String, &'static str>,
) {
    for id in listed(operator.store(), ExecutionStatus::InDoubt).await {
        let Ok(state) = operator.store().fold(&id).await else {
            continue;
        };
        let admin = admins.of(&id);
        for step in state.steps_in_doubt().clone() {
            let key = loom_kernel::idempotency_key(&id, &step);
            let token: i64 = until_answered(
                &admin,
                "SELECT lease_token FROM loom_executions WHERE execution_id = $1",
                &[&id.as_str()],
            )
            .await[0]
                .get(0);
            until_answered(
                &admin,
                "INSERT INTO fences AS f (execution, token) VALUES ($1, $2) \
                 ON CONFLICT (execution) DO UPDATE SET token = greatest(f.token, excluded.token)",
                &[&id.as_str(), &token],
            )
            .await;
            let receipt = until_answered(
                &admin,
                "SELECT token FROM calls WHERE key = $1 AND accepted ORDER BY id LIMIT 1",
                &[&key],
            )
            .await
            .into_iter()
            .next();
            let (verdict, said) = match receipt {
                Some(row) => {
                    let token: Option<i64> = row.get(0);
                    let output = json!({ "effect": "charge", "key": key, "token": token });
                    (
                        Verdict::Completed {
                            output: output.into(),
                        },
                        "completed",
                    )
                }
                None => (Verdict::Retry, "retry"),
            };
            if operator
                .resolve(&id, &step, verdict, Some("kill-test operator".into()))
                .await
                .is_ok()
            {
                verdicts.insert(key, said);
            }
        }
    }
}

async fn count_by_status(admins: &Ledgers) -> BTreeMap<i16, i64> {
    let mut counts = BTreeMap::new();
    for admin in admins.all() {
        for row in until_answered(
            admin,
            "SELECT status, count(*) FROM loom_executions WHERE head > 0 GROUP BY status",
            &[],
        )
        .await
        {
            *counts.entry(row.get::<_, i16>(0)).or_insert(0) += row.get::<_, i64>(1);
        }
    }
    counts
}

/// Every row `sql` returns, from every database.
async fn rows_of_all(admins: &Ledgers, sql: &str) -> Vec<tokio_postgres::Row> {
    let mut rows = Vec::new();
    for admin in admins.all() {
        rows.extend(until_answered(admin, sql, &[]).await);
    }
    rows
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
        pair: crate::failover::SharedPair,
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
    // Borrowed, not taken: a replicated pair lives until the checks are done.
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
        Disruption::Failovers { count, pair } => {
            crate::failover::failovers(pair, *count, &schema).await
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
