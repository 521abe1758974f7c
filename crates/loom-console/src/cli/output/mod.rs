//! How the console writes its answers: to stdout, as text or JSON, a reader that went away
//! ending it quietly; tables, durations, and cut payloads.

/// ends the program quietly with success instead of a panic: nobody is left to read the rest.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(error) = writeln!(std::io::stdout().lock(), $($arg)*) {
            if error.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            eprintln!("loom: cannot write the output: {error}");
            std::process::exit(4);
        }
    }};
}

pub(crate) mod lists;
pub(crate) mod show;

use loom_console::{ExecutionView, utc};

pub(crate) fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => out!("{text}"),
        Err(error) => eprintln!("loom: cannot print JSON: {error}"),
    }
}

/// Prints rows under headers, columns as wide as their widest cell.
pub(crate) fn print_table(indent: &str, headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::from(indent);
        let last = cells.len().saturating_sub(1);
        for (index, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if index == last {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        out!("{}", text.trim_end());
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

pub(crate) fn done(json: bool, message: &str, note: Option<&str>) {
    if json {
        let value = serde_json::json!({"ok": true, "message": message, "note": note});
        out!("{value}");
    } else {
        out!("{message}");
        if let Some(note) = note {
            out!("{note}");
        }
    }
}

pub(crate) fn flow_label(view: &ExecutionView) -> String {
    let label = match (&view.flow, view.flow_version) {
        (Some(flow), Some(version)) => format!("{flow} v{version}"),
        (Some(flow), None) => flow.clone(),
        _ => "-".into(),
    };
    if view.flow_not_registered {
        format!("{label} (not registered here)")
    } else {
        label
    }
}

/// A payload on one line, cut to 100 characters unless `full`.
pub(crate) fn cut(text: &str, full: bool) -> String {
    if full || text.chars().count() <= 100 {
        return text.to_owned();
    }
    text.chars().take(99).collect::<String>() + "…"
}

/// A word as a shell would need it: quoted when it holds anything but plain characters.
pub(crate) fn ago(now: Option<u64>, ms: u64) -> String {
    match now {
        Some(now) => format!("{} ago", duration(now.saturating_sub(ms))),
        None => utc(ms),
    }
}

/// A short duration to the millisecond: `12ms`, `1.250s`, or [`duration`] past a minute.
pub(crate) fn duration_precise(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{}.{:03}s", ms / 1000, ms % 1000),
        _ => duration(ms),
    }
}

/// A duration for people: `45s`, `3m12s`, `2h05m`, `4d03h`.
pub(crate) fn duration(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86_400 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3600),
    }
}
