"""The standard error of a verdict's mean log-ratio when its rounds are not independent.

Paired rounds cancel what a round's two samples share, but two things on a real host survive
the pairing and make rounds depend on each other:

- **Process effects.** A pair of server processes is a little faster or slower on one side
  than the next pair (where its pages and threads landed): about 1.5 % on this project's
  hosts (:data:`~pytest_moeperf.defaults.PROCESS_TERM`). Every round a pair serves shares its
  offset, so a mean over rounds of few pairs carries the offsets of few draws. The rounds'
  blocks (rounds served by one pair) are known, so the term is added as a variance component:
  ``tau^2 (sum(m_b^2) / n^2 - 1 / n)`` with ``m_b`` the rounds of block *b*, the part of the
  offsets' variance the rounds' own spread does not already hold (0 when every round is a
  fresh pair, ``tau^2 (1 - 1/n)`` for one pair). ``tau`` is the host's calibrated term (or the
  default), raised to what the blocks themselves show (a one-way analysis of variance) once
  there are blocks to show it. A cluster-robust error on the block means with their degrees
  of freedom was the other choice; with the 2 to 6 blocks a budget reaches it cannot decide
  before the fourth block, and at the first looks (one block) it has nothing to estimate
  from, where the calibrated term does.
- **Drift between rounds.** The host's level wanders slowly (-20 % in an hour), and a round's
  log-ratio keeps a little of the last one's (lag-1 +0.12 for tg64 on this project's VMs).
  The rounds' variance is scaled by the larger of the host's calibrated AR(1) factor
  ``(1 + phi) / (1 - phi)`` and a Newey-West estimate from the rounds themselves (Bartlett
  weights over ``n^(1/3)`` lags of the winsorized rounds around their block means, so that
  blocks are not counted twice), never below 1.

Both act on the trimmed mean's standard error (Yuen's): the centre stays robust to stalls. The
per-look level is calibrated by simulating this very error (:mod:`..verdicts.levels`), so the
Newey-West term's own noise costs nothing in the stated rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..defaults import PROCESS_TERM
from .student import trim_count, trimmed_t_rows

MAX_INFLATION = 4.0
"""The most the drift term may scale the rounds' variance (a Newey-West estimate of a few
rounds can be wild)."""


@dataclass(frozen=True)
class Dependence:
    """How a host's rounds depend on each other: what ``moeperf calibrate`` measures."""

    process: float = PROCESS_TERM
    """Log standard deviation of a process pair's offset of the log-ratio (0.015: 1.5 %)."""
    lag1: float = 0.0
    """Lag-1 autocorrelation of consecutive rounds' log-ratios within a process block (only
    a positive one widens)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.process) and 0 <= self.process < 1):
            raise ValueError(f"process term {self.process!r} must be in [0, 1)")
        if not (math.isfinite(self.lag1) and -1 < self.lag1 < 1):
            raise ValueError(f"lag-1 {self.lag1!r} must be in (-1, 1)")

    @property
    def ar_factor(self) -> float:
        """The variance factor of a mean of AR(1) rounds: ``(1 + phi) / (1 - phi)``, at least 1."""
        phi = max(0.0, self.lag1)
        return (1 + phi) / (1 - phi)

    def describe(self) -> str:
        """``process term 1.5 %, lag-1 +0.00``."""
        return f"process term {100 * self.process:.1f} %, lag-1 {self.lag1:+.2f}"


DEFAULT_DEPENDENCE = Dependence()
"""A host not calibrated: the default process term, no lag-1 beyond what its rounds show."""
NO_DEPENDENCE = Dependence(process=0.0, lag1=0.0)
"""Rounds with no process term (every round a fresh pair, or a simulation's calibration)."""


@dataclass(frozen=True)
class RobustRows:
    """The trimmed mean of each row's log-ratios and its dependence-robust standard error."""

    mean: NDArray[np.float64]
    se: NDArray[np.float64]
    df: int
    """Degrees of freedom of the t multiplier (Yuen's ``h - 1``)."""
    inflation: NDArray[np.float64]
    """How much the dependence widened each row's variance over Yuen's (1: not at all)."""


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


def _between_blocks(
    x: NDArray[np.float64], index: NDArray[np.intp], sizes: NDArray[np.intp]
) -> NDArray[np.float64]:
    """The variance between blocks beyond what their rounds explain (one-way ANOVA, 0 at
    least), per row; 0 with fewer than two blocks or a block of one round."""
    n, k = x.shape[1], len(sizes)
    if k < 2 or sizes.min() < 2:
        return np.zeros(x.shape[0])
    means = _block_means(x, index, k)
    within = ((x - means[:, index]) ** 2).sum(axis=1) / (n - k)
    grand = x.mean(axis=1, keepdims=True)
    between = (sizes * (means - grand) ** 2).sum(axis=1) / (k - 1)
    n0 = (n - float((sizes**2).sum()) / n) / (k - 1)
    return np.maximum(0.0, (between - within) / n0)


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


def between_blocks(values: Sequence[float], blocks: Sequence[int] | None) -> float | None:
    """The variance between *values*' process *blocks* beyond what their rounds explain (a
    one-way analysis of variance, 0 at least); ``None`` when the rounds cannot show it (fewer
    than two blocks, or a block of one round)."""
    n = len(values)
    index = _block_index(n, blocks)
    sizes = np.bincount(index)
    if n < 3 or len(sizes) < 2 or sizes.min() < 2:
        return None
    return float(_between_blocks(np.asarray([values], dtype=np.float64), index, sizes)[0])


def robust_rows(
    d: NDArray[np.float64],
    *,
    trim: float = 0.2,
    blocks: Sequence[int] | None = None,
    dependence: Dependence = NO_DEPENDENCE,
    floor: float = 0.0,
) -> RobustRows:
    """The trimmed mean of each row of *d* (rounds' log-ratios, in round order) and its
    standard error: Yuen's, scaled for drift (the larger of *dependence*'s AR(1) factor and the
    rounds' own Newey-West ratio), plus the process blocks' term (the rounds' *blocks*, the
    same for every row; ``None``: one process pair), at least *floor* / sqrt(n)."""
    d = np.atleast_2d(np.asarray(d, dtype=np.float64))
    if not 0 <= trim < 0.5:
        raise ValueError(f"trim {trim!r} must be in [0, 0.5)")
    mean, yuen, df = trimmed_t_rows(d, trim)
    n, g = d.shape[1], trim_count(d.shape[1], trim)
    bounds = np.partition(d, [g, n - g - 1], axis=1)
    w = np.clip(d, bounds[:, [g]], bounds[:, [n - g - 1]])  # winsorized, in round order
    yuen2 = yuen**2
    index = _block_index(n, blocks)
    sizes = np.bincount(index)
    k = len(sizes)
    drift = np.maximum(dependence.ar_factor, _drift_ratio(w, index, k))
    tau2 = np.maximum(dependence.process**2, _between_blocks(d, index, sizes))
    shared = max(0.0, float((sizes**2).sum()) / n**2 - 1.0 / n)
    var = yuen2 * drift + tau2 * shared
    se = np.maximum(np.sqrt(var), floor / math.sqrt(n))
    safe = np.where(yuen2 > 0, yuen2, 1.0)
    inflation = np.where(yuen2 > 0, var / safe, 1.0)
    return RobustRows(mean, se, df, inflation)
