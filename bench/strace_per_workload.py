#!/usr/bin/env python3
"""Counts syscalls per workload of a Loom bench binary traced with strace.

The benches print one line at the end of each workload, so the `write(1, ...)` of that line in
the trace ends the workload's segment. Usage:

    strace -f -ttt -e trace=fdatasync,fsync,pwrite64,pwritev,write -o LOG <bench binary> --bench
    python3 bench/strace_per_workload.py LOG

prints, for each line the bench printed, the count of every traced syscall in its segment
(the bench's own `write` to stdout included in the next segment's count).
"""
import collections
import sys


def main() -> int:
    segments = []
    counts = collections.Counter()
    with open(sys.argv[1]) as log:
        for line in log:
            parts = line.split(None, 2)
            if len(parts) < 3:
                continue
            call = parts[2]
            if call.startswith("write(1,"):
                label = call.split('"')[1][:60]
                segments.append((label, counts))
                counts = collections.Counter()
                continue
            if call.startswith("<... "):
                continue
            counts[call.split("(")[0]] += 1
    for label, segment in segments:
        print(f"{label:60s} " + " ".join(f"{k}={v}" for k, v in sorted(segment.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
