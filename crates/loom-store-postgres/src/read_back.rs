//! Reading back a commit whose answer was lost: on a primary only (`pg_is_in_recovery()`
//! false), since a standby's view may lag the commit asked about, and within a deadline (the
//! store's `failover_timeout`), so that a failover in the middle is waited out. See the
//! writer's module documentation for what is done with the answer.

use std::time::Duration;

use loom_kernel::ExecutionId;

use crate::cause::{Retry, describe, describe_pool};
use crate::fast;
use crate::writer::Writer;

/// One event the batch inserted: finding it with the batch's commit id proves the commit.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub(crate) execution: ExecutionId,
    pub(crate) seq: i64,
    pub(crate) commit_id: i64,
}

impl Writer {
    /// Which of `ids` have the event at the matching `seqs` stored under `commit_id`; `None`
    /// if that cannot be found out.
    pub(crate) async fn read_back(
        &self,
        ids: &[&str],
        seqs: &[i64],
        commit_id: i64,
        deadline: tokio::time::Instant,
    ) -> Option<std::collections::HashSet<String>> {
        self.ask_until_answered(deadline, |client| async move {
            if !on_primary(&client).await? {
                return Ok(None);
            }
            let rows = client
                .query(fast::READ_BACK, &[&ids, &seqs, &commit_id])
                .await?;
            Ok(Some(fast::id_set(&rows)))
        })
        .await
    }

    /// Whether the batch of `probe` committed: `None` if it cannot be found out by
    /// `deadline`.
    pub(crate) async fn resolve(
        &self,
        probe: &Probe,
        deadline: tokio::time::Instant,
    ) -> Option<bool> {
        self.ask_until_answered(deadline, |client| async move {
            if !on_primary(&client).await? {
                return Ok(None);
            }
            let row = client
                .query_opt(
                    "SELECT commit_id FROM loom_events WHERE execution_id = $1 AND seq = $2",
                    &[&probe.execution.as_str(), &probe.seq],
                )
                .await?;
            Ok(Some(row.is_some_and(|row| {
                row.get::<_, i64>(0) == probe.commit_id
            })))
        })
        .await
    }

    /// Asks the primary with `ask` on a pooled connection until it answers (`ask` gives `None`
    /// on a standby), backing off from 20 ms to 1 s between tries, until `deadline`: `None` if
    /// it never does. How an ambiguous commit is read back.
    async fn ask_until_answered<T, F, Fut>(
        &self,
        deadline: tokio::time::Instant,
        ask: F,
    ) -> Option<T>
    where
        F: Fn(deadpool_postgres::Object) -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>, tokio_postgres::Error>>,
    {
        let mut retry = Retry::until(deadline).first_wait(Duration::from_millis(20));
        let mut tries = 0;
        loop {
            let found = match self.pool.get().await {
                Ok(client) => ask(client).await.map_err(|e| describe(&e)),
                Err(e) => Err(describe_pool(&e)),
            };
            tries += 1;
            match found {
                Ok(Some(found)) => return Some(found),
                Ok(None) => {
                    tracing::debug!("reached a standby; reading back from the primary later");
                }
                // Once at warn: a failover takes seconds, and each try would say the same.
                Err(detail) if tries == 1 => {
                    tracing::warn!(%detail, "cannot read back an ambiguous commit yet; trying again");
                }
                Err(detail) => {
                    tracing::debug!(%detail, tries, "cannot read back an ambiguous commit yet");
                }
            }
            if !retry.wait().await {
                return None;
            }
        }
    }
}

/// Whether `client`'s server is a primary: a standby's view may lag the commit asked about.
async fn on_primary(client: &deadpool_postgres::Object) -> Result<bool, tokio_postgres::Error> {
    let row = client
        .query_one("SELECT NOT pg_is_in_recovery()", &[])
        .await?;
    Ok(row.get(0))
}
