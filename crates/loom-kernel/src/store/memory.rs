//! The in-memory store: the reference twin of the disk store, for tests.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use super::claim::{ClaimTable, FirstAppend, NewClaim};
use super::tail::{ExecutionTail, TailChange, filter_code};
use super::wake::{self, WakeRows, Wakeup};
use super::watch::{FeedWatch, HeadWatch};
use super::{
    AppendError, EventStore, ExecutionPage, ExecutionQuery, ExecutionQueryPage, ExecutionSummary,
    FeedEvent, ListedExecution, ReadError, RetentionError, StatusCounts, StatusFilter,
    wall_clock_ms,
};
use crate::envelope::EventEnvelope;
use crate::event::Event;
use crate::fold::ExecutionStatus;
use crate::id::ExecutionId;

/// Logs in a map behind a mutex. Cheap to clone; clones share the logs.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    watch: HeadWatch,
    /// The next feed position, published after each append.
    feed_head: FeedWatch,
    /// New ids claimed for their first append ([`EventStore::claim_new`]).
    claims: ClaimTable,
    /// Woken when a claim is given back or a first append is over.
    claims_changed: tokio::sync::Notify,
}

/// Everything behind the one lock, so an append changes logs, index and feed together.
#[derive(Debug, Default)]
struct State {
    logs: BTreeMap<ExecutionId, Log>,
    /// Index code -> the executions filed under it (every code of each execution's tail).
    by_status: BTreeMap<u8, BTreeSet<ExecutionId>>,
    /// Ended at -> the executions that ended then (those with an end time).
    ended: BTreeMap<u64, BTreeSet<ExecutionId>>,
    /// `(start time, execution)` of every started execution, for newest-first queries.
    by_start: BTreeSet<(u64, ExecutionId)>,
    /// Feed position -> (execution, seq).
    feed: BTreeMap<u64, (ExecutionId, u64)>,
    next_position: u64,
    /// The wake-up index (`wake.rs`): every row of every execution, in key order.
    wakeups: BTreeSet<Wakeup>,
}

#[derive(Debug, Default)]
struct Log {
    events: Vec<EventEnvelope>,
    /// The feed position of each event, by seq.
    positions: Vec<u64>,
    tail: ExecutionTail,
    /// This execution's rows of the wake-up index.
    wake: WakeRows,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a log half-appended: appends change the
        // state only after every check, so the data is consistent even if poisoned.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn unindex(&mut self, execution: &ExecutionId, tail: &ExecutionTail) {
        for code in tail.index_codes() {
            if let Some(filed) = self.by_status.get_mut(&code) {
                filed.remove(execution);
            }
        }
        if let Some(ended) = tail.ended_at_ms()
            && let Some(filed) = self.ended.get_mut(&ended)
        {
            filed.remove(execution);
            if filed.is_empty() {
                self.ended.remove(&ended);
            }
        }
    }

    fn index(&mut self, execution: &ExecutionId, tail: &ExecutionTail) {
        for code in tail.index_codes() {
            self.by_status
                .entry(code)
                .or_default()
                .insert(execution.clone());
        }
        if let Some(ended) = tail.ended_at_ms() {
            self.ended
                .entry(ended)
                .or_default()
                .insert(execution.clone());
        }
    }
}

/// `log` as a query lists it.
fn listed(id: &ExecutionId, log: &Log) -> Option<ListedExecution> {
    let first = log.events.first()?;
    let flow = first.event.started_flow().unwrap_or_default().to_owned();
    Some(ListedExecution {
        id: id.clone(),
        status: log.tail.status(),
        flow,
        started_at_ms: first.recorded_at_ms,
        ended_at_ms: log.tail.ended_at_ms(),
        head: log.events.len() as u64,
    })
}

impl State {
    /// Applies an append's changes to `execution`'s rows of the wake-up index.
    fn rewake(&mut self, execution: &ExecutionId, changes: &[TailChange]) {
        let log = self.logs.entry(execution.clone()).or_default();
        let diff = wake::wake_diff(execution, &log.wake, changes);
        for (tag, at_ms) in diff.removed {
            log.wake.remove(&tag);
            if let Some(row) = Wakeup::from_stored(at_ms, execution.clone(), &tag) {
                self.wakeups.remove(&row);
            }
        }
        for (tag, at_ms) in diff.added {
            if let Some(row) = Wakeup::from_stored(at_ms, execution.clone(), &tag) {
                self.wakeups.insert(row);
            }
            log.wake.insert(tag, at_ms);
        }
    }
}

impl MemoryStore {
    /// An append, claimed (`claim`: its token) or not. A first append of an id another caller
    /// claimed waits until that claim is given back or its first append is over.
    async fn append_as(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
        claim: Option<u64>,
    ) -> Result<u64, AppendError> {
        super::check_batch(execution, expected_seq, events)?;
        loop {
            let changed = self.inner.claims_changed.notified();
            if expected_seq == 0 && self.inner.claims.admit(execution, claim) == FirstAppend::Wait {
                changed.await;
                continue;
            }
            let outcome = self.append_now(execution, expected_seq, events);
            if expected_seq == 0 {
                self.inner.claims.settle(execution);
                self.inner.claims_changed.notify_waiters();
            }
            return outcome;
        }
    }

    fn append_now(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        let recorded_at_ms = wall_clock_ms();
        let (head, feed_head) = {
            let mut state = self.state();
            let state = &mut *state;
            let (actual_seq, mut tail) = state.logs.get(execution).map_or_else(
                || (0, ExecutionTail::new()),
                |log| (log.events.len() as u64, log.tail.clone()),
            );
            if actual_seq != expected_seq {
                return Err(AppendError::Conflict {
                    execution: execution.clone(),
                    expected_seq,
                    actual_seq,
                });
            }
            let old_tail = tail.clone();
            let changes: Vec<TailChange> = events.iter().map(TailChange::of).collect();
            tail.apply_changes(&changes, recorded_at_ms)
                .map_err(|refused| refused.into_append_error(execution, expected_seq))?;
            state.unindex(execution, &old_tail);
            state.index(execution, &tail);
            if wake::touches_wakeups(&changes) {
                state.rewake(execution, &changes);
            }
            let first_position = state.next_position;
            state.next_position += events.len() as u64;
            let log = state.logs.entry(execution.clone()).or_default();
            for ((seq, position), event) in (expected_seq..).zip(first_position..).zip(events) {
                log.events.push(EventEnvelope {
                    recorded_at_ms,
                    ..EventEnvelope::new(execution.clone(), seq, event.clone())
                });
                log.positions.push(position);
                state.feed.insert(position, (execution.clone(), seq));
            }
            log.tail = tail;
            if expected_seq == 0 {
                state
                    .by_start
                    .insert((recorded_at_ms.unwrap_or(0), execution.clone()));
            }
            (log.events.len() as u64, state.next_position)
        };
        self.inner.watch.publish(execution, head);
        self.inner.feed_head.publish(feed_head);
        Ok(head)
    }
}

impl EventStore for MemoryStore {
    async fn append(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        self.append_as(execution, expected_seq, events, None).await
    }

    async fn claim_new(&self, execution: &ExecutionId) -> Result<Option<NewClaim>, ReadError> {
        let token = {
            // Under the logs' lock: no first append commits between the check and the claim.
            let state = self.state();
            if state
                .logs
                .get(execution)
                .is_some_and(|log| !log.events.is_empty())
            {
                return Ok(None);
            }
            match self.inner.claims.try_claim(execution) {
                Some(token) => token,
                None => return Ok(None),
            }
        };
        let inner = Arc::clone(&self.inner);
        let id = execution.clone();
        Ok(Some(NewClaim::new(execution.clone(), token, move || {
            if inner.claims.release(&id, token) {
                inner.claims_changed.notify_waiters();
            }
        })))
    }

    async fn append_claimed(&self, claim: &NewClaim, events: &[Event]) -> Result<u64, AppendError> {
        self.append_as(claim.execution(), 0, events, Some(claim.token()))
            .await
    }

    async fn read(
        &self,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<EventEnvelope>, ReadError> {
        let state = self.state();
        let Some(log) = state.logs.get(execution) else {
            return Ok(Vec::new());
        };
        let start = usize::try_from(from)
            .unwrap_or(usize::MAX)
            .min(log.events.len());
        Ok(log.events[start..].iter().take(limit).cloned().collect())
    }

    async fn head(&self, execution: &ExecutionId) -> Result<u64, ReadError> {
        Ok(self
            .state()
            .logs
            .get(execution)
            .map_or(0, |log| log.events.len() as u64))
    }

    async fn list_executions(
        &self,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        let state = self.state();
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let limit = limit.max(1);
        let executions: Vec<ExecutionSummary> = state
            .logs
            .range::<ExecutionId, _>((lower, Bound::Unbounded))
            .filter(|(_, log)| !log.events.is_empty())
            .take(limit + 1)
            .map(|(id, log)| ExecutionSummary {
                id: id.clone(),
                head: log.events.len() as u64,
            })
            .collect();
        Ok(ExecutionPage::from_one_extra(executions, limit))
    }

    async fn wait_for(&self, execution: &ExecutionId, seq: u64) -> Result<(), ReadError> {
        self.inner
            .watch
            .wait_for(execution, seq, self.head(execution))
            .await
    }

    async fn list_by_status(
        &self,
        filter: StatusFilter,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        let state = self.state();
        let code = filter_code(filter);
        let limit = limit.max(1);
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let Some(filed) = state.by_status.get(&code) else {
            return Ok(ExecutionPage::from_one_extra(Vec::new(), limit));
        };
        let executions: Vec<ExecutionSummary> = filed
            .range::<ExecutionId, _>((lower, Bound::Unbounded))
            .take(limit + 1)
            .map(|id| ExecutionSummary {
                id: id.clone(),
                head: state.logs.get(id).map_or(0, |log| log.events.len() as u64),
            })
            .collect();
        Ok(ExecutionPage::from_one_extra(executions, limit))
    }

    async fn query_executions(
        &self,
        query: &ExecutionQuery,
    ) -> Result<ExecutionQueryPage, ReadError> {
        let state = self.state();
        let upper = query.before.as_ref().map_or(Bound::Unbounded, |cursor| {
            Bound::Excluded((cursor.started_at_ms, cursor.id.clone()))
        });
        let rows = state
            .by_start
            .range((Bound::Unbounded, upper))
            .rev()
            .filter_map(|(_, id)| listed(id, state.logs.get(id)?))
            .filter(|row| query.matches(row))
            .take(query.page_size() + 1)
            .collect();
        Ok(query.page_of(rows))
    }

    async fn count_by_status(&self) -> Result<StatusCounts, ReadError> {
        let state = self.state();
        let mut counts = StatusCounts::default();
        for (code, filed) in &state.by_status {
            if let Some(status) = super::tail::status_from_code(*code)
                && status != ExecutionStatus::New
            {
                counts.set(status, filed.len() as u64);
            }
        }
        Ok(counts)
    }

    async fn read_feed(&self, from: u64, limit: usize) -> Result<Vec<FeedEvent>, ReadError> {
        let state = self.state();
        Ok(state
            .feed
            .range(from..)
            .take(limit.max(1))
            .filter_map(|(position, (execution, seq))| {
                let log = state.logs.get(execution)?;
                let envelope = log.events.get(usize::try_from(*seq).ok()?)?;
                Some(FeedEvent {
                    position: *position,
                    envelope: envelope.clone(),
                })
            })
            .collect())
    }

    async fn wait_for_feed(&self, position: u64) -> Result<(), ReadError> {
        self.inner.feed_head.wait_past(position).await
    }

    async fn list_wakeups(
        &self,
        before_ms: u64,
        after: Option<&Wakeup>,
        limit: usize,
    ) -> Result<Vec<Wakeup>, ReadError> {
        let state = self.state();
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(wake::page_of(
            state
                .wakeups
                .range::<Wakeup, _>((lower, Bound::Unbounded))
                .take_while(|row| wake::listed_before(row.at_ms, before_ms))
                .cloned(),
            before_ms,
            None,
            limit,
        ))
    }

    fn indexes_wakeups(&self) -> bool {
        true
    }

    async fn delete_ended(
        &self,
        ended_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<ExecutionId>, RetentionError> {
        let mut state = self.state();
        // A child whose parent still waits for its end is kept (`wake::awaiting_parent`).
        let awaited = |child: &ExecutionId| {
            wake::awaiting_parent(child).is_some_and(|(parent, tag)| {
                state
                    .logs
                    .get(&parent)
                    .is_some_and(|log| log.wake.contains_key(&tag))
            })
        };
        let doomed: Vec<ExecutionId> = state
            .ended
            .range(..ended_before_ms)
            .flat_map(|(_, filed)| filed.iter())
            .filter(|execution| !awaited(execution))
            .take(limit.max(1))
            .cloned()
            .collect();
        let mut deleted = Vec::with_capacity(doomed.len());
        for execution in doomed {
            if let Some(log) = state.logs.remove(&execution) {
                state.unindex(&execution, &log.tail);
                let started = log.events.first().and_then(|first| first.recorded_at_ms);
                state
                    .by_start
                    .remove(&(started.unwrap_or(0), execution.clone()));
                for (tag, at_ms) in log.wake {
                    if let Some(row) = Wakeup::from_stored(at_ms, execution.clone(), &tag) {
                        state.wakeups.remove(&row);
                    }
                }
                for position in &log.positions {
                    state.feed.remove(position);
                }
            }
            deleted.push(execution);
        }
        Ok(deleted)
    }
}
