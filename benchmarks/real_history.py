"""A real history over published llama.cpp builds: the embedded measurements (the synthetic bench
MoE, ``-c 4096 -t 2 -np 1``, pp512 and tg64 on the default load mode) on each build in turn, as a
nightly job that upgrades its build would have them, into one store; then the change points, the
dashboard and its screenshots.

Each build is run ``--runs`` times, one perf session a run (its own server, probe and results
file), in build order: the series a store then holds is what a host that measured every night
and took each new build as it came would hold. Builds come from the build cache
(``moeperf build N`` first; a missing one is built by the first run that needs it).

    python benchmarks/real_history.py --out /tmp/history --builds 10423,10429,10435 --runs 5
    python benchmarks/real_history.py --out /tmp/history --report          # changes + dashboard
    python benchmarks/real_history.py --out /tmp/history --screenshots docs/images

A run already recorded under ``--out`` (its ``runs.json``) is not run again: an interrupted
history resumes. ``--report`` prints ``moeperf changes`` and writes the dashboard to
``--out``/site; ``--screenshots`` draws its index and host page in Debian's Chromium (Playwright)
into the named folder (``--prefix``-index.png, ``--prefix``-host.png). Run the bisect
``moeperf changes`` prints from ``--out`` (its ``moeperf.toml`` names the profile).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROFILE = "history"
CONFIG = """\
# benchmarks/real_history.py: the embedded profile's server and model on published builds.
[profiles.{profile}]
description = "CPU-only llama-server of published builds on the synthetic bench MoE (~460 MB f16)"
build = {first}
builds = {{ {builds} }}
model = "synthetic:bench"
flags = ["-c", "4096", "-t", "2", "-np", "1"]
workloads = ["pp512", "tg64"]
repetitions = {repetitions}

[profiles.{profile}.configurations.mmap]
description = "default load mode (mmap)"
"""
TEST = """\
import os

import pytest


@pytest.mark.moeperf(profile="{profile}", configurations=["mmap"])
def test_history_run(moeperf):
    build = os.environ.get("HISTORY_BUILD") or None
    for workload in ("pp512", "tg64"):
        moeperf.measure("mmap", workload, build=build)
"""


def prepare(out: Path, builds: list[int], repetitions: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    first, rest = builds[0], builds[1:]
    table = ", ".join(f"b{n} = {n}" for n in rest)
    config = CONFIG.format(profile=PROFILE, first=first, builds=table, repetitions=repetitions)
    (out / "moeperf.toml").write_text(config)
    (out / "test_history.py").write_text(TEST.format(profile=PROFILE))
    (out / "pytest.ini").write_text("[pytest]\nmoeperf_config = moeperf.toml\n")


def run_history(out: Path, builds: list[int], runs: int) -> None:
    done_path = out / "runs.json"
    done: list[dict[str, object]] = json.loads(done_path.read_text()) if done_path.exists() else []
    for n in builds:
        for i in range(runs):
            if any(d["build"] == n and d["run"] == i for d in done):
                continue
            env = dict(os.environ, HISTORY_BUILD="" if n == builds[0] else f"b{n}")
            began = time.time()
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-m", "perf", "-q", "-p", "no:cacheprovider",
                 "--moeperf-allow-empty", "test_history.py"],
                cwd=out, env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            seconds = time.time() - began
            (out / f"run-b{n}-{i}.log").write_text(proc.stdout + proc.stderr)
            print(f"b{n} run {i + 1}/{runs}: exit {proc.returncode}, {seconds:.0f} s", flush=True)
            if proc.returncode != 0:
                sys.exit(f"b{n} run {i + 1} failed: see {out}/run-b{n}-{i}.log")
            done.append({"build": n, "run": i, "seconds": round(seconds, 1)})
            done_path.write_text(json.dumps(done, indent=1) + "\n")


def report(out: Path) -> None:
    changes = subprocess.run(
        ["moeperf", "changes"], cwd=out, capture_output=True, text=True, check=False
    )
    (out / "changes.txt").write_text(changes.stdout + changes.stderr)
    print(changes.stdout + changes.stderr, end="")
    print(f"moeperf changes: exit {changes.returncode}")
    subprocess.run(["moeperf", "dashboard", "--output", "site"], cwd=out, check=True)


def screenshots(out: Path, folder: Path, prefix: str) -> None:
    """The index and the first host's page; then that page's first series with a change point, a
    point's tooltip pinned by a click (``-hover``), its compare page of the series' first and newest
    run (``-compare``), and, once the steepest change point was acknowledged from the command line
    and the site rebuilt, the series with its mark (``-triage``)."""
    from playwright.sync_api import sync_playwright

    site = out / "site"
    folder.mkdir(parents=True, exist_ok=True)
    hosts = sorted(p for p in site.glob("host-*.html"))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})

        def shot(name: str, element: object = None) -> None:
            path = folder / f"{prefix}-{name}.png"
            if element is None:
                page.screenshot(path=str(path), full_page=True)
            else:
                element.screenshot(path=str(path))  # type: ignore[attr-defined]
            print(path)

        page.goto((site / "index.html").as_uri())
        shot("index")
        page.goto(hosts[0].as_uri())
        shot("host")
        stepped = page.locator("section.series", has=page.locator("line.changepoint")).first
        stepped.scroll_into_view_if_needed()
        stepped.locator("circle.point").last.click()  # its tip pinned, with its record's link
        path = folder / f"{prefix}-hover.png"
        page.screenshot(path=str(path))  # the viewport: the tooltip lies beside the chart
        print(path)
        stepped.locator("a.compare").click()
        page.wait_for_load_state("load")
        shot("compare")
        found = subprocess.run(
            ["moeperf", "changes", "--json"], cwd=out, capture_output=True, text=True
        ).stdout
        steepest = min(json.loads(found), key=lambda c: c["ratio"])  # the one bisected above
        note = f"bisected: {steepest['after']} is the first bad build"
        subprocess.run(
            ["moeperf", "changes", "ack", steepest["id"], "--note", note], cwd=out, check=True
        )
        subprocess.run(["moeperf", "dashboard", "--output", "site"], cwd=out, check=True)
        page.goto(hosts[0].as_uri())
        marked = page.locator("section.series", has=page.locator("span.mark")).first
        shot("triage", marked)
        browser.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the history's folder")
    ap.add_argument("--builds", default="10423,10429,10435", help="published builds, in order")
    ap.add_argument("--runs", type=int, default=5, help="perf sessions a build")
    ap.add_argument("--repetitions", type=int, default=5, help="samples a workload a run")
    ap.add_argument("--report", action="store_true", help="moeperf changes, then the dashboard")
    ap.add_argument("--screenshots", type=Path, help="draw the dashboard into this folder")
    ap.add_argument("--prefix", default="history", help="the screenshots' names' start")
    args = ap.parse_args()
    out = args.out.resolve()
    builds = [int(b) for b in args.builds.split(",")]
    if args.report:
        report(out)
    elif args.screenshots:
        screenshots(out, args.screenshots, args.prefix)
    else:
        prepare(out, builds, args.repetitions)
        run_history(out, builds, args.runs)


if __name__ == "__main__":
    main()
