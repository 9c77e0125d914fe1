"""The error rates the verdicts state, measured through the real gate on simulated hosts that
are not independent, louder than any default, and paced so the budget ends where it ends.

Every row here is :func:`pytest_moeperf.run.gate.run_gate` with a real
:class:`~pytest_moeperf.run.session.PerfSession` (its decision loop, ``decide_pair``, the
default plan, margin and budget, the rows' sequential p-values and Holm). Only the rounds and
the clock are stand-ins: a simulated source whose rounds are a true log-ratio plus

- round noise of log-SD *sd* (0.02, 0.05, or 0.09: this project's 2-core VM),
- a round-level AR(1) at *lag1* (a host that drifts slowly; it carries across restarts),
- a process pair's offset of log-SD *process*, drawn afresh every *block* rounds, when the
  source restarts both servers (it reports the blocks, and its block length, as the live
  feed does),

and a clock at *pace* seconds a round (2.5 s: the 180 s budget runs out after round 72; 3 s:
after round 60, where every block length here leaves a last block of one round). The host is
not calibrated unless a cell says so; nothing about the simulated host is told to the code.

Per cell (2,000 seeded runs unless --runs says otherwise):

- **miss over all looks** and **miss of the final interval**: the same loop and plan, judged
  by a rule that never decides, so every look's interval up to the budget's end is seen;
  a look misses when its interval excludes the true ratio;
- a one-row gate (margin 5 %) at a true 1.00 (``unchanged``: power; ``undecided``; mean
  rounds), 0.95 (the margin's edge: ``slower`` must stay at or below 2.5 %) and 0.90
  (``slower``: power), with the fixed-sample floor: the rounds a test of one fixed size, of
  the same error rate and power, needs at this noise (its variance known: the physical floor);
- 20-row A/A gates: how often any row ends slower or faster; and 20-row gates at a true 0.93
  (some rows decided, some not): whether every row its own interval decided slower or faster
  is among those Holm's step-down rejects;
- chains of accepted gates whose build pair's change moved between sessions by a day term
  (log-SD), each link a gate row, judged as the gate judges the chain: how often the
  chain's interval misses the chain's true change;
- a calibrated host: ``moeperf calibrate``'s A/A gates (12 of them, ``--gates 12``) run first
  on the same simulated host (:func:`pytest_moeperf.run.calibrate.run_calibration`, stored
  with the host by ``accept_noise``), then the cell's rows.

    python benchmarks/error_rates.py --runs 2000 --jobs 2 --out error-rates.json
    python benchmarks/error_rates.py --table error-rates.json   # the table of a run

Every cell is seeded by its kind, host and pace, whichever cells a run asks for (``--kind``,
``--pace``, ``--no-calibrated``), and a run keeps the cells its ``--out`` already holds with
the same seed and runs (an interrupted run resumes; runs of different cells can be merged).
Run it with ``PYTHONPATH`` at another checkout to measure that code; ``--table F --today G``
puts G's figures (that checkout's ``--out``) in brackets beside each of F's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_moeperf.config.profiles import Configuration, Profile
from pytest_moeperf.defaults import FAMILY_ALPHA, MARGIN
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.round import Round
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.run import rounds as rounds_mod
from pytest_moeperf.run.gate import BuildUnderTest, run_gate
from pytest_moeperf.run.rounds import decide_pair
from pytest_moeperf.run.session import Options, PerfSession
from pytest_moeperf.run.source import PAIRED_METHOD, Feed, Side
from pytest_moeperf.run.source import Host as RunHost
from pytest_moeperf.store.record import VerdictSide
from pytest_moeperf.verdicts.creep import judge_chain, link_spread
from pytest_moeperf.verdicts.gate import GateRow
from pytest_moeperf.verdicts.judge import Verdict
from pytest_moeperf.verdicts.sequential import Coin, Plan, Rule

W = Workload.parse("pp512")
BUDGET = 180.0
GATE_ROWS = 20


# -- the simulated host -------------------------------------------------------------------------
@dataclass(frozen=True)
class Host:
    """A simulated host's rounds."""

    sd: float
    lag1: float = 0.0
    process: float = 0.0
    block: int = 10
    """Rounds a process pair serves (the source restarts both after each block)."""

    @property
    def name(self) -> str:
        parts = [f"SD {self.sd:.2f}", f"blocks of {self.block}"]
        if self.process:
            parts.append(f"process {100 * self.process:g} %")
        if self.lag1:
            parts.append(f"AR(1) {self.lag1:g}")
        return ", ".join(parts)


class Clock:
    """The loop's clock: it moves only when a round is measured."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def fake_clock(clock: Clock | None = None) -> Iterator[Clock]:
    """Run the loop on *clock* (a new :class:`Clock` by default; ``time.monotonic`` as the
    rounds module sees it)."""
    clock = clock or Clock()
    real = rounds_mod.time.monotonic
    rounds_mod.time.monotonic = clock  # type: ignore[assignment]
    try:
        yield clock
    finally:
        rounds_mod.time.monotonic = real  # type: ignore[assignment]


def _measurement(name: str, values: Sequence[float], pace: float) -> Measurement:
    samples = tuple(Sample(512, 512.0 / v) for v in values)
    told = Conditions(profile="sim", measured_s=pace * len(values), probe_cpus="0-1")
    return Measurement(name, "sim", W, samples, told)


class SimulatedFeed(Feed):
    """Rounds of a :class:`Host` at a true log-ratio, each costing *pace* seconds; both servers
    restarted (a fresh process offset) every ``host.block`` rounds, as the live feed does."""

    def __init__(
        self, host: Host, truth: float, rng: np.random.Generator, clock: Clock, pace: float = 2.5
    ) -> None:
        self.host, self.truth, self.rng, self.clock, self.pace = host, truth, rng, clock, pace
        self.values: list[list[float]] = [[], []]
        self._block: int | None = None
        self.process_block = host.block
        self.coin = Coin(seed=int(rng.integers(2**32)))
        self.method = f"{PAIRED_METHOD} in process blocks of {host.block}"
        self._drift = 0.0
        self._offset = 0.0

    def take(self, index: int) -> Round | None:
        self.clock.now += self.pace
        first = self.coin.first(index)
        h = self.host
        block = index // h.block if h.block else 0
        if block != self._block:
            self._offset = float(self.rng.normal(0.0, h.process)) if h.process else 0.0
        self._block = block
        shock = float(self.rng.normal(0.0, h.sd))
        if index == 0 or not h.lag1:
            self._drift = shock
        else:
            self._drift = h.lag1 * self._drift + math.sqrt(1 - h.lag1**2) * shock
        a = 100.0
        b = a * math.exp(self.truth + self._offset + self._drift)
        places = ((len(self.values[0]),), (len(self.values[1]),))
        self.values[0].append(a)
        self.values[1].append(b)
        return Round((a, b), places, block=block, first=first)

    def measurements(self) -> tuple[Measurement, ...]:
        return (
            _measurement("a", self.values[0], self.pace),
            _measurement("b", self.values[1], self.pace),
        )

    def sides(self) -> tuple[VerdictSide, ...]:
        return (
            VerdictSide("sim", "c", "baseline", W.name),
            VerdictSide("sim", "c", "candidate", W.name),
        )


class SimulatedSource(RunHost):
    """The session's source: every pair is a :class:`SimulatedFeed` of the current run; the host
    stays where it is (the simulated host moves only in its rounds)."""

    def __init__(self, clock: Clock, pace: float) -> None:
        super().__init__()
        self.clock, self.pace = clock, pace
        self.simulated = Host(0.05)
        self.truth = 0.0
        self.rng = np.random.default_rng(0)

    def run(self, host: Host, truth: float, seed: int) -> None:
        """The next rows' rounds: *host*'s at the true log-ratio *truth*, seeded."""
        self.simulated, self.truth, self.rng = host, truth, np.random.default_rng(seed)

    def measure(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        repetitions: int | None = None, build: str | None = None,
    ) -> Measurement:  # fmt: skip
        raise AssertionError("the gate measures in rounds only")

    def pair(self, profile: Any, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        return SimulatedFeed(self.simulated, self.truth, self.rng, self.clock, self.pace)

    def series(self, profile: Profile, configuration: Configuration, workload: Workload) -> Feed:
        raise AssertionError("the gate checks no baseline")

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        return []

    def fingerprint(self, profile: Profile, label: str | None = None) -> dict[str, Any]:
        return {"cpu_model": "simulated", "cpus": 2}


class SimulatedStage:
    """The host beside the rounds, as a gate asks it: every server starts, nothing is lacking,
    the host is idle."""

    def check(self, profile: Profile, configurations: Sequence[Any], labels: Sequence[str]) -> None:
        pass

    def forget(self, profile: str, labels: Sequence[str]) -> None:
        pass

    def start(self, profile: Profile, configuration: Configuration, label: str | None) -> None:
        pass

    def stop_servers(self, keep: Callable[[tuple[str, str, str]], bool] | None = None) -> None:
        pass

    def greedy(self, profile: Profile, configuration: Configuration, label: str) -> tuple[int, ...]:
        return (1, 2, 3)

    def host_load(self, seconds: float) -> tuple[float, tuple[float, float, float]]:
        return 0.0, (0.0, 0.0, 0.0)

    def bench_sample(self, *args: Any, **kwargs: Any) -> float:
        raise AssertionError("no --attribute here")


@dataclass
class Bench:
    """One process's simulated gate: a session on a simulated source, its stage and clock."""

    pace: float
    rows: int = 1
    calibrated: bool = False
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="moeperf-sim-")))

    def __post_init__(self) -> None:
        self.clock = Clock()
        self.source = SimulatedSource(self.clock, self.pace)
        self.stage = SimulatedStage()
        names = [f"c{i}" for i in range(self.rows)]
        baseline = 'baseline = "baselines.toml"\n' if self.calibrated else ""
        toml = self.directory / "moeperf.toml"
        toml.write_text(
            f'[profiles.sim]\nmodel = "m.gguf"\nworkloads = ["pp512"]\nbudget = {BUDGET:g}\n'
            + baseline
            + "".join(f"[profiles.sim.configurations.{c}]\n" for c in names)
        )
        options = Options(  # each verdict on its own blocks: no history pooled across runs
            profile="sim",
            config_file=toml,
            rootdir=self.directory,
            results_dir=self.directory,
            history=False,
        )
        self.session = PerfSession(options, source=self.source, stage=self.stage)  # type: ignore[arg-type]
        self.profile = self.session.profile("sim")

    def gate(self, host: Host, truth: float, seed: int) -> list[GateRow]:
        """One gate of every configuration (A/A when *truth* is 0) through ``run_gate``."""
        self.source.run(host, truth, seed)
        with fake_clock(self.clock):
            result = run_gate(
                self.session,
                self.profile,
                BuildUnderTest(1),
                BuildUnderTest(2),
                check_output=False,
            )
        return result.rows

    def looks(self, host: Host, truth: float, seed: int) -> list[Verdict]:
        """Every look's verdict of one row whose rule never decides: the gate's plan, loop and
        budget, run to the budget's end."""
        self.source.run(host, truth, seed)
        seen: list[Verdict] = []
        plan = Plan(alpha=FAMILY_ALPHA, dependence=self.session.dependence(self.profile))
        config = self.profile.configuration("c0")
        with fake_clock(self.clock):
            decide_pair(
                self.source,
                self.profile,
                NeverDecides("change", margin=MARGIN),
                Side(config, W, "baseline"),
                Side(config, W, "candidate"),
                label="sim",
                plan=plan,
                budget=BUDGET,
                busy_limit=1.0,
                on_look=lambda v, _s: seen.append(v),
            )
        return seen


@dataclass(frozen=True)
class NeverDecides(Rule):
    """A rule that decides nothing before the budget's end: every look of the plan is taken."""

    def outcome(self, ratio: float, low: float, high: float, *, final: bool) -> Any:
        return "undecided" if final else None


# -- the cells ----------------------------------------------------------------------------------
def coverage(bench: Bench, host: Host, runs: int, seed: int) -> dict[str, float]:
    """How often the interval excluded the true ratio (1.00) at some look, and at the last."""
    anywhere = last = looks = 0
    for i in range(runs):
        seen = bench.looks(host, 0.0, seed + i)
        missed = [v.low > 1.0 or v.high < 1.0 for v in seen]
        anywhere += any(missed)
        last += missed[-1]
        looks += len(seen)
    return {"miss": anywhere / runs, "final_miss": last / runs, "looks": looks / runs}


def one_row(bench: Bench, host: Host, ratio: float, runs: int, seed: int) -> dict[str, Any]:
    """What one-row gates said at a true *ratio*, and the rounds each took."""
    said: dict[str, int] = {}
    rounds: list[int] = []
    for i in range(runs):
        (row,) = bench.gate(host, math.log(ratio), seed + i)
        said[row.verdict.outcome] = said.get(row.verdict.outcome, 0) + 1
        rounds.append(row.verdict.rounds or 0)
    return {
        "said": {k: v / runs for k, v in sorted(said.items())},
        "rounds": statistics.fmean(rounds),
        "median_rounds": statistics.median(rounds),
    }


def holm_rejects(rows: Sequence[GateRow], alpha: float, way: str) -> set[int]:
    """The rows Holm's step-down over the rows' p-values against *way* (``slower``: "no
    slowdown beyond the margin"; ``faster``) rejects at family rate *alpha*."""
    out: set[int] = set()
    k = len(rows)
    ps = [r.p_slower if way == "slower" else r.p_faster for r in rows]
    for j, i in enumerate(sorted(range(k), key=lambda i: ps[i])):
        if ps[i] > alpha / (k - j):
            break
        out.add(i)
    return out


def family_gates(bench: Bench, host: Host, ratio: float, gates: int, seed: int) -> dict[str, Any]:
    """Gates of :data:`GATE_ROWS` rows at a true *ratio*: the share with any row slower or
    faster (at 1.00, a false alarm), the rows their own interval decided slower or faster, and
    how many of those Holm's step-down did not reject (the same error: must be none)."""
    false = decided = unrejected = 0
    for g in range(gates):
        rows = bench.gate(host, math.log(ratio), seed + g)
        false += any(r.verdict.outcome in ("slower", "faster") for r in rows)
        for way in ("slower", "faster"):
            rejected = holm_rejects(rows, FAMILY_ALPHA, way)
            mine = [i for i, r in enumerate(rows) if r.verdict.outcome == way]
            decided += len(mine)
            unrejected += sum(i not in rejected for i in mine)
    return {"false": false / gates, "decided": decided, "decided_not_rejected": unrejected}


def creep_miss(bench: Bench, host: Host, links: int, chains: int, day: float, seed: int) -> float:
    """Share of *chains* accepted chains of *links* gates whose chained interval missed the
    chain's true change. Every build is as fast as the last, but each link was gated on a day of
    its own where the pair's change read differently by *day* (log-SD); each link is a gate
    row's paired change, the chain judged as the gate judges it (the link term this host
    measured: none repeated, the prior)."""
    rng = np.random.default_rng(seed)
    missed = 0
    for c in range(chains):
        days = rng.normal(0.0, day, links)
        changes = []
        for j, t in enumerate(days):
            (row,) = bench.gate(host, float(t), seed + 1000 * c + j + 1)
            assert row.change is not None
            changes.append(row.change)
        chained = judge_chain(
            [(f"b{j + 1}", x) for j, x in enumerate(changes[:-1])],
            changes[-1],
            link_term=link_spread([]),
        )
        missed += not (chained.low <= 1.0 <= chained.high)  # no build changed anything
    return missed / chains


def _mean_variance(host: Host, n: int) -> float:
    """The true variance of the mean log-ratio of *n* rounds of *host* (AR(1) rounds and a
    process offset a block)."""
    i = np.arange(n)
    rounds = host.sd**2 * float((host.lag1 ** np.abs(np.subtract.outer(i, i))).sum()) / n**2
    sizes = np.bincount(i // host.block) if host.block else np.asarray([n])
    return rounds + host.process**2 * float((sizes**2).sum()) / n**2


def floor_rounds(host: Host, ratio: float, power: float, alpha: float = FAMILY_ALPHA) -> int | None:
    """The fixed-sample floor: the fewest rounds a test of one fixed size (its variance known,
    the same error rate) needs to say what the gate said with *power* at a true *ratio*
    (unchanged at 1.00, slower below the margin; at most 99 %); ``None`` when no size up to 400
    does."""
    z = statistics.NormalDist().inv_cdf(1 - alpha / 2)
    normal = statistics.NormalDist()
    edge_low, edge_high = math.log(1 - MARGIN), math.log(1 + MARGIN)
    if power <= 0:
        return None
    power = min(power, 0.99)  # a power of 1 no fixed size reaches: the floor at 99 %
    for n in range(2, 401):
        se = math.sqrt(_mean_variance(host, n))
        mu = math.log(ratio)
        if ratio == 1.0:  # the whole interval inside the margin
            got = normal.cdf((edge_high - mu) / se - z) - normal.cdf((edge_low - mu) / se + z)
        else:  # the whole interval below the margin's lower edge
            got = normal.cdf((edge_low - mu) / se - z)
        if got >= power:
            return n
    return None


def hosts(*, louder: bool = False) -> list[Host]:
    """The table's rows: process terms 0, 1.5, 3 and 5 % (the last the early looks' prior
    bound, :data:`~pytest_moeperf.defaults.PRIOR_PROCESS_TERM`) x blocks of 5, 10, 20, 30 x
    round SD 0.02, 0.05, 0.09; and AR(1) 0.25 and 0.5 at blocks of 5, 10, 20, 30 (SD 0.05).
    *louder*: also hosts beyond the prior bound, process terms 7 and 10 % in blocks of 5 and
    10 (after the others, so that their seeds stay where they were)."""
    out = [
        Host(sd, process=p, block=b)
        for p in (0.0, 0.015, 0.03, 0.05)
        for b in (5, 10, 20, 30)
        for sd in (0.02, 0.05, 0.09)
    ]
    out += [Host(0.05, lag1=r, block=b) for r in (0.25, 0.5) for b in (5, 10, 20, 30)]
    if louder:
        out += [
            Host(sd, process=p, block=b)
            for p in (0.07, 0.10)
            for b in (5, 10)
            for sd in (0.02, 0.05, 0.09)
        ]
    return out


PACES = (2.5, 3.0)
"""Seconds a round: 2.5 (the default budget reaches 72 rounds) and 3 (61: a last block of one
round wherever the block length divides 60)."""
KINDS = (
    "miss",
    "ratio 1.00",
    "ratio 0.95",
    "ratio 0.90",
    "aa-gates",
    "holm",
    "creep 3",
    "creep 10",
)


@dataclass(frozen=True)
class Job:
    kind: str
    host: Host
    pace: float
    runs: int
    seed: int
    calibrated: bool = False

    @property
    def key(self) -> tuple[str, str, float, bool]:
        """The cell's place in the table, as :func:`_key` reads it off a written cell."""
        return self.kind, self.host.name, self.pace, self.calibrated


_BENCHES: dict[tuple[float, int, bool, Host | None], Bench] = {}


def _bench(job: Job) -> Bench:
    rows = GATE_ROWS if job.kind in ("aa-gates", "holm") else 1
    key = (job.pace, rows, job.calibrated, job.host if job.calibrated else None)
    if key not in _BENCHES:
        bench = Bench(job.pace, rows, job.calibrated)
        if job.calibrated:
            calibrate(bench, job.host, gates=12)
        _BENCHES[key] = bench
    return _BENCHES[key]


def calibrate(bench: Bench, host: Host, gates: int = 4, seed: int = 9_000_000) -> None:
    """``moeperf calibrate`` on the simulated host: its A/A gates through the real calibration,
    the figures stored with the host in the profile's baseline file."""
    from pytest_moeperf.run.calibrate import run_calibration
    from pytest_moeperf.store.accept import accept_noise

    bench.source.run(host, 0.0, seed)
    with fake_clock(bench.clock):
        got = run_calibration(
            bench.session,
            bench.profile,
            BuildUnderTest(1),
            configurations=["c0"],
            gates=gates,
        )
    accept_noise(
        bench.directory / "baselines.toml",
        "sim",
        bench.source.fingerprint(bench.profile),
        got.figures(),
    )
    bench.session = PerfSession(bench.session.options, source=bench.source, stage=bench.stage)  # type: ignore[arg-type]
    bench.profile = bench.session.profile("sim")


def cell(job: Job) -> dict[str, Any]:
    """One cell of the table (a job of the pool)."""
    began = time.process_time()
    bench = _bench(job)
    host = job.host
    got: dict[str, Any] = {
        "kind": job.kind,
        "host": asdict(host),
        "name": host.name,
        "pace": job.pace,
        "runs": job.runs,
        "calibrated": job.calibrated,
        "seed": job.seed,
    }
    if job.kind == "miss":
        got.update(coverage(bench, host, job.runs, job.seed))
    elif job.kind.startswith("ratio "):
        ratio = float(job.kind.split()[1])
        got.update(one_row(bench, host, ratio, job.runs, job.seed))
        said = got["said"]
        power = said.get("unchanged", 0.0) if ratio == 1.0 else said.get("slower", 0.0)
        got["floor"] = floor_rounds(host, ratio, power) if ratio != 0.95 else None
    elif job.kind == "aa-gates":
        got.update(family_gates(bench, host, 1.0, job.runs, job.seed))
    elif job.kind == "holm":
        got.update(family_gates(bench, host, 0.93, job.runs, job.seed))
    elif job.kind.startswith("creep "):
        got["rate"] = creep_miss(bench, host, int(job.kind.split()[1]), job.runs, 0.02, job.seed)
    got["cpu_s"] = time.process_time() - began
    return got


def _runs_of(kind: str, runs: int) -> int:
    """A cell's seeded runs: the gates and chains (20 rows or links each) a tenth as many."""
    few = kind in ("aa-gates", "holm") or kind.startswith("creep")
    return max(10, runs // 10) if few else runs


def _key(c: dict[str, Any]) -> tuple[str, str, float, bool]:
    return c["kind"], c["name"], c["pace"], c.get("calibrated", False)


def jobs(
    runs: int,
    kinds: Sequence[str],
    paces: Sequence[float],
    *,
    calibrated: bool = True,
    louder: bool = False,
) -> list[Job]:
    """Every (kind, host, pace) cell, seeded by its place. The A/A gates (20 rows each, a
    tenth as many gates) run on the louder hosts; the chains on independent rounds; the
    calibrated cells on independent rounds of blocks of 10 (SD 0.05 and 0.09)."""
    out = []
    for pace in paces:
        p = PACES.index(pace) if pace in PACES else round(1000 * pace)
        for kind in kinds:
            k = KINDS.index(kind)  # a cell's seed is the same whichever kinds are asked for
            for h, host in enumerate(hosts(louder=louder)):
                seed = 10_000_000 * (k + 1) + 100_000 * h + 7_000_000_000 * p
                if kind in ("aa-gates", "holm") and not (host.block == 10 and host.sd == 0.05):
                    continue
                if kind.startswith("creep") and (host.process or host.lag1 or host.block != 10):
                    continue
                out.append(Job(kind, host, pace, _runs_of(kind, runs), seed))
            if calibrated and kind in ("miss", "ratio 1.00", "ratio 0.90", "ratio 0.95"):
                for sd in (0.05, 0.09):
                    host = Host(sd, block=10)
                    seed = 10_000_000 * (k + 1) + 99_000_000 + int(1000 * sd) + 7_000_000_000 * p
                    out.append(Job(kind, host, pace, runs, seed, calibrated=True))
    return out


# -- the table ----------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _by_row(cells: Sequence[dict[str, Any]]) -> dict[tuple[str, float, bool], dict[str, Any]]:
    by: dict[tuple[str, float, bool], dict[str, Any]] = {}
    for c in cells:
        by.setdefault((c["name"], c["pace"], c.get("calibrated", False)), {})[c["kind"]] = c
    return by


def _figures(got: dict[str, Any]) -> list[str]:
    """A row's figures: misses, A/A outcomes and rounds, the edge, the power and its rounds."""
    miss, same = got.get("miss", {}), got.get("ratio 1.00", {})
    edge, power = got.get("ratio 0.95", {}), got.get("ratio 0.90", {})

    def said(c: dict[str, Any], k: str) -> str:
        return _pct(c["said"].get(k, 0.0)) if c else "-"

    def rounds(c: dict[str, Any]) -> str:
        return f"{c['rounds']:.0f}" if c else "-"

    return [
        _pct(miss.get("miss")),
        _pct(miss.get("final_miss")),
        said(same, "unchanged"),
        said(same, "undecided"),
        rounds(same),
        said(edge, "slower"),
        said(power, "slower"),
        rounds(power),
    ]


def table(cells: Sequence[dict[str, Any]], today: Sequence[dict[str, Any]] = ()) -> str:
    """The markdown table: one row per (host, pace, calibrated), a column per figure; with
    *today* (the same cells of another checkout) each figure is followed by its figure there,
    ``3.1 (12.5)``, and the rounds by the fixed-sample floor, ``42 [21]``."""
    by, then = _by_row(cells), _by_row(today)
    head = [
        "host (pace)",
        "miss all looks %",
        "miss final %",
        "A/A unchanged %",
        "A/A undecided %",
        "A/A rounds [floor]",
        "-5 %: slower %",
        "-10 %: slower %",
        "-10 %: rounds [floor]",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, got in by.items():
        if not any(k in got for k in ("miss", "ratio 1.00", "ratio 0.95", "ratio 0.90")):
            continue
        name, pace, calibrated = key
        figures = _figures(got)
        before = _figures(then[key]) if key in then else None
        for i, floor_of in ((4, "ratio 1.00"), (7, "ratio 0.90")):
            floor = got.get(floor_of, {}).get("floor")
            figures[i] += f" [{floor or '-'}]"
        if before is not None:
            figures = [f"{x} ({y})" for x, y in zip(figures, before, strict=True)]
        label = f"{name}{', calibrated' if calibrated else ''} ({pace:g} s)"
        lines.append("| " + " | ".join([label, *figures]) + " |")
    extra = []
    for c in cells:
        if c["kind"] == "aa-gates":
            extra.append(
                f"- 20-row A/A gates, {c['name']} ({c['pace']:g} s): any row slower or faster in "
                f"{_pct(c['false'])} % of {c['runs']} gates"
            )
        if c["kind"] == "holm" or (c["kind"] == "aa-gates" and c["decided"]):
            extra.append(
                f"- 20-row gates at {'1.00' if c['kind'] == 'aa-gates' else '0.93'}, "
                f"{c['name']} ({c['pace']:g} s): rows decided slower or faster by their own "
                f"interval {c['decided']}, of which Holm did not reject "
                f"{c['decided_not_rejected']}"
            )
        if c["kind"].startswith("creep"):
            extra.append(
                f"- chains of {c['kind'].split()[1]} accepted gates, day term 2 %, {c['name']} "
                f"({c['pace']:g} s): the chained interval missed in {_pct(c['rate'])} % of "
                f"{c['runs']}"
            )
    return "\n".join([*lines, "", *extra])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=2000, help="seeded runs a cell (gates: a tenth)")
    p.add_argument("--jobs", type=int, default=2, help="processes")
    p.add_argument("--kind", action="append", choices=KINDS, help="cells to run (default all)")
    p.add_argument("--pace", action="append", type=float, help="seconds a round (2.5 and 3)")
    p.add_argument(
        "--host", action="append", help="only this host's cells (its name: 'SD 0.05, blocks of 5')"
    )
    p.add_argument(
        "--fresh", type=int, default=0, help="the N-th fresh set of seeds (a borderline cell again)"
    )
    p.add_argument(
        "--no-calibrated",
        dest="calibrated",
        action="store_false",
        help="leave out the calibrated hosts' cells (each runs moeperf calibrate's 12 gates)",
    )
    p.add_argument(
        "--louder",
        action="store_true",
        help="also hosts louder than the early looks' prior bound (process terms 7 and 10 %%)",
    )
    p.add_argument(
        "--out", type=Path, help="write every cell as JSON here (cells already there are kept)"
    )
    p.add_argument("--table", type=Path, help="print the table of an earlier --out and exit")
    p.add_argument("--today", type=Path, help="with --table: another checkout's --out beside it")
    args = p.parse_args(argv)
    if args.table:
        today = json.loads(args.today.read_text()) if args.today else []
        print(table(json.loads(args.table.read_text()), today))
        return 0
    todo = jobs(
        args.runs,
        args.kind or KINDS,
        args.pace or PACES,
        calibrated=args.calibrated,
        louder=args.louder,
    )
    if args.host:
        known = {j.host.name for j in todo}
        for name in args.host:
            if name not in known:
                p.error(f"--host {name!r}: no such host among the cells asked for")
        todo = [j for j in todo if j.host.name in args.host]
    if args.fresh:  # the same cells again on seeds no other run used
        todo = [replace(j, seed=j.seed + args.fresh * 1_000_000_000_000) for j in todo]
    cells: list[dict[str, Any]] = []
    if args.out and args.out.exists():
        # An interrupted run resumes: the cells already written are kept, not run again.
        cells = json.loads(args.out.read_text())
        seeds = {j.key: (j.runs, j.seed) for j in todo}
        cells = [c for c in cells if seeds.get(_key(c)) == (c["runs"], c.get("seed"))]
        done = {_key(c) for c in cells}
        todo = [j for j in todo if j.key not in done]
    began = time.monotonic()
    print(f"{len(todo)} cells to run, {len(cells)} kept, {args.jobs} processes", file=sys.stderr)
    with multiprocessing.Pool(args.jobs) as pool:
        for got in pool.imap_unordered(cell, todo):
            cells.append(got)
            print(
                f"  {got['kind']:<10} {got['name']:<40} {got['pace']:g} s "
                f"{'cal ' if got['calibrated'] else ''}{got['cpu_s']:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            if args.out:
                args.out.write_text(json.dumps(cells, indent=1) + "\n")
    print(table(cells))
    print(f"\n{time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
