"""The error rates the verdicts state, measured through the real decision loop on simulated
hosts that are not independent.

Every verdict here is :func:`pytest_moeperf.run.rounds.decide_pair` (the loop the plugin, the
gate and bisect run: ``until_decided`` -> ``judge_rounds`` -> ``look`` ->
``paired_interval``) on a simulated source whose rounds are a true log-ratio plus

- round noise of log-SD *sd* (0.05, or 0.09: this project's 2-core VM),
- a round-level AR(1) at *lag1* (a host that drifts slowly; the coin cannot remove it),
- a process pair's offset of log-SD *process*, drawn afresh every *block* rounds (the source
  reports the blocks, as the live source's restarts do),

and a fake clock at *pace* seconds a round, so a 180 s budget reaches 72 rounds (the plan's
looks then end at 6, 8, 10, 13, 17, 22, 28, 35, 44, 55, 69 and the budget's end). The plan is
the plugin's default: the host is not calibrated, so the verdicts carry the default process
term (1.5 %) and lag-1 0; nothing about the simulated host is told to the code.

Per cell (2,000 seeded runs unless --runs says otherwise) it prints

- **miss**: the interval at some look excludes the true ratio (driven as a claim whose
  threshold is the truth: the loop decides it exactly when an interval misses);
- the gate's change rule (margin 5 %) at a true 0.95 (the margin's edge: "slower" must stay
  at or below 2.5 %), 0.90 ("slower": power) and 1.00 ("unchanged": power);
- 20-row A/A gates: every row through the loop at 5 % / 20, then the rows' sequential
  p-values and :func:`pytest_moeperf.verdicts.gate.holm` (what ``run_gate`` calls): how often
  any row ends slower or faster;
- chained creep: chains of 3 and 10 gates of builds all as fast as the last, each gated on a
  day where the pair's change read differently by a between-session term of 1 % (log-SD),
  each link a verdict through the loop, judged by
  :func:`pytest_moeperf.verdicts.creep.judge_chain`: how often the chain's interval misses
  the chain's true change (none).

    python benchmarks/error_rates.py --runs 2000 --jobs 2 --out error-rates.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pytest_moeperf.defaults import BUDGET, FAMILY_ALPHA, MARGIN, MIN_REL_SPREAD
from pytest_moeperf.measure.dependence import DEFAULT_DEPENDENCE
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.stats import paired_interval
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.run import rounds as rounds_mod
from pytest_moeperf.run.profiles import Configuration, Pinning
from pytest_moeperf.run.rounds import Decided, decide_pair
from pytest_moeperf.run.source import PAIRED_METHOD, Feed, Side
from pytest_moeperf.store.record import SideRounds
from pytest_moeperf.verdicts.creep import PairedChange, judge_chain
from pytest_moeperf.verdicts.gate import GateRow, holm, row_p_values
from pytest_moeperf.verdicts.sequential import Coin, Plan, Rule

PACE = 2.5
"""Seconds a simulated round takes: a 180 s budget reaches 72 rounds."""
W = Workload.parse("pp512")
GATE_ROWS = 20
LINK_TERM = 0.01
"""The between-session term the creep cells draw for each link (log-SD)."""


@dataclass(frozen=True)
class Host:
    """A simulated host's rounds."""

    sd: float
    lag1: float = 0.0
    process: float = 0.0
    block: int = 10
    """Rounds a process pair serves (0: one pair for the whole verdict)."""

    @property
    def name(self) -> str:
        parts = [f"SD {self.sd:.2f}"]
        if self.process:
            parts.append(f"blocks {100 * self.process:.1f} % / {self.block} rounds")
        if self.lag1:
            parts.append(f"AR(1) {self.lag1:.2f}")
        if len(parts) == 1:
            parts.append("independent")
        return ", ".join(parts)


class Clock:
    """The loop's clock: it moves only when a round is measured."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def fake_clock() -> Iterator[Clock]:
    """Run the loop on a :class:`Clock` (``time.monotonic`` as the rounds module sees it)."""
    clock = Clock()
    real = rounds_mod.time.monotonic
    rounds_mod.time.monotonic = clock  # type: ignore[assignment]
    try:
        yield clock
    finally:
        rounds_mod.time.monotonic = real  # type: ignore[assignment]


def _measurement(name: str, values: Sequence[float]) -> Measurement:
    samples = tuple(Sample(512, 512.0 / v) for v in values)
    told = Conditions(profile="sim", measured_s=PACE * len(values), probe_cpus="0-1")
    return Measurement(name, "sim", W, samples, told)


class SimulatedFeed(Feed):
    """Rounds of a :class:`Host` at a true log-ratio, each costing :data:`PACE` seconds."""

    def __init__(self, host: Host, truth: float, rng: np.random.Generator, clock: Clock) -> None:
        self.host, self.truth, self.rng, self.clock = host, truth, rng, clock
        self.values: list[list[float]] = [[], []]
        self.blocks = []
        self.coin = Coin(seed=int(rng.integers(2**32)))
        self.method = f"{PAIRED_METHOD} in process blocks of {host.block}"
        self._drift = 0.0
        self._offset = 0.0

    def take(self, index: int) -> tuple[float, ...] | None:
        self.clock.now += PACE
        self.first(index)
        h = self.host
        block = index // h.block if h.block else 0
        if not self.blocks or block != self.blocks[-1]:
            self._offset = float(self.rng.normal(0.0, h.process)) if h.process else 0.0
        self.blocks.append(block)
        shock = float(self.rng.normal(0.0, h.sd))
        if index == 0 or not h.lag1:
            self._drift = shock
        else:
            self._drift = h.lag1 * self._drift + math.sqrt(1 - h.lag1**2) * shock
        a = 100.0
        b = a * math.exp(self.truth + self._offset + self._drift)
        self.values[0].append(a)
        self.values[1].append(b)
        return (a, b)

    def measurements(self) -> tuple[Measurement, ...]:
        return (_measurement("a", self.values[0]), _measurement("b", self.values[1]))

    def sides(self) -> tuple[SideRounds, ...]:
        return (
            SideRounds("sim", "a", "sim", W.name, 0),
            SideRounds("sim", "b", "sim", W.name, 0),
        )


@dataclass
class SimulatedSource:
    """What :func:`decide_pair` asks of a source, for simulated rounds."""

    host: Host
    truth: float
    rng: np.random.Generator
    clock: Clock
    notices: list[str] = field(default_factory=list)

    def pair(self, profile: Any, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        return SimulatedFeed(self.host, self.truth, self.rng, self.clock)

    def notice(self, line: str) -> None:
        self.notices.append(line)

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        return []


@dataclass
class _Profile:
    name: str = "sim"


def _config(name: str) -> Configuration:
    return Configuration(name=name, profile="sim", flags=(), pinning=Pinning())


def verdict(
    host: Host,
    truth: float,
    rule: Rule,
    seed: int,
    *,
    plan: Plan | None = None,
    budget: float = BUDGET,
) -> Decided:
    """One verdict of *rule* on *host*'s rounds at the true ratio ``exp(truth)``, through the
    real loop (the default plan: the plugin's on a host not calibrated)."""
    with fake_clock() as clock:
        source = SimulatedSource(host, truth, np.random.default_rng(seed), clock)
        return decide_pair(
            source,  # type: ignore[arg-type]
            _Profile(),  # type: ignore[arg-type]
            rule,
            Side(_config("a"), W),
            Side(_config("b"), W),
            label="b / a",
            plan=plan or Plan(),  # the defaults: a host not calibrated
            budget=budget,
            busy_limit=1.0,
        )


# -- the cells -----------------------------------------------------------------------------------
def miss_rate(host: Host, runs: int, seed: int, truth: float = 0.0) -> float:
    """Share of *runs* verdicts whose interval excluded the true ratio at some look."""
    rule = Rule("claim", threshold=math.exp(truth), relation=">=")
    missed = 0
    for i in range(runs):
        missed += verdict(host, truth, rule, seed + i).verdict.outcome in ("holds", "fails")
    return missed / runs


def outcomes(host: Host, ratio: float, runs: int, seed: int) -> Counter[str]:
    """What the gate's change rule said over *runs* verdicts at a true *ratio*."""
    rule = Rule("change", margin=MARGIN)
    said: Counter[str] = Counter()
    for i in range(runs):
        said[str(verdict(host, math.log(ratio), rule, seed + i).verdict.outcome)] += 1
    return said


def aa_gates(host: Host, gates: int, seed: int, rows: int = GATE_ROWS) -> dict[str, float]:
    """Share of *gates* A/A gates of *rows* rows with any row slower or faster after Holm, and
    with any row Holm alone would have rejected (its note)."""
    rule = Rule("change", margin=MARGIN)
    plan = Plan(alpha=FAMILY_ALPHA / rows)
    false, leaning = 0, 0
    for g in range(gates):
        gate = []
        for r in range(rows):
            got = verdict(host, 0.0, rule, seed + g * rows + r, plan=plan)
            d = [math.log(y / x) for x, y in zip(*got.rounds, strict=True)]
            p_slower, p_faster = row_p_values(d, got.blocks, got.plan or plan, MARGIN)
            gate.append(
                GateRow(
                    f"r{r}",
                    W,
                    got.a,
                    got.b,
                    got.verdict,
                    p_slower=p_slower,
                    p_faster=p_faster,
                    log_ratios=tuple(d),
                    blocks=got.blocks,
                )
            )
        judged = holm(gate, FAMILY_ALPHA)
        false += any(r.verdict.outcome in ("slower", "faster") for r in judged)
        leaning += any(r.family for r in judged)
    return {"false": false / gates, "leaning": leaning / gates}


def creep_miss(host: Host, links: int, chains: int, seed: int) -> float:
    """Share of *chains* accepted chains of *links* gates whose chained interval missed the
    chain's true change (none: every build as fast as the last). Each link was gated on a day
    of its own, where the build pair's change read differently by a between-session term of
    :data:`LINK_TERM` (the day's rounds measure that day's change exactly as well as any)."""
    rng = np.random.default_rng(seed)
    rule = Rule("change", margin=MARGIN)
    missed = 0
    for c in range(chains):
        days = rng.normal(0.0, LINK_TERM, links)
        changes = []
        for j, t in enumerate(days):
            got = verdict(host, float(t), rule, seed + 1000 * c + j + 1)
            a, b = got.rounds
            plan = got.plan or Plan()
            iv = paired_interval(
                a,
                b,
                blocks=got.blocks or None,
                min_rel_spread=MIN_REL_SPREAD,
                dependence=plan.dependence,
            )
            changes.append(PairedChange(f"b{j}", math.log(iv.ratio), iv.se, iv.rounds))
        chained = judge_chain([(f"b{j + 1}", x) for j, x in enumerate(changes[:-1])], changes[-1])
        missed += not (chained.low <= 1.0 <= chained.high)
    return missed / chains


# -- the table -----------------------------------------------------------------------------------
def hosts(sds: Sequence[float] = (0.05, 0.09)) -> list[Host]:
    """The table's rows: per SD, independent rounds (a fresh pair every 10 rounds, no offset),
    process offsets of 1.5 % over 10 and over 20 rounds, and AR(1) 0.25."""
    out = []
    for sd in sds:
        out += [
            Host(sd),
            Host(sd, process=0.015, block=10),
            Host(sd, process=0.015, block=20),
            Host(sd, lag1=0.25),
        ]
    return out


def cell(job: tuple[str, Host, int, int]) -> dict[str, Any]:
    """One cell of the table (a job of the pool)."""
    kind, host, runs, seed = job
    began = time.process_time()
    got: dict[str, Any] = {"kind": kind, "host": asdict(host), "name": host.name, "runs": runs}
    if kind == "miss":
        got["rate"] = miss_rate(host, runs, seed)
    elif kind.startswith("ratio "):
        said = outcomes(host, float(kind.split()[1]), runs, seed)
        got["said"] = {k: v / runs for k, v in said.items()}
    elif kind == "aa-gates":
        got.update(aa_gates(host, runs, seed))
    elif kind.startswith("creep "):
        got["rate"] = creep_miss(host, int(kind.split()[1]), runs, seed)
    got["cpu_s"] = time.process_time() - began
    return got


KINDS = ("miss", "ratio 0.95", "ratio 0.90", "ratio 1.00", "aa-gates", "creep 3", "creep 10")


def jobs(runs: int, kinds: Sequence[str], sds: Sequence[float]) -> list[tuple[str, Host, int, int]]:
    """Every (kind, host) cell, seeded by its place; A/A gates count gates (20 rows each) and
    run only on the dependent hosts (blocks of 10, AR(1)); creep runs on independent rounds."""
    out = []
    for k, kind in enumerate(kinds):
        for h, host in enumerate(hosts(sds)):
            if kind == "aa-gates" and not ((host.process and host.block == 10) or host.lag1):
                continue
            if kind.startswith("creep") and (host.process or host.lag1):
                continue
            out.append((kind, host, runs, 1_000_000 * (k + 1) + 100_000 * h))
    return out


def table(cells: Sequence[dict[str, Any]]) -> str:
    """The markdown table: one row per host, a column per kind."""
    names = list(dict.fromkeys(c["name"] for c in cells))
    by = {(c["name"], c["kind"]): c for c in cells}
    head = [
        "rounds' log-ratios",
        "miss over all looks",
        "0.95: slower",
        "0.90: slower",
        "1.00: unchanged",
        "1.00: undecided",
        "20-row A/A: any slower/faster",
        "creep 3 / 10 links: miss",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"

    for name in names:
        said = {k: by.get((name, k), {}).get("said", {}) for k in KINDS if k.startswith("ratio")}
        aa = by.get((name, "aa-gates"))
        c3, c10 = by.get((name, "creep 3")), by.get((name, "creep 10"))
        row = [
            name,
            pct(by[(name, "miss")]["rate"]) if (name, "miss") in by else "-",
            pct(said["ratio 0.95"].get("slower", 0.0)) if said["ratio 0.95"] else "-",
            pct(said["ratio 0.90"].get("slower", 0.0)) if said["ratio 0.90"] else "-",
            pct(said["ratio 1.00"].get("unchanged", 0.0)) if said["ratio 1.00"] else "-",
            pct(said["ratio 1.00"].get("undecided", 0.0)) if said["ratio 1.00"] else "-",
            f"{pct(aa['false'])} (Holm leans {pct(aa['leaning'])})" if aa else "-",
            f"{pct(c3['rate'])} / {pct(c10['rate'])}" if c3 and c10 else "-",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=2000, help="seeded runs (or gates, or chains)")
    p.add_argument("--jobs", type=int, default=2, help="processes")
    p.add_argument("--kind", action="append", choices=KINDS, help="cells to run (default all)")
    p.add_argument("--sd", action="append", type=float, help="round log-SDs (0.05 and 0.09)")
    p.add_argument("--out", type=Path, help="write every cell as JSON here")
    args = p.parse_args(argv)
    todo = jobs(args.runs, args.kind or KINDS, args.sd or (0.05, 0.09))
    began = time.monotonic()
    print(
        f"{len(todo)} cells, {args.runs} runs each, {args.jobs} processes; "
        f"{PACE} s a round in a {BUDGET:g} s budget",
        file=sys.stderr,
    )
    Plan().nominal_alpha()  # the levels, simulated once
    cells: list[dict[str, Any]] = []
    with multiprocessing.Pool(args.jobs) as pool:
        for got in pool.imap_unordered(cell, todo):
            cells.append(got)
            print(f"  {got['kind']:<10} {got['name']:<40} {got['cpu_s']:.0f} s", file=sys.stderr)
    order = {(k, h.name): i for i, (k, h, _, _) in enumerate(todo)}
    cells.sort(key=lambda c: order[(c["kind"], c["name"])])
    print(table(cells))
    print(f"\n{time.monotonic() - began:.0f} s; {DEFAULT_DEPENDENCE.describe()} (the default)")
    if args.out:
        args.out.write_text(json.dumps(cells, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
