//! Why a statement or a connection failed, in words an operator can act on, and whether the
//! same work may be tried again on a fresh connection.
//!
//! tokio-postgres reports a cancelled statement, a session the server ended and a server that
//! went away all as "db error" or "connection closed". Behind a failover they mean different
//! things: the server cancelled a statement that ran past the store's limits (the worker was
//! starved), the server ended a session idle in a transaction (the worker was paused), the
//! primary died or is shutting down (a failover may follow), or the host reached is a standby.
//! The writer retries the ones a reconnection can cure, within its failover bound
//! ([`crate::PostgresStoreConfig::failover_timeout`]); every error a caller sees names its
//! cause.

use std::time::Duration;

use tokio_postgres::error::SqlState;

/// What went wrong with a statement or a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The server cancelled a statement that ran past `statement_timeout`.
    StatementTimeout,
    /// The server ended a session that sat idle in a transaction past
    /// `idle_in_transaction_session_timeout`.
    IdleInTransactionTimeout,
    /// The connection broke, or no server could be reached.
    ConnectionLost,
    /// The server is shutting down, restarting after a crash, or starting up.
    ServerGoingAway,
    /// The host reached accepts no writes: a standby, during a failover or because the URL
    /// lets the store connect to one.
    ReadOnly,
    /// A deadlock or a serialisation failure: the transaction did nothing.
    Contention,
    /// Anything else: the server refused the statement.
    Other,
}

impl Cause {
    /// Classifies a tokio-postgres error.
    pub(crate) fn of(err: &tokio_postgres::Error) -> Self {
        if let Some(code) = err.code() {
            return Self::of_code(code);
        }
        if err.is_closed() {
            return Self::ConnectionLost;
        }
        // An I/O error, a failed connect (every host of the URL refused, or none was
        // writable), a timeout waiting for the server: the connection is gone or never was.
        let shown = err.to_string();
        if std::error::Error::source(err).is_some_and(|s| s.is::<std::io::Error>())
            || shown.starts_with("error communicating with the server")
            || shown.starts_with("error connecting to server")
            || shown.starts_with("timeout waiting for server")
        {
            return Self::ConnectionLost;
        }
        Self::Other
    }

    fn of_code(code: &SqlState) -> Self {
        match code {
            c if *c == SqlState::QUERY_CANCELED => Self::StatementTimeout,
            c if *c == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT => {
                Self::IdleInTransactionTimeout
            }
            c if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || *c == SqlState::IDLE_SESSION_TIMEOUT =>
            {
                Self::ServerGoingAway
            }
            c if *c == SqlState::READ_ONLY_SQL_TRANSACTION => Self::ReadOnly,
            c if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED =>
            {
                Self::Contention
            }
            _ => Self::Other,
        }
    }

    /// Classifies a pool error: a connection that could not be made is lost.
    pub(crate) fn of_pool(err: &deadpool_postgres::PoolError) -> Self {
        match err {
            deadpool_postgres::PoolError::Backend(err) => Self::of(err),
            _ => Self::ConnectionLost,
        }
    }

    /// Whether the failed work may succeed on a fresh connection, perhaps to another host:
    /// nothing of it took effect (or its outcome is read back first) and the cause is the
    /// connection or the server, not the work.
    pub(crate) fn reconnect_may_cure(self) -> bool {
        matches!(
            self,
            Self::ConnectionLost
                | Self::ServerGoingAway
                | Self::ReadOnly
                | Self::IdleInTransactionTimeout
        )
    }

    /// The cause in a few words, to stand before the server's own message.
    pub(crate) fn phrase(self) -> &'static str {
        match self {
            Self::StatementTimeout => {
                "the server cancelled a statement that ran past the store's statement_timeout \
                 (a third of the lease for writes: the worker or the server was starved)"
            }
            Self::IdleInTransactionTimeout => {
                "the server ended a session idle in a transaction past \
                 idle_in_transaction_session_timeout (the worker was paused or starved)"
            }
            Self::ConnectionLost => "the connection to PostgreSQL was lost or could not be made",
            Self::ServerGoingAway => {
                "the PostgreSQL server is shutting down, restarting or starting up (a failover \
                 or an operator's stop)"
            }
            Self::ReadOnly => {
                "the server reached is a read-only standby, not the primary (a failover under \
                 way, or a URL without target_session_attrs=read-write)"
            }
            Self::Contention => "a deadlock or a serialisation failure",
            Self::Other => "the server refused the statement",
        }
    }
}

/// Why a statement (or the statements of a batch) failed, and whether trying again on a fresh
/// connection may succeed.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) detail: String,
    pub(crate) cause: Cause,
}

impl Failure {
    pub(crate) fn of(err: &tokio_postgres::Error) -> Self {
        let cause = Cause::of(err);
        Self {
            detail: described(cause, err),
            cause,
        }
    }

    pub(crate) fn pool(err: &deadpool_postgres::PoolError) -> Self {
        let cause = Cause::of_pool(err);
        Self {
            detail: described(cause, err),
            cause,
        }
    }

    pub(crate) fn other(detail: impl Into<String>, cause: Cause) -> Self {
        Self {
            detail: detail.into(),
            cause,
        }
    }
}

/// `err` as a sentence that starts with its cause.
pub(crate) fn describe(err: &tokio_postgres::Error) -> String {
    described(Cause::of(err), err)
}

/// A pool error as a sentence that starts with its cause.
pub(crate) fn describe_pool(err: &deadpool_postgres::PoolError) -> String {
    described(Cause::of_pool(err), err)
}

fn described(cause: Cause, err: &dyn std::error::Error) -> String {
    // tokio-postgres's own text is "db error" for every server error: the server's message is
    // in its source.
    let mut detail = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        detail.push_str(": ");
        detail.push_str(&inner.to_string());
        source = inner.source();
    }
    format!("{}: {detail}", cause.phrase())
}

/// `bound` from now, or as far as the clock goes: a bound of `Duration::MAX` means "never give
/// up", not an overflow.
pub(crate) fn deadline_after(bound: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(bound)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 60 * 60))
}

/// How the store waits out a failover: tries again after a wait that doubles up to 1 s, until a
/// deadline (`failover_timeout` from the first failure).
#[derive(Debug)]
pub(crate) struct Retry {
    deadline: tokio::time::Instant,
    wait: Duration,
}

impl Retry {
    /// Until `bound` from now, the first wait 50 ms.
    pub(crate) fn within(bound: Duration) -> Self {
        Self::until(deadline_after(bound))
    }

    /// Until `deadline`, the first wait 50 ms.
    pub(crate) fn until(deadline: tokio::time::Instant) -> Self {
        Self {
            deadline,
            wait: Duration::from_millis(50),
        }
    }

    /// The same with another first wait.
    pub(crate) fn first_wait(self, wait: Duration) -> Self {
        Self { wait, ..self }
    }

    pub(crate) fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }

    /// Whether the deadline is still ahead.
    pub(crate) fn time_left(&self) -> bool {
        tokio::time::Instant::now() < self.deadline
    }

    /// Waits before the next try; `false`, at once, if that wait would pass the deadline.
    pub(crate) async fn wait(&mut self) -> bool {
        if tokio::time::Instant::now() + self.wait > self.deadline {
            return false;
        }
        tokio::time::sleep(self.wait).await;
        self.wait = (self.wait * 2).min(Duration::from_secs(1));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_codes_a_failover_brings_are_told_apart() {
        for (code, cause) in [
            (SqlState::QUERY_CANCELED, Cause::StatementTimeout),
            (
                SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
                Cause::IdleInTransactionTimeout,
            ),
            (SqlState::ADMIN_SHUTDOWN, Cause::ServerGoingAway),
            (SqlState::READ_ONLY_SQL_TRANSACTION, Cause::ReadOnly),
            (SqlState::T_R_DEADLOCK_DETECTED, Cause::Contention),
            (SqlState::UNIQUE_VIOLATION, Cause::Other),
        ] {
            assert_eq!(Cause::of_code(&code), cause, "{code:?}");
        }
    }

    #[test]
    fn only_what_a_new_connection_can_cure_is_retried_after_reconnecting() {
        assert!(Cause::ConnectionLost.reconnect_may_cure());
        assert!(Cause::ServerGoingAway.reconnect_may_cure());
        assert!(Cause::ReadOnly.reconnect_may_cure());
        assert!(!Cause::StatementTimeout.reconnect_may_cure());
        assert!(!Cause::Other.reconnect_may_cure());
    }

    #[test]
    fn every_phrase_names_its_cause_not_db_error() {
        for cause in [
            Cause::StatementTimeout,
            Cause::IdleInTransactionTimeout,
            Cause::ConnectionLost,
            Cause::ServerGoingAway,
            Cause::ReadOnly,
            Cause::Contention,
            Cause::Other,
        ] {
            assert!(!cause.phrase().contains("db error"));
        }
    }

    #[tokio::test]
    async fn an_unbounded_failover_timeout_is_a_far_deadline_not_an_overflow() {
        let far = deadline_after(Duration::MAX);
        assert!(far > tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 60 * 60));
        let soon = deadline_after(Duration::from_millis(5));
        assert!(soon <= tokio::time::Instant::now() + Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_waits_longer_each_time_and_never_past_its_deadline() {
        let began = tokio::time::Instant::now();
        let mut retry = Retry::within(Duration::from_millis(1_000));
        let mut waits = 0;
        while retry.wait().await {
            waits += 1;
        }
        // 50, 100, 200, 400 ms: the next, 800 ms, would pass the deadline.
        assert_eq!(waits, 4);
        assert_eq!(began.elapsed(), Duration::from_millis(750));
        assert!(retry.time_left());
    }
}
