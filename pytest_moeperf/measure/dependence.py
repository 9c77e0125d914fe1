"""The standard error of a verdict's mean log-ratio when its rounds are not independent, with
the degrees of freedom its evidence has.

Paired rounds cancel what a round's two samples share, but two things on a real host survive
the pairing and make rounds depend on each other:

- **Process effects.** A pair of server processes is a little faster or slower on one side
  than the next pair (where its pages and threads landed): 1.5 % on some of this project's
  hosts, 3 % and more on others. Every round a pair serves shares its offset, so a mean over
  rounds of few pairs carries the offsets of few draws: ``tau^2 sum(m_b^2) / n^2`` of its
  variance (``m_b`` the rounds of block *b*).
- **Drift between rounds.** The host's level wanders slowly, and a round's log-ratio keeps a
  little of the last one's (lag-1 +0.12 for tg64 on this project's VMs; the simulations go to
  0.5).

How big ``tau`` is decides how much a verdict may say, so it is never taken on trust:

- **A host that was not calibrated** (:attr:`Dependence.calibrated` false) has only its
  verdict's own blocks to say it. The variance of the mean is estimated from the blocks
  themselves, a one-way analysis of variance of the winsorized rounds: ``(1/n - c/n0) MSW +
  (c/n0) MSB`` with ``c = sum(m_b^2) / n^2`` and ``n0`` the blocks' effective size, unbiased
  whatever ``tau`` is, and for blocks of equal size exactly the between-block mean square over
  ``n``, so the t statistic has the blocks' ``k - 1`` degrees of freedom (Satterthwaite's
  approximation where sizes differ). A louder host widens its own interval: nothing rests on
  a default being right. The price is that one block shows nothing (a look on one process
  pair is not estimable and never decides), and two or three blocks show little; the loop
  therefore looks at whole blocks only (:class:`~pytest_moeperf.verdicts.sequential.Plan`).
  Drift that carries from one block into the next makes neighbouring blocks alike, which the
  blocks' spread cannot see: the rounds' lag-1 within blocks (many degrees of freedom) says how
  much, and the variance is raised by the factor an AR(1) of that lag-1 gives this very
  estimator (:func:`ar_correction`).
- **A calibrated host** (``moeperf calibrate`` measured its process term over the blocks of
  its A/A gates, with those blocks' degrees of freedom) pools that term with what the
  verdict's own blocks show, each weighted by its degrees of freedom, so a single block can
  decide on the calibrated term and a host louder today than when it was calibrated still
  widens the interval. Drift is the larger of the host's calibrated AR(1) factor ``(1 + phi) /
  (1 - phi)`` and a Newey-West estimate from the rounds themselves.

Everything acts on the trimmed mean (the centre stays robust to stalls): the winsorized
variance is scaled as Yuen's is, ``n (n - 1) / (h (h - 1))`` with *h* the rounds kept. The
per-look level is calibrated by simulating this very statistic (:mod:`..verdicts.levels`).
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .student import trim_count, trimmed_t_rows

MAX_INFLATION = 4.0
"""The most the drift term may scale the rounds' variance (a Newey-West estimate of a few
rounds can be wild)."""
MAX_LAG1 = 0.95
"""The largest lag-1 the drift correction reads from the rounds."""
_GRID = np.linspace(0.0, MAX_LAG1, 96)


@dataclass(frozen=True)
class Dependence:
    """How a host's rounds depend on each other: what ``moeperf calibrate`` measures."""

    process: float = 0.0
    """Log standard deviation of a process pair's offset of the log-ratio (0.015: 1.5 %), as
    calibrated (unused while :attr:`process_df` is 0)."""
    lag1: float = 0.0
    """Lag-1 autocorrelation of consecutive rounds' log-ratios within a process block (only
    a positive one widens)."""
    process_df: float = 0.0
    """Degrees of freedom of the calibrated process term (its A/A gates' blocks less one a
    gate): how much evidence it is, pooled with a verdict's own blocks. 0: not calibrated,
    the verdict's blocks alone estimate the term."""
    round_spread: float = 0.0
    """The calibrated spread of one round's log-ratio (0: unknown): with :attr:`process` it
    says how the host's looks are correlated, which the per-look level is simulated at."""
    origin: str = field(default="calibrated", compare=False)
    """Where the terms were measured: ``calibrated`` (``moeperf calibrate``), or ``this host's
    verdicts`` (its stored verdicts' process blocks, and this run's earlier ones)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.process) and 0 <= self.process < 1):
            raise ValueError(f"process term {self.process!r} must be in [0, 1)")
        if not (math.isfinite(self.lag1) and -1 < self.lag1 < 1):
            raise ValueError(f"lag-1 {self.lag1!r} must be in (-1, 1)")
        if not (self.process_df >= 0 and not math.isnan(self.process_df)):
            raise ValueError(f"process_df {self.process_df!r} must be >= 0")
        if not (math.isfinite(self.round_spread) and self.round_spread >= 0):
            raise ValueError(f"round spread {self.round_spread!r} must be >= 0")

    @property
    def calibrated(self) -> bool:
        """Whether the process term is this host's own measurement (not a guess)."""
        return self.process_df > 0

    @property
    def ratio(self) -> float:
        """The calibrated process term over the round spread (0 when either is unknown)."""
        if not self.calibrated or self.round_spread <= 0:
            return 0.0
        return self.process / self.round_spread

    @property
    def ar_factor(self) -> float:
        """The variance factor of a mean of AR(1) rounds: ``(1 + phi) / (1 - phi)``, at least 1."""
        phi = max(0.0, self.lag1)
        return (1 + phi) / (1 - phi)

    def describe(self) -> str:
        """``process term 1.5 % (calibrated, 40 df), lag-1 +0.00``, or for a host not
        calibrated ``process term from each verdict's own process blocks, lag-1 +0.00``."""
        if not self.calibrated:
            return f"process term from each verdict's own process blocks, lag-1 {self.lag1:+.2f}"
        return (
            f"process term {100 * self.process:.1f} % ({self.origin}, {self.process_df:g} df), "
            f"lag-1 {self.lag1:+.2f}"
        )


DEFAULT_DEPENDENCE = Dependence()
"""A host not calibrated: the process term comes from each verdict's own blocks, no lag-1
beyond what its rounds show."""
NO_PROCESS_TERM = Dependence(process=0.0, lag1=0.0, process_df=math.inf)
"""Rounds known to carry no process term (a simulation's, or a test's)."""


@dataclass(frozen=True)
class RobustRows:
    """The trimmed mean of each row's log-ratios, its standard error and degrees of freedom."""

    mean: NDArray[np.float64]
    se: NDArray[np.float64]
    df: NDArray[np.float64]
    """Degrees of freedom of each row's t multiplier (Yuen's ``h - 1``, the blocks' ``k - 1``,
    or Satterthwaite's mix)."""
    inflation: NDArray[np.float64]
    """How much the dependence widened each row's variance over Yuen's (1: not at all)."""
    estimable: bool = True
    """False when the rounds cannot bound the process term: one process pair on a host whose
    term is not calibrated. The error is then the rounds' alone, and no look may decide."""


def _block_index(n: int, blocks: Sequence[int] | None) -> NDArray[np.intp]:
    if not blocks:
        return np.zeros(n, dtype=np.intp)
    _, index = np.unique(np.asarray(blocks[:n]), return_inverse=True)
    return np.asarray(index, dtype=np.intp)


def _block_means(x: NDArray[np.float64], index: NDArray[np.intp], k: int) -> NDArray[np.float64]:
    """Each row's mean over each block (rows x k)."""
    sums = np.zeros((x.shape[0], k))
    np.add.at(sums.T, index, x.T)
    return sums / np.bincount(index, minlength=k)


@dataclass(frozen=True)
class _Anova:
    """The one-way analysis of variance of rows of rounds over their blocks."""

    within: NDArray[np.float64]
    """MSW: the rounds' variance around their blocks' means (``n - k`` degrees of freedom)."""
    between: NDArray[np.float64]
    """MSB: the blocks' means' spread, per round (``k - 1`` degrees of freedom)."""
    shared: float
    """``sum(m_b^2) / n^2``: the share of one offset's variance the mean keeps."""
    n0: float
    """The blocks' effective size (``E[MSB] = sigma^2 + n0 tau^2``)."""

    @property
    def own_coefficient(self) -> float:
        """``c / n0``: what MSB - MSW is worth as the offsets' part of the mean's variance."""
        return self.shared / self.n0


def _anova(w: NDArray[np.float64], index: NDArray[np.intp], sizes: NDArray[np.intp]) -> _Anova:
    n, k = w.shape[1], len(sizes)
    means = _block_means(w, index, k)
    nan = np.full(w.shape[0], np.nan)
    within = ((w - means[:, index]) ** 2).sum(axis=1) / (n - k) if n > k else nan
    grand = w.mean(axis=1, keepdims=True)
    between = (sizes * (means - grand) ** 2).sum(axis=1) / (k - 1) if k > 1 else nan
    square = float((sizes**2).sum())
    n0 = (n - square / n) / (k - 1) if k > 1 else math.inf
    return _Anova(within, between, square / n**2, n0)


def _drift_ratio(w: NDArray[np.float64], index: NDArray[np.intp], k: int) -> NDArray[np.float64]:
    """Newey-West's long-run variance of the winsorized rounds *w* (around their block means,
    lags within a block only) over their plain variance, per row, in [1, MAX_INFLATION]."""
    n = w.shape[1]
    centred = w - _block_means(w, index, k)[:, index] if k > 1 else w - w.mean(1, keepdims=True)
    gamma0 = (centred**2).sum(axis=1)
    total = gamma0.copy()
    lags = max(1, math.floor(n ** (1 / 3)))
    for lag in range(1, min(lags, n - 1) + 1):
        same = index[lag:] == index[:-lag]
        cross = (centred[:, lag:] * centred[:, :-lag] * same).sum(axis=1)
        total += 2 * (1 - lag / (lags + 1)) * cross
    safe = np.where(gamma0 > 0, gamma0, 1.0)
    return np.clip(np.where(gamma0 > 0, total / safe, 1.0), 1.0, MAX_INFLATION)


# -- drift across blocks: what an AR(1) of lag-1 phi does to the blocks' estimator -------------
def _ar_covariance(n: int, phi: float) -> NDArray[np.float64]:
    lags = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    return np.asarray(phi**lags, dtype=np.float64)


@functools.lru_cache(maxsize=512)
def _ar_tables(sizes: tuple[int, ...]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """For rounds in blocks of *sizes* (in order) and each lag-1 of the grid: the expected
    ratio of consecutive rounds' products to their squares, each read around its block's mean
    (what the rounds show of their lag-1), and the factor by which the true variance of the
    mean exceeds the expected blocks' estimate (``1/n - c/n0``) MSW + (``c/n0``) MSB, or the
    rounds' plain variance over n when every block is one round."""
    n, k = sum(sizes), len(sizes)
    index = np.repeat(np.arange(k), sizes)
    same = index[:, None] == index[None, :]
    size_of = np.asarray(sizes, dtype=np.float64)[index]
    project = np.where(same, 1.0 / size_of[:, None], 0.0)  # each block's mean
    centre = np.eye(n) - project
    neighbours = np.zeros((n, n))
    for i in range(n - 1):
        if index[i] == index[i + 1]:
            neighbours[i, i + 1] = neighbours[i + 1, i] = 0.5
    lag_form = centre @ neighbours @ centre
    between_form = project - np.full((n, n), 1.0 / n)
    square = float(sum(m * m for m in sizes))
    ratios, factors = np.zeros(len(_GRID)), np.ones(len(_GRID))
    for j, phi in enumerate(_GRID):
        cov = _ar_covariance(n, float(phi))  # symmetric: tr(A cov) is sum(A * cov)
        squares = float(np.sum(centre * cov))
        ratios[j] = float(np.sum(lag_form * cov)) / squares if squares > 0 else 0.0
        true = float(cov.sum()) / n**2
        if k == n:  # every block one round: the rounds' variance over n
            expected = float(np.sum((np.eye(n) - 1.0 / n) * cov)) / (n - 1) / n
        elif k == 1:
            expected = squares / (n - 1) / n
        else:
            n0 = (n - square / n) / (k - 1)
            c = square / n**2
            within = squares / (n - k)
            between = float(np.sum(between_form * cov)) / (k - 1)
            expected = (1.0 / n - c / n0) * within + (c / n0) * between
        factors[j] = max(1.0, true / expected) if expected > 0 else 1.0
    if k == n:  # no pairs within a block: the lag-1 is read between consecutive rounds
        ratios = np.asarray(_GRID * (1 - 1.0 / n) - 1.0 / n, dtype=np.float64)
    return ratios, factors


def ar_correction(
    w: NDArray[np.float64], sizes: NDArray[np.intp], lag1: float = 0.0
) -> NDArray[np.float64]:
    """Per row of winsorized rounds *w* in consecutive blocks of *sizes*: the factor the
    blocks' variance estimate is raised by for drift that carries across blocks, from the lag-1
    the rounds show (consecutive rounds of one block around its mean; consecutive rounds when
    every block is one round) or the host's calibrated *lag1*, the larger; at least 1, at most
    :data:`MAX_INFLATION`."""
    n, k = w.shape[1], len(sizes)
    ratios, factors = _ar_tables(tuple(int(m) for m in sizes))
    index = np.repeat(np.arange(k), sizes)
    if k == n:
        centred = w - w.mean(axis=1, keepdims=True)
        same = np.ones(n - 1, dtype=bool)
    else:
        centred = w - _block_means(w, index, k)[:, index]
        same = index[1:] == index[:-1]
    squares = (centred**2).sum(axis=1)
    products = (centred[:, 1:] * centred[:, :-1] * same).sum(axis=1)
    read = products / np.where(squares > 0, squares, 1.0)
    if np.all(np.diff(ratios) > 0):
        phi = np.interp(read, ratios, _GRID, left=0.0, right=MAX_LAG1)
    else:  # blocks of two rounds: the lag-1 cannot be read from them
        phi = np.zeros(w.shape[0])
    phi = np.clip(np.maximum(phi, lag1), 0.0, MAX_LAG1)
    factor = np.interp(phi, _GRID, factors)
    return np.asarray(np.minimum(factor, MAX_INFLATION), dtype=np.float64)


def centred_ratio(rho: float, sizes: Mapping[int, int]) -> float:
    """What consecutive rounds' products over their squares, each read around its own block's
    mean, come to on average for rounds of lag-1 *rho* (AR(1)) in blocks of these sizes
    (size -> count): the expected products over the expected squares, from the covariance of a
    round and its block's mean."""
    products = squares = 0.0
    for m, count in sizes.items():
        # c[i]: the covariance of round i and its block's mean (the rounds' variance 1)
        c = [sum(rho ** abs(i - k) for k in range(m)) / m for i in range(m)]
        mean_var = sum(c) / m
        products += count * sum(rho - c[i] - c[i + 1] + mean_var for i in range(m - 1))
        squares += count * (m - 2 * sum(c) + m * mean_var)
    return products / squares


# -- the two estimators --------------------------------------------------------------------------
def _satterthwaite(parts: Sequence[tuple[NDArray[np.float64], float]]) -> NDArray[np.float64]:
    """Degrees of freedom of a sum of independent variance estimates (each: its value per
    row, its degrees of freedom)."""
    total = sum(v for v, _ in parts)
    spread = sum(v**2 / df for v, df in parts if df > 0 and math.isfinite(df))
    safe = np.where(spread > 0, spread, 1.0)
    return np.asarray(np.where(spread > 0, total**2 / safe, 1e6), dtype=np.float64)


def _from_blocks(
    w: NDArray[np.float64], index: NDArray[np.intp], sizes: NDArray[np.intp], scale: float,
    kept: int, lag1: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], bool]:  # fmt: skip
    """The variance of the trimmed mean and its degrees of freedom from the blocks alone (a
    host not calibrated), and whether the blocks can show it at all (two or more)."""
    n, k = w.shape[1], len(sizes)
    drift = ar_correction(w, sizes, lag1) if k > 1 else np.ones(w.shape[0])
    if k == n:  # every round a fresh pair: its offset is part of the round's spread
        var = w.var(axis=1, ddof=1) / n
        return scale * var * drift, np.full(w.shape[0], float(kept - 1)), True
    a = _anova(w, index, sizes)
    if k == 1:  # one pair: the rounds' own spread, for the record; nothing decides on it
        return scale * a.within / n, np.full(w.shape[0], float(kept - 1)), False
    within_part = (1.0 / n - a.own_coefficient) * a.within
    between_part = a.own_coefficient * a.between
    # unbiased, but below zero where uneven blocks weigh MSW negatively and MSB came out small:
    # never below the smaller mean square's share (equal blocks never reach it)
    var = np.maximum(within_part + between_part, np.minimum(a.within, a.between) / n)
    within_df = (n - k) * (kept - 1) / (n - 1)  # winsorizing costs the rounds' df as in Yuen's
    df = _satterthwaite([(within_part, within_df), (between_part, float(k - 1))])
    return scale * var * drift, np.maximum(df, 1.0), True


def _with_calibration(
    w: NDArray[np.float64], index: NDArray[np.intp], sizes: NDArray[np.intp], scale: float,
    kept: int, dependence: Dependence,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:  # fmt: skip
    """The variance of the trimmed mean and its degrees of freedom on a calibrated host: the
    calibrated term (with its degrees of freedom) pooled with the blocks' own evidence."""
    n, k = w.shape[1], len(sizes)
    drift = np.maximum(dependence.ar_factor, _drift_ratio(w, index, k))
    if k == n:  # every round a fresh pair: its offset is part of the round's spread
        var = scale * w.var(axis=1, ddof=1) / n * drift
        return var, np.full(w.shape[0], float(kept - 1))
    a = _anova(w, index, sizes)
    within_df = (n - k) * (kept - 1) / (n - 1)
    own_df, prior_df = float(k - 1), dependence.process_df
    own = own_df / (own_df + prior_df)  # the blocks' share of the evidence on the term
    prior = 1.0 - own
    # MSW carries the rounds' spread (with the calibrated drift on the prior's share); the
    # blocks' own evidence on the term is (c / n0)(MSB - MSW), the calibrated one c tau^2
    within = scale * a.within * ((1.0 + prior * (drift - 1.0)) / n - own * a.own_coefficient)
    parts = [(within, within_df)]
    if k > 1:
        parts.append((scale * own * a.own_coefficient * a.between, own_df))
    parts.append((np.full(w.shape[0], prior * a.shared * dependence.process**2), prior_df))
    # never below the rounds' own spread over n: uneven blocks (a last block of one round) can
    # weigh MSW negatively where the blocks' MSB came out small
    var = np.maximum(sum(v for v, _ in parts), np.maximum(scale * a.within / n, 1e-300))
    return var, np.maximum(_satterthwaite(parts), 1.0)


def robust_rows(
    d: NDArray[np.float64],
    *,
    trim: float = 0.2,
    blocks: Sequence[int] | None = None,
    dependence: Dependence = DEFAULT_DEPENDENCE,
    floor: float = 0.0,
) -> RobustRows:
    """The trimmed mean of each row of *d* (rounds' log-ratios, in round order), its standard
    error and degrees of freedom: from the rounds' process *blocks* (the same for every row;
    ``None``: one process pair) and *dependence* (the host's calibrated terms, if any), at
    least *floor* / sqrt(n)."""
    d = np.atleast_2d(np.asarray(d, dtype=np.float64))
    if not 0 <= trim < 0.5:
        raise ValueError(f"trim {trim!r} must be in [0, 0.5)")
    mean, yuen, _ = trimmed_t_rows(d, trim)
    n, g = d.shape[1], trim_count(d.shape[1], trim)
    kept = n - 2 * g
    bounds = np.partition(d, [g, n - g - 1], axis=1)
    w = np.clip(d, bounds[:, [g]], bounds[:, [n - g - 1]])  # winsorized, in round order
    scale = n * (n - 1) / (kept * (kept - 1))  # Yuen's: the winsorized variance understates
    index = _block_index(n, blocks)
    sizes = np.bincount(index)
    if dependence.calibrated:
        var, df = _with_calibration(w, index, sizes, scale, kept, dependence)
        estimable = True
    else:
        var, df, estimable = _from_blocks(w, index, sizes, scale, kept, dependence.lag1)
    se = np.maximum(np.sqrt(var), floor / math.sqrt(n))
    yuen2 = yuen**2
    safe = np.where(yuen2 > 0, yuen2, 1.0)
    inflation = np.where(yuen2 > 0, se**2 / safe, 1.0)
    return RobustRows(mean, se, df, inflation, estimable)


def rounds_per_process(
    restart: float, round_cost: float, round_spread: float, process: float, *, most: int
) -> int:
    """The rounds a pair of server processes should serve before both are restarted, where the
    variance is and what a restart costs (Kalibera and Jones, "Rigorous benchmarking in
    reasonable time", ISMM 2013): ``ceil(sqrt((restart / round_cost) * (round_spread^2 /
    process^2)))`` minimises the variance of the mean for the seconds spent, a restart costing
    *restart* seconds and a round *round_cost*, the rounds spreading by *round_spread* and
    process pairs by *process* (log standard deviations); at least 2, at most *most*."""
    if round_cost <= 0 or process <= 0:
        return most
    r = math.sqrt(max(restart, 0.0) / round_cost * (round_spread / process) ** 2)
    return int(min(most, max(2, math.ceil(r - 1e-9))))


@dataclass(frozen=True)
class ProcessEvidence:
    """What paired rounds show of their host's round spread, lag-1 and process term, in sums
    that pool over verdicts (a calibration's A/A gates, or a host's stored verdicts): each
    block's rounds around the block's own mean, and each verdict's variance between its blocks
    beyond what their rounds explain, weighted by its blocks less one (cut at zero only once
    pooled: each verdict's cut would read a host with no term as one with some)."""

    squares: float = 0.0
    """Sum of squared deviations of rounds from their block's mean."""
    cross: float = 0.0
    """Sum of products of consecutive rounds' deviations within a block."""
    df: int = 0
    """Rounds less one a block (blocks of two rounds or more)."""
    sizes: tuple[tuple[int, int], ...] = ()
    """(block size, count) of the blocks of two rounds or more."""
    excess: float = 0.0
    """Sum over verdicts of their between-block excess variance times its degrees of freedom."""
    between_df: int = 0
    """Sum of the verdicts' blocks less one (those whose blocks could show it)."""

    @classmethod
    def of(cls, values: Sequence[float], blocks: Sequence[int] | None) -> ProcessEvidence:
        """The evidence of one verdict's (or gate's) rounds' log-ratios *values* in their
        process *blocks* (``None``: one pair)."""
        labels = list(blocks) if blocks else [0] * len(values)
        groups: dict[int, list[float]] = {}
        for x, b in zip(values, labels, strict=False):
            groups.setdefault(b, []).append(x)
        squares = cross = 0.0
        df = 0
        sizes: dict[int, int] = {}
        for g in groups.values():
            if len(g) < 2:
                continue
            mean = statistics.fmean(g)
            dev = [x - mean for x in g]
            squares += sum(x * x for x in dev)
            cross += sum(a * b for a, b in itertools.pairwise(dev))
            df += len(g) - 1
            sizes[len(g)] = sizes.get(len(g), 0) + 1
        got = block_excess(values, labels)
        excess, between_df = (got[0] * got[1], got[1]) if got is not None else (0.0, 0)
        return cls(squares, cross, df, tuple(sorted(sizes.items())), excess, between_df)

    def __add__(self, other: ProcessEvidence) -> ProcessEvidence:
        sizes = dict(self.sizes)
        for size, count in other.sizes:
            sizes[size] = sizes.get(size, 0) + count
        return ProcessEvidence(
            self.squares + other.squares,
            self.cross + other.cross,
            self.df + other.df,
            tuple(sorted(sizes.items())),
            self.excess + other.excess,
            self.between_df + other.between_df,
        )

    @property
    def round_spread(self) -> float:
        """The pooled spread of one round around its block's mean (0: none to pool)."""
        return math.sqrt(self.squares / self.df) if self.df else 0.0

    @property
    def process(self) -> float | None:
        """The pooled process term (log SD), cut at zero; ``None`` where no blocks showed it,
        or where they show one of log-SD 1 or more, which is no host's own and no
        :class:`Dependence` can hold (rounds of binaries slowed on purpose, or of a host that
        stalled for whole blocks): each verdict's own blocks then estimate it."""
        if not self.between_df:
            return None
        term = math.sqrt(max(0.0, self.excess / self.between_df))
        return term if term < 1 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "squares": self.squares,
            "cross": self.cross,
            "df": self.df,
            "sizes": [list(s) for s in self.sizes],
            "excess": self.excess,
            "between_df": self.between_df,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProcessEvidence:
        """Evidence from :meth:`to_dict`; ``ValueError`` or ``TypeError`` when malformed."""
        sizes = tuple((int(a), int(b)) for a, b in d.get("sizes", ()))
        got = cls(
            float(d["squares"]),
            float(d["cross"]),
            int(d["df"]),
            sizes,
            float(d["excess"]),
            int(d["between_df"]),
        )
        if got.df < 0 or got.between_df < 0 or got.squares < 0 or not math.isfinite(got.excess):
            raise ValueError(f"process evidence {dict(d)!r} is not a valid sum")
        return got


def block_excess(values: Sequence[float], blocks: Sequence[int] | None) -> tuple[float, int] | None:
    """The variance between *values*' process *blocks* beyond what their rounds explain (a
    one-way analysis of variance: ``(MSB - MSW) / n0``, not cut at zero, so that estimates from
    many gates pool without bias) and its degrees of freedom (blocks less one); ``None`` when
    the rounds cannot show it (fewer than two blocks, or no block of two rounds)."""
    n = len(values)
    index = _block_index(n, blocks)
    sizes = np.bincount(index)
    if n < 3 or len(sizes) < 2 or len(sizes) == n:
        return None
    a = _anova(np.asarray([values], dtype=np.float64), index, sizes)
    return float((a.between[0] - a.within[0]) / a.n0), len(sizes) - 1
