"""The error rates the verdicts state are the ones the code keeps, by seeded simulation of the
statistic each look computes (the trimmed t interval of the per-round log-ratios, Yuen's
standard error, the 1 % floor of spread), over every look a budget reaches:

- the interval misses the true ratio at some look at most 5.5 % of the time, with independent
  noise and with per-sample AR(1) noise (phi 0.5 and 0.9) under the coin's round order;
- a true change inside the margin (-3 %) fails a gate at most 2.5 % of the time;
- a gate of 20 A/A rows, its family held by Holm, fails (any row slower) at most 5 % of the
  time.

The per-round spread is this project's 2-core VM's: a log-ratio SD of 0.09 a round."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_moeperf.measure.stats import log_sigma, paired_interval
from pytest_moeperf.measure.student import t_quantile, trimmed_t_rows
from pytest_moeperf.verdicts.levels import direction_p
from pytest_moeperf.verdicts.sequential import Plan

RUNS = 3000
SD = 0.09
REACH = Plan(first_look=6, max_rounds=200).within(70)
"""The looks a 180 s budget reaches on this VM (55 to 70 rounds of pp512 and tg64)."""


def rounds(rng: np.random.Generator, runs: int, n: int, phi: float, order: str) -> np.ndarray:
    """Per-round log-ratios of *runs* A/A verdicts: per-sample AR(1) noise (each round two
    samples in a row), the side that goes first thrown by a coin (or alternating)."""
    sigma = SD / math.sqrt(2)
    e = rng.standard_normal((runs, 2 * n)) * sigma * math.sqrt(1 - phi * phi)
    x = np.empty((runs, 2 * n))
    x[:, 0] = rng.standard_normal(runs) * sigma
    for i in range(1, 2 * n):
        x[:, i] = phi * x[:, i - 1] + e[:, i]
    if order == "coin":
        sign = rng.choice([-1.0, 1.0], size=(runs, n))
    else:
        sign = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)[None, :]
    return sign * (x[:, 1::2] - x[:, 0::2])


def intervals(d: np.ndarray, plan: Plan, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The log-space interval each run's first *n* rounds give at a look of *plan*: what
    :func:`paired_interval` computes, for many runs at once."""
    mean, se, df = trimmed_t_rows(d[:, :n], plan.trim)
    se = np.maximum(se, log_sigma(0.01) / math.sqrt(n))
    half = t_quantile(1 - plan.nominal_alpha() / 2, df) * se
    return mean - half, mean + half


def test_the_vectorized_interval_is_the_one_the_code_computes():
    d = rounds(np.random.default_rng(1), 20, REACH.max_rounds, 0.5, "coin")
    for n in (6, 13, 70):
        low, high = intervals(d, REACH, n)
        for i in range(len(d)):
            a = [100.0] * n
            b = [100.0 * math.exp(v) for v in d[i, :n]]
            iv = paired_interval(a, b, alpha=REACH.nominal_alpha(), trim=REACH.trim)
            assert math.log(iv.low) == pytest.approx(low[i], abs=1e-9)
            assert math.log(iv.high) == pytest.approx(high[i], abs=1e-9)


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9])
def test_over_every_look_the_interval_misses_the_truth_at_most_5_5_percent(phi):
    d = rounds(np.random.default_rng(int(10 * phi) + 3), RUNS, REACH.max_rounds, phi, "coin")
    missed = np.zeros(RUNS, dtype=bool)
    for n in REACH.looks:
        low, high = intervals(d, REACH, n)
        missed |= (low > 0) | (high < 0)
    print(f"phi {phi}: the interval missed at some look in {100 * missed.mean():.2f} % of {RUNS}")
    assert missed.mean() <= 0.055, f"missed in {100 * missed.mean():.1f} % of {RUNS} runs"


def test_a_plain_interval_at_every_look_or_an_alternating_order_would_not_hold_it():
    """What the design avoids: a plain 95 % interval at each look misses several times as
    often; alternating A B / B A under per-sample autocorrelation makes the rounds'
    log-ratios correlated and the interval too narrow."""
    d = rounds(np.random.default_rng(5), RUNS, REACH.max_rounds, 0.0, "coin")
    missed = np.zeros(RUNS, dtype=bool)
    for n in REACH.looks:
        mean, se, df = trimmed_t_rows(d[:, :n], REACH.trim)
        missed |= np.abs(mean) > t_quantile(0.975, df) * se
    assert missed.mean() >= 0.15
    d = rounds(np.random.default_rng(6), RUNS, REACH.max_rounds, 0.5, "alternate")
    missed = np.zeros(RUNS, dtype=bool)
    for n in REACH.looks:
        low, high = intervals(d, REACH, n)
        missed |= (low > 0) | (high < 0)
    assert missed.mean() >= 0.065


def gate_outcomes(d: np.ndarray, plan: Plan, margin: float = 0.05) -> np.ndarray:
    """Each run's outcome under the change rule, looking on *plan*'s schedule until decided:
    -1 slower, +1 faster, 0 anything else (small changes, unchanged, undecided)."""
    lo, hi = math.log(1 - margin), math.log(1 + margin)
    outcome = np.zeros(len(d), dtype=int)
    open_ = np.ones(len(d), dtype=bool)
    for n in plan.looks:
        low, high = intervals(d, plan, n)
        slower, faster = open_ & (high < lo), open_ & (low > hi)
        within = open_ & (low >= lo) & (high <= hi)
        outcome[slower], outcome[faster] = -1, 1
        open_ &= ~(slower | faster | within)
    return outcome


def test_a_change_inside_the_margin_fails_the_gate_at_most_2_5_percent():
    d = rounds(np.random.default_rng(7), RUNS, REACH.max_rounds, 0.0, "coin") + math.log(0.97)
    slower = (gate_outcomes(d, REACH) == -1).mean()
    print(f"-3 %: called slower in {100 * slower:.2f} % of {RUNS} gates")
    assert slower <= 0.025, f"-3 % called slower in {100 * slower:.1f} % of {RUNS} gates"


def test_twenty_aa_rows_fail_a_gate_at_most_5_percent_with_holm():
    """A gate of 20 A/A rows: each row judged at 5 % / 20 over its looks, then Holm's
    step-down over the rows' sequential p-values (the observed ones taken over every look, so
    more rows are rejected here than a gate would: this errs against the design)."""
    gates, k = 1000, 20
    plan = REACH.within(REACH.max_rounds)
    row_plan = Plan(first_look=6, max_rounds=200, alpha=0.05 / k).within(REACH.max_rounds)
    d = rounds(np.random.default_rng(8), gates * k, plan.max_rounds, 0.0, "coin")
    decided = gate_outcomes(d, row_plan).reshape(gates, k)
    floor = log_sigma(0.01)
    p_slow = direction_p(d, row_plan.looks, 0.95, True, floor=floor).reshape(gates, k)
    p_fast = direction_p(d, row_plan.looks, 1.05, False, floor=floor).reshape(gates, k)
    levels = 0.05 / (k - np.arange(k))

    def holm_any(p: np.ndarray) -> np.ndarray:
        ordered = np.sort(p, axis=1)
        return ordered[:, 0] <= levels[0]  # step-down rejects something only if the first is

    false_fail = (decided == -1).any(axis=1) | holm_any(p_slow)
    false_faster = (decided == 1).any(axis=1) | holm_any(p_fast)
    print(
        f"20 A/A rows: a false FAIL in {100 * false_fail.mean():.2f} %, a false faster in "
        f"{100 * false_faster.mean():.2f} % of {gates} gates"
    )
    assert false_fail.mean() <= 0.05, f"a false FAIL in {100 * false_fail.mean():.1f} % of gates"
    assert false_faster.mean() <= 0.05
    assert ((decided == -1) & (p_slow > levels[0])).sum() == 0  # decided slower: Holm agrees


def test_holm_decides_an_undecided_row_its_family_level_allows():
    from dataclasses import replace

    from pytest_moeperf.measure.measurement import Measurement
    from pytest_moeperf.measure.workload import Workload
    from pytest_moeperf.verdicts.gate import GateRow, holm
    from pytest_moeperf.verdicts.judge import Verdict

    w = Workload.parse("pp512")
    m = Measurement("c", "b", w, ())
    undecided = Verdict("undecided", 0.93, 0.90, 0.96, 1.0, relation="~", margin=0.05)
    rows = [
        GateRow("a", w, m, m, undecided, p_slower=0.004),  # 0.004 <= 0.05 / 10 ... step 1
        GateRow("b", w, m, m, undecided, p_slower=0.0052),  # <= 0.05 / 9: decided by Holm
        GateRow("c", w, m, m, undecided, p_slower=0.2),
        *[GateRow(f"r{i}", w, m, m, undecided) for i in range(7)],
    ]
    out = holm(rows, 0.05)
    assert [r.verdict.outcome for r in out[:3]] == ["slower", "slower", "undecided"]
    assert "by Holm across 10 rows" in out[1].family
    busy = replace(undecided, reason="host 40 % busy with other work")
    assert holm([replace(rows[0], verdict=busy)], 0.05)[0].verdict.outcome == "undecided"
