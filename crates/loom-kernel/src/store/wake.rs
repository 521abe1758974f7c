//! The wake-up index: what `Runtime::recover` must act on for executions that are parked,
//! found without reading their logs (LD-033).
//!
//! A parked execution needs the runtime only when one of these happens:
//! - **a deadline passes** (a timer, a gate with a timeout): a row `(deadline, execution,
//!   "d:<gate>")` from its `loom.deadline` decision until the gate is resumed or the execution
//!   ends;
//! - **it waits for a child** (a pending `loom.child` gate): the child may never have been
//!   started, or may have ended without its end being delivered (a crash in between). A row
//!   `(0, parent, "c:<gate>")` while the gate is pending;
//! - **it is a child** (its id has the child form `<parent>/<flow>#<n>`): its parent may have
//!   ended while waiting for it. A row `(0, child, "p")` until it ends.
//!
//! Stores keep the rows in the same atomic commit as the events that add or remove them, and
//! list them in key order, so `recover` reads the child links once and the deadlines a time
//! window at a time ([`crate::store::EventStore::list_wakeups`]). The rows come from the events
//! alone ([`wake_diff`]), so every store writes the same ones.

use std::collections::BTreeMap;

use crate::event::Event;
use crate::id::ExecutionId;
use crate::runtime::markers::{CHILD_EVENT_TYPE, DEADLINE_KIND, parent_of, parse_deadline};

/// Why a row of the wake-up index is there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum WakeReason {
    /// The gate's deadline passes at the row's time.
    Deadline {
        /// The gate.
        gate_id: String,
    },
    /// The execution waits on this child gate.
    AwaitsChild {
        /// The gate.
        gate_id: String,
    },
    /// The execution is a child and has not ended.
    IsChild,
}

/// The tag prefixes of [`WakeReason::tag`].
const DEADLINE_TAG: &str = "d:";
const CHILD_GATE_TAG: &str = "c:";
const IS_CHILD_TAG: &str = "p";

impl WakeReason {
    /// The reason as the text a store keeps in its key: `d:<gate>`, `c:<gate>` or `p`.
    pub fn tag(&self) -> String {
        match self {
            Self::Deadline { gate_id } => format!("{DEADLINE_TAG}{gate_id}"),
            Self::AwaitsChild { gate_id } => format!("{CHILD_GATE_TAG}{gate_id}"),
            Self::IsChild => IS_CHILD_TAG.to_owned(),
        }
    }

    /// Reads back what [`WakeReason::tag`] wrote; `None` for other text.
    pub fn from_tag(tag: &str) -> Option<Self> {
        if let Some(gate_id) = tag.strip_prefix(DEADLINE_TAG) {
            return Some(Self::Deadline {
                gate_id: gate_id.to_owned(),
            });
        }
        if let Some(gate_id) = tag.strip_prefix(CHILD_GATE_TAG) {
            return Some(Self::AwaitsChild {
                gate_id: gate_id.to_owned(),
            });
        }
        (tag == IS_CHILD_TAG).then_some(Self::IsChild)
    }
}

/// One row of the wake-up index. Rows sort by time, then execution id (byte order), then
/// [`WakeReason::tag`] (byte order): the order of [`crate::store::EventStore::list_wakeups`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Wakeup {
    /// When the runtime must act, in milliseconds since the Unix epoch; `0` for a child link
    /// (at once, at recovery).
    pub at_ms: u64,
    /// The execution concerned.
    pub execution: ExecutionId,
    /// Why.
    pub reason: WakeReason,
}

impl Wakeup {
    /// A row from its stored parts; `None` when `tag` is not a [`WakeReason::tag`].
    pub fn from_stored(at_ms: u64, execution: ExecutionId, tag: &str) -> Option<Self> {
        Some(Self {
            at_ms,
            execution,
            reason: WakeReason::from_tag(tag)?,
        })
    }

    /// The sort key: `(at_ms, execution, tag)`, without building the tag: a reason's tag is
    /// its prefix (`c:` < `d:` < `p`, byte order) then its gate id, so the pair (prefix
    /// rank, gate id) orders as the tag does.
    fn key(&self) -> (u64, &str, u8, &str) {
        let (rank, gate_id) = match &self.reason {
            WakeReason::AwaitsChild { gate_id } => (0, gate_id.as_str()),
            WakeReason::Deadline { gate_id } => (1, gate_id.as_str()),
            WakeReason::IsChild => (2, ""),
        };
        (self.at_ms, self.execution.as_str(), rank, gate_id)
    }
}

impl PartialOrd for Wakeup {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Wakeup {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// What one event changes in its execution's rows, taken from the event (see
/// [`crate::store::TailChange`], which carries it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WakeChange {
    Started,
    Deadline { gate_id: String, at_ms: u64 },
    AwaitsChild { gate_id: String },
    Resumed { gate_id: String },
    Ended,
}

impl WakeChange {
    pub(crate) fn of(event: &Event) -> Option<Self> {
        match event {
            Event::ExecutionStarted(_) => Some(Self::Started),
            Event::DecisionRecorded(d) if d.kind == DEADLINE_KIND => {
                // A value that holds no deadline is armed by no one (recovery warned of it
                // when it read the log): it gets no row.
                parse_deadline(&d.value).map(|at_ms| Self::Deadline {
                    gate_id: d.step_id.clone(),
                    at_ms,
                })
            }
            Event::ExecutionSuspended(s) if s.event_type == CHILD_EVENT_TYPE => {
                Some(Self::AwaitsChild {
                    gate_id: s.gate_id.clone(),
                })
            }
            Event::ExecutionResumed(r) => Some(Self::Resumed {
                gate_id: r.gate_id.clone(),
            }),
            Event::ExecutionCompleted(_)
            | Event::ExecutionFailed(_)
            | Event::ExecutionCancelled(_) => Some(Self::Ended),
            _ => None,
        }
    }
}

/// The rows of one execution: tag -> time.
pub type WakeRows = BTreeMap<String, u64>;

/// How an append changes an execution's rows: those to remove and those to add (a row whose
/// time changes is in both).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WakeDiff {
    /// `(tag, at_ms)` rows to remove.
    pub removed: Vec<(String, u64)>,
    /// `(tag, at_ms)` rows to add.
    pub added: Vec<(String, u64)>,
}

impl WakeDiff {
    /// Whether the append changes no row.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.added.is_empty()
    }
}

/// Whether any of `changes` may change the execution's rows: a store reads the current rows
/// only then (most appends, a step's start or end, change none).
pub fn touches_wakeups(changes: &[crate::store::TailChange]) -> bool {
    changes.iter().any(|change| change.wake().is_some())
}

/// Whether `changes` start the execution (its first append).
pub fn starts_execution(changes: &[crate::store::TailChange]) -> bool {
    changes
        .iter()
        .any(|change| matches!(change.wake(), Some(WakeChange::Started)))
}

/// The rows of `execution` after `changes`, given its rows before (`current`).
pub fn wake_diff(
    execution: &ExecutionId,
    current: &WakeRows,
    changes: &[crate::store::TailChange],
) -> WakeDiff {
    let mut rows = current.clone();
    for change in changes.iter().filter_map(crate::store::TailChange::wake) {
        match change {
            WakeChange::Started => {
                if parent_of(execution).is_some() {
                    rows.insert(IS_CHILD_TAG.to_owned(), 0);
                }
            }
            WakeChange::Deadline { gate_id, at_ms } => {
                rows.insert(format!("{DEADLINE_TAG}{gate_id}"), *at_ms);
            }
            WakeChange::AwaitsChild { gate_id } => {
                rows.insert(format!("{CHILD_GATE_TAG}{gate_id}"), 0);
            }
            WakeChange::Resumed { gate_id } => {
                rows.remove(&format!("{DEADLINE_TAG}{gate_id}"));
                rows.remove(&format!("{CHILD_GATE_TAG}{gate_id}"));
            }
            WakeChange::Ended => rows.clear(),
        }
    }
    let mut diff = WakeDiff::default();
    for (tag, at) in current {
        if rows.get(tag) != Some(at) {
            diff.removed.push((tag.clone(), *at));
        }
    }
    for (tag, at) in &rows {
        if current.get(tag) != Some(at) {
            diff.added.push((tag.clone(), *at));
        }
    }
    diff
}

/// What an append does to its execution's rows, without knowing them: for a store that
/// writes them with statements rather than reading them first (PostgreSQL). Each tag is in at
/// most one of `upserts` and `deletes`; after `clear` (the execution ended) both are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WakeOps {
    /// Delete every row of the execution.
    pub clear: bool,
    /// `tag -> at ms`: rows to insert or move.
    pub upserts: BTreeMap<String, u64>,
    /// Tags to delete (that may or may not be there).
    pub deletes: std::collections::BTreeSet<String>,
}

impl WakeOps {
    /// Adds what `changes`, appended to `execution` after what is already here, do.
    pub fn extend(&mut self, execution: &ExecutionId, changes: &[crate::store::TailChange]) {
        for change in changes.iter().filter_map(crate::store::TailChange::wake) {
            match change {
                WakeChange::Started => {
                    if parent_of(execution).is_some() {
                        self.upsert(IS_CHILD_TAG.to_owned(), 0);
                    }
                }
                WakeChange::Deadline { gate_id, at_ms } => {
                    self.upsert(format!("{DEADLINE_TAG}{gate_id}"), *at_ms);
                }
                WakeChange::AwaitsChild { gate_id } => {
                    self.upsert(format!("{CHILD_GATE_TAG}{gate_id}"), 0);
                }
                WakeChange::Resumed { gate_id } => {
                    self.delete(format!("{DEADLINE_TAG}{gate_id}"));
                    self.delete(format!("{CHILD_GATE_TAG}{gate_id}"));
                }
                WakeChange::Ended => {
                    self.clear = true;
                    self.upserts.clear();
                    self.deletes.clear();
                }
            }
        }
    }

    fn upsert(&mut self, tag: String, at_ms: u64) {
        self.deletes.remove(&tag);
        self.upserts.insert(tag, at_ms);
    }

    fn delete(&mut self, tag: String) {
        if !self.clear {
            self.upserts.remove(&tag);
            self.deletes.insert(tag);
        }
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        !self.clear && self.upserts.is_empty() && self.deletes.is_empty()
    }
}

/// The rows of a whole log: what a store builds for an execution it indexes afresh.
pub fn rows_of_log<'a>(
    execution: &ExecutionId,
    events: impl IntoIterator<Item = &'a Event>,
) -> WakeRows {
    let changes: Vec<_> = events
        .into_iter()
        .map(crate::store::TailChange::of)
        .collect();
    let diff = wake_diff(execution, &WakeRows::new(), &changes);
    diff.added.into_iter().collect()
}

/// The row of the wake-up index that says `child`'s parent still waits for its end (the
/// parent's child gate is pending): `(parent, tag)`, for a child id. While the row is there,
/// retention keeps the ended child: the parent has not heard of its end (a crash between the
/// child's end and the parent's resume), and without the child's log `recover` would take the
/// gate for a child never started and start it again (issue 41, hole 2).
pub fn awaiting_parent(child: &ExecutionId) -> Option<(ExecutionId, String)> {
    let (parent, gate_id) = parent_of(child)?;
    Some((parent, WakeReason::AwaitsChild { gate_id }.tag()))
}

/// Whether a row at `at_ms` is listed by `list_wakeups(before_ms, ..)`: it is before
/// `before_ms`, or `before_ms` is `u64::MAX`, which reads as no bound at all, so that a
/// deadline set at `u64::MAX` fires when a clock reads it, as an armed timer does (issue 41,
/// hole 10).
pub fn listed_before(at_ms: u64, before_ms: u64) -> bool {
    at_ms < before_ms || before_ms == u64::MAX
}

/// Keeps `rows` (sorted) to those of the page `list_wakeups(before_ms, after, limit)` asks for.
pub fn page_of(
    rows: impl IntoIterator<Item = Wakeup>,
    before_ms: u64,
    after: Option<&Wakeup>,
    limit: usize,
) -> Vec<Wakeup> {
    rows.into_iter()
        .filter(|row| listed_before(row.at_ms, before_ms) && after.is_none_or(|after| row > after))
        .take(limit.max(1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{completed, started, suspended};
    use crate::event::{DecisionRecorded, ExecutionResumed, ExecutionSuspended};

    #[test]
    fn rows_sort_as_their_stored_keys_do() {
        let id = |s: &str| ExecutionId::new(s).unwrap();
        let reasons = [
            WakeReason::IsChild,
            WakeReason::Deadline {
                gate_id: "b".into(),
            },
            WakeReason::Deadline {
                gate_id: "a#2".into(),
            },
            WakeReason::AwaitsChild {
                gate_id: "z".into(),
            },
            WakeReason::AwaitsChild { gate_id: "".into() },
        ];
        let mut rows = Vec::new();
        for at_ms in [0, 5] {
            for execution in ["e/x#1", "e"] {
                for reason in &reasons {
                    rows.push(Wakeup {
                        at_ms,
                        execution: id(execution),
                        reason: reason.clone(),
                    });
                }
            }
        }
        let mut by_key = rows.clone();
        by_key.sort_by(|a, b| {
            (a.at_ms, a.execution.as_str(), a.reason.tag()).cmp(&(
                b.at_ms,
                b.execution.as_str(),
                b.reason.tag(),
            ))
        });
        rows.sort();
        assert_eq!(rows, by_key);
    }
    use crate::payload::Payload;
    use crate::store::TailChange;

    fn deadline(gate: &str, at: u64) -> Event {
        Event::DecisionRecorded(DecisionRecorded {
            step_id: gate.into(),
            kind: DEADLINE_KIND.into(),
            value: Payload::from_value(&serde_json::json!({ "deadlineMs": at })),
        })
    }

    fn resumed(gate: &str) -> Event {
        Event::ExecutionResumed(ExecutionResumed {
            gate_id: gate.into(),
            event_type: "e".into(),
            correlation_key: "k".into(),
            payload: Payload::from_value(&serde_json::json!({})),
        })
    }

    fn changes(events: &[Event]) -> Vec<TailChange> {
        events.iter().map(TailChange::of).collect()
    }

    #[test]
    fn a_deadline_row_lives_from_its_decision_to_its_gates_resume() {
        let id = ExecutionId::new("e").unwrap();
        let armed = wake_diff(
            &id,
            &WakeRows::new(),
            &changes(&[started("f"), deadline("g", 7), suspended("g")]),
        );
        assert_eq!(armed.added, vec![("d:g".to_owned(), 7)]);
        let rows: WakeRows = armed.added.into_iter().collect();
        let resumed = wake_diff(&id, &rows, &changes(&[resumed("g")]));
        assert_eq!(resumed.removed, vec![("d:g".to_owned(), 7)]);
        assert!(resumed.added.is_empty());
        assert!(
            wake_diff(&id, &rows, &changes(&[completed()]))
                .added
                .is_empty()
        );
    }

    #[test]
    fn a_child_and_a_child_gate_get_rows_at_zero() {
        let child = ExecutionId::new("p/work#0").unwrap();
        let gate = Event::ExecutionSuspended(ExecutionSuspended {
            gate_id: "child:work#0".into(),
            event_type: CHILD_EVENT_TYPE.into(),
            correlation_key: "p/work#0/x#0".into(),
        });
        let rows = rows_of_log(&child, &[started("work"), gate]);
        assert_eq!(rows.get("p"), Some(&0));
        assert_eq!(rows.get("c:child:work#0"), Some(&0));
        for tag in rows.keys() {
            assert!(WakeReason::from_tag(tag).is_some_and(|reason| reason.tag() == *tag));
        }
    }
}
