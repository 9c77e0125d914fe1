"""How often the build gate gets it right, on this host, against real llama-servers.

Runs ``moeperf gate`` again and again between two wrappers of the same build's llama-server,
the candidate's really slowed by one of two mechanisms:

- ``cgroup``: each side's server in a cgroup of its own, the baseline's uncapped, the
  candidate's with its CPU time capped to ``(1 - slowdown)`` of the CPUs it runs on (CFS
  bandwidth control, 10 ms periods). Both sides sit in sibling cgroups, because a process in a
  cgroup of its own is scheduled as one entity against every task of the parent group: an
  uncapped cgroup beside a server in the root group is not an A/A (measured: -2.4 % and twice
  the spread). Slowdown 0 is the A/A case.
- ``pause``: the candidate's server stopped (SIGSTOP, every thread) for ``slowdown`` of each
  50 ms and resumed (SIGCONT) for the rest, by ``benchmarks/pauser.py``; it too runs in an
  uncapped sibling cgroup of its own, so that only the pauses differ from the baseline (until
  2026-12-01 it ran in the root group, beside the baseline's cgroup: see the README).

The scenarios take turns, so that a slow phase of the host falls on all of them; within a
scenario, run *i* gates the *i*-th configuration of ``-c`` (and workload of ``-w``) in turn,
so an A/A is counted over every configuration given, not one.

    python benchmarks/gate_power.py --runs 20 --slowdowns 0,0.03,0.05,0.10 --pauses 0.10 \
        -c mmap -c lm-none --aa-configuration mmap,lm-none,one-core,oversubscribed

A gate already recorded under ``--out`` is not run again (an interrupted campaign resumes),
and while a file ``PAUSE`` exists in ``--out`` no new gate starts (room for other work on the
host between gates). The script prints, per scenario and metric, how many gates said what,
the median measured ratio and the median wall time of one gate; every gate's JSON is kept
under ``--out``. ``--summarize`` prints the table of an earlier run's files without
measuring. Needs root (to write cgroups).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PERIOD_US = 10_000


def _cgroup(name: str, share: float | None) -> Path:
    """A new cgroup whose members may use *share* of a CPU (``None``: no cap)."""
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").is_file():
        group = v1 / name
        group.mkdir(exist_ok=True)
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        quota = -1 if share is None else int(share * PERIOD_US)
        (group / "cpu.cfs_quota_us").write_text(str(quota))
        return group
    v2 = Path("/sys/fs/cgroup")
    if "cpu" not in (v2 / "cgroup.controllers").read_text().split():
        raise SystemExit("gate_power: no cgroup cpu controller here; cannot slow a server")
    group = v2 / name
    group.mkdir(exist_ok=True)
    quota = "max" if share is None else str(int(share * PERIOD_US))
    (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
    return group


def _remove(group: Path) -> None:
    with contextlib.suppress(OSError):
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    for _ in range(50):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)


Scenario = tuple[str, float]  # (mechanism, slowdown): ("cgroup", 0.0) is the A/A


def scenario_name(scenario: Scenario) -> str:
    mechanism, f = scenario
    if f == 0:
        return "A/A"
    return f"-{round(100 * f)} %" + (" pause" if mechanism == "pause" else "")


@contextlib.contextmanager
def slowed_servers(
    server: Path, scenarios: list[Scenario], cpus: int, out: Path
) -> Iterator[dict[Scenario | None, Path]]:
    """A wrapper llama-server per scenario (joins its cgroup, and for a pause starts a pauser
    of itself, then execs *server*: the server keeps the wrapper's pid), and the baseline's
    under the key ``None`` (a cgroup of its own, uncapped)."""
    groups: list[Path] = []
    wrappers: dict[Scenario | None, Path] = {}
    pauser = Path(__file__).with_name("pauser.py").resolve()
    try:
        for scenario in [None, *scenarios]:
            mechanism, f = scenario or ("cgroup", 0.0)
            tag = "baseline" if scenario is None else f"{mechanism}-{round(100 * f)}pct"
            # every side in a sibling cgroup of its own, capped or not, paused or not
            share = (1 - f) * cpus if mechanism == "cgroup" and f else None
            group = _cgroup(f"moeperf-gate-power-{os.getpid()}-{tag}", share)
            groups.append(group)
            join = f"echo $$ > {group / 'cgroup.procs'}"
            if mechanism == "pause":
                join += f"\n{sys.executable} {pauser} $$ {f} </dev/null >/dev/null 2>&1 &"
            wrapper = out / f"llama-server-{tag}"
            wrapper.write_text(f'#!/bin/sh\n{join}\nexec {server} "$@"\n')
            wrapper.chmod(0o755)
            wrappers[scenario] = wrapper
        yield wrappers
    finally:
        for group in groups:
            _remove(group)


def _server_of(build: int) -> Path:
    from pytest_moeperf.llama.build import build_llama

    return build_llama(build, progress=lambda line: print(line, flush=True)).server


def run_gate(
    args: argparse.Namespace,
    baseline: Path,
    candidate: Path,
    json_path: Path,
    configuration: str,
    workload: str | None,
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "pytest_moeperf.commands",
        "gate",
        "--baseline",
        str(baseline),
        "--candidate",
        str(candidate),
        "--json",
        str(json_path),
    ]
    cmd += ["-c", configuration]
    if workload:
        cmd += ["-w", workload]
    if args.budget:
        cmd += ["--budget", str(args.budget)]
    if args.process_block is not None:
        cmd += ["--process-block", str(args.process_block)]
    began = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    wall = time.monotonic() - began
    result: dict[str, Any] = {
        "rc": proc.returncode,
        "wall": wall,
        "rows": [],
        "output": proc.stdout[-4000:],
        "stderr": proc.stderr[-4000:],
    }
    if json_path.is_file():
        result["rows"] = json.loads(json_path.read_text())["rows"]
    else:
        result["error"] = (proc.stderr or proc.stdout)[-2000:]
    return result


def summarize(out: Path) -> str:
    """The table of every gate recorded under *out*."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    walls: dict[str, list[float]] = defaultdict(list)
    codes: dict[str, Counter[int]] = defaultdict(Counter)
    for f in sorted(out.glob("gate-*.json")):
        rec = json.loads(f.read_text())
        walls[rec["scenario"]].append(rec["wall"])
        codes[rec["scenario"]][rec["rc"]] += 1
        for row in rec["rows"]:
            by[(rec["scenario"], f"{row['configuration']}.{row['workload']}")].append(row)
    sw = max([len("scenario"), *(len(sc) for sc in walls)])
    mw = max([len("metric"), *(len(m) for _, m in by)])
    lines = [
        f"{'scenario':<{sw}} {'metric':<{mw}} {'gates':>5}  {'median ratio':>12}  "
        f"{'median rounds':>13}  verdicts"
    ]
    for (scenario, metric), rows in sorted(by.items()):
        counts = Counter(r["verdict"]["outcome"] for r in rows)
        ratio = statistics.median(r["verdict"]["ratio"] for r in rows)
        rounds = statistics.median(r["verdict"].get("rounds") or 0 for r in rows)
        verdicts = ", ".join(f"{k} {v}" for k, v in counts.most_common())
        lines.append(
            f"{scenario:<{sw}} {metric:<{mw}} {len(rows):>5}  {ratio:>12.3f}  "
            f"{rounds:>13.0f}  {verdicts}"
        )
    lines.append("")
    lines.append(f"{'scenario':<{sw}} {'rows':>5}  {'ratios':>11}  verdicts of every row")
    for scenario in sorted(walls):
        rows = [r for (sc, _), rs in by.items() if sc == scenario for r in rs]
        counts = Counter(r["verdict"]["outcome"] for r in rows)
        verdicts = ", ".join(f"{k} {v}" for k, v in counts.most_common())
        ratios = [r["verdict"]["ratio"] for r in rows]
        span = f"{min(ratios):.3f}-{max(ratios):.3f}" if ratios else "-"
        lines.append(f"{scenario:<{sw}} {len(rows):>5}  {span:>11}  {verdicts}")
    lines.append("")
    for scenario in sorted(walls):
        w = walls[scenario]
        exit_codes = ", ".join(f"{k}: {v}" for k, v in sorted(codes[scenario].items()))
        lines.append(
            f"{scenario:<{sw}} median wall of one gate {statistics.median(w):.0f} s "
            f"(min {min(w):.0f}, max {max(w):.0f}); exit codes {exit_codes}"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20, help="gates per scenario (default 20)")
    p.add_argument(
        "--first-run",
        type=int,
        default=0,
        help="number of the first run, to add runs to an earlier --out (default 0)",
    )
    p.add_argument(
        "--slowdowns",
        default="0,0.05,0.10",
        help="candidate slowdowns by cgroup CPU caps, comma separated shares, 0 for the A/A "
        "(default 0,0.05,0.10)",
    )
    p.add_argument(
        "--pauses",
        default="",
        help="candidate slowdowns by SIGSTOP/SIGCONT, comma separated shares (default none)",
    )
    p.add_argument(
        "--aa-configuration",
        default="",
        help="configurations the A/A gates take in turn, comma separated (default: -c's)",
    )
    p.add_argument("--build", type=int, default=11434, help="llama.cpp build (default 11434)")
    p.add_argument(
        "-c",
        "--configuration",
        action="append",
        default=[],
        help="configurations the slowed gates take in turn (default mmap)",
    )
    p.add_argument(
        "-w",
        "--workload",
        action="append",
        default=[],
        help="workloads the gates take in turn (default: every workload of the profile)",
    )
    p.add_argument("--budget", type=float, help="--budget of each gate (default: profile's)")
    p.add_argument(
        "--process-block",
        type=int,
        help="rounds between restarts of both servers (the gate's --process-block; default: "
        "as many as keep restarts at a third of the measuring time, 0: never)",
    )
    p.add_argument("--cpus", type=int, help="CPUs the server runs on (default: all of ours)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per gate (default 1800)")
    p.add_argument("--out", default=".moeperf/gate-power", help="where the gates' JSON go")
    p.add_argument("--summarize", action="store_true", help="only print the table of --out")
    args = p.parse_args()
    out = Path(args.out)
    if args.summarize:
        print(summarize(out))
        return 0
    args.configuration = args.configuration or ["mmap"]
    scenarios: list[Scenario] = [
        ("cgroup", float(x)) for x in args.slowdowns.split(",") if x.strip()
    ]
    scenarios += [("pause", float(x)) for x in args.pauses.split(",") if x.strip()]
    if any(not 0 <= f < 1 for _, f in scenarios) or any(
        m == "pause" and f == 0 for m, f in scenarios
    ):
        raise SystemExit(
            f"--slowdowns {args.slowdowns} --pauses {args.pauses}: give shares in [0, 1) "
            "(pauses above 0), e.g. --slowdowns 0,0.05,0.1 --pauses 0.1"
        )
    aa_configurations = [c for c in args.aa_configuration.split(",") if c] or args.configuration
    out.mkdir(parents=True, exist_ok=True)
    cpus = args.cpus or len(os.sched_getaffinity(0))
    server = _server_of(args.build)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up the cgroups on kill
    with slowed_servers(server, scenarios, cpus, out) as wrappers:
        for i in range(args.first_run, args.first_run + args.runs):
            k = i % len(scenarios)
            for scenario in scenarios[k:] + scenarios[:k]:
                mechanism, f = scenario
                name = scenario_name(scenario)
                configurations = aa_configurations if f == 0 else args.configuration
                configuration = configurations[i % len(configurations)]
                w = args.workload  # every workload with every configuration, in turn
                workload = w[i // len(configurations) % len(w)] if w else None
                tag = f"{mechanism}-{round(100 * f):02d}pct-{i:02d}"
                if (out / f"gate-{tag}.json").is_file():
                    continue  # measured by an earlier invocation with this --out
                while (out / "PAUSE").exists():  # make room for other work between gates
                    time.sleep(5)
                rec = run_gate(
                    args,
                    wrappers[None],
                    wrappers[scenario],
                    out / f"raw-{tag}.json",
                    configuration,
                    workload,
                )
                rec.update(
                    scenario=name,
                    mechanism=mechanism,
                    slowdown=f,
                    run=i,
                    configuration=configuration,
                )
                (out / f"gate-{tag}.json").write_text(json.dumps(rec, indent=1))
                said = (
                    "; ".join(
                        f"{r['configuration']} {r['workload']} {r['verdict']['ratio']:.3f} "
                        f"{r['verdict']['outcome']} ({r['verdict'].get('rounds')} rounds)"
                        for r in rec["rows"]
                    )
                    or rec.get("error", "")[-300:]
                )
                head = f"{name} run {i}: exit {rec['rc']}, {rec['wall']:.0f} s"
                print(f"{head}: {said}", flush=True)
    print(summarize(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
