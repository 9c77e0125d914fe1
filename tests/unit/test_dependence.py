"""The rounds' dependence: the standard error that carries a process term and drift, the level
calibrated at a host's lag-1, what ``moeperf calibrate`` measures of both and stores with the
host, and how a calibrated host says what a verdict can resolve before it measures."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest
from _fakes import Clock, FakeFeed, FakeSource, Profile, W, config

from pytest_moeperf.measure.dependence import (
    DEFAULT_DEPENDENCE,
    NO_PROCESS_TERM,
    Dependence,
    block_excess,
    robust_rows,
)
from pytest_moeperf.measure.stats import paired_interval
from pytest_moeperf.run import rounds as rounds_mod
from pytest_moeperf.run.rounds import decide_pair
from pytest_moeperf.run.source import Side
from pytest_moeperf.store.accept import accept_noise
from pytest_moeperf.store.accepted import dependence_for, noise_for
from pytest_moeperf.store.baselines import load_baselines
from pytest_moeperf.verdicts.calibration import (
    NoiseFigure,
    Resolution,
    host_dependence,
    noise_figure,
)
from pytest_moeperf.verdicts.levels import Design, lag1_grid, per_look_alpha
from pytest_moeperf.verdicts.sequential import Plan, Rule

FP = {"cpu_model": "test cpu", "cpus": 2}


def test_a_dependence_is_checked_and_only_a_positive_lag_widens():
    assert Dependence(lag1=0.25).ar_factor == pytest.approx(1.25 / 0.75)
    assert Dependence(lag1=-0.3).ar_factor == 1.0
    assert not DEFAULT_DEPENDENCE.calibrated and DEFAULT_DEPENDENCE.lag1 == 0.0
    assert DEFAULT_DEPENDENCE.describe() == (
        "process term from each verdict's own process blocks, lag-1 +0.00"
    )
    calibrated = Dependence(process=0.015, process_df=40, round_spread=0.05)
    assert calibrated.calibrated and calibrated.ratio == pytest.approx(0.3)
    assert calibrated.describe() == "process term 1.5 % (calibrated, 40 df), lag-1 +0.00"
    bads = (
        {"process": -0.01},
        {"process": math.nan},
        {"lag1": 1.0},
        {"lag1": -1.5},
        {"process_df": -1},
        {"round_spread": math.inf},
    )
    for bad in bads:
        with pytest.raises(ValueError):
            Dependence(**bad)  # type: ignore[arg-type]


def test_the_error_of_many_rows_is_the_error_of_each():
    rng = np.random.default_rng(1)
    d = rng.normal(0, 0.05, (5, 23))
    blocks = [i // 7 for i in range(23)]
    many = robust_rows(d, blocks=blocks, dependence=DEFAULT_DEPENDENCE, floor=0.01)
    for i, row in enumerate(d):
        one = robust_rows(row, blocks=blocks, dependence=DEFAULT_DEPENDENCE, floor=0.01)
        assert one.mean[0] == pytest.approx(many.mean[i]) and one.se[0] == pytest.approx(many.se[i])
    iv = paired_interval([100.0] * 23, [100 * math.exp(x) for x in d[0]], blocks=blocks)
    assert iv.se == pytest.approx(float(many.se[0]))  # the interval's error is this one


def test_drift_between_rounds_widens_the_error_and_independent_rounds_keep_yuens():
    """Strongly drifting rounds (AR(1) 0.8) get a Newey-West ratio well above 1; independent
    ones stay near Yuen's error (the ratio never narrows it)."""
    rng = np.random.default_rng(2)
    e = rng.normal(0, 1, (400, 60))
    drift = np.empty_like(e)
    drift[:, 0] = e[:, 0]
    for i in range(1, 60):
        drift[:, i] = 0.8 * drift[:, i - 1] + 0.6 * e[:, i]
    assert np.median(robust_rows(drift, dependence=NO_PROCESS_TERM).inflation) > 2.5
    plain = robust_rows(e, dependence=NO_PROCESS_TERM).inflation
    assert plain.min() >= 1.0 - 1e-9 and np.median(plain) < 1.3
    # the host's calibrated lag-1 is a floor under the data's own ratio
    calibrated = Dependence(process=0.0, lag1=0.5, process_df=math.inf)
    floor = robust_rows(e, dependence=calibrated).inflation
    assert floor.min() >= 3.0 - 1e-9


def test_the_process_term_is_what_the_blocks_do_not_hold_already():
    """On a host whose term is known (calibrated, taken as exact here): one pair for all
    rounds carries the whole term; a fresh pair every round none of it (their spread holds
    it); blocks of 10, a quarter of it over 4 blocks."""
    d = np.array([[0.01 * (-1) ** i for i in range(40)]])  # no drift, no blocks shown
    term = Dependence(process=0.02, lag1=0.0, process_df=math.inf)
    one = robust_rows(d, dependence=term).se[0] ** 2
    fresh = robust_rows(d, blocks=range(40), dependence=term).se[0] ** 2
    tens = robust_rows(d, blocks=[i // 10 for i in range(40)], dependence=term).se[0] ** 2
    yuen = robust_rows(d, blocks=range(40), dependence=NO_PROCESS_TERM).se[0] ** 2
    assert fresh == pytest.approx(yuen)
    assert one - yuen == pytest.approx(0.02**2, rel=1e-6)
    assert tens - yuen == pytest.approx(0.02**2 / 4, rel=0.3)
    assert block_excess([0.1, 0.1, -0.1, -0.1], [0, 0, 1, 1]) == (pytest.approx(0.02), 1)
    assert block_excess([0.1, 0.2, 0.3], [0, 1, 2]) is None  # blocks of one round
    # a last block of one round is weighed as what it is, not a reason to show nothing
    assert block_excess([0.1, 0.1, -0.1, -0.1, 0.3], [0, 0, 1, 1, 2]) is not None


def test_the_level_is_calibrated_at_the_hosts_lag1():
    looks = Plan(first_look=6, max_rounds=40).looks
    assert lag1_grid(-0.2) == 0.0 and lag1_grid(0.0) == 0.0
    assert lag1_grid(0.12) == pytest.approx(0.15) and lag1_grid(0.15) == pytest.approx(0.15)
    assert lag1_grid(0.97) == 0.9
    independent = per_look_alpha(Design(looks), 0.05)
    assert 0.005 < independent < 0.05
    assert per_look_alpha(Design(looks, lag1=0.3), 0.05) != independent


def _gates(rng: random.Random, offsets: float) -> tuple[list[list[float]], list[list[int]]]:
    gates, blocks = [], []
    for _ in range(6):
        d, b = [], []
        for j in range(8):
            shift, x = rng.gauss(0, offsets), 0.0
            for _ in range(10):
                x = 0.3 * x + rng.gauss(0, 0.04)
                d.append(shift + x)
                b.append(j)
        gates.append(d)
        blocks.append(b)
    return gates, blocks


def test_calibrate_measures_the_process_term_and_lag1_within_blocks():
    rng = random.Random(4)
    gates, blocks = _gates(rng, 0.03)
    f = noise_figure(
        ["unchanged"] * 6, gates, [0.04], build="b1", date="d", budget=180.0,
        blocks=blocks, seconds=[240.0] * 6,
    )  # fmt: skip
    assert f.process is not None and 0.015 < f.process < 0.05
    assert 0.1 < f.lag1 < 0.5  # within blocks: the offsets are not counted as drift
    assert f.pace == pytest.approx(3.0)
    assert "process term" in f.describe() and f.to_dict()["process"] == f.process
    quiet = noise_figure(["unchanged"], gates[:1], [0.04], build="b", date="d", budget=1.0)
    assert quiet.process is None and "process" not in quiet.to_dict()  # one pair: not measured
    assert NoiseFigure.from_dict(f.to_dict()) == f
    assert NoiseFigure.from_dict(quiet.to_dict()) == quiet
    # the host's dependence: its noisiest figure's terms; the default term where unmeasured
    dep = host_dependence([f, quiet])
    assert dep.process == f.process and dep.lag1 == pytest.approx(max(f.lag1, quiet.lag1))
    assert host_dependence([quiet]).process == DEFAULT_DEPENDENCE.process


@pytest.mark.parametrize("block", [4, 5, 10, 20])
@pytest.mark.parametrize("rho", [0.0, 0.3, 0.5])
def test_the_lag1_is_not_pulled_down_by_the_blocks_own_means(rho, block):
    """Rounds of a known lag-1 (AR(1), drifting across blocks, each block its own process
    offset), calibrated 200 times: the figures' mean lag-1 is the host's within 0.05 (it came
    within 0.012 at every case here). Read around each block's mean without the correction the
    mean was -0.25 / -0.14 / -0.07 at blocks of 4 and -0.09 / 0.14 / 0.28 at blocks of 10; the
    first correction tried (Marriott and Pope's, for one series) read 0.45 and 0.70 for 0.3
    and 0.5 at blocks of 4."""
    rng = random.Random(block)
    got = []
    for _ in range(200):
        gates, blocks = [], []
        for _ in range(4):
            x, d, b = 0.0, [], []
            for i in range(40):
                if i % block == 0:
                    offset = rng.gauss(0, 0.01)
                x = rho * x + math.sqrt(1 - rho * rho) * rng.gauss(0, 1)
                d.append(offset + 0.05 * x)
                b.append(i // block)
            gates.append(d)
            blocks.append(b)
        f = noise_figure(["unchanged"] * 4, gates, [0.04], build="b", date="d", budget=1.0,
                         blocks=blocks)  # fmt: skip
        got.append(f.lag1)
    assert sum(got) / len(got) == pytest.approx(rho, abs=0.05)


def test_a_calibrated_host_is_found_by_its_identity_before_any_probe(tmp_path):
    path = tmp_path / "p.toml"
    figure = NoiseFigure("b1", "d", 4, 220, 0.061, 0.2, 0.042, 180.0, process=0.004, pace=2.5)
    noisy = NoiseFigure("b1", "d", 4, 220, 0.09, 0.1, 0.06, 180.0, process=0.01, pace=3.0)
    accept_noise(path, "p", FP, {"mmap.pp512": figure, "mmap.tg64": noisy})
    bf = load_baselines(path)
    here = {**FP, "probes": {}}  # no server started yet: no probe figures
    # the largest term, with the fewest df (a figure of before they were kept: one a gate)
    assert dependence_for(bf, here) == Dependence(0.01, 0.2, process_df=4, round_spread=0.09)
    assert noise_for(bf, here, ["mmap.pp512"]) == figure
    assert noise_for(bf, here, ["mmap.pp512", "mmap.tg64"]) == noisy
    assert noise_for(bf, here, ["lm-none.pp512"]) is None
    other = {"cpu_model": "other cpu", "cpus": 2}
    assert dependence_for(bf, other) == DEFAULT_DEPENDENCE and noise_for(bf, other, ["x"]) is None
    assert dependence_for(None, here) == DEFAULT_DEPENDENCE


def test_the_resolution_says_the_rounds_a_margin_needs_and_the_mde_the_budget_reaches():
    figure = NoiseFigure("b1", "d", 4, 220, 0.05, 0.0, 0.04, 180.0, pace=2.5)
    res = Resolution(figure, NO_PROCESS_TERM, 0.0068)
    n = res.rounds_for(0.05)
    assert res.mde(n) <= 0.05 < res.mde(n - 1)
    assert res.mde(4 * n) == pytest.approx(math.expm1(math.log1p(res.mde(n)) / 2), rel=0.05)
    # a process term and drift cost rounds
    assert Resolution(figure, Dependence(process=0.015, lag1=0.25), 0.0068).rounds_for(0.05) > n
    line = res.describe("mmap.pp512", 0.05, 180.0)
    assert line.startswith("mmap.pp512: this host's calibrated noise (round spread 5.0 %")
    assert f"resolves 5 % in about {n} rounds (about {n * 2.5:.0f} s at 2.5 s a round)" in line
    assert "the budget of 180 s reaches about 72: MDE about" in line
    short = res.describe("mmap.pp512", 0.05, 10.0)
    seconds = math.ceil(n * 2.5 / 10) * 10
    assert short.endswith(
        f"wider than the margin: expect undecided (a budget of {seconds} s reaches it)"
    )
    with pytest.raises(ValueError, match="margin"):
        res.rounds_for(0.0)


def test_a_calibrated_verdict_says_what_it_can_resolve_before_it_measures(monkeypatch):
    """The line comes before the first round; an automatic budget buys the rounds the host's
    noise needs for the margin instead of a fixed 40."""
    clock = Clock()
    monkeypatch.setattr(rounds_mod.time, "monotonic", clock)
    figure = NoiseFigure("b1", "d", 4, 220, 0.09, 0.0, 0.06, 180.0, pace=6.0)
    plan = Plan(dependence=NO_PROCESS_TERM, noise=figure)
    source = FakeSource(FakeFeed(1.0, clock, step=6.0))
    got = decide_pair(
        source,  # type: ignore[arg-type]
        Profile(),  # type: ignore[arg-type]
        Rule("change"),
        Side(config("c"), W),
        Side(config("c"), W, "b2"),
        label="c.pp512",
        plan=plan,
        budget=None,
        busy_limit=1.0,
    )
    # the loop's plan knows the feed's process blocks (every round a fresh pair)
    needed = replace(plan, block=1).resolution().rounds_for(0.05)  # type: ignore[union-attr]
    said = source.notices
    assert said[0].startswith("c.pp512: this host's calibrated noise") and needed > 40
    assert said[0].endswith("the automatic budget buys them")
    assert got.resolution == said[0]  # what the gate keeps in its notes
    assert f"an automatic budget of {needed * 6.0:.0f} s ({needed} rounds" in said[1]
    assert needed * 6.0 > 180 and got.seconds <= needed * 6.0 + 6.0


def test_history_of_blocks_too_far_apart_for_a_host_term_stands_for_nothing() -> None:
    """A bisect's gates of binaries slowed on purpose, on a busy host, pooled a process term of
    log-SD 1.3: the session's next gate raised ValueError building its Dependence from it.
    Such a history stands for nothing; each verdict's own blocks estimate the term."""
    from pytest_moeperf.measure.dependence import ProcessEvidence
    from pytest_moeperf.verdicts.calibration import HISTORY_MIN_DF, history_dependence

    rng = random.Random(3)
    quiet = wild = ProcessEvidence()
    for _ in range(HISTORY_MIN_DF):
        blocks = [b for b in range(3) for _ in range(4)]
        offsets = [rng.gauss(0, 0.02) for _ in range(3)]
        quiet += ProcessEvidence.of([offsets[b] + rng.gauss(0, 0.03) for b in blocks], blocks)
        jumps = [rng.choice((-2.0, 0.0, 2.0)) for _ in range(3)]
        wild += ProcessEvidence.of([jumps[b] + rng.gauss(0, 0.03) for b in blocks], blocks)
    assert wild.excess / wild.between_df >= 1  # the premise: a term of log-SD 1 or more
    assert history_dependence(wild) is None
    found = history_dependence(quiet)
    assert found is not None and found.process < 0.1
