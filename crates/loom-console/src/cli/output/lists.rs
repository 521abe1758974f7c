//! The listings as text: executions, events, the steps in doubt, and cancels by filter.

use loom_console::{EventView, ExecutionList, InDoubtView, thousands, utc};
use serde_json::Value;

use super::{ago, duration, flow_label, print_json, print_table};

pub(crate) fn print_executions(page: &ExecutionList, json: bool) {
    if json {
        return print_json(page);
    }
    let listed = &page.executions;
    if listed.is_empty() {
        match page.total {
            Some(0) | None => out!("no executions"),
            Some(total) => out!(
                "no executions on this page ({} match, none after the cursor)",
                thousands(total)
            ),
        }
        return;
    }
    let now = loom_console::now_ms();
    let rows: Vec<Vec<String>> = listed
        .iter()
        .map(|view| {
            vec![
                view.id.clone(),
                view.status.clone(),
                flow_label(view),
                view.events.to_string(),
                view.started_at_ms.map_or("-".into(), utc),
                view.last_event_at_ms.map_or("-".into(), |ms| ago(now, ms)),
            ]
        })
        .collect();
    print_table(
        "",
        &[
            "ID",
            "STATUS",
            "FLOW",
            "EVENTS",
            "STARTED (UTC)",
            "LAST EVENT",
        ],
        &rows,
    );
    let counts: Vec<String> = loom_console::STATUSES
        .into_iter()
        .map(loom_console::status_name)
        .filter_map(|status| {
            let count = listed.iter().filter(|view| view.status == status).count();
            (count > 0).then(|| format!("{count} {status}"))
        })
        .collect();
    // Never "5 executions" when 5,000 match: what is shown, of how many, and how to go on.
    let of = match page.total {
        Some(total) => format!(" of {}", thousands(total)),
        None => String::new(),
    };
    out!(
        "\n{} shown{of} (newest first): {}",
        thousands(listed.len() as u64),
        counts.join(", ")
    );
    if let Some(next) = &page.next_before {
        match page.remaining {
            Some(remaining) => out!("{} more: --before {next}", thousands(remaining)),
            None => out!("more: --before {next}"),
        }
    }
}

pub(crate) fn print_event(event: &EventView, json: bool, full: bool) {
    if json {
        match serde_json::to_string(event) {
            Ok(text) => out!("{text}"),
            Err(error) => eprintln!("loom: cannot print JSON: {error}"),
        }
        return;
    }
    let mut detail = event.event.clone();
    if let Value::Object(fields) = &mut detail {
        fields.remove("type");
    }
    let mut detail = detail.to_string();
    if !full && detail.chars().count() > 120 {
        detail = detail.chars().take(119).collect::<String>() + "…";
    }
    out!(
        "  {:>4}  {:<19}  {:<19}  {detail}",
        event.seq,
        event.recorded_at_ms.map_or("-".into(), utc),
        event.event_type
    );
}

pub(crate) fn print_in_doubt(listed: &[InDoubtView], json: bool) {
    if json {
        return print_json(&listed);
    }
    if listed.is_empty() {
        out!("no step is in doubt");
        return;
    }
    // The lease column only on a store with leases.
    let leased = listed.iter().any(|step| step.lease.is_some());
    let rows: Vec<Vec<String>> = listed
        .iter()
        .map(|step| {
            vec![
                match (step.cancelled, step.ended, step.stopped) {
                    (true, ..) => format!("{} (cancelled)", step.execution),
                    (false, true, _) => format!("{} (ended)", step.execution),
                    (false, false, true) => format!("{} (stopped)", step.execution),
                    (false, false, false) => step.execution.clone(),
                },
                step.step_id.clone(),
                step.effect.clone(),
                step.attempt.to_string(),
                step.idempotency_key.clone(),
                step.waiting_ms.map_or("-".into(), duration),
                step.reason.as_ref().map_or("-".into(), |reason| {
                    format!("{}: {}", reason.code, reason.message)
                }),
            ]
            .into_iter()
            .chain(leased.then(|| {
                step.lease.as_ref().map_or("-".into(), |lease| {
                    let liveness = if lease.live { "live" } else { "not live" };
                    format!("{} #{} {liveness}", lease.holder, lease.token)
                })
            }))
            .collect()
        })
        .collect();
    let mut headers = vec![
        "EXECUTION",
        "STEP",
        "EFFECT",
        "ATTEMPT",
        "IDEMPOTENCY KEY",
        "WAITING",
        "REASON",
    ];
    if leased {
        headers.push("LAST LEASE HOLDER");
    }
    print_table("", &headers, &rows);
    out!();
    if listed
        .iter()
        .any(|step| step.lease.as_ref().is_some_and(|l| l.live))
    {
        out!(
            "A live lease: its worker may be paused, not dead, and may still send the step's call. Before --retry, read docs/EFFECTS.md, \"Paused workers\"."
        );
    }
    out!("Look the idempotency key up at the effect's receiver, then give a verdict:");
    out!("  loom resolve <execution> <step> --completed <json> | --failed <message> | --retry");
    if listed.iter().any(|step| step.stopped) {
        out!(
            "A step marked (stopped) was running when the process that ran it stopped: `loom resolve` (--completed or --failed) or `loom cancel` records it in doubt first; starting that process instead lets its recover() decide (it runs an idempotent effect again)."
        );
    }
    if listed.iter().any(|step| step.cancelled || step.ended) {
        out!(
            "A step of an ended execution (cancelled, or whose flow returned while the effect ran) takes no verdict (its log is closed), but its effect may have happened: settle it with the receiver."
        );
    }
}

pub(crate) fn print_cancel_many(answer: &loom_console::CancelManyAnswer, json: bool) {
    if json {
        print_json(answer);
        return;
    }
    let more = if answer.more {
        " (more match: run it again)"
    } else {
        ""
    };
    if answer.dry_run {
        for id in &answer.executions {
            out!("would cancel {id}");
        }
        out!(
            "{} executions would be cancelled{more}; nothing was cancelled",
            thousands(answer.matched as u64)
        );
        return;
    }
    for id in &answer.cancelled {
        out!("cancelled {id}");
    }
    for skipped in &answer.skipped {
        out!("skipped {}: {}", skipped.execution, skipped.reason);
    }
    out!(
        "cancelled {} executions ({} skipped){more}",
        thousands(answer.cancelled.len() as u64),
        answer.skipped.len()
    );
}
