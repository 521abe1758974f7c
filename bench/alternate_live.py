#!/usr/bin/env python3
"""Runs `live` bench binaries of two (or more) builds alternately and compares them.

Usage: python3 bench/alternate_live.py REPS BASE NEW [NEW2 ...]

Each binary is one build's `cargo bench -p loom-kernel --bench live --no-run` executable (the
path cargo prints; copy it out before building the other revision). Every rep runs each binary
once with `--bench`, the order flipped every rep, and reads its `loom <workload>
steps_per_s=...` lines. Per workload it prints, for each build: the median and range, the
median of the per-rep ratio to BASE ("paired"), and in how many reps it beat BASE ("wins").
The disk's pace swings between reps far more than a build does, so only the paired figures
over many reps say anything.
"""
import re
import statistics
import subprocess
import sys

WORKLOADS = ["raw_fsync", "floor", "seq", "one_step_executions", "concurrent", "concurrent_warm", "resume"]


def run(binary):
    out = subprocess.run([binary, "--bench"], capture_output=True, text=True, check=True).stdout
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"loom (\w+) steps_per_s=(\d+)", out)}


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    reps, binaries = int(sys.argv[1]), sys.argv[2:]
    figures = {binary: {w: [] for w in WORKLOADS} for binary in binaries}
    for rep in range(reps):
        order = binaries if rep % 2 == 0 else binaries[::-1]
        for binary in order:
            for workload, value in run(binary).items():
                figures[binary].setdefault(workload, []).append(value)
    base = binaries[0]
    for workload in WORKLOADS:
        if not figures[base][workload]:
            continue  # not run (LOOM_LIVE_ONLY)
        print(workload)
        for binary in binaries:
            values = figures[binary][workload]
            ratios = [v / b for v, b in zip(values, figures[base][workload])]
            print(
                f"  {binary}: median {statistics.median(values):.0f} ({min(values)}-{max(values)}),"
                f" paired {statistics.median(ratios):.3f}, wins {sum(r > 1 for r in ratios)}/{len(ratios)}"
            )


if __name__ == "__main__":
    main()
