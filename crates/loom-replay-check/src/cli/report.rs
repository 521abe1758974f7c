//! What `replay-check` prints at the end: the report of a check, as text or JSON, and its exit
//! status; or why a source holding flows the program does not have is refused.

use loom_kernel::FlowSet;

use crate::check::{Finding, Outcome};

pub(super) struct Report {
    outcomes: Vec<Outcome>,
    seconds: f64,
}

impl Report {
    pub(super) fn new(outcomes: Vec<Outcome>, seconds: f64) -> Self {
        Self { outcomes, seconds }
    }

    fn count(&self, pick: impl Fn(&Finding) -> bool) -> usize {
        self.outcomes.iter().filter(|o| pick(&o.finding)).count()
    }

    fn divergent(&self) -> usize {
        self.count(|f| matches!(f, Finding::Divergent { .. }))
    }

    fn errors(&self) -> usize {
        self.count(|f| matches!(f, Finding::Error { .. }))
    }

    fn events(&self) -> u64 {
        self.outcomes.iter().map(|o| o.events).sum()
    }

    pub(super) fn exit_code(&self) -> u8 {
        if self.divergent() > 0 {
            1
        } else if self.errors() > 0 {
            2
        } else {
            0
        }
    }

    /// Prints the report on stdout, in one `print!` (which a test harness captures).
    pub(super) fn print(&self, label: &str) {
        use std::fmt::Write as _;
        let mut out = String::new();
        let flow = |o: &Outcome| {
            o.flow.as_ref().map_or_else(
                || "flow unknown".to_owned(),
                |(name, v)| format!("{name} v{v}"),
            )
        };
        for outcome in &self.outcomes {
            match &outcome.finding {
                Finding::Deterministic => {}
                Finding::Divergent {
                    seq,
                    recorded,
                    attempted,
                } => {
                    let _ = writeln!(
                        out,
                        "DIVERGENT {} ({}) at seq {seq}\n  recorded:  {recorded}\n  attempted: the flow now {attempted}",
                        outcome.execution,
                        flow(outcome)
                    );
                }
                Finding::Error { detail } => {
                    let _ = writeln!(
                        out,
                        "ERROR     {} ({}): {detail}",
                        outcome.execution,
                        flow(outcome)
                    );
                }
            }
        }
        let broken = crate::breaks::summary(&self.outcomes);
        if !broken.is_empty() {
            let _ = write!(out, "\n{broken}");
        }
        let _ = writeln!(out, "\nreplay-check of {label}");
        let _ = writeln!(
            out,
            "{:>10}  {:>10}  {:>9}  {:>6}  {:>8}",
            "executions", "events", "divergent", "errors", "time"
        );
        let _ = writeln!(
            out,
            "{:>10}  {:>10}  {:>9}  {:>6}  {:>7.2}s",
            self.outcomes.len(),
            self.events(),
            self.divergent(),
            self.errors(),
            self.seconds
        );
        print!("{out}");
    }

    pub(super) fn to_json(&self, label: &str) -> serde_json::Value {
        let findings: Vec<serde_json::Value> = self
            .outcomes
            .iter()
            .filter_map(|o| {
                let (name, version) = o
                    .flow
                    .clone()
                    .map_or((None, None), |(name, version)| (Some(name), Some(version)));
                let base = serde_json::json!({
                    "execution": o.execution, "flow": name, "version": version, "events": o.events,
                });
                let extra = match &o.finding {
                    Finding::Deterministic => return None,
                    Finding::Divergent {
                        seq,
                        recorded,
                        attempted,
                    } => serde_json::json!({
                        "result": "divergent", "seq": seq, "recorded": recorded, "attempted": attempted,
                    }),
                    Finding::Error { detail } => {
                        serde_json::json!({"result": "error", "detail": detail})
                    }
                };
                let mut merged = base;
                if let (Some(merged), Some(extra)) = (merged.as_object_mut(), extra.as_object()) {
                    merged.extend(extra.clone());
                }
                Some(merged)
            })
            .collect();
        serde_json::json!({
            "source": label,
            "summary": {
                "executions": self.outcomes.len(),
                "events": self.events(),
                "deterministic": self.outcomes.len() - self.divergent() - self.errors(),
                "divergent": self.divergent(),
                "errors": self.errors(),
                "seconds": self.seconds,
            },
            "findings": findings,
            "breaks": crate::breaks::breakages(&self.outcomes).iter().map(|b| serde_json::json!({
                "flow": b.flow, "version": b.version, "executions": b.executions,
                "first": {
                    "execution": b.first.execution, "seq": b.first.seq,
                    "recorded": b.first.recorded, "attempted": b.first.attempted,
                },
            })).collect::<Vec<_>>(),
        })
    }
}

/// The flows a source holds executions of that the checking program does not have, with how
/// many executions each; and the flows it has, to name them.
pub(super) struct UnknownFlows {
    unknown: std::collections::BTreeMap<(String, u32), usize>,
    known: std::collections::BTreeSet<(String, u32)>,
}

impl UnknownFlows {
    pub(super) fn find(flows: &FlowSet, outcomes: &[Outcome]) -> Self {
        let known: std::collections::BTreeSet<(String, u32)> = flows
            .iter()
            .map(|flow| (flow.name().to_owned(), flow.version()))
            .collect();
        let mut unknown = std::collections::BTreeMap::new();
        for flow in outcomes.iter().filter_map(|outcome| outcome.flow.as_ref()) {
            if !known.contains(flow) {
                *unknown.entry(flow.clone()).or_insert(0) += 1;
            }
        }
        Self { unknown, known }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.unknown.is_empty()
    }

    fn named(set: impl Iterator<Item = String>) -> String {
        let names: Vec<String> = set.collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }

    /// Why the source is refused, and what to do instead.
    pub(super) fn sentence(&self, label: &str) -> String {
        let unknown = Self::named(self.unknown.iter().map(|((name, version), count)| {
            format!(
                "{name} v{version} ({count} execution{})",
                if *count == 1 { "" } else { "s" }
            )
        }));
        let known = Self::named(
            self.known
                .iter()
                .map(|(name, version)| format!("{name} v{version}")),
        );
        format!(
            "{label} holds executions of flows this program does not have: {unknown}. It checks \
             only its own flows ({known}), so it cannot say whether those replay. Check them \
             with a replay-check built with the flows that recorded them (docs/REPLAY-CHECK.md, \
             \"Checking your own flows\"), or pass --flow with one of its own flows to check only that one."
        )
    }

    pub(super) fn to_json(&self, label: &str) -> serde_json::Value {
        let unknown: Vec<serde_json::Value> = self
            .unknown
            .iter()
            .map(|((name, version), count)| {
                serde_json::json!({"flow": name, "version": version, "executions": count})
            })
            .collect();
        let known: Vec<serde_json::Value> = self
            .known
            .iter()
            .map(|(name, version)| serde_json::json!({"flow": name, "version": version}))
            .collect();
        serde_json::json!({
            "source": label, "result": "refused", "reason": self.sentence(label),
            "unknown_flows": unknown, "known_flows": known,
        })
    }
}
