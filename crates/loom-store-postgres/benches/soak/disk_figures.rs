//! What the machine's disks did in a soak's interval (`/proc/diskstats`, Linux): how much was
//! written and how long a write and a cache flush took on average. Both stores wait for a
//! log's sync on the disk their tables are written to, so a tail that came with a burst of
//! writes (a checkpoint, the kernel's writeback of dirty pages) shows beside it, whichever
//! process issued them. Loop, RAM and zram devices are left out; partitions are not listed
//! in `/sys/block`, so each disk counts once.

use std::sync::Mutex;
use std::time::Instant;

/// The counters of `/proc/diskstats` summed over the machine's disks: sectors written, writes
/// completed, milliseconds spent writing, flushes completed, milliseconds spent flushing,
/// milliseconds with I/O in flight.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    sectors_written: u64,
    writes: u64,
    write_ms: u64,
    flushes: u64,
    flush_ms: u64,
    busy_ms: u64,
}

pub struct DiskFigures {
    before: Mutex<Option<(Instant, Counters)>>,
}

impl DiskFigures {
    pub fn new() -> Self {
        DiskFigures {
            before: Mutex::new(None),
        }
    }

    /// Takes a reading without reporting it.
    pub fn start(&self) {
        *self.before.lock().expect("disk figures") = read().map(|now| (Instant::now(), now));
    }

    /// ` disk_write_mib=… disk_write_ms_avg=… disk_flushes=… disk_flush_ms_avg=…
    /// disk_busy_pct=…` since the last call, or an empty string where `/proc/diskstats`
    /// cannot be read.
    pub fn interval(&self) -> String {
        let now = read().map(|now| (Instant::now(), now));
        let before = std::mem::replace(&mut *self.before.lock().expect("disk figures"), now);
        let (Some((at, now)), Some((then, before))) = (now, before) else {
            return String::new();
        };
        let elapsed_ms = at.duration_since(then).as_secs_f64() * 1000.0;
        let average = |ms: u64, count: u64| match count {
            0 => 0.0,
            count => ms as f64 / count as f64,
        };
        let writes = now.writes.saturating_sub(before.writes);
        let flushes = now.flushes.saturating_sub(before.flushes);
        format!(
            " disk_write_mib={:.1} disk_write_ms_avg={:.2} disk_flushes={flushes} \
             disk_flush_ms_avg={:.2} disk_busy_pct={:.0}",
            now.sectors_written.saturating_sub(before.sectors_written) as f64 * 512.0 / 1_048_576.0,
            average(now.write_ms.saturating_sub(before.write_ms), writes),
            average(now.flush_ms.saturating_sub(before.flush_ms), flushes),
            now.busy_ms.saturating_sub(before.busy_ms) as f64 * 100.0 / elapsed_ms.max(1.0),
        )
    }
}

/// The machine's disks' counters now; `None` without `/proc/diskstats` or `/sys/block`.
fn read() -> Option<Counters> {
    let disks: Vec<String> = std::fs::read_dir("/sys/block")
        .ok()?
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| {
            !["loop", "ram", "zram"]
                .iter()
                .any(|kind| name.starts_with(kind))
        })
        .collect();
    let stats = std::fs::read_to_string("/proc/diskstats").ok()?;
    let mut sum = Counters::default();
    for line in stats.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .get(2)
            .is_none_or(|name| !disks.iter().any(|disk| disk == name))
        {
            continue;
        }
        // After major, minor and name: the kernel's documented order (Documentation/admin-guide/
        // iostats.rst); flushes are fields 16 and 17, absent before Linux 5.5.
        let field = |index: usize| {
            fields
                .get(index + 2)
                .and_then(|value| value.parse::<u64>().ok())
                .unwrap_or(0)
        };
        sum.writes += field(5);
        sum.sectors_written += field(7);
        sum.write_ms += field(8);
        sum.busy_ms += field(10);
        sum.flushes += field(16);
        sum.flush_ms += field(17);
    }
    Some(sum)
}
