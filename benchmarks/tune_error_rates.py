"""The error rates ``moeperf tune`` states, measured through its real race (``run_race``:
each duel :func:`~pytest_moeperf.run.rounds.decide_pair` at the family's share of 5 %) on the
simulated hosts of ``error_rates.py`` (round noise, round-level AR(1), process blocks; a fake
clock at 2.5 s a round, a 180 s budget a duel). Each race has one knob of two challengers
against the base; per host, over seeded races:

- **loser wins**: the base is truly the best (challengers at 0.95, the margin's edge, and
  0.90): how often the race ends with a challenger as its winner (stated: at most 5 %);
- **A/A winner**: both challengers as fast as the base: how often one is called the winner;
- **2x margin missed**: one challenger 10 % faster (twice the margin), the other at 0.90:
  how often the race does not end with it as the winner (a tie, or the base): the power.

    python benchmarks/tune_error_rates.py --runs 400 --jobs 2
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from error_rates import Host, SimulatedFeed, fake_clock

from pytest_moeperf.config.profiles import Configuration, Profile
from pytest_moeperf.measure.measurement import Measurement
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.run.session import Options, PerfSession
from pytest_moeperf.run.source import Feed, Side
from pytest_moeperf.run.source import Host as RunHost
from pytest_moeperf.run.tune import Knob, Race, RaceState, run_race

SCENARIOS: dict[str, dict[str, float]] = {
    "loser wins": {"1": 0.95, "2": 0.90},
    "A/A winner": {"1": 1.0, "2": 1.0},
    "2x margin missed": {"1": 1.10, "2": 0.90},
}
WRONG = {
    "loser wins": lambda leader: leader != "base",
    "A/A winner": lambda leader: leader != "base",
    "2x margin missed": lambda leader: leader != "t1",
}


class SimRace(RunHost):
    """A session's source whose pairs are simulated rounds at the ratio of the two sides'
    true speeds (the ``-t`` value names the speed), on one simulated host."""

    def __init__(self, host: Host, speeds: dict[str, float], seed: int, clock: Any) -> None:
        super().__init__()
        self.sim, self.speeds, self.clock = host, speeds, clock
        self.rng = np.random.default_rng(seed)

    def _speed(self, side: Side) -> float:
        flags = side.configuration.flags
        return self.speeds.get(flags[-1], 1.0) if "-t" in flags else 1.0

    def pair(self, profile: Profile, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        truth = math.log(self._speed(b) / self._speed(a))
        return SimulatedFeed(self.sim, truth, self.rng, self.clock)

    def measure(self, *args: Any, **kw: Any) -> Measurement:
        raise AssertionError("the race measures in rounds only")

    def series(self, *args: Any, **kw: Any) -> Feed:
        raise AssertionError("the race checks no baseline")

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        return []

    def fingerprint(self, profile: Profile, label: str | None = None) -> dict[str, Any]:
        return {}


class NoStage:
    """Servers that always start (the simulation has none)."""

    def check(self, *args: Any) -> None: ...

    def start(self, *args: Any) -> None: ...

    def stop_servers(self, keep: Any = None) -> None: ...


def one_race(host: Host, scenario: str, seed: int, folder: Path) -> str:
    """The leader one seeded race of *scenario* ends with."""
    toml = folder / "moeperf.toml"
    if not toml.exists():
        toml.write_text('[profiles.p]\nmodel = "m.gguf"\n[profiles.p.configurations.c]\n')
    with fake_clock() as clock:
        source = SimRace(host, SCENARIOS[scenario], seed, clock)
        options = Options(profile="p", config_file=toml, rootdir=folder)
        session = PerfSession(options, source=source, stage=NoStage())  # type: ignore[arg-type]
        profile = session.profile("p")
        base: Configuration = profile.configuration("c")
        race = Race(
            session,
            profile,
            base,
            (Knob.parse("-t=1,2"),),
            Workload.parse("pp512"),
            0.05,
            180.0,
            RaceState(folder / f"state-{seed}", {"seed": seed}),
            lambda line: None,
        )
        return run_race(race).leader


def cell(job: tuple[Host, str, int, int]) -> dict[str, Any]:
    host, scenario, runs, seed = job
    began = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        wrong = sum(
            WRONG[scenario](one_race(host, scenario, seed + i, Path(tmp))) for i in range(runs)
        )
    return {
        "host": host.name,
        "scenario": scenario,
        "runs": runs,
        "rate": wrong / runs,
        "cpu_s": time.process_time() - began,
    }


def hosts() -> list[Host]:
    return [
        Host(0.05),
        Host(0.09),
        Host(0.09, process=0.015, block=10),
        Host(0.09, lag1=0.25),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=400, help="seeded races a cell")
    p.add_argument("--jobs", type=int, default=2, help="processes")
    args = p.parse_args(argv)
    todo = [(h, s, args.runs, 7919 * i) for i, (h, s) in enumerate(
        (h, s) for h in hosts() for s in SCENARIOS
    )]  # fmt: skip
    with multiprocessing.Pool(args.jobs) as pool:
        cells = pool.map(cell, todo)
    print("| host | " + " | ".join(SCENARIOS) + " |")
    print("|---" * (len(SCENARIOS) + 1) + "|")
    for h in hosts():
        row = [f"{100 * c['rate']:.1f} %" for c in cells if c["host"] == h.name]
        print(f"| {h.name} | " + " | ".join(row) + " |")
    print(f"\n{args.runs} races a cell; {sum(c['cpu_s'] for c in cells):.0f} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
