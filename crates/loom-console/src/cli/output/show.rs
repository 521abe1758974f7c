//! One execution as text: its folded state (steps, gates, doubts, children), then its log.

use loom_console::{ShowView, shell_word, utc};
use serde_json::Value;

use super::lists::print_event;
use super::{ago, cut, duration, duration_precise, flow_label, print_json, print_table};

pub(crate) fn print_show(shown: &ShowView, json: bool, full: bool) {
    if json {
        return print_json(shown);
    }
    let view = &shown.execution;
    let state = &shown.state;
    let now = loom_console::now_ms();
    let outcome = &shown.outcome;
    out!("execution     {}", view.id);
    out!("flow          {}", flow_label(view));
    out!("status        {}", view.status);
    if view.flow_not_registered {
        out!(
            "waits for     a server that registers this flow and version: the one answering here does not, so nothing drives it"
        );
    }
    // How it ended first: the question `show` is asked.
    if let Some(failure) = &outcome.failure {
        out!("failure       {}: {}", failure.code, failure.message);
    }
    if let Some(output) = &outcome.output {
        out!("output        {}", cut(&output.to_string(), full));
    }
    if view.status == "cancelled" {
        out!(
            "cancelled     {}",
            outcome
                .cancel_reason
                .as_deref()
                .unwrap_or("(no reason given)")
        );
    }
    if let Some(input) = &outcome.input {
        out!("input         {}", cut(&input.to_string(), full));
    }
    if let Some(parent) = &outcome.parent {
        out!("parent        {parent}  (loom show {})", shell_word(parent));
    }
    for child in &outcome.children {
        out!(
            "child         {}  ({})",
            child.id,
            if child.ended { "ended" } else { "not ended" }
        );
    }
    out!("events        {}", view.events);
    if let Some(started) = view.started_at_ms {
        out!("started       {} UTC", utc(started));
    }
    if let Some(last) = view.last_event_at_ms {
        out!("last event    {} UTC ({})", utc(last), ago(now, last));
    }
    match state.budget {
        Some(budget) => out!("budget        {} spent of {budget}", state.budget_spent),
        None => out!("budget        {} spent, no limit", state.budget_spent),
    }
    if !state.capabilities.is_empty() {
        out!("capabilities  {}", state.capabilities.join(", "));
    }
    if state.steps_in_flight > 0 {
        out!(
            "in flight     {} step(s) started with no outcome",
            state.steps_in_flight
        );
    }
    if let Some(lease) = &shown.lease {
        out!("lease         {}", lease.summary());
    }
    out!();
    if state.steps.is_empty() {
        out!("steps: none");
    } else {
        out!("steps");
        let rows: Vec<Vec<String>> = state
            .steps
            .iter()
            .map(|step| {
                let running = match (step.status.as_str(), step.running_ms) {
                    // The attempt running now counts up from its start.
                    ("started", _) => match (step.started_at_ms, now) {
                        (Some(start), Some(now)) => {
                            format!("{} so far", duration(now.saturating_sub(start)))
                        }
                        _ => "-".into(),
                    },
                    (_, Some(ms)) => duration_precise(ms),
                    (_, None) => "-".into(),
                };
                let in_doubt = match (step.in_doubt_since_ms, step.in_doubt_ms, now) {
                    (Some(since), closed, Some(now)) => format!(
                        "{} so far",
                        duration(closed.unwrap_or(0) + now.saturating_sub(since))
                    ),
                    (_, Some(ms), _) => duration_precise(ms),
                    _ => "-".into(),
                };
                vec![
                    step.step_id.clone(),
                    step.effect.clone(),
                    step.status.clone(),
                    step.attempt.map_or("-".into(), |a| a.to_string()),
                    step.seq.to_string(),
                    running,
                    in_doubt,
                    step.waiting_ms.map_or("-".into(), duration_precise),
                ]
            })
            .collect();
        print_table(
            "  ",
            &[
                "STEP", "EFFECT", "STATUS", "ATTEMPTS", "SEQ", "RUNNING", "IN DOUBT", "WAITING",
            ],
            &rows,
        );
    }
    if !state.pending_gates.is_empty() {
        out!("pending gates");
        let rows: Vec<Vec<String>> = state
            .pending_gates
            .iter()
            .map(|gate| {
                let waiting = match (gate.opened_at_ms, now) {
                    (Some(opened), Some(now)) => duration(now.saturating_sub(opened)),
                    _ => "-".into(),
                };
                vec![
                    gate.gate_id.clone(),
                    gate.event_type.clone(),
                    gate.correlation_key.clone(),
                    gate.seq.to_string(),
                    waiting,
                ]
            })
            .collect();
        print_table(
            "  ",
            &["GATE", "EVENT TYPE", "KEY", "SEQ", "WAITING"],
            &rows,
        );
        for gate in &state.pending_gates {
            if let Some(request) = &gate.request {
                let mut text = request.to_string();
                if !full && text.chars().count() > 100 {
                    text = text.chars().take(99).collect::<String>() + "…";
                }
                out!("  {} asks: {text}", gate.gate_id);
            }
        }
    }
    if !state.decisions.is_empty() {
        let decisions: Vec<String> = state
            .decisions
            .iter()
            .map(|d| format!("{} (seq {})", d.step_id, d.seq))
            .collect();
        out!("decisions     {}", decisions.join(", "));
    }
    let mut next = Vec::new();
    for step in &state.steps_in_doubt {
        next.push(format!(
            "loom resolve {} {} --completed <json> | --failed <message> | --retry",
            shell_word(&view.id),
            shell_word(step)
        ));
    }
    // A timer's or a child's gate (`loom.` types) is the runtime's to resume, not the operator's.
    for gate in state
        .pending_gates
        .iter()
        .filter(|gate| !gate.event_type.starts_with("loom."))
    {
        next.push(format!(
            "loom resume {} {} {} <json>",
            shell_word(&view.id),
            shell_word(&gate.event_type),
            shell_word(&gate.correlation_key)
        ));
        // What <json> must be, when the gate declared it (LD-031).
        if let Some(expects) = &gate.expects {
            let title = expects
                .schema
                .get("title")
                .and_then(Value::as_str)
                .map(|title| format!("{title}, "))
                .unwrap_or_default();
            next.push(format!(
                "  <json> must fit {title}the JSON Schema {}",
                cut(&expects.schema.to_string(), full)
            ));
            next.push(format!(
                "  for example: {}",
                shell_word(&expects.example.to_string())
            ));
        }
    }
    if !next.is_empty() {
        out!();
        out!("waiting for you:");
        for line in next {
            out!("  {line}");
        }
    }
    out!();
    out!("events");
    for event in &shown.events {
        print_event(event, false, full);
    }
}
