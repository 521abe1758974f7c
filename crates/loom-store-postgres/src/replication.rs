//! What the server's replication promises an acknowledged append: whether it survives the
//! primary's loss. Read at connect (a warning when it does not) and on demand
//! ([`crate::PostgresStore::replication`]).

use std::time::Duration;

use loom_kernel::kit::StorageError;
use loom_kernel::{AppendError, ExecutionId};
use tokio_postgres::config::TargetSessionAttrs;

/// The replication settings of the primary a store is connected to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    /// The server's `synchronous_commit` (`on`, `remote_apply`, `remote_write`, `local`,
    /// `off`) for the store's sessions.
    pub synchronous_commit: String,
    /// The server's `synchronous_standby_names` (empty: no standby is waited for).
    pub synchronous_standby_names: String,
    /// Standbys streaming from this primary now.
    pub standbys: u32,
    /// Of them, the ones a commit waits for now (`sync_state` `sync` or `quorum`); `None` when
    /// the store's role may not see `sync_state` (it takes `pg_read_all_stats`).
    pub synchronous_standbys: Option<u32>,
}

impl Replication {
    /// Whether every append this store acknowledges is on a synchronous standby too, so that
    /// promoting that standby after the primary's loss loses none: commits wait for one
    /// (`synchronous_commit` `on`, `remote_apply` or `remote_write`, and standbys named in
    /// `synchronous_standby_names`). With none streaming, commits wait rather than go
    /// unreplicated: appends stall, they are not lost. False for asynchronous replication,
    /// where a failover may lose acknowledged appends.
    pub fn survives_failover(&self) -> bool {
        matches!(
            self.synchronous_commit.as_str(),
            "on" | "remote_apply" | "remote_write"
        ) && !self.synchronous_standby_names.trim().is_empty()
    }

    /// Whether the primary streams to standbys that a commit does not wait for: a failover
    /// to one of them may lose acknowledged appends.
    pub fn may_lose_on_failover(&self) -> bool {
        self.standbys > 0 && !self.survives_failover()
    }

    pub(crate) async fn read(
        client: &tokio_postgres::Client,
    ) -> Result<Self, tokio_postgres::Error> {
        let row = client
            .query_one(
                "SELECT current_setting('synchronous_commit'), \
                        current_setting('synchronous_standby_names'), \
                        (SELECT count(*) FROM pg_stat_replication)::int8, \
                        (SELECT count(*) FROM pg_stat_replication \
                         WHERE sync_state IN ('sync', 'quorum'))::int8, \
                        (SELECT count(*) FROM pg_stat_replication \
                         WHERE sync_state IS NULL)::int8",
                &[],
            )
            .await?;
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(Self {
            synchronous_commit: row.get(0),
            synchronous_standby_names: row.get(1),
            standbys: count(row.get(2)),
            // Rows the role may not see the details of have no `sync_state`.
            synchronous_standbys: (row.get::<_, i64>(4) == 0).then(|| count(row.get(3))),
        })
    }
}

/// Connection settings that find the primary again after a failover and notice a dead server
/// soon, where the URL leaves them unset:
/// - several hosts: only a writable one (`target_session_attrs=read-write`), as every
///   statement of the store writes or must see what the primary has;
/// - 5 s to connect to a host before trying the next;
/// - TCP keepalives after 5 s idle, every 2 s, 3 unanswered: a primary whose machine vanished
///   without closing its connections is given up in about 11 s, not the system's 2 hours.
pub(crate) fn prepare_for_failover(pg: &mut tokio_postgres::Config) {
    if pg.get_hosts().len() > 1 && pg.get_target_session_attrs() == TargetSessionAttrs::Any {
        pg.target_session_attrs(TargetSessionAttrs::ReadWrite);
    }
    if pg.get_connect_timeout().is_none() {
        pg.connect_timeout(Duration::from_secs(5));
    }
    if pg.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        pg.keepalives_idle(Duration::from_secs(5));
    }
    if pg.get_keepalives_interval().is_none() {
        pg.keepalives_interval(Duration::from_secs(2));
    }
    if pg.get_keepalives_retries().is_none() {
        pg.keepalives_retries(3);
    }
}

/// The error for an append to an execution whose log the database no longer has up to `had`
/// (this worker committed it there, and was told so) but only up to `now`.
pub(crate) fn lost_commits(execution: &ExecutionId, had: u64, now: u64) -> AppendError {
    let detail = format!(
        "the database lost commits it had acknowledged: execution {execution} had {had} events \
         when this worker last committed to it and now has {now}. A failover to a standby that \
         had not received them does this (asynchronous replication: synchronous_commit off or \
         local, or no synchronous standby); the lost steps' effects may have run and will run \
         again when the execution is driven from what is stored. See docs/POSTGRES.md"
    );
    tracing::error!(%execution, had, now, "acknowledged commits lost");
    AppendError::Storage {
        execution: execution.clone(),
        source: StorageError::msg(detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replication(commit: &str, names: &str, standbys: u32, sync: Option<u32>) -> Replication {
        Replication {
            synchronous_commit: commit.into(),
            synchronous_standby_names: names.into(),
            standbys,
            synchronous_standbys: sync,
        }
    }

    #[test]
    fn only_commits_that_wait_for_a_synchronous_standby_keep_acknowledged_appends() {
        assert!(replication("on", "*", 1, Some(1)).survives_failover());
        assert!(replication("remote_apply", "s1", 2, Some(1)).survives_failover());
        // Asynchronous: standbys, but commits do not wait for them.
        let lossy = replication("on", "", 1, Some(0));
        assert!(!lossy.survives_failover() && lossy.may_lose_on_failover());
        let local = replication("local", "*", 1, Some(1));
        assert!(!local.survives_failover() && local.may_lose_on_failover());
        // The synchronous standby is not connected now: commits wait, nothing is lost.
        assert!(replication("on", "*", 0, Some(0)).survives_failover());
        // A role that may not see `sync_state` is not told a loss it cannot see.
        assert!(!replication("on", "s1", 1, None).may_lose_on_failover());
        // A single server: nothing to fail over to, nothing said.
        assert!(!replication("on", "", 0, Some(0)).may_lose_on_failover());
    }

    #[test]
    fn several_hosts_mean_the_writable_one() {
        let mut pg: tokio_postgres::Config = "postgres://u@h1:5432,h2:5433/db".parse().unwrap();
        prepare_for_failover(&mut pg);
        assert_eq!(pg.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
        assert_eq!(pg.get_connect_timeout(), Some(&Duration::from_secs(5)));
        // What the URL says wins.
        let mut pg: tokio_postgres::Config =
            "postgres://u@h1,h2/db?target_session_attrs=any&connect_timeout=30&keepalives_idle=60"
                .parse()
                .unwrap();
        prepare_for_failover(&mut pg);
        assert_eq!(pg.get_connect_timeout(), Some(&Duration::from_secs(30)));
        assert_eq!(pg.get_keepalives_idle(), Duration::from_secs(60));
    }
}
