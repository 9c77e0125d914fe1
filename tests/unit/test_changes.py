"""Change points of a series: PELT over the runs' log medians, each run weighed by its own
interval and the series' between-session term; a change is at least the margin, lies between two
builds (or within one), and is the host's when its probe stepped with it."""

from __future__ import annotations

import math
import random
import shlex

import numpy as np
import pytest

from pytest_moeperf.verdicts.changes import (
    SESSION_FLOOR,
    Point,
    bisect_command,
    change_points,
    session_term,
)


def _series(
    step: float,
    *,
    at: int = 30,
    n: int = 60,
    sd: float = 0.02,
    seed: int = 1,
    per_build: int = 5,
    probe_step: float = 0.0,
    builds: bool = True,
    probe_sd: float = 0.01,
) -> list[Point]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        moved = i >= at
        value = 1000 * (1 + step if moved else 1) * math.exp(rng.gauss(0, sd))
        probe = 10.0 * (1 + probe_step if moved else 1) * math.exp(rng.gauss(0, probe_sd))
        build = f"b{10423 + i // per_build}" if builds else "b11434"
        out.append(Point(value, 0.01, build, f"day {i}", probe, f"run{i}"))
    return out


def test_a_step_between_two_builds_is_found_there_with_its_bisect():
    points = _series(-0.20)
    (change,) = change_points(points, 0.05)
    assert change.index == 30 and (change.before, change.after) == ("b10428", "b10429")
    assert change.low < 0.80 < change.high and change.ratio == pytest.approx(0.8, rel=0.03)
    assert change.bisectable and not change.host
    assert bisect_command(
        change, profile="embedded", configuration="mmap", workload="tg64", margin=0.05
    ) == (
        "moeperf bisect --profile embedded -c mmap --metric tg64 --good 10428 --bad 10429 "
        "--margin 0.05"
    )
    assert "-20." in change.describe() and "between b10428 and b10429" in change.describe()
    # a name a shell would split or run is quoted, so that the command pastes as it reads
    pasted = bisect_command(
        change, profile="p", configuration="mmap; rm -rf ~", workload="tg64 @ d512", margin=0.05
    )
    assert pasted is not None
    assert shlex.split(pasted)[4:8] == ["-c", "mmap; rm -rf ~", "--metric", "tg64 @ d512"]


def test_a_series_with_no_step_has_no_change():
    assert change_points(_series(0.0, sd=0.03), 0.05) == []


def test_a_step_smaller_than_the_margin_is_never_called():
    """A clear 3 % step on runs that agree to 0.2 %: real, but below the 5 % margin."""
    assert change_points(_series(-0.03, sd=0.002), 0.05) == []
    (change,) = change_points(_series(-0.03, sd=0.002), 0.02)
    assert change.index == 30


def test_the_step_is_put_on_the_build_boundary_that_explains_it():
    """Builds change every 10 runs; the step happens at run 30, a boundary. At 5 % noise the
    best split of the runs alone lands a run off for these seeds (29 or 31, inside a build);
    the boundary between b10425 and b10426 fits nearly as well, and a build's change can lie
    nowhere else."""
    for seed in (2, 12, 29, 32, 35):
        (change,) = change_points(_series(-0.15, sd=0.05, per_build=10, seed=seed), 0.05)
        assert change.index == 30 and (change.before, change.after) == ("b10425", "b10426"), seed


def test_a_step_within_one_build_goes_to_no_bisect():
    (change,) = change_points(_series(-0.25, builds=False), 0.05)
    assert not change.between_builds and not change.bisectable
    assert "within b11434" in change.describe()
    assert bisect_command(change, profile="p", configuration="c", workload="w", margin=0.05) is None


def test_a_step_the_hosts_probe_made_too_is_the_hosts():
    """The tiny model's decode read 7,000 and 15,000 tok/s minutes apart on this kind of VM,
    in blocks of runs: the probe stepped with it, so no build is to blame."""
    (change,) = change_points(_series(-0.5, probe_step=-0.45), 0.05)
    assert change.host and not change.bisectable and "the host's change" in change.describe()
    (own,) = change_points(_series(-0.5, probe_step=0.0), 0.05)
    assert not own.host
    # as a co-tenant on one of two CPUs did it on a real host: the probe's summed compute -28 %,
    # barrier-bound prefill -49 % (not in proportion: a quarter of the step is enough)
    (hogged,) = change_points(_series(-0.49, probe_step=-0.28), 0.05)
    assert hogged.host


def test_a_probe_step_within_its_own_noise_or_too_small_is_not_the_hosts():
    # a -10 % probe step under a -30 % step, six runs each side: from a steady probe it is the
    # host's; from a probe that spreads 40 % run to run it is not told from its noise
    short = {"probe_step": -0.1, "n": 12, "at": 6, "per_build": 6}
    (steady,) = change_points(_series(-0.3, probe_sd=0.01, **short), 0.05)  # type: ignore[arg-type]
    assert steady.host
    (noisy,) = change_points(_series(-0.3, probe_sd=0.4, **short), 0.05)  # type: ignore[arg-type]
    assert not noisy.host and noisy.bisectable
    # a steady probe that moved 5 % under a 49 % step: too small to explain it
    (small,) = change_points(_series(-0.49, probe_step=-0.05), 0.05)
    assert not small.host


def test_a_speed_up_is_a_change_without_a_bisect():
    (change,) = change_points(_series(+0.3), 0.05)
    assert change.ratio > 1.2
    assert bisect_command(change, profile="p", configuration="c", workload="w", margin=0.05) is None


def test_the_session_term_is_the_run_to_run_spread_and_never_below_the_floor():
    rng = np.random.default_rng(3)
    y = rng.normal(0, 0.08, 400)
    assert session_term(y, np.full(400, 0.01)) == pytest.approx(0.08, rel=0.15)
    assert session_term(np.zeros(10), np.zeros(10)) == SESSION_FLOOR


def test_too_few_runs_have_no_change():
    assert change_points(_series(-0.5, n=5), 0.05) == []


def test_a_long_series_is_split_coarsely_then_put_on_its_build_boundary():
    """1,000 runs, builds every 7 runs (not a multiple of the coarse split of 5 runs): the step
    at the build starting at run 497 is still found between its two builds."""
    (change,) = change_points(_series(-0.2, at=497, n=1000, per_build=7), 0.05)
    assert change.index == 497 and (change.before, change.after) == ("b10493", "b10494")
