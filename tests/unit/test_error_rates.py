"""The error rates the verdicts state are the ones the code keeps on hosts louder than any
default: a seeded subset of ``benchmarks/error_rates.py``, through the same code (``run_gate``
with a real session, the decision loop, the rows' p-values and Holm, the chained creep
interval) on a simulated source and a clock at 2.5 or 3 s a round in the default 180 s budget.
The simulated hosts are not calibrated and nothing about them is told to the code: process
terms of 3 and 5 % (twice and more the old default), blocks of 20 and 30 rounds (few of them
in a budget), round AR(1) of 0.5, a pace that leaves a last block of one round, and a build
pair's change that moves 2 % between sessions.

Each rate is measured over a few hundred seeded runs (the script runs 2,000 a cell, and its
table must meet the bounds outright). A seeded subset is a sample of the rate: each assertion
allows the bound its sampling error at this many runs (one-sided 99 %, :func:`_allowed`), so a
rate the code truly keeps never fails here by the luck of a seed, and a rate well above the
bound always does. On the code before the blocks' own evidence (``c0fe444``, run with this
file and this script) 10 of these 12 failed: over all looks the interval missed 12.5 % at a
3 % term in blocks of 20, 47.5 % at 5 % in blocks of 30, 28.8 % at 5 % in blocks of 10 and
10.5 % under AR(1) 0.5 (its final interval 5.8, 28.3, 16.0 and 4.0 %); at -5 % "slower" came
out 6.2 and 5.7 %; Holm left 4 of 19 and 3 of 13 rows unrejected that their own interval had
decided slower (at the budget's last look, which the p-values skipped); chains of 3 links at a
2 % day term missed 11.3 %; and the loop's last look was not one of its plan's."""

from __future__ import annotations

import math

import pytest
from _scripts import load_script

sim = load_script("error_rates")
Host = sim.Host

LOUD_20 = Host(0.05, process=0.03, block=20)
LOUD_30 = Host(0.02, process=0.05, block=30)
LOUD_10 = Host(0.05, process=0.05, block=10)
DRIFT = Host(0.05, lag1=0.5, block=5)


def _allowed(bound: float, runs: int) -> float:
    """The most a seeded sample of *runs* may show of a rate the code keeps at *bound*: the
    bound plus 2.33 of its binomial standard errors."""
    return bound + 2.33 * math.sqrt(bound * (1 - bound) / runs)


@pytest.fixture(scope="module")
def slow() -> object:
    """The simulated gate at 3 s a round: the budget runs out after round 60, and every block
    length here would leave a last block of one round."""
    return sim.Bench(3.0)


@pytest.fixture(scope="module")
def quick() -> object:
    """The simulated gate at 2.5 s a round: the budget runs out after round 72."""
    return sim.Bench(2.5)


@pytest.mark.parametrize(
    "host, seed",
    [(LOUD_20, 31), (LOUD_30, 32), (LOUD_10, 33), (DRIFT, 34)],
    ids=lambda x: x.name if isinstance(x, Host) else str(x),
)
def test_over_every_look_and_at_the_last_the_interval_keeps_its_rate(slow, host, seed):
    runs = 400
    got = sim.coverage(slow, host, runs, 1_000 * seed)
    print(f"{host.name}: {got}")
    assert got["miss"] <= _allowed(0.055, runs), f"{host.name}: over all looks {got}"
    assert got["final_miss"] <= _allowed(0.05, runs), f"{host.name}: the final interval {got}"


@pytest.mark.parametrize("host, seed", [(LOUD_20, 41), (DRIFT, 42)], ids=["loud", "drift"])
def test_at_the_margins_edge_slower_stays_at_or_below_2_5_percent(quick, host, seed):
    runs = 600
    said = sim.one_row(quick, host, 0.95, runs, 1_000 * seed)["said"]
    print(f"{host.name} at -5 %: {said}")
    assert said.get("slower", 0.0) <= _allowed(0.025, runs), said
    assert said.get("faster", 0.0) + said.get("small-faster", 0.0) == 0, said


def test_power_where_the_host_is_quiet(quick):
    """Independent rounds (a fresh pair every 10 rounds, no process term), SD 0.05, not
    calibrated: -10 % is slower at least 90 % of the time and no change unchanged at least 95 %
    (the blocks' own t pays its degrees of freedom, not a term the host does not have)."""
    host = Host(0.05, block=10)
    slower = sim.one_row(quick, host, 0.90, 150, 51_000)
    same = sim.one_row(quick, host, 1.00, 150, 52_000)
    print(f"-10 %: {slower}; no change: {same}")
    assert slower["said"].get("slower", 0.0) >= 0.9, slower
    assert same["said"].get("unchanged", 0.0) >= 0.95, same


def test_twenty_row_aa_gates_call_no_row_slower_or_faster():
    """A/A gates of 20 rows on a host whose term is twice the old default: any false slower or
    faster at most 5 % of gates."""
    gates = 40
    got = sim.family_gates(sim.Bench(3.0, rows=sim.GATE_ROWS), LOUD_20, 1.0, gates, 61_000)
    print(f"20-row A/A gates: {got}")
    assert got["false"] <= _allowed(0.05, gates), got


@pytest.mark.parametrize("pace", [2.5, 3.0])
def test_holm_rejects_every_row_its_own_interval_decided(pace):
    """20-row gates at a true -7 %, where some rows decide slower at some look (at 3 s a round
    some at the budget's end) and most do not: every row its interval decided is among those
    Holm's step-down over the rows' sequential p-values rejects, over many seeds (before, the
    p-values skipped the budget's last look and a row decided there went unrejected)."""
    bench = sim.Bench(pace, rows=sim.GATE_ROWS)
    got = sim.family_gates(bench, Host(0.05, block=10), 0.93, 20, 62_000)
    print(f"20-row gates at -7 %: {got}")
    assert got["decided"] >= 5, got  # the premise: rows were decided
    assert got["decided_not_rejected"] == 0, got


def test_a_chain_of_accepted_gates_covers_its_true_change_at_a_2_percent_day_term(quick):
    """Chains of builds each as fast as the last, every link gated on a day where the pair's
    change read 2 % differently (twice the old prior): the chained interval misses no change at
    most 5.5 % of the time."""
    chains = 150
    missed = sim.creep_miss(quick, Host(0.05, block=10), 3, chains, 0.02, 71_003)
    print(f"chains of 3: missed {100 * missed:.1f} %")
    assert missed <= _allowed(0.055, chains), f"missed {100 * missed:.1f} % of {chains} chains"


def test_the_last_look_is_a_look_of_the_plan_it_was_judged_by(slow):
    """At 3 s a round the budget runs out after round 60: the loop's plan ends there, in whole
    blocks, and every look the row took (its last included) is one the level was calibrated for
    and the p-values read."""
    seen = slow.looks(LOUD_20, 0.0, 7)
    rounds = [v.rounds for v in seen]
    # blocks of 20: early looks at 4 and the blocks' ends; its third block is the budget's end
    assert rounds == [4, 20, 40, 60]
    seen = slow.looks(Host(0.05, block=10), 0.0, 8)
    assert [v.rounds for v in seen] == [4, 10, 20, 30, 40, 50, 60]
    (row,) = slow.gate(Host(0.05, block=10), math.log(0.95), 9)
    assert row.verdict.rounds == 60 and row.verdict.outcome == "undecided"
    assert row.blocks[:21] == (0,) * 10 + (1,) * 10 + (2,)
