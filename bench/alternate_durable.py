#!/usr/bin/env python3
"""Runs `durable_steps` bench binaries of two (or more) builds alternately and compares them.

Usage: python3 bench/alternate_durable.py REPS WORKLOADS LABEL=BINARY[:ENV=VALUE,...] ...

WORKLOADS is `LOOM_DURABLE_ONLY` (e.g. `one_step_executions,sequential:non_idempotent`). Each
binary is one build's `cargo bench -p loom-effect-runtime --bench durable_steps --no-run`
executable (copy it out before building the other revision); `:ENV=VALUE,...` after it sets
environment variables for that build's runs only (`LOOM_BENCH_WORKERS=1`, say). Every rep runs
each binary once, the order flipped every rep, and reads each workload's mean (per step or per
execution) and its `floor_ratio` (its mean over the same-pattern floor measured just before it
in the same run). Per workload and build it prints the medians and ranges of both, then each
build's speed against the first, paired rep by rep (the first's time over the build's).
"""
import os
import re
import statistics
import subprocess
import sys

LINE = re.compile(
    r"^(\w+) effect=(\w+) .*?(?:per_step_us|mean_us)=(\d+).*floor_ratio=([\d.]+)", re.M
)


def builds(arguments, workloads):
    for argument in arguments:
        label, rest = argument.split("=", 1)
        binary, _, settings = rest.partition(":")
        env = dict(os.environ, LOOM_DURABLE_ONLY=workloads, LOOM_DURABLE_REPS="1")
        for setting in filter(None, settings.split(",")):
            key, value = setting.split("=", 1)
            env[key] = value
        yield label, binary, env


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    reps, workloads = int(sys.argv[1]), sys.argv[2]
    configs = list(builds(sys.argv[3:], workloads))
    figures = {label: {} for label, _, _ in configs}
    for rep in range(reps):
        for label, binary, env in configs if rep % 2 == 0 else configs[::-1]:
            out = subprocess.run(
                [binary, "--bench"], env=env, capture_output=True, text=True, check=True
            ).stdout
            for m in LINE.finditer(out):
                key = f"{m.group(1)}:{m.group(2)}"
                figures[label].setdefault(key, []).append((int(m.group(3)), float(m.group(4))))
    for label, workloads_seen in figures.items():
        for key, values in workloads_seen.items():
            means = [mean for mean, _ in values]
            ratios = [ratio for _, ratio in values]
            print(
                f"{label:10} {key:36} mean_us median {statistics.median(means):.0f}"
                f" ({min(means)}-{max(means)})  floor_ratio median {statistics.median(ratios):.2f}"
                f" ({min(ratios):.2f}-{max(ratios):.2f})"
            )
    # Paired: each build against the first, rep by rep (the same rep ran both back to back).
    # Above 1 the build is faster; a time per step, so base over build.
    first = configs[0][0]
    for label, _, _ in configs[1:]:
        for key, values in figures[label].items():
            base = figures[first].get(key, [])
            pairs = [b[0] / v[0] for b, v in zip(base, values) if v[0] > 0]
            if pairs:
                print(
                    f"{label:10} {key:36} speed vs {first}, paired: median {statistics.median(pairs):.3f}"
                    f" ({min(pairs):.2f}-{max(pairs):.2f}, {len(pairs)} reps)"
                )


if __name__ == "__main__":
    main()
