//! The kill and failover tests' ledger: every effect call written, beside the store's tables
//! but on connections of its own (pools, so that a failover's new primary is reached), with the
//! token the handler was given and the lease the server held at that moment; the receiver's
//! fence; the acknowledged starts and resumes; and what tells the workers to stop starting.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use futures::future::BoxFuture;
use loom_kernel::{EffectCall, EffectOutcome, ErrorInfo, ExecutionId, FnEffect};
use loom_store_postgres::shard_of;
use serde_json::json;

use crate::workers::WorkerStore;

/// The ledger, on the store's schema but written on connections of its own.
pub(crate) const LEDGER: &str = "
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
pub(crate) const FENCED_CALL: &str = "
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
pub(crate) const PLAIN_CALL: &str = "
    INSERT INTO calls (effect, execution, step, key, worker, token, attempt, holder_token,
                       live, accepted)
    SELECT $1, $2, $3, $4, $5, $6, $7, e.lease_token,
           coalesce(e.lease_owner = $5 AND e.lease_expires_at > clock_timestamp(), false), true
    FROM (SELECT 1) AS one LEFT JOIN loom_executions e ON e.execution_id = $2
    RETURNING accepted";

/// An effect whose every call goes to the ledger. The work (a short sleep) comes before the
/// call reaches the receiver, so that kills and pauses land between the runtime's lease check
/// and the receiver.
pub(crate) fn ledger_effect<S: WorkerStore>(
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
    pub(crate) fn of(&self, execution: &ExecutionId) -> Pool {
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

pub(crate) fn ledger_pool(url: &str, schema: &str, name: &str) -> Pool {
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

pub(crate) async fn count_by_status(admins: &Ledgers) -> BTreeMap<i16, i64> {
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
pub(crate) async fn rows_of_all(admins: &Ledgers, sql: &str) -> Vec<tokio_postgres::Row> {
    let mut rows = Vec::new();
    for admin in admins.all() {
        rows.extend(until_answered(admin, sql, &[]).await);
    }
    rows
}
