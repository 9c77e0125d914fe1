"""Change points of a series: where one (host, profile, configuration, workload) steps, over
its runs, by more than the margin, between which two builds, and whether the host did it.

The detector is PELT (``ruptures``) over the runs' log medians with a weighted L2 cost: each
run weighs by the inverse of its own variance (its median's, from its samples) plus the host's
between-session term, so a noisy run moves a segment's mean less. The between-session term is
the series' own: the spread of its run-to-run differences (robust, a median absolute
deviation), never below :data:`SESSION_FLOOR`. Its penalty (:data:`PENALTY` x log n, in units
of that variance) keeps a series with no change from showing one in more than 5 % of series of
this kind of VM's noise (``benchmarks/change_points.py`` measures it); a segment boundary is
then called a change only when the step is at least the margin and its interval, widened for
the drift between neighbouring runs, leaves out no change.

A step the host's own probe made at the same run (its memory bandwidth or compute moved as
much, the same way) is the host's: shown as such, never handed to a bisect. A step between
two runs of one build is no build's either.
"""

from __future__ import annotations

import functools
import itertools
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..llama.build import label_number
from ..measure.stats import MEDIAN_SE, bounded_exp

SESSION_FLOOR = 0.02
"""The least between-session term (log SD) a series is weighed with: a series of agreeing runs
still moves by a few per cent between sessions on any shared host."""
PENALTY = 4.5
"""PELT's penalty, x log n, in units of a run's variance (chosen by simulation: at most 5 % of
series of 100 drifting runs with no change show one)."""
MIN_RUNS = 3
"""The fewest runs a segment holds (a change needs runs on both sides to stand on)."""
Z = 1.959964
"""The change's interval: 95 %, two-sided."""
EXACT_RUNS = 200
"""Up to this many runs PELT considers a split after every run; a longer series (years of
nightly runs) is split every ``n / EXACT_RUNS`` runs, which keeps a series under a second."""
HOST_SHARE = 0.25
"""A probe step at the same run (within one), the same way, of at least this share of the
series' step and beyond the probe's own run-to-run spread, makes the change the host's. Not
half: a co-tenant on one of two CPUs cost the probe's summed compute 28 % and barrier-bound
prefill 49 % on this kind of VM (docs/guide/dashboard.md, "A host's own change")."""
PROBE_FLOOR = 0.01
"""The least run-to-run spread (log SD) a probe is judged with."""


@dataclass(frozen=True)
class Point:
    """One run's value of a series: its median and that median's own log SE, its build and
    date, the host's probe figure at that run (``None``: not probed), and the run's key."""

    median: float
    log_se: float
    build: str
    date: str = ""
    probe: float | None = None
    run: str = ""


@dataclass(frozen=True)
class ChangePoint:
    """A step of a series at run *index* (the first run after it)."""

    index: int
    before: str
    """The build of the last run before the step."""
    after: str
    """The build of the first run after it."""
    ratio: float
    """After / before (weighted means of the two segments)."""
    low: float
    high: float
    host: bool = False
    """The host's probe made the same step at the same run: the host's change, not a build's."""
    date: str = ""

    @property
    def between_builds(self) -> bool:
        return self.before != self.after

    @property
    def bisectable(self) -> bool:
        """A build's change: between two builds, and not the host's."""
        return self.between_builds and not self.host

    def describe(self) -> str:
        pct = 100 * (self.ratio - 1)
        where = (
            f"between {self.before} and {self.after}"
            if self.between_builds
            else f"within {self.before}"
        )
        whose = "; the host's probe moved with it: the host's change" if self.host else ""
        return (
            f"{pct:+.1f} % [{100 * (self.low - 1):+.1f}, {100 * (self.high - 1):+.1f}] "
            f"{where} (run {self.index + 1}, {self.date or 'undated'}){whose}"
        )


class WeightedL2:
    """The weighted sum of squares of a segment about its weighted mean (``signal`` columns:
    value, weight), from cumulative sums: O(1) a segment; PELT's cost (:func:`_pelt_cost`)."""

    model = "weighted-l2"
    min_size = MIN_RUNS

    def fit(self, signal: np.ndarray) -> WeightedL2:
        self.signal = signal  # ruptures reads its length
        y, w = signal[:, 0], signal[:, 1]
        self._w = np.concatenate([[0.0], np.cumsum(w)])
        self._wy = np.concatenate([[0.0], np.cumsum(w * y)])
        self._wyy = np.concatenate([[0.0], np.cumsum(w * y * y)])
        return self

    def error(self, start: int, end: int) -> float:
        w = self._w[end] - self._w[start]
        wy = self._wy[end] - self._wy[start]
        return float(self._wyy[end] - self._wyy[start] - wy * wy / w)

    def weight(self, start: int, end: int) -> float:
        """The segment's summed weight (its mean's variance is the inverse)."""
        return float(self._w[end] - self._w[start])

    def mean(self, start: int, end: int) -> float:
        """The segment's weighted mean."""
        return float(self._wy[end] - self._wy[start]) / self.weight(start, end)


def robust_sd(deviations: np.ndarray) -> float:
    """The SD of values from their *deviations* (each from its centre): 1.4826 x the median
    absolute deviation."""
    return 1.4826 * float(np.median(np.abs(deviations)))


def session_term(values: np.ndarray, log_se: np.ndarray) -> float:
    """The series' between-session term (log SD): the robust spread of its run-to-run
    differences, less the runs' own variance, at least :data:`SESSION_FLOOR`."""
    if len(values) < 3:
        return SESSION_FLOOR
    diffs = np.diff(values)
    spread = robust_sd(diffs - np.median(diffs)) / math.sqrt(2)
    own = float(np.median(log_se**2))
    return max(math.sqrt(max(spread**2 - own, 0.0)), SESSION_FLOOR)


def _drift_factor(residuals: np.ndarray) -> float:
    """How much neighbouring runs' drift widens a mean's SE: sqrt((1 + r) / (1 - r)) of the
    residuals' lag-1 correlation r (0 and below: 1)."""
    if len(residuals) < 4 or float(np.var(residuals)) == 0.0:
        return 1.0
    r = float(np.corrcoef(residuals[:-1], residuals[1:])[0, 1])
    r = min(max(r, 0.0), 0.9)
    return math.sqrt((1 + r) / (1 - r))


def change_points(
    points: Sequence[Point], margin: float, *, penalty: float = PENALTY
) -> list[ChangePoint]:
    """The changes of the series *points* (oldest first): segment boundaries PELT finds that
    step by at least *margin* (relative) with an interval leaving out no change, each moved to
    the boundary between two builds that explains it as well (a build's change can lie nowhere
    else)."""
    n = len(points)
    if n < 2 * MIN_RUNS:
        return []
    y = np.log([p.median for p in points])
    se = np.array([p.log_se for p in points])
    tau = session_term(y, se)
    w = 1.0 / (se**2 + tau**2)
    ends = _segments(y, w, penalty * math.log(n))
    # again, with the drift the first segments leave: the runs' spread about their segments
    # and its lag-1 (neighbouring runs drift together: a mean is worth fewer runs)
    resid = y - _fitted(y, w, ends)
    tau = max(math.sqrt(max(float(np.var(resid)) - float(np.median(se**2)), 0.0)), tau)
    inflate = _drift_factor(resid)
    w = 1.0 / (se**2 + tau**2) / inflate**2
    ends = _segments(y, w, penalty * math.log(n))
    cost = WeightedL2().fit(np.column_stack([y, w]))
    bounds = [0, *_placed(points, cost, ends), n]
    probes = _probe_series(points)
    found = []
    for i, k in enumerate(bounds[1:-1]):
        a, b = bounds[i], bounds[i + 2]
        step = cost.mean(k, b) - cost.mean(a, k)
        half = Z * math.sqrt(1 / cost.weight(a, k) + 1 / cost.weight(k, b))
        if abs(step) < math.log1p(margin) or abs(step) <= half:
            continue
        found.append(
            ChangePoint(
                index=k,
                before=points[k - 1].build,
                after=points[k].build,
                ratio=math.exp(step),
                low=bounded_exp(step - half),
                high=bounded_exp(step + half),
                host=_host_moved(probes, k, step, a, b),
                date=points[k].date,
            )
        )
    return found


def _segments(y: np.ndarray, w: np.ndarray, pen: float) -> list[int]:
    """PELT's segment ends (the last is ``len(y)``) under the weighted L2 cost; a series of
    more than :data:`EXACT_RUNS` runs is split only every ``n / EXACT_RUNS`` runs (the split
    is then put on its build boundary, or left within that many runs of where it lies)."""
    import ruptures as rpt  # type: ignore[import-untyped]

    jump = max(1, math.ceil(len(y) / EXACT_RUNS))
    algo = rpt.Pelt(custom_cost=_pelt_cost()(), min_size=MIN_RUNS, jump=jump)
    return [int(e) for e in algo.fit(np.column_stack([y, w])).predict(pen=pen)]


@functools.cache
def _pelt_cost() -> type[WeightedL2]:
    """:class:`WeightedL2` as a ruptures cost (a ``BaseCost``, which PELT requires). ruptures is
    imported here, when change points are first computed: with scipy it takes about 0.6 s, which
    every ``moeperf`` verb paid at start when this module imported it."""
    from ruptures.base import BaseCost  # type: ignore[import-untyped]

    class Cost(WeightedL2, BaseCost):  # type: ignore[misc]
        pass

    return Cost


def _fitted(y: np.ndarray, w: np.ndarray, ends: Sequence[int]) -> np.ndarray:
    """Each run's segment mean."""
    cost = WeightedL2().fit(np.column_stack([y, w]))
    out = np.empty_like(y)
    for a, b in itertools.pairwise([0, *ends]):
        out[a:b] = cost.mean(a, b)
    return out


def _placed(points: Sequence[Point], cost: WeightedL2, ends: Sequence[int]) -> list[int]:
    """PELT's splits each put on its build boundary (:func:`_at_build_boundary`), in order,
    those that would leave a segment shorter than :data:`MIN_RUNS` dropped (a coarse split of a
    long series can put two splits around one step)."""
    bounds = [0, *ends]
    placed = sorted(
        {
            _at_build_boundary(points, cost, bounds[i], k, bounds[i + 2])
            for i, k in enumerate(ends[:-1])
        }
    )
    kept: list[int] = []
    for k in placed:
        if k - (kept[-1] if kept else 0) >= MIN_RUNS and len(points) - k >= MIN_RUNS:
            kept.append(k)
    return kept


def _at_build_boundary(points: Sequence[Point], cost: WeightedL2, a: int, k: int, b: int) -> int:
    """Where between runs *a* and *b* the step at *k* lies: the boundary between two builds
    that splits them best, when it fits nearly as well as *k* (within a chi-square of one
    degree of freedom at 95 %, :data:`Z` squared); else *k* (a step within a build)."""
    best = cost.error(a, k) + cost.error(k, b)
    candidates = [
        j for j in range(a + MIN_RUNS, b - MIN_RUNS + 1) if points[j - 1].build != points[j].build
    ]
    if not candidates:
        return k
    j = min(candidates, key=lambda j: cost.error(a, j) + cost.error(j, b))
    return j if cost.error(a, j) + cost.error(j, b) - best <= Z * Z else k


def _probe_series(points: Sequence[Point]) -> np.ndarray | None:
    values = [p.probe for p in points]
    if any(v is None or v <= 0 for v in values):
        return None
    return np.log(np.array(values, dtype=float))


def _host_moved(probes: np.ndarray | None, k: int, step: float, a: int, b: int) -> bool:
    """Whether the probe stepped at run *k* (or a run beside it) the same way as *step*, by at
    least :data:`HOST_SHARE` of it and beyond its own spread: its segments' medians compared,
    their difference's interval (the probe's robust spread about each segment) leaving out no
    move."""
    if probes is None:
        return False
    for at in (k - 1, k, k + 1):
        if a + 1 < at < b - 1:
            before, after = probes[a:at], probes[at:b]
            moved = float(np.median(after) - np.median(before))
            resid = np.concatenate([before - np.median(before), after - np.median(after)])
            spread = max(robust_sd(resid), PROBE_FLOOR)
            se = MEDIAN_SE * spread * math.sqrt(1 / len(before) + 1 / len(after))
            same_way = moved * step > 0 and abs(moved) >= HOST_SHARE * abs(step)
            if same_way and abs(moved) > Z * se:
                return True
    return False


def bisect_command(
    change: ChangePoint, *, profile: str, configuration: str, workload: str, margin: float
) -> str | None:
    """The ``moeperf bisect`` that finds the first bad build of *change* (a slowdown between
    two published builds); ``None`` for the host's change, one within a build, or a speed-up."""
    good, bad = (label_number(b) for b in (change.before, change.after))
    if not change.bisectable or change.ratio >= 1 or good is None or bad is None:
        return None
    words = ["moeperf", "bisect", "--profile", profile, "-c", configuration, "--metric"]
    words += [workload, "--good", str(good), "--bad", str(bad), "--margin", f"{margin:g}"]
    return shlex.join(words)  # quoted where a shell would read a name otherwise
