//! The kill and failover tests' worker processes (this test binary run again with
//! `LOOM_KILL_WORKER` set: `worker_process_entry`) and the operator that gives verdicts.

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use loom_kernel::{
    EventStore, EventStoreExt, ExecutionId, ExecutionStatus, Payload, Runtime, StartOptions,
    StatusFilter, Verdict,
};
use loom_store_postgres::{ConnectError, PostgresStore, PostgresStoreConfig, ShardedStore};
use serde_json::json;

use crate::kill_rounds::{APPROVAL, START_EVERY, flows};
use crate::ledger::{Ledgers, ledger_effect, until_answered};
use crate::support::child::{child_runtime, child_test};

pub(crate) const WORKER_ENV: &str = "LOOM_KILL_WORKER";

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

pub(crate) fn configs(
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

pub(crate) fn runtime_on<S: WorkerStore>(store: S, worker: &str, ledgers: &Ledgers) -> Runtime<S> {
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
pub(crate) async fn listed(store: &impl EventStore, status: ExecutionStatus) -> Vec<ExecutionId> {
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
pub(crate) async fn approve_pending<S: WorkerStore>(rt: &Runtime<S>, by: &str, ledgers: &Ledgers) {
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
pub(crate) fn worker_process_entry() {
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
pub(crate) struct Life<'a> {
    worker: &'a str,
    generation: &'a str,
    schema: &'a str,
    starts_until: u128,
    lease: Duration,
}

/// A worker's life: recover and resume gates now and then, start executions until
/// `starts_until`, then go on until killed.
pub(crate) async fn work<S: WorkerStore>(urls: &[String], life: Life<'_>) {
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
pub(crate) struct Workers {
    pub(crate) children: Vec<Child>,
    pub(crate) generations: Vec<usize>,
    pub(crate) schema: String,
    pub(crate) urls: Vec<String>,
    pub(crate) starts_until: u128,
    pub(crate) lease: Duration,
}

impl Workers {
    pub(crate) fn spawn(&mut self, index: usize) {
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

    pub(crate) fn kill(&mut self, index: usize) {
        let child = &mut self.children[index];
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }

    pub(crate) fn signal(&self, index: usize, signal: &str) {
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
pub(crate) async fn operator_pass<S: WorkerStore>(
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
