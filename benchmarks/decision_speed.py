"""How fast the decision loop decides, against the fixed-sample floor at the same error rates.

Every verdict here is :func:`pytest_moeperf.run.rounds.decide_pair`, the loop the fixture and
the gate run, with the plan a session gives it (a host not calibrated; or one whose terms are
known, as ``moeperf calibrate`` or its stored history would give them), its budget and its rule.
Only the rounds and the clock are stand-ins: a simulated host whose rounds are a true log-ratio
plus

- round noise of log-SD *sd*,
- a process pair's offset of log-SD *process*, drawn afresh whenever both servers restart,

each round costing *pace* seconds and each restart of both servers *restart* seconds (the
first start of a verdict is not counted: it is the same for every rule). Process blocks are
sized as the live feed sizes them (:func:`pytest_moeperf.measure.dependence.rounds_per_process`
with the plan's terms); restarts are setup, outside the budget, inside the wall time.

The **floor** beside each cell is the fixed-sample test at the same error rates (two-sided 95 %,
90 % power) with the host's terms known and its process blocks sized where the variance is and
what a restart costs (Kalibera and Jones, ISMM 2013): the fewest rounds, in blocks of
``ceil(sqrt((restart / pace) (sd / process)^2))``, whose interval's half-width at 1.96 standard
errors leaves the bound with 90 % power, and their wall time (the rounds, and a restart between
blocks).

    python benchmarks/decision_speed.py --adr --runs 200            # ADR-0042's suite
    python benchmarks/decision_speed.py --grid --runs 200           # the cells
    python benchmarks/decision_speed.py --adr --sd 0.05 --process 0.03

The ADR suite's verdicts are those of ``tests/perf/test_adr_0042.py``, their paces from the
record's own tok/s (``baselines/adr-0042.toml``: one sample of each side a round, pp2048 or
tg128), 120 s to restart a pair of servers of its 112 GB model, the ``adr-0042`` profile's
budget as ``moeperf.toml`` gives it (``--budget`` another).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from error_rates import Clock, _measurement, fake_clock

from pytest_moeperf.config.profiles import Configuration, Pinning, load_profiles
from pytest_moeperf.measure.dependence import Dependence, ProcessEvidence, rounds_per_process
from pytest_moeperf.measure.measurement import Measurement
from pytest_moeperf.measure.round import Round
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.run.feeds import MAX_AUTO_BLOCK, MAX_CALIBRATED_BLOCK
from pytest_moeperf.run.rounds import decide_pair
from pytest_moeperf.run.source import PAIRED_METHOD, Feed, Host, Side
from pytest_moeperf.store.record import VerdictSide
from pytest_moeperf.store.runstore import HISTORY_VERDICTS
from pytest_moeperf.verdicts.calibration import history_dependence
from pytest_moeperf.verdicts.sequential import Coin, Plan, Rule

W = Workload.parse("pp512")
Z_FLOOR = statistics.NormalDist().inv_cdf(0.975) + statistics.NormalDist().inv_cdf(0.9)


@dataclass(frozen=True)
class SimHost:
    """A simulated host: its round spread, process term, pace and restart cost."""

    sd: float
    process: float
    pace: float
    restart: float

    def block(self, plan: Plan) -> int:
        """The process block the live feed would choose for *plan* on this host."""
        spread, process = plan.block_terms()
        most = MAX_CALIBRATED_BLOCK if plan.dependence.calibrated else MAX_AUTO_BLOCK
        return rounds_per_process(self.restart, self.pace, spread, process, most=most)


class SimFeed(Feed):
    """Rounds of a :class:`SimHost` at a true log-ratio; a fresh process offset (and a restart
    of *restart* seconds of setup) every block."""

    def __init__(self, host: SimHost, truth: float, rng: np.random.Generator, clock: Clock) -> None:
        self.host, self.truth, self.rng, self.clock = host, truth, rng, clock
        self.values: list[list[float]] = [[], []]
        self._block: int | None = None
        self.block = 0
        self.process_block = 0
        self.coin = Coin(seed=int(rng.integers(2**32)))
        self.method = PAIRED_METHOD
        self.restarted = 0.0
        self._offset = 0.0

    def size_blocks(self, round_spread: float, process: float, *, calibrated: bool) -> None:
        most = MAX_CALIBRATED_BLOCK if calibrated else MAX_AUTO_BLOCK
        h = self.host
        self.block = rounds_per_process(h.restart, h.pace, round_spread, process, most=most)
        self.process_block = self.block
        self.method = f"{PAIRED_METHOD} in process blocks of {self.block}"

    def setup_seconds(self) -> float:
        return self.restarted

    def take(self, index: int) -> Round | None:
        h = self.host
        block = index // self.block if self.block else 0
        if block != self._block:
            if self._block is not None:  # both servers restarted (the first start not counted)
                self.clock.now += h.restart
                self.restarted += h.restart
            self._offset = float(self.rng.normal(0.0, h.process)) if h.process else 0.0
        self._block = block
        self.clock.now += h.pace
        first = self.coin.first(index)
        a = 100.0
        b = a * math.exp(self.truth + self._offset + float(self.rng.normal(0.0, h.sd)))
        places = ((len(self.values[0]),), (len(self.values[1]),))
        self.values[0].append(a)
        self.values[1].append(b)
        return Round((a, b), places, block=block, first=first)

    def measurements(self) -> tuple[Measurement, ...]:
        pace = self.host.pace
        return (_measurement("a", self.values[0], pace), _measurement("b", self.values[1], pace))

    def sides(self) -> tuple[VerdictSide, ...]:
        return (VerdictSide("sim", "a", "b1", W.name), VerdictSide("sim", "b", "b1", W.name))


class SimSource(Host):
    """Hands out the next :class:`SimFeed`; the host never moves and is never busy."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.next: tuple[SimHost, float, np.random.Generator] | None = None
        self.lines: list[str] = []

    def pair(self, profile: Any, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        assert self.next is not None
        host, truth, rng = self.next
        return SimFeed(host, truth, rng, self.clock)

    def measure(self, *args: Any, **kwargs: Any) -> Measurement:
        raise AssertionError("rounds only")

    def series(self, *args: Any, **kwargs: Any) -> Feed:
        raise AssertionError("rounds only")

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        return []

    def notice(self, line: str) -> None:
        self.lines.append(line)


@dataclass(frozen=True)
class SimProfile:
    """All the loop asks of a profile: to hand it back to the source."""

    name: str = "sim"


PROFILE: Any = SimProfile()
SIDE_A = Side(Configuration("a", "sim", (), Pinning()), W)
SIDE_B = Side(Configuration("b", "sim", (), Pinning()), W)


@dataclass(frozen=True)
class Verdict:
    """One verdict to decide: its rule and the true ratio ``b / a``."""

    name: str
    rule: Rule
    truth: float
    pace: float

    @property
    def bound(self) -> float:
        """The ratio the rule's decision point lies at (the one the truth is nearest)."""
        if self.rule.kind == "claim":
            return self.rule.threshold
        if self.rule.kind == "dead_end":
            return 1.0
        return 1.0 - self.rule.margin if self.truth < 1 else 1.0 + self.rule.margin

    @property
    def distance(self) -> float:
        """How far the truth lies beyond the bound, log."""
        return abs(math.log(self.truth / self.bound))


def floor(v: Verdict, host: SimHost) -> tuple[int, float]:
    """The fixed-sample floor: rounds and wall seconds of the test of one fixed size, the
    host's terms known, blocks sized by Kalibera and Jones, 95 % two-sided, 90 % power."""
    r = max(1, math.ceil(math.sqrt(host.restart / host.pace) * host.sd / max(host.process, 1e-9)))
    for n in range(2, 5000):
        sizes = [r] * (n // r) + ([n % r] if n % r else [])
        var = host.sd**2 / n + host.process**2 * sum(m * m for m in sizes) / n**2
        if v.distance >= Z_FLOOR * math.sqrt(var):
            return n, n * host.pace + (len(sizes) - 1) * host.restart
    return 5000, math.inf


def plan_for(known: Dependence | None, budget_rounds: int = 200) -> Plan:
    """The plan a session gives a verdict: its default looks and round cap, this host's
    dependence (not calibrated unless *known*)."""
    return Plan(max_rounds=budget_rounds, dependence=known or Dependence())


@dataclass
class Outcome:
    decided: bool
    outcome: str
    rounds: int
    wall: float
    block: int
    evidence: ProcessEvidence | None


def run_one(
    source: SimSource, clock: Clock, v: Verdict, host: SimHost, plan: Plan, budget: float,
    seed: int,
) -> Outcome:  # fmt: skip
    source.next = (host, math.log(v.truth), np.random.default_rng(seed))
    began = clock.now
    with fake_clock(clock):
        got = decide_pair(
            source, PROFILE, v.rule, SIDE_A, SIDE_B, label=v.name, plan=plan, budget=budget,
            busy_limit=1.0,
        )  # fmt: skip
    return Outcome(
        got.verdict.decided,
        got.verdict.outcome,
        len(got.values[0]),
        clock.now - began,
        got.plan.block or 0 if got.plan else 0,
        got.record("sim", v.name).evidence,
    )


def summary(v: Verdict, host: SimHost, got: Sequence[Outcome]) -> dict[str, Any]:
    """A verdict's runs: how often it decided, its rounds and wall time, and its floor."""
    runs = len(got)
    rounds = sorted(o.rounds for o in got)
    walls = sorted(o.wall for o in got)
    n_floor, wall_floor = floor(v, host)
    said: dict[str, int] = {}
    for o in got:
        said[o.outcome] = said.get(o.outcome, 0) + 1
    p90 = min(runs - 1, math.ceil(0.9 * runs) - 1)
    return {
        "verdict": v.name,
        "truth": v.truth,
        "bound": v.bound,
        "decided": sum(o.decided for o in got) / runs,
        "said": said,
        "rounds_median": statistics.median(rounds),
        "rounds_p90": rounds[p90],
        "wall_median": statistics.median(walls),
        "wall_p90": walls[p90],
        "floor_rounds": n_floor,
        "floor_wall": wall_floor,
        "block": statistics.median(o.block for o in got),
    }


def cell(
    v: Verdict, host: SimHost, known: Dependence | None, budget: float, runs: int, seed: int
) -> dict[str, Any]:
    """One verdict, *runs* times, each on a host whose terms are *known* or not."""
    clock = Clock()
    source = SimSource(clock)
    plan = plan_for(known)
    got = [run_one(source, clock, v, host, plan, budget, seed + i) for i in range(runs)]
    return summary(v, host, got)


def suite(
    verdicts: Sequence[Verdict], hosts: Sequence[SimHost], mode: str, budget: float, runs: int,
    known: Dependence,
) -> list[dict[str, Any]]:  # fmt: skip
    """The verdicts in order, as one session runs them, *runs* times: on a host whose terms
    are ``known``, one ``not calibrated`` (each verdict's own blocks), one whose earlier
    verdicts' blocks are its ``history`` (the session pools them as it pools a host's stored
    verdicts: :func:`history_dependence`), one whose store also holds the verdicts of the
    host's one session before (``stored``: the session's second run on the host; a first,
    uncounted session stores them), or one whose store holds every session before, the newest
    :data:`HISTORY_VERDICTS` verdicts as ``RunStore.recent_verdicts`` gives them (``kept``: a
    host this suite runs on every day, its sessions 2 to *runs* + 1)."""
    clock = Clock()
    source = SimSource(clock)
    got: list[list[Outcome]] = [[] for _ in verdicts]
    stores = mode in ("stored", "kept")  # the host's store keeps its sessions' verdicts
    kept: deque[ProcessEvidence | None] = deque(maxlen=HISTORY_VERDICTS)
    for r in range(-1 if stores else 0, runs):
        pooled = sum((e for e in kept if e is not None), ProcessEvidence())  # from its store
        if mode == "stored":
            kept.clear()
        for i, (v, host) in enumerate(zip(verdicts, hosts, strict=True)):
            dep = known if mode == "known" else None
            if mode in ("history", "stored", "kept"):
                dep = history_dependence(pooled)
            o = run_one(source, clock, v, host, plan_for(dep), budget, 1_000_000 * (i + 1) + r)
            if r >= 0:
                got[i].append(o)
            if o.evidence is not None:
                pooled += o.evidence
            if stores:
                kept.append(o.evidence)
    return [summary(v, h, g) for v, h, g in zip(verdicts, hosts, got, strict=True)]


# -- ADR-0042's suite on a simulated ADR host ------------------------------------------------
ADR = {  # configuration: (pp2048 tok/s, tg128 tok/s), baselines/adr-0042.toml
    "b11053": (176.9, 11.48),
    "mmap": (189.0, 15.92),
    "cache-2gib": (187.5, 4.69),
    "cache-4gib": (189.9, 7.87),
    "cache-6gib": (189.3, 10.19),
    "lm-none-node0": (389.9, 11.67),
    "lm-none-node1": (391.4, 15.71),
    "near": (412.7, 13.31),
    "far": (413.6, 13.47),
}


def _round(a: str, b: str, metric: str) -> tuple[float, float]:
    """The true ratio b / a and the seconds of one sample of each."""
    i, tokens = (0, 2048) if metric == "pp2048" else (1, 128)
    return ADR[b][i] / ADR[a][i], tokens / ADR[a][i] + tokens / ADR[b][i]


def adr_suite() -> list[Verdict]:
    def v(name: str, a: str, b: str, metric: str, rule: Rule) -> Verdict:
        truth, pace = _round(a, b, metric)
        return Verdict(name, rule, truth, pace)

    dead = Rule("dead_end", margin=0.05)
    at_least = claim(">=", 2.0)
    return [
        v("dead end: cache 2 GiB, decode", "mmap", "cache-2gib", "tg128", dead),
        v("dead end: cache 4 GiB", "mmap", "cache-4gib", "tg128", dead),
        v("dead end: cache 6 GiB", "mmap", "cache-6gib", "tg128", dead),
        v("dead end: cache 2.5 GiB GPU0, near", "lm-none-node1", "near", "tg128", dead),
        v("dead end: cache 2.5 GiB GPU0, far", "lm-none-node1", "far", "tg128", dead),
        v("cache 6 GiB <= 0.70 x mmap", "mmap", "cache-6gib", "tg128", claim("<=", 0.70)),
        v("-lm none node 0 >= 2.0 x mmap, prefill", "mmap", "lm-none-node0", "pp2048", at_least),
        v("-lm none node 1 >= 2.0 x mmap, prefill", "mmap", "lm-none-node1", "pp2048", at_least),
        v("b11713 >= 1.30 x b11053, decode", "b11053", "mmap", "tg128", claim(">=", 1.30)),
        v("b11713 >= 1.03 x b11053, prefill", "b11053", "mmap", "pp2048", claim(">=", 1.03)),
        v("node 1 >= node 0, decode", "lm-none-node0", "lm-none-node1", "tg128", claim(">=", 1)),
    ]


def claim(relation: str, threshold: float) -> Rule:
    return Rule("claim", threshold=threshold, relation=relation)  # type: ignore[arg-type]


def _minutes(s: float) -> str:
    return "-" if not math.isfinite(s) else f"{s / 60:.1f}"


def adr_table(cells: Sequence[dict[str, Any]]) -> str:
    head = (
        "| verdict | truth | bound | decided | rounds (median, p90) | block | wall min "
        "(median, p90) | floor rounds | floor min | wall / floor |"
    )
    lines = [head, "|" + "---|" * 10]
    total = total_floor = 0.0
    for c in cells:
        total += c["wall_median"]
        total_floor += c["floor_wall"]
        lines.append(
            f"| {c['verdict']} | {c['truth']:.3f} | {c['bound']:g} | {100 * c['decided']:.0f} % "
            f"| {c['rounds_median']:.0f}, {c['rounds_p90']} | {c['block']:.0f} "
            f"| {_minutes(c['wall_median'])}, {_minutes(c['wall_p90'])} | {c['floor_rounds']} "
            f"| {_minutes(c['floor_wall'])} | {c['wall_median'] / c['floor_wall']:.1f} |"
        )
    lines.append(
        f"| **the suite** | | | | | | **{_minutes(total)}** | | **{_minutes(total_floor)}** "
        f"| {total / total_floor:.2f} |"
    )
    return "\n".join(lines)


MODES = {
    "known": "terms known (calibrated, 40 df)",
    "stored": "not calibrated, its stored session before and this run its history",
    "kept": "not calibrated, every stored session before (newest 200 verdicts) its history",
    "history": "not calibrated, this run's earlier verdicts its history",
    "not calibrated": "not calibrated, no history (--moeperf-no-history)",
}


def run_adr(args: argparse.Namespace) -> int:
    budget = args.budget if args.budget is not None else adr_budget()
    verdicts = adr_suite()
    hosts = [SimHost(args.sd, args.process, v.pace, args.restart) for v in verdicts]
    known = Dependence(args.process, 0.0, 40.0, args.sd)
    for mode in args.mode or MODES:
        began = time.monotonic()
        cells = suite(verdicts, hosts, mode, budget, args.runs, known)
        print(
            f"\nADR-0042 suite, round SD {100 * args.sd:g} %, process term "
            f"{100 * args.process:g} %, restart {args.restart:g} s a pair, budget {budget:g} s, "
            f"{MODES[mode]}, {args.runs} runs ({time.monotonic() - began:.0f} s)\n"
        )
        print(adr_table(cells), flush=True)
    return 0


# -- the cells ---------------------------------------------------------------------------------
def grid() -> list[tuple[Verdict, SimHost]]:
    """Claims ``b / a >= 1`` at truths 1.03 to 3, at round SD 2-9 %, process terms 0-5 %, paces
    and restarts of this project's VM (1.6 s, 2 s) and ADR-0042's host (20 s, 120 s)."""
    out = []
    for pace, restart in ((1.6, 2.0), (20.0, 120.0)):
        for sd in (0.02, 0.05, 0.09):
            for process in (0.0, 0.015, 0.03, 0.05):
                for truth in (1.03, 1.06, 1.10, 1.30, 3.0):
                    v = Verdict(f"{truth:g}x", claim(">=", 1.0), truth, pace)
                    out.append((v, SimHost(sd, process, pace, restart)))
    return out


def run_grid(args: argparse.Namespace) -> int:
    print(
        "| pace s, restart s | round SD | process | truth | decided | rounds (median, p90) | "
        "floor rounds | median / floor | wall s (median, p90) | floor wall s |"
    )
    print("|" + "---|" * 10)
    for i, (v, host) in enumerate(grid()):
        budget = max(args.budget_rounds * host.pace, 180.0)
        c = cell(v, host, None, budget, args.runs, 7_000_000 + 1000 * i)
        print(
            f"| {host.pace:g}, {host.restart:g} | {100 * host.sd:g} % | {100 * host.process:g} % "
            f"| {v.truth:g} | {100 * c['decided']:.0f} % | {c['rounds_median']:.0f}, "
            f"{c['rounds_p90']} | {c['floor_rounds']} | "
            f"{c['rounds_median'] / c['floor_rounds']:.2f} | {c['wall_median']:.0f}, "
            f"{c['wall_p90']:.0f} | {c['floor_wall']:.0f} |",
            flush=True,
        )
    return 0


def adr_budget() -> float:
    """The ``adr-0042`` profile's budget, as the project's ``moeperf.toml`` gives it."""
    profile = load_profiles(Path(__file__).parent.parent / "moeperf.toml")["adr-0042"]
    if profile.budget is None:
        sys.exit('moeperf.toml: the adr-0042 profile\'s budget is "auto": give --budget seconds')
    return profile.budget


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--adr", action="store_true", help="ADR-0042's suite on a simulated ADR host")
    p.add_argument("--grid", action="store_true", help="the cells")
    p.add_argument("--runs", type=int, default=200, help="seeded runs a verdict")
    p.add_argument("--sd", type=float, default=0.03, help="ADR host: round SD (log)")
    p.add_argument("--process", type=float, default=0.015, help="ADR host: process term (log)")
    p.add_argument("--restart", type=float, default=120.0, help="ADR host: seconds a restart")
    p.add_argument(
        "--budget",
        type=float,
        help="ADR suite: seconds a verdict (default: the adr-0042 profile's, moeperf.toml)",
    )
    p.add_argument(
        "--budget-rounds", type=int, default=100, help="grid: budget in rounds at the pace"
    )
    p.add_argument("--mode", action="append", choices=list(MODES), help="ADR suite: hosts")
    args = p.parse_args(argv)
    if not (args.adr or args.grid):
        p.error("give --adr, --grid or both")
    if args.adr:
        run_adr(args)
    if args.grid:
        run_grid(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
