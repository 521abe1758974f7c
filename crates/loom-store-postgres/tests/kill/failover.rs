//! The failover test: the kill test's three worker processes, ledger and operator (see
//! `kill_rounds`) on a replicated pair (a primary and a synchronous standby, the test's own),
//! the workers connected with the pair's multi-host URL. Instead of killing workers, the test
//! kills the primary (every process of it, SIGKILL) and promotes the standby, then makes a new
//! standby of the new primary on the dead one's port; three times in an ordinary run
//! (`LOOM_FAILOVERS` sets another number). Then everything is driven to its end and the kill
//! test's checks run: no acknowledged start lost, no non-idempotent call twice without a
//! doubt and a verdict, every log replays. It also measures, after each promotion, how long
//! until the workers commit again, and fails past [`RESUME_BOUND`]. The same runs on a
//! `ShardedStore` over two replicated pairs, failed over in turn (`--long` and CI only).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loom_store_postgres::{PostgresStore, ShardedStore, raw_client};

use crate::kill_rounds::{Disruption, kill_test, knob};
use crate::support::cluster::Pair;

/// Longer than a failover here (under a second to a few), so that the workers keep their
/// executions through it: the lease's expiry is the database's, and it is on the standby.
pub(crate) const LEASE: Duration = Duration::from_secs(6);
/// Between failovers: the workers start and drive executions meanwhile.
const GAP: Duration = Duration::from_millis(1_500);
/// How many failovers (3 by default).
const FAILOVERS_VAR: &str = "LOOM_FAILOVERS";
/// How many failovers of the two replicated shards: none by default (the one-pair test takes
/// the same paths; the sharded kill test covers the sharded store), 4 with
/// `cargo xtask test --long` and in CI.
const SHARDED_FAILOVERS_VAR: &str = "LOOM_SHARDED_FAILOVERS";
/// The most the workers may take, from a promotion, to commit again (a new standby included:
/// a commit waits for a synchronous standby).
const RESUME_BOUND: Duration = Duration::from_secs(30);

/// The pair, shared with blocking tasks that kill, promote and rebuild its servers.
#[derive(Clone)]
pub(crate) struct SharedPair(Arc<Mutex<Pair>>);

impl SharedPair {
    pub(crate) fn new(pair: Pair) -> Self {
        Self(Arc::new(Mutex::new(pair)))
    }

    /// Runs `what` on the pair in a blocking task; panics with its error.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        what: impl FnOnce(&mut Pair) -> Result<T, String> + Send + 'static,
    ) -> T {
        let pair = Arc::clone(&self.0);
        tokio::task::spawn_blocking(move || what(&mut pair.lock().expect("pair")))
            .await
            .expect("blocking task")
            .unwrap_or_else(|error| panic!("{error}"))
    }
}

/// The workers' lease and the longest the failovers may take: the workers start executions
/// until the test tells them the failovers are over, or until then at the latest (a slow
/// failover on a loaded machine takes seconds).
pub(crate) fn plan(count: usize) -> (Duration, Duration) {
    (LEASE, (GAP + RESUME_BOUND) * count as u32)
}

/// `count` failovers, `GAP` apart, of `pairs` in turn (one pair per database of the store); a
/// line of what they took.
pub(crate) async fn failovers(pairs: &[SharedPair], count: usize, schema: &str) -> String {
    let (mut kills, mut promotions, mut rebuilds, mut resumed) = (vec![], vec![], vec![], vec![]);
    for round in 0..count {
        let pair = &pairs[round % pairs.len()];
        tokio::time::sleep(GAP).await;
        kills.push(timed(pair, |pair| pair.kill_primary()).await);
        promotions.push(timed(pair, |pair| pair.promote()).await);
        let promoted = Instant::now();
        let primary = pair.run(|pair| Ok(pair.primary_url())).await;
        let watching = tokio::spawn(first_commit_after(primary, schema.to_owned(), promoted));
        rebuilds.push(timed(pair, |pair| pair.rebuild_standby()).await);
        let took = tokio::time::timeout(RESUME_BOUND, watching)
            .await
            .unwrap_or_else(|_| {
                panic!("no worker committed within {RESUME_BOUND:?} of a promotion")
            })
            .expect("watching the feed");
        resumed.push(took);
    }
    let most = |times: &[Duration]| times.iter().max().copied().unwrap_or_default();
    let ms = |times: &[Duration]| {
        times
            .iter()
            .map(|t| t.as_millis().to_string())
            .collect::<Vec<_>>()
            .join("/")
    };
    let pairs = match pairs.len() {
        1 => "a synchronous pair".to_owned(),
        n => format!("{n} synchronous pairs in turn"),
    };
    format!(
        "{count} failovers of {pairs} (kill {} ms, promotion {} ms, new standby {} \
         ms; the workers' first commit {} ms after each promotion, at most {:?})",
        ms(&kills),
        ms(&promotions),
        ms(&rebuilds),
        ms(&resumed),
        most(&resumed),
    )
}

async fn timed(
    pair: &SharedPair,
    what: impl FnOnce(&mut Pair) -> Result<(), String> + Send + 'static,
) -> Duration {
    pair.run(move |pair| {
        let began = Instant::now();
        what(pair)?;
        Ok(began.elapsed())
    })
    .await
}

/// How long after `promoted` the feed of `schema` on `primary` first grew: a worker's commit.
async fn first_commit_after(primary: String, schema: String, promoted: Instant) -> Duration {
    let client = raw_client(&primary).await;
    let position = format!("SELECT next_position FROM {schema}.loom_feed");
    let read = || async {
        let row = client.query_one(&position, &[]).await.ok()?;
        Some(row.get::<_, i64>(0))
    };
    let before = read().await.expect("the feed on the new primary");
    loop {
        // `None`: the pair went away (the test ended); the wait's own bound ends this.
        if read().await.is_some_and(|now| now > before) {
            return promoted.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_a_replicated_pair_come_through_failovers_losing_nothing() {
    let Some(pair) = crate::support::replicated_pair("failover", true) else {
        return;
    };
    let url = pair.url();
    let count = knob(FAILOVERS_VAR, 3);
    let pairs = vec![SharedPair::new(pair)];
    kill_test::<PostgresStore>(vec![url], Disruption::Failovers { count, pairs }).await;
}

/// The same on a `ShardedStore` over two replicated databases, failed over in turn: one shard
/// loses its primary while the other goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_two_replicated_shards_come_through_their_failovers_losing_nothing() {
    let count = knob(SHARDED_FAILOVERS_VAR, 0);
    if count == 0 {
        // Past the harness's capture, so that an ordinary run says what it left out.
        let _ = writeln!(
            std::io::stderr(),
            "failover test on two replicated shards: not run ({SHARDED_FAILOVERS_VAR}=0; \
             `cargo xtask test --long` runs it)"
        );
        return;
    }
    let Some(first) = crate::support::replicated_pair("failover_sharded", true) else {
        return;
    };
    let Some(second) = crate::support::replicated_pair("failover_sharded", true) else {
        return;
    };
    let urls = vec![first.url(), second.url()];
    let pairs = vec![SharedPair::new(first), SharedPair::new(second)];
    kill_test::<ShardedStore>(urls, Disruption::Failovers { count, pairs }).await;
}
