//! How far a check has got, shown while it runs.

use std::io::IsTerminal;

/// A progress bar on a terminal, a line per tenth otherwise.
pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u64,
    done: std::sync::atomic::AtomicU64,
    quiet: bool,
}

impl Progress {
    pub(super) fn new(total: u64, quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} executions ({per_sec}, {eta} left)",
            ) {
                bar.set_style(style);
            }
            bar
        });
        Self {
            bar,
            total,
            done: std::sync::atomic::AtomicU64::new(0),
            quiet,
        }
    }

    pub(super) fn tick(&self) {
        let done = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        match &self.bar {
            Some(bar) => bar.inc(1),
            None if !self.quiet && self.total >= 10 && done.is_multiple_of(self.total / 10) => {
                eprintln!("replay-check: checked {done}/{}", self.total);
            }
            None => {}
        }
    }

    pub(super) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
