"""The store at a team's scale: 10,000 runs of the embedded profiles (several hosts, builds and
dates) in a store, then what a perf session, a report and an import pay for them.

    python benchmarks/store_scale.py --runs 10000 --store sqlite:////tmp/scale.sqlite
    python benchmarks/store_scale.py --runs 10000 --store postgresql://USER:PW@127.0.0.1/DB

Each timed step runs in a fresh process (the store opened from cold Python, as a perf session
or a report opens it; with ``--cold``, the kernel's page cache dropped first, root only) and
says its wall time and its peak memory (the process's maximum resident set, and what the step
added to it):

- ``session``: what a perf session reads from history: the store opened, and the session
  medians of every (configuration, workload) of the profile for one build on one host, as the
  baseline checks' between-session term asks them;
- ``plot``: the report's history: the newest runs of this host with the run's (profile,
  configuration) pairs, drawn into the report's PNG with the run itself;
- ``dashboard``: ``moeperf dashboard`` of the whole store (every host's series, change points,
  records): its wall time, its files and the largest of them, and, where Playwright's
  Chromium is installed, each page's load in it (``loadEventEnd``);
- ``import``: ``moeperf store import`` of 1,000 results files into an empty store of the same
  backend (``--import-into``), and the same 1,000 results files read back one by one
  (``read_results``; with ``--today-files 10000``, 10,000), the way every perf session read
  its history before the store.

A run is the embedded profile's configurations and workloads with ``--samples`` samples each
(the results file's size is printed); ``--template FILE`` takes a real results file instead,
varied per run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.store.database import store_url
from pytest_moeperf.store.hosts import BaselineHost, host_key
from pytest_moeperf.store.record import RESULTS_VERSION, RunRecord
from pytest_moeperf.store.runstore import open_store
from pytest_moeperf.store.sessions import session_levels

CONFIGURATIONS = {"mmap": 1.0, "lm-none": 1.9, "one-core": 0.55, "numa-0": 1.0}
WORKLOADS = {"pp512": 620.0, "tg64": 48.0, "tg64 @ d512": 41.0}
HOSTS = ["ci-a", "ci-b", "gpu-01", "gpu-02", "laptop"]
"""The hosts runs take turns on (``--hosts`` adds ``host-5``, ``host-6``, ...): 12 series each."""
BUILDS = tuple(f"b{n}" for n in range(11400, 11440))


def fingerprint(host: str) -> dict[str, Any]:
    return {
        "hostname": host,
        "cpu_model": f"CPU of {host}",
        "cpus": 2,
        "memory_gib": 23.4,
        "gpus": [],
        "probes": {"0-1": {"bandwidth_gbs": 9.8, "compute_gops": 41.0}},
    }


def build_of(i: int) -> str:
    """Run *i*'s build: the builds follow one another every 250 runs (50 a host)."""
    return BUILDS[i // 250 % len(BUILDS)]


def synthetic_run(i: int, samples: int) -> RunRecord:
    """Run *i*: host, build and date drawn from *i*; every configuration and workload."""
    rng = random.Random(i)
    host, build = HOSTS[i % len(HOSTS)], build_of(i)
    day = i // 10
    measurements = []
    for config, factor in CONFIGURATIONS.items():
        for name, nominal in WORKLOADS.items():
            wl = Workload.parse(name)
            rate = nominal * factor * rng.uniform(0.9, 1.1)
            values = tuple(
                Sample(wl.tokens, wl.tokens * 1000.0 / (rate * rng.gauss(1, 0.03)))
                for _ in range(samples)
            )
            spans = ((1.8e9 + i * 600.0, 1.8e9 + i * 600.0 + 30.0),)
            cond = Conditions(profile="embedded", flags=("-t", "2"), spans=spans, busy_s=0.2)
            measurements.append(Measurement(config, build, wl, values, cond).to_dict())
    fp = fingerprint(host)
    when = time.gmtime(1.75e9 + day * 86400 + i * 60)
    return RunRecord.from_dict(
        {
            "moeperf_results": RESULTS_VERSION,
            "plugin_version": "0.1.0",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S+0000", when),
            "fingerprint": fp,
            "fingerprints": {"embedded": {**fp, "model": "bench.gguf"}},
            "measurements": measurements,
            "verdicts": [],
            "baseline_checks": [],
        }
    )


def template_run(template: dict[str, Any], i: int) -> RunRecord:
    """A real results file as run *i*: its host, build and date varied, its timings scaled."""
    rng = random.Random(i)
    doc = json.loads(json.dumps(template))
    host, build = HOSTS[i % len(HOSTS)], BUILDS[i % len(BUILDS)]
    doc["fingerprint"]["hostname"] = host
    for fp in doc.get("fingerprints", {}).values():
        fp["hostname"] = host
    doc["date"] = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1.75e9 + i * 3600))
    for m in doc["measurements"]:
        m["build"] = build
        scale = rng.uniform(0.9, 1.1)
        for s in m.get("samples", []):
            if isinstance(s, dict) and "ms" in s:
                s["ms"] *= scale
    return RunRecord.from_dict(doc)


def make_run(args: argparse.Namespace, i: int) -> RunRecord:
    if args.template:
        return template_run(json.loads(Path(args.template).read_text()), i)
    return synthetic_run(i, args.samples)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- steps (each in a fresh process) ---------------------------------------------------------------
def step_session(url: URL, runs: int) -> dict[str, Any]:
    before = peak_mb()
    start = time.perf_counter()
    store = open_store(url)
    fp = fingerprint("gpu-01")
    host = BaselineHost("gpu-01", fp)
    build = build_of(runs // 2)
    found = 0
    for config in CONFIGURATIONS:
        for workload in WORKLOADS:
            points = store.session_points(
                profile="embedded",
                configuration=config,
                workload=Workload.parse(workload).name,
                build=build,
                cpu_model=fp["cpu_model"],
            )
            found += len(session_levels(points, host, cpus=None))
    store.close()
    return {"seconds": time.perf_counter() - start, "sessions": found, **_memory(before)}


def step_plot(url: URL, samples: int) -> dict[str, Any]:
    from pytest_moeperf.report.plot import plot_report

    before = peak_mb()
    start = time.perf_counter()
    store = open_store(url)
    record = synthetic_run(10_000_003, samples)  # this run: gpu-01's
    wanted = {(m.conditions.profile, m.configuration) for m in record.measurements}
    history = store.recent_runs(host_key(record.fingerprint), wanted)
    store.close()
    asked = time.perf_counter() - start
    png = Path(tempfile.mkdtemp()) / "report.png"
    plot_report(record, history, png)
    return {
        "seconds": time.perf_counter() - start,
        "query_seconds": asked,
        "runs_drawn": len(history),
        **_memory(before),
    }


def step_import(url: URL, folder: Path) -> dict[str, Any]:
    from pytest_moeperf.store.transfer import import_folder

    before = peak_mb()
    start = time.perf_counter()
    store = open_store(url)
    done = import_folder(store, folder)
    store.close()
    return {"seconds": time.perf_counter() - start, "added": done.added, **_memory(before)}


def step_read_history(folder: Path) -> dict[str, Any]:
    from pytest_moeperf.store.history import RESULTS_GLOB, read_results

    before = peak_mb()
    start = time.perf_counter()
    runs = [r for p in sorted(folder.glob(RESULTS_GLOB)) if (r := read_results(p)[0])]
    return {"seconds": time.perf_counter() - start, "runs": len(runs), **_memory(before)}


def step_dashboard(url: URL) -> dict[str, Any]:
    from pytest_moeperf.commands import main as moeperf

    before = peak_mb()
    site = Path(tempfile.mkdtemp()) / "site"
    start = time.perf_counter()
    code = moeperf(["dashboard", "--output", str(site), "--store", url.render_as_string(False)])
    seconds = time.perf_counter() - start
    files = [p for p in site.rglob("*") if p.is_file()]
    largest = max(files, key=lambda p: p.stat().st_size)
    out: dict[str, Any] = {
        "seconds": seconds,
        "exit": code,
        "files": len(files),
        "largest": largest.name,
        "largest_mb": round(largest.stat().st_size / 1e6, 2),
        "site_mb": round(sum(p.stat().st_size for p in files) / 1e6, 1),
        **_memory(before),
    }
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return out
    loads = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium")
        )
        page = browser.new_page()
        for path in sorted(site.glob("*.html")):
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            loads[path.name] = page.evaluate(
                "performance.getEntriesByType('navigation')[0].loadEventEnd"
            )
        browser.close()
    out["slowest_page"] = max(loads, key=loads.__getitem__)
    out["slowest_load_ms"] = round(max(loads.values()))
    return out


def _memory(before: float) -> dict[str, float]:
    return {"peak_mb": round(peak_mb(), 1), "added_mb": round(peak_mb() - before, 1)}


COLD = False
"""``--cold``: the kernel's page cache dropped before each timed step (root only), so the
store's pages are read from disk, as on a host whose store nothing read lately."""


def _in_process(argv: list[str]) -> dict[str, Any]:
    if COLD:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    out = subprocess.run(
        [sys.executable, __file__, *argv], check=True, capture_output=True, text=True
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


# -- the benchmark -------------------------------------------------------------------------------
def fill(args: argparse.Namespace, url: URL) -> dict[str, Any]:
    store = open_store(url)
    have = store.count()
    start = time.perf_counter()
    for i in range(have, args.runs):
        store.add_run(make_run(args, i))
        if (i + 1) % 1000 == 0:
            print(f"  {i + 1} runs stored", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    size = len(make_run(args, 0).json_text())
    store.close()
    return {"runs": args.runs, "added": args.runs - have, "seconds": seconds, "file_kb": size / 1e3}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument(
        "--samples", type=int, default=90, help="samples a measurement (90: ~120 KB a file)"
    )
    p.add_argument("--template", help="a real results file, varied per run")
    p.add_argument("--store", required=True, help="the store to fill (kept: rerun adds none)")
    p.add_argument("--import-into", help="an empty store of the same backend for the import")
    p.add_argument("--import-files", type=int, default=1000)
    p.add_argument(
        "--today-files",
        type=int,
        default=0,
        help="also time reading this many results files back (what a session read before)",
    )
    p.add_argument("--step", choices=("session", "plot", "import", "read-history", "dashboard"))
    p.add_argument("--hosts", type=int, default=5, help="hosts the runs take turns on")
    p.add_argument("--folder")
    p.add_argument("--out", help="the table as JSON")
    p.add_argument("--cold", action="store_true", help="drop the page cache before each step")
    args = p.parse_args()
    global COLD
    COLD = args.cold
    url = store_url(args.store, Path("."))
    HOSTS.extend(f"host-{k}" for k in range(len(HOSTS), args.hosts))
    if args.step:  # one timed step, in its own process
        steps = {
            "session": lambda: step_session(url, args.runs),
            "plot": lambda: step_plot(url, args.samples),
            "import": lambda: step_import(url, Path(args.folder)),
            "read-history": lambda: step_read_history(Path(args.folder)),
            "dashboard": lambda: step_dashboard(url),
        }
        print(json.dumps(steps[args.step]()))
        return
    table: dict[str, Any] = {
        "store": url.render_as_string(),
        "cold": args.cold,
        "fill": fill(args, url),
    }
    common = ["--store", args.store, "--samples", str(args.samples), "--runs", str(args.runs)]
    common += ["--hosts", str(args.hosts)]
    table["dashboard"] = _in_process([*common, "--step", "dashboard"])
    table["session"] = _in_process([*common, "--step", "session"])
    table["plot"] = _in_process([*common, "--step", "plot"])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for i in range(args.import_files):
            (folder / f"results-{i:05d}.json").write_text(make_run(args, 20_000 + i).json_text())
        into = args.import_into or f"sqlite:///{folder / 'import.sqlite'}"
        table["import"] = _in_process(
            ["--store", into, "--samples", str(args.samples), "--step", "import", "--folder", tmp]
        )
        table["read_history_same_files"] = _in_process(
            [*common, "--step", "read-history", "--folder", tmp]
        )
        for i in range(args.import_files, args.today_files):
            (folder / f"results-{i:05d}.json").write_text(make_run(args, 20_000 + i).json_text())
        if args.today_files > args.import_files:  # every perf session before the store
            table[f"read_history_{args.today_files}_files"] = _in_process(
                [*common, "--step", "read-history", "--folder", tmp]
            )
    print(json.dumps(table, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
