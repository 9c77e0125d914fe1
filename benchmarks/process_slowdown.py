"""A/A gates on real llama-servers whose every process is slowed by an amount drawn at its start:
a process term that is real, and louder than any default.

Each server the gate starts is a wrapper of the same llama-server binary that draws its own
speed, ``speed * exp(N(0, log_sd))`` (0.85 and 3 % by default), and has ``benchmarks/pauser.py``
stop the process (SIGSTOP, every thread) for ``1 - that`` of each 50 ms until it exits. Two
processes of a gate's pair then differ by about ``log_sd * sqrt(2)`` (4.2 %) on top of what the
host does: its rounds carry a process term of that size over their process blocks, which the
gate knows nothing of. Every drawn speed is logged (``processes.log``).

Two scenarios, one after the other, each ``--gates`` A/A gates (the same wrapper on both sides)
of one configuration and workload:

- **not calibrated**: the profile's host has no noise figure, so every row estimates the process
  term from its own blocks;
- **calibrated**: first ``moeperf calibrate --gates N`` on the same wrapper stores this host's
  noise figure (round spread, lag-1, process term and its degrees of freedom) in the profile's
  baseline file (under ``--out``), then the same gates again.

A false alarm is a row ``slower`` or ``faster``; the script prints each scenario's outcomes,
the rounds each row took and its seconds, and keeps every gate's JSON. A gate already recorded
under ``--out`` is not run again (an interrupted campaign resumes).

    python benchmarks/process_slowdown.py --gates 20 --calibration-gates 8 --budget 90 \
        -c mmap -w pp512 --out /tmp/slowdown
    python benchmarks/process_slowdown.py --out /tmp/slowdown --summarize
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WRAPPER = """#!/bin/sh
# A llama-server process slowed by a share drawn at its start (benchmarks/process_slowdown.py).
case " $* " in *" --version "*|*" --help "*|*" -h "*) exec {server} "$@";; esac
share=$({python} {script} --draw {speed} {log_sd})
echo "$$ $share" >> {log}
{python} {pauser} $$ $share 50 &
exec {server} "$@"
"""
PROFILE = """[profiles.slowed]
description = "the embedded profile's bench model and flags, on a server slowed per process"
binary = "{wrapper}"
model = "synthetic:bench"
flags = ["-c", "4096", "-t", "{threads}", "-np", "1"]
baseline = "baselines.toml"
workloads = ["{workload}"]
repetitions = 3

[profiles.slowed.configurations.{configuration}]
{cpus}"""


def _server() -> str:
    """The llama-server binary of build b11434 (built once by the embedded builder)."""
    from pytest_moeperf.llama.build import build_llama

    return str(build_llama(11434).server)


def _setup(args: argparse.Namespace) -> tuple[Path, Path]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    wrapper = out / "llama-server"
    wrapper.write_text(
        WRAPPER.format(
            server=_server(),
            python=sys.executable,
            pauser=HERE / "pauser.py",
            script=Path(__file__).resolve(),
            speed=args.speed,
            log_sd=args.log_sd,
            log=out / "processes.log",
        )
    )
    wrapper.chmod(0o755)
    config = out / "moeperf.toml"
    # imported here, not at the top: every server start runs this script's --draw
    from pytest_moeperf.host.machine import parse_cpu_list

    threads = len(parse_cpu_list(args.cpus)) if args.cpus else 2
    config.write_text(
        PROFILE.format(
            wrapper=wrapper,
            workload=args.workload,
            configuration=args.configuration,
            threads=threads,
            cpus=f'cpus = "{args.cpus}"\n' if args.cpus else "",
        )
    )
    return wrapper, config


def _moeperf(*argv: str) -> int:
    return subprocess.run([sys.executable, "-m", "pytest_moeperf.commands", *argv]).returncode


def _gates(args: argparse.Namespace, wrapper: Path, config: Path, scenario: str) -> None:
    for i in range(args.gates):
        path = args.out / f"{scenario}-{i:02d}.json"
        if path.exists():
            continue
        print(f"{scenario} gate {i + 1}/{args.gates}", file=sys.stderr, flush=True)
        _moeperf(
            "gate", "--config", str(config), "--profile", "slowed",
            "--baseline", str(wrapper), "--candidate", str(wrapper),
            "-c", args.configuration, "-w", args.workload, "--budget", str(args.budget),
            "--json", str(path),
        )  # fmt: skip


def _calibrate(args: argparse.Namespace, wrapper: Path, config: Path) -> None:
    done = args.out / "calibration.json"
    if done.exists():
        return
    print(f"moeperf calibrate --gates {args.calibration_gates}", file=sys.stderr, flush=True)
    code = _moeperf(
        "calibrate", "--config", str(config), "--profile", "slowed", "--build", str(wrapper),
        "-c", args.configuration, "-w", args.workload, "--budget", str(args.budget),
        "--gates", str(args.calibration_gates), "--json", str(done),
    )  # fmt: skip
    if code not in (0, 3):
        raise SystemExit(f"moeperf calibrate exited {code}")


def summarize(out: Path) -> str:
    """One line per scenario: outcomes, rounds and seconds of its rows."""
    lines = []
    for scenario in ("uncalibrated", "calibrated"):
        rows: list[dict[str, Any]] = []
        for path in sorted(out.glob(f"{scenario}-*.json")):
            rows += json.loads(path.read_text()).get("rows", [])
        if not rows:
            continue
        said = Counter(r["verdict"]["outcome"] for r in rows)
        rounds = [r["verdict"]["rounds"] or 0 for r in rows]
        seconds = [r.get("seconds", 0.0) for r in rows]
        lines.append(
            f"{scenario}: {len(rows)} A/A rows: {dict(sorted(said.items()))}; "
            f"false alarms {said['slower'] + said['faster']}; rounds median "
            f"{statistics.median(rounds):g} (min {min(rounds)}, max {max(rounds)}); "
            f"seconds median {statistics.median(seconds):.0f}"
        )
    calibration = out / "calibration.json"
    if calibration.exists():
        for metric, got in json.loads(calibration.read_text()).items():
            said = Counter(g["verdict"]["outcome"] for g in got["gates"])
            lines.append(f"calibration {metric}: {got['figure']}; its A/A gates {dict(said)}")
    log = out / "processes.log"
    if log.exists():
        shares = [float(line.split()[1]) for line in log.read_text().split("\n") if line]
        speeds = [1 - s for s in shares]
        logs = [math.log(s) for s in speeds]
        lines.append(
            f"{len(speeds)} server processes, drawn speed {statistics.mean(speeds):.3f} "
            f"(log-SD {statistics.stdev(logs):.4f})"
        )
    return "\n".join(lines)


def draw(speed: float, log_sd: float) -> float:
    """The share of its time a new server process is stopped: ``1 - speed * exp(N(0, log_sd))``."""
    return 1.0 - speed * math.exp(random.SystemRandom().gauss(0.0, log_sd))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--draw"]:  # the wrapper's: one process's share
        print(f"{draw(float(argv[1]), float(argv[2])):.5f}")
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gates", type=int, default=20, help="A/A gates a scenario")
    p.add_argument("--calibration-gates", type=int, default=8, help="moeperf calibrate --gates")
    p.add_argument("--budget", type=float, default=90.0, help="seconds a row may measure")
    p.add_argument("-c", "--configuration", default="mmap")
    p.add_argument("-w", "--workload", default="pp512")
    p.add_argument("--cpus", help="pin the servers to these CPUs (default: the profile's, 0-1)")
    p.add_argument("--speed", type=float, default=0.85, help="a process's median speed")
    p.add_argument("--log-sd", type=float, default=0.03, help="log-SD of a process's speed")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--summarize", action="store_true", help="print the table of --out and exit")
    args = p.parse_args(argv)
    if not args.summarize:
        if not os.access(HERE / "pauser.py", os.R_OK):
            raise SystemExit("benchmarks/pauser.py is missing")
        wrapper, config = _setup(args)
        _gates(args, wrapper, config, "uncalibrated")
        _calibrate(args, wrapper, config)
        _gates(args, wrapper, config, "calibrated")
    print(summarize(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
