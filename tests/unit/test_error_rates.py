"""The error rates the verdicts state are the ones the code keeps on a host whose rounds are not
independent: a seeded subset of ``benchmarks/error_rates.py``, through the same code (the real
decision loop, :func:`~pytest_moeperf.run.rounds.decide_pair`, on a simulated source and a
fake clock at 2.5 s a round in the default 180 s budget; the gate's p-values and Holm; the
chained creep interval). The simulated hosts are the ones a shared host shows: a process
pair's offset of 1.5 % drawn afresh every 10 or 20 rounds, round-level AR(1) drift at 0.25,
a round spread of 0.05 or 0.09 (this project's 2-core VM), and a build pair's change that
moves 1 % between sessions. Nothing about them is told to the code: the plan is the plugin's
on a host not calibrated.

Each rate is measured over a few hundred seeded runs (the script runs 2,000 a cell, and its
table must meet the bounds outright). A seeded subset is a sample of the rate: each assertion
allows the bound its sampling error at this many runs (one-sided 99 %, :func:`_allowed`), so a
rate the code truly keeps never fails here by the luck of a seed, and a rate well above the
bound always does. On the code before the dependence-robust error (``cf87daf``, run with
adapters for the new names) 7 of these 11 failed: the interval missed 8.8 % over blocks of 20
rounds, 8.8 % under AR(1) 0.25 and 9.6 % over blocks of 10 at SD 0.05; at -5 % under AR(1)
"slower" came out 4.7 %; chains of 3 and 10 links missed 10.7 and 12.0 %; Holm decided a row
whose own interval was undecided."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from pytest_moeperf.measure.measurement import Measurement
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.verdicts.gate import GateRow, holm
from pytest_moeperf.verdicts.judge import Verdict


def _load_script() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "error_rates.py"
    spec = importlib.util.spec_from_file_location("error_rates", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sim = _load_script()
Host = sim.Host

BLOCKS_20 = Host(0.09, process=0.015, block=20)
BLOCKS_10 = Host(0.09, process=0.015, block=10)
DRIFT = Host(0.09, lag1=0.25)


def _rate(said: Counter[str], *outcomes: str) -> float:
    return sum(said[o] for o in outcomes) / sum(said.values())


def _allowed(bound: float, runs: int) -> float:
    """The most a seeded sample of *runs* may show of a rate the code keeps at *bound*: the
    bound plus 2.33 of its binomial standard errors."""
    return bound + 2.33 * math.sqrt(bound * (1 - bound) / runs)


@pytest.mark.parametrize(
    "host, seed",
    [(BLOCKS_20, 31), (DRIFT, 32), (Host(0.05, process=0.015, block=10), 33)],
    ids=lambda x: x.name if isinstance(x, Host) else str(x),
)
def test_over_every_look_the_interval_misses_the_truth_at_most_5_5_percent(host, seed):
    runs = 500
    missed = sim.miss_rate(host, runs, 1_000 * seed)
    print(f"{host.name}: the interval missed the truth at some look in {100 * missed:.1f} %")
    assert missed <= _allowed(0.055, runs), f"{host.name}: missed {100 * missed:.1f} % of {runs}"


@pytest.mark.parametrize("host, seed", [(BLOCKS_20, 41), (DRIFT, 42)], ids=["blocks", "drift"])
def test_at_the_margins_edge_slower_stays_at_or_below_2_5_percent(host, seed):
    runs = 1000
    said = sim.outcomes(host, 0.95, runs, 1_000 * seed)
    print(f"{host.name} at -5 %: {dict(said)}")
    assert _rate(said, "slower") <= _allowed(0.025, runs), said
    assert _rate(said, "faster", "small-faster") == 0, said


def test_power_is_kept_on_independent_rounds():
    """The wider error costs nothing a quiet host needs: at SD 0.05, -10 % is slower at least
    80 % of the time and no change is unchanged at least 90 %."""
    host = Host(0.05)
    slower = sim.outcomes(host, 0.90, 150, 51_000)
    same = sim.outcomes(host, 1.00, 150, 52_000)
    print(f"-10 %: {dict(slower)}; no change: {dict(same)}")
    assert _rate(slower, "slower") >= 0.8, slower
    assert _rate(same, "unchanged") >= 0.9, same


def test_twenty_row_aa_gates_call_no_row_slower_or_faster():
    """A/A gates of 20 rows each under process blocks: every row through the loop at 5 % / 20,
    its p-values with the interval's error, then Holm: any false slower or faster at most 5 %
    of gates."""
    gates = 40
    got = sim.aa_gates(BLOCKS_10, gates, 61_000)
    print(f"20-row A/A gates: {got}")
    assert got["false"] <= _allowed(0.05, gates), got


@pytest.mark.parametrize("links, chains", [(3, 300), (10, 100)])
def test_a_chain_of_accepted_gates_covers_its_true_change(links, chains):
    """Chains of builds each as fast as the last, every link gated on a day where the pair's
    change read 1 % differently: the chained interval misses no change at most 5.5 % of the
    time."""
    missed = sim.creep_miss(Host(0.05), links, chains, 71_000 + links)
    print(f"chains of {links}: missed {100 * missed:.1f} %")
    assert missed <= _allowed(0.055, chains), f"missed {100 * missed:.1f} % of {chains} chains"


def test_holm_never_decides_a_row_its_own_interval_left_undecided():
    """Holm's step-down over the rows' p-values may say how an undecided row leans; it never
    decides it (the interval holds a decision point). Before, a row at p 0.0052 <= 0.05 / 9
    was turned "slower" although its interval held the margin's edge."""
    w = Workload.parse("pp512")
    m = Measurement("c", "b", w, ())
    undecided = Verdict("undecided", 0.93, 0.90, 0.96, 1.0, relation="~", margin=0.05)
    slower = Verdict("slower", 0.90, 0.88, 0.92, 1.0, relation="~", margin=0.05)
    rows = [
        GateRow("a", w, m, m, slower, p_slower=0.001),
        GateRow("b", w, m, m, undecided, p_slower=0.0052),
        GateRow("c", w, m, m, undecided, p_slower=0.2),
        *[GateRow(f"r{i}", w, m, m, undecided) for i in range(7)],
    ]
    out = holm(rows, 0.05)
    assert [r.verdict.outcome for r in out[:3]] == ["slower", "undecided", "undecided"]
    assert out[1].family.startswith("leans slower: Holm across 10 rows")
    assert out[0].family == "" and out[2].family == ""


def test_the_loop_is_what_the_script_drives():
    """The simulated verdicts are the loop's own: their plan is cut at the rounds the budget
    reaches at 2.5 s a round, and a verdict ends with the budget after about 72 rounds."""
    got = sim.verdict(BLOCKS_20, 0.0, sim.Rule("claim", threshold=0.5), 7)
    assert got.verdict.outcome == "holds" and got.plan is not None
    spent = sim.verdict(BLOCKS_20, math.log(0.95), sim.Rule("change"), 8)
    assert spent.verdict.outcome == "undecided" and len(spent.rounds[0]) in range(70, 75)
    assert spent.blocks[:21] == (0,) * 20 + (1,)
