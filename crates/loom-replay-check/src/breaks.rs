//! Which stored executions the current code would break, by flow and version: the summary
//! `replay-check` ends with when it finds divergences, so that a deploy can be stopped (or the
//! change guarded with `ctx.patched`, or a new flow version registered) before it happens.

use std::collections::BTreeMap;
use std::fmt;

use crate::check::{Finding, Outcome};

/// How many execution ids a summary line names before it says "and N more".
const NAMED: usize = 5;

/// The executions of one flow version that the current code would stop at their next replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breakage {
    /// The flow's name (`None` when the log names none).
    pub flow: Option<String>,
    /// The flow's version.
    pub version: Option<u32>,
    /// The divergent executions, in id order.
    pub executions: Vec<String>,
    /// The first difference of the first of them: its execution, seq, what its log recorded
    /// and what the code does now (masked as the check masks it, K10-R6).
    pub first: FirstDifference,
}

/// Where one execution and today's code part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstDifference {
    /// The execution.
    pub execution: String,
    /// The seq of the recorded command that is not matched.
    pub seq: u64,
    /// What the log recorded there.
    pub recorded: String,
    /// What the flow does now instead.
    pub attempted: String,
}

/// The divergent outcomes grouped by flow and version, in that order (never in map order).
pub fn breakages(outcomes: &[Outcome]) -> Vec<Breakage> {
    let mut groups: BTreeMap<(Option<String>, Option<u32>), Vec<&Outcome>> = BTreeMap::new();
    for outcome in outcomes {
        if matches!(outcome.finding, Finding::Divergent { .. }) {
            let (flow, version) = match &outcome.flow {
                Some((flow, version)) => (Some(flow.clone()), Some(*version)),
                None => (None, None),
            };
            groups.entry((flow, version)).or_default().push(outcome);
        }
    }
    groups
        .into_iter()
        .filter_map(|((flow, version), mut outcomes)| {
            outcomes.sort_by(|a, b| a.execution.cmp(&b.execution));
            let Finding::Divergent {
                seq,
                recorded,
                attempted,
            } = &outcomes.first()?.finding
            else {
                return None;
            };
            let first = FirstDifference {
                execution: outcomes.first()?.execution.clone(),
                seq: *seq,
                recorded: recorded.clone(),
                attempted: attempted.clone(),
            };
            Some(Breakage {
                flow,
                version,
                executions: outcomes.iter().map(|o| o.execution.clone()).collect(),
                first,
            })
        })
        .collect()
}

/// The summary as text: a headline, then per flow version the executions it would break and the
/// first difference. Empty when nothing breaks.
pub fn summary(outcomes: &[Outcome]) -> String {
    let broken = breakages(outcomes);
    if broken.is_empty() {
        return String::new();
    }
    let total: usize = broken.iter().map(|b| b.executions.len()).sum();
    let mut text = format!(
        "The current code would break {total} of {} stored executions (each would stop at its next replay):\n",
        outcomes.len()
    );
    for breakage in &broken {
        text.push_str(&format!("{breakage}\n"));
    }
    text.push_str(
        "If this program's flows recorded these executions, guard the change with ctx.patched(\"<change id>\"), or register it as a new flow version (docs/VERSIONING.md).\nIf another program recorded them (its flows share these names), check them with that program's own replay-check (docs/REPLAY-CHECK.md, \"Checking your own flows\").\n",
    );
    text
}

impl fmt::Display for Breakage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flow = match (&self.flow, self.version) {
            (Some(flow), Some(version)) => format!("{flow} v{version}"),
            _ => "flow unknown".to_owned(),
        };
        let named: Vec<&str> = self
            .executions
            .iter()
            .take(NAMED)
            .map(String::as_str)
            .collect();
        let more = self.executions.len().saturating_sub(NAMED);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        write!(
            f,
            "  {flow}: {} execution(s): {}{more}\n    first difference, {} at seq {}:\n      recorded:  {}\n      attempted: the flow now {}",
            self.executions.len(),
            named.join(", "),
            self.first.execution,
            self.first.seq,
            self.first.recorded,
            self.first.attempted
        )
    }
}
