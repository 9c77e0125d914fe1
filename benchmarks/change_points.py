"""The change-point detector's error rates on series of this kind of VM's noise
(:func:`pytest_moeperf.verdicts.changes.change_points`, the code ``moeperf changes`` and the
dashboard run).

A series is 100 runs of one (host, configuration, workload), 5 runs a build over 20 builds.
Each run's log median is the series' level, plus the host's between-session drift (AR(1),
lag-1 ``--phi``, marginal SD ``--drift``: the guide's "-20 % within an hour" between runs
minutes apart, ``docs/campaigns.md``'s 10 % between sessions), plus the run's own sampling error
(its median's SE, 1-3 %, which the run reports). Cases: no change; a step of ``--step`` at the
boundary between builds 10 and 11 (run 50).

    python benchmarks/change_points.py --series 1000 --out changes.json

Reports per case and noise: the share of series with a change point called (no change: a false
one), found between the right two builds, and the median called step; with ``--probe-sd``, each
run also has a probe figure of a host that stays, and the share of series whose build step is
called the host's is counted (a build's regression that would get no bisect).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from pathlib import Path

from pytest_moeperf.verdicts.changes import PENALTY, Point, change_points

RUNS, PER_BUILD, STEP_AT = 100, 5, 50


def series(
    rng: random.Random, *, step: float, drift: float, phi: float, probe_sd: float = 0.0
) -> list[Point]:
    points, d = [], rng.gauss(0, drift)
    innovation = drift * math.sqrt(1 - phi * phi)
    for i in range(RUNS):
        d = phi * d + rng.gauss(0, innovation)
        se = rng.uniform(0.01, 0.03)
        level = math.log(1000.0) + (math.log1p(step) if i >= STEP_AT else 0.0)
        value = level + d + rng.gauss(0, se)
        probe = 10.0 * math.exp(rng.gauss(0, probe_sd)) if probe_sd > 0 else None
        build = f"b{10_423 + i // PER_BUILD}"
        points.append(Point(math.exp(value), se, build, probe=probe, run=str(i)))
    return points


def case(args: argparse.Namespace, step: float, drift: float, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    called = right = host = 0
    steps = []
    for _ in range(args.series):
        s = series(rng, step=step, drift=drift, phi=args.phi, probe_sd=args.probe_sd)
        found = change_points(s, args.margin, penalty=args.penalty)
        if found:
            called += 1
        boundary = [c for c in found if c.index == STEP_AT]
        if boundary:
            right += 1
            steps.append(boundary[0].ratio - 1)
            host += boundary[0].host
    n = args.series
    return {
        "step": step,
        "drift": drift,
        "called": called / n,
        "right_builds": right / n,
        "called_the_hosts": host / n,
        "median_step": statistics.median(steps) if steps else float("nan"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--series", type=int, default=1000)
    p.add_argument("--margin", type=float, default=0.05)
    p.add_argument("--phi", type=float, default=0.5)
    p.add_argument("--penalty", type=float, default=PENALTY)
    p.add_argument("--drift", type=float, action="append", help="between-session SDs (log)")
    p.add_argument("--step", type=float, action="append", help="steps (relative), 0: none")
    p.add_argument(
        "--probe-sd",
        type=float,
        default=0.0,
        help="each run's probe figure spreads this much (log SD) about a host that stays; "
        "0: no probe. A build's step called the host's is counted (called_the_hosts)",
    )
    p.add_argument("--out")
    args = p.parse_args()
    rows = []
    start = time.perf_counter()
    for drift in args.drift or [0.03, 0.05, 0.10]:
        for i, step in enumerate(args.step or [0.0, -0.10, -0.05]):
            row = case(args, step, drift, seed=1000 * i + int(drift * 1000))
            rows.append(row)
            print(json.dumps(row), flush=True)
    table = {
        "series": args.series,
        "phi": args.phi,
        "penalty": args.penalty,
        "margin": args.margin,
        "probe_sd": args.probe_sd,
        "seconds": time.perf_counter() - start,
        "rows": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
