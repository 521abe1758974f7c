//! Listing executions as an operator asks for them: newest start first, filtered by status,
//! flow, id prefix and start or end time, a page at a time behind an opaque cursor; and how
//! many executions each status holds.
//!
//! The order is the key `(start time, id)`, greatest first. The start time is the
//! `recorded_at_ms` the store stamped on the execution's `EXECUTION_STARTED` (0 when the store
//! had no clock), so it comes from the log and never from a clock read while listing. A
//! cursor is the key of the last execution of a page: the next page holds the executions
//! whose key is smaller, so executions started while an operator pages (their keys are
//! greater) never push others to the next page, and none is shown twice.
//!
//! [`ExecutionQuery::select`] is the reference: the order and filters on a list of rows, what
//! every store's [`super::EventStore::query_executions`] must agree with.

use std::cmp::Ordering;

use crate::fold::ExecutionStatus;
use crate::id::ExecutionId;

/// The most executions one page of [`super::EventStore::query_executions`] holds.
pub const MAX_QUERY_LIMIT: usize = 1000;

/// Which executions [`super::EventStore::query_executions`] lists, and how many.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutionQuery {
    /// Only executions with this status.
    pub status: Option<ExecutionStatus>,
    /// Only executions of this flow.
    pub flow: Option<String>,
    /// Only executions whose id starts with this (a parent's children: `"<parent>/"`).
    pub id_prefix: Option<String>,
    /// Only executions started at or after this time (ms since the Unix epoch).
    pub started_from_ms: Option<u64>,
    /// Only executions started before this time.
    pub started_before_ms: Option<u64>,
    /// Only executions that ended at or after this time (those not ended are left out).
    pub ended_from_ms: Option<u64>,
    /// Only executions that ended before this time (those not ended are left out).
    pub ended_before_ms: Option<u64>,
    /// Only executions after this cursor (a previous page's [`ExecutionQueryPage::next`]).
    pub before: Option<ExecutionCursor>,
    /// At most this many; 0 is read as 1, more than [`MAX_QUERY_LIMIT`] as that.
    pub limit: usize,
}

/// One execution as a query lists it: what the store's index knows, no event read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedExecution {
    /// The execution's id.
    pub id: ExecutionId,
    /// Its status.
    pub status: ExecutionStatus,
    /// Its flow's name.
    pub flow: String,
    /// When its `EXECUTION_STARTED` was recorded, if the store had a clock.
    pub started_at_ms: Option<u64>,
    /// When its terminal event was recorded, if it ended and the store had a clock.
    pub ended_at_ms: Option<u64>,
    /// How many events its log holds.
    pub head: u64,
}

impl ListedExecution {
    /// Where it sorts: greater is listed first.
    pub fn cursor(&self) -> ExecutionCursor {
        ExecutionCursor {
            started_at_ms: self.started_at_ms.unwrap_or(0),
            id: self.id.clone(),
        }
    }
}

/// A position in the newest-first order: the key `(start time, id)` of an execution.
/// Callers hold it as an opaque string ([`ExecutionCursor::encode`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExecutionCursor {
    /// The start time of the key (0 for a start recorded without a clock).
    pub started_at_ms: u64,
    /// The id of the key.
    pub id: ExecutionId,
}

impl PartialOrd for ExecutionCursor {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ExecutionCursor {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.started_at_ms, self.id.as_str()).cmp(&(other.started_at_ms, other.id.as_str()))
    }
}

impl ExecutionCursor {
    /// The cursor as text safe in a URL or a shell argument: hex digits only.
    pub fn encode(&self) -> String {
        let mut text = format!("{:016x}", self.started_at_ms);
        for byte in self.id.as_str().bytes() {
            text.push_str(&format!("{byte:02x}"));
        }
        text
    }

    /// Reads back what [`ExecutionCursor::encode`] wrote; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        if !text.is_ascii() || text.len() < 18 || !text.len().is_multiple_of(2) {
            return None;
        }
        let started_at_ms = u64::from_str_radix(&text[..16], 16).ok()?;
        let bytes = (16..text.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&text[at..at + 2], 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        // Any id the store holds, as it holds it: a page may end at an id recorded before
        // today's rules for new ids.
        let id = ExecutionId::from_stored(&String::from_utf8(bytes).ok()?).ok()?;
        Some(Self { started_at_ms, id })
    }
}

/// The least string above every string that starts with `prefix` (byte order, which is code
/// point order in UTF-8): the exclusive upper end of a range of ids holding exactly those with
/// the prefix. `None` when there is none (an empty prefix, or one of `char::MAX` alone).
pub fn prefix_upper_bound(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last as u32 + 1 {
            0xD800 => Some('\u{E000}'),
            code => char::from_u32(code),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// A page of [`super::EventStore::query_executions`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecutionQueryPage {
    /// The executions, newest start first.
    pub executions: Vec<ListedExecution>,
    /// Pass as [`ExecutionQuery::before`] for the next page; `None` when no execution follows.
    pub next: Option<ExecutionCursor>,
}

impl ExecutionQuery {
    /// The page size this query asks for: 1 to [`MAX_QUERY_LIMIT`].
    pub fn page_size(&self) -> usize {
        self.limit.clamp(1, MAX_QUERY_LIMIT)
    }

    /// Whether the filters (not the cursor) keep `row`.
    pub fn matches(&self, row: &ListedExecution) -> bool {
        let started = row.started_at_ms.unwrap_or(0);
        let within = |at: Option<u64>, from: Option<u64>, before: Option<u64>| {
            if from.is_none() && before.is_none() {
                return true;
            }
            at.is_some_and(|at| from.is_none_or(|from| at >= from) && before.is_none_or(|b| at < b))
        };
        self.status.is_none_or(|status| row.status == status)
            && self.flow.as_deref().is_none_or(|flow| row.flow == flow)
            && self
                .id_prefix
                .as_deref()
                .is_none_or(|prefix| row.id.as_str().starts_with(prefix))
            && within(Some(started), self.started_from_ms, self.started_before_ms)
            && within(row.ended_at_ms, self.ended_from_ms, self.ended_before_ms)
    }

    /// Whether `row` comes after the cursor (or there is none).
    pub fn after_cursor(&self, row: &ListedExecution) -> bool {
        self.before
            .as_ref()
            .is_none_or(|cursor| row.cursor() < *cursor)
    }

    /// The reference: the page of `rows` (in any order) this query lists.
    pub fn select(&self, rows: impl IntoIterator<Item = ListedExecution>) -> ExecutionQueryPage {
        let mut kept: Vec<ListedExecution> = rows
            .into_iter()
            .filter(|row| self.matches(row) && self.after_cursor(row))
            .collect();
        kept.sort_by_key(|row| std::cmp::Reverse(row.cursor()));
        self.page_of(kept)
    }

    /// A page from rows already filtered and in order, of which at most one more than the
    /// page size is needed: the extra one says that more follow.
    pub fn page_of(&self, mut rows: Vec<ListedExecution>) -> ExecutionQueryPage {
        let limit = self.page_size();
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more {
            rows.last().map(ListedExecution::cursor)
        } else {
            None
        };
        ExecutionQueryPage {
            executions: rows,
            next,
        }
    }
}

/// How many executions each status holds, as [`super::EventStore::count_by_status`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatusCounts {
    counts: [u64; 7],
}

impl StatusCounts {
    /// How many executions have `status` (none are `New`).
    pub fn get(&self, status: ExecutionStatus) -> u64 {
        self.counts[usize::from(super::tail::status_code(status))]
    }

    /// Sets how many executions have `status`.
    pub fn set(&mut self, status: ExecutionStatus, count: u64) {
        self.counts[usize::from(super::tail::status_code(status))] = count;
    }

    /// Every execution, whatever its status.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds `other`'s counts to these (the shards of one store).
    pub fn add(&mut self, other: &StatusCounts) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine += theirs;
        }
    }

    /// Counts `rows`.
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a ListedExecution>) -> Self {
        let mut counts = Self::default();
        for row in rows {
            counts.counts[usize::from(super::tail::status_code(row.status))] += 1;
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upper_bound_of_a_prefix_is_above_every_id_with_it_and_below_every_other() {
        assert_eq!(prefix_upper_bound("run-05"), Some("run-06".to_owned()));
        assert_eq!(
            prefix_upper_bound("a\u{D7FF}"),
            Some("a\u{E000}".to_owned())
        );
        assert_eq!(prefix_upper_bound("a\u{10FFFF}"), Some("b".to_owned()));
        assert_eq!(prefix_upper_bound(""), None);
        let upper = prefix_upper_bound("order-7/").unwrap();
        for inside in ["order-7/", "order-7/child#1", "order-7/\u{10FFFF}"] {
            assert!(inside < upper.as_str(), "{inside}");
        }
        for outside in ["order-70", "order-8", "order-7:"] {
            assert!(
                !outside.starts_with("order-7/") && outside >= upper.as_str()
                    || outside < "order-7/",
                "{outside}"
            );
        }
    }

    #[test]
    fn a_cursor_round_trips_and_refuses_what_it_did_not_write() {
        let cursor = ExecutionCursor {
            started_at_ms: 1_700_000_000_123,
            id: ExecutionId::new("checkout-3/notify#1").unwrap(),
        };
        assert_eq!(
            ExecutionCursor::decode(&cursor.encode()),
            Some(cursor.clone())
        );
        assert!(cursor.encode().bytes().all(|b| b.is_ascii_hexdigit()));
        for bad in [
            "",
            "zz",
            "0000000000000000",
            "00000000000000006",
            "é0000000000000000aa",
        ] {
            assert_eq!(ExecutionCursor::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_cursor_at_an_id_recorded_before_todays_rules_reads_back() {
        // Not in NFC: `ExecutionId::new` refuses it, but a store may hold it.
        let older = "cafe\u{301}-1";
        assert!(ExecutionId::new(older).is_err());
        let cursor = ExecutionCursor {
            started_at_ms: 5,
            id: ExecutionId::from_stored(older).unwrap(),
        };
        assert_eq!(ExecutionCursor::decode(&cursor.encode()), Some(cursor));
    }
}
