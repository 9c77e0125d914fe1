"""The per-look level of a sequential verdict, calibrated by simulation on the statistic each
look computes: the trimmed t interval of the per-round log-ratios with its dependence-robust
standard error (:mod:`..measure.dependence`: Yuen's, scaled for drift by the larger of the
host's AR(1) factor and the rounds' own Newey-West ratio; ``h - 1`` degrees of freedom), at the
round counts of the plan's looks.

Under no change the rounds' log-ratios are noise whose order the coin randomises within a
round; between rounds the host may drift, so the simulated rounds are AR(1) at the host's
calibrated lag-1 (0: independent), which gives the distribution of the smallest nominal
p-value over all looks. (The process term is a variance known from calibration, added to the
error, not simulated.) Its *alpha* quantile is the level at which every look may
judge so that all looks together miss the true ratio with probability *alpha*; the whole
distribution turns a verdict's smallest p-value into a p-value of the sequential design (what
a gate's family of rows is corrected with). A simulation takes a few seconds; its result is
kept in memory and under the cache directory, keyed by the looks, the trim and this module's
version.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ..fs import atomic_write_bytes, cache_dir
from ..measure.dependence import NO_DEPENDENCE, Dependence, robust_rows
from ..measure.student import t_sf

PATHS = 40_000
"""Simulated verdicts behind each level: its own sampling error is about 1 % of it."""
SEED = 20261201
VERSION = 2
"""Bumped when the statistic or the simulation changes (old cached levels are not read)."""
LAG1_STEP = 0.05
"""A host's lag-1 is calibrated at the next multiple of this at or above it (few levels to
simulate, never a smaller one than the host's)."""


def lag1_grid(lag1: float) -> float:
    """The lag-1 a level is calibrated at for a host of *lag1*: 0 for none or a negative one,
    else the next multiple of :data:`LAG1_STEP` (at most 0.9)."""
    if lag1 <= 0:
        return 0.0
    return min(0.9, math.ceil(round(lag1 / LAG1_STEP, 9)) * LAG1_STEP)


def _key(looks: tuple[int, ...], trim: float, lag1: float) -> str:
    text = json.dumps(
        {"looks": looks, "trim": trim, "lag1": lag1, "paths": PATHS, "seed": SEED, "v": VERSION}
    )
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def ar1_rounds(rng: np.random.Generator, paths: int, n: int, lag1: float) -> NDArray[np.float64]:
    """*paths* series of *n* standard normal AR(1) rounds at *lag1* (independent at 0)."""
    e = rng.standard_normal((paths, n))
    if lag1 == 0:
        return e
    out = np.empty_like(e)
    out[:, 0] = e[:, 0]
    c = math.sqrt(1 - lag1 * lag1)
    for i in range(1, n):
        out[:, i] = lag1 * out[:, i - 1] + c * e[:, i]
    return out


def _simulate(looks: tuple[int, ...], trim: float, lag1: float) -> NDArray[np.float64]:
    """The smallest two-sided nominal p-value over *looks* of each simulated verdict, sorted."""
    rounds = ar1_rounds(np.random.default_rng(SEED), PATHS, looks[-1], lag1)
    host = Dependence(process=0.0, lag1=lag1)
    smallest = np.ones(PATHS)
    for n in looks:
        got = robust_rows(rounds[:, :n], trim=trim, dependence=host)
        p = 2.0 * t_sf(np.abs(got.mean) / got.se, got.df)
        np.minimum(smallest, p, out=smallest)
    return np.sort(smallest)


@functools.lru_cache(maxsize=64)
def null_smallest_p(
    looks: tuple[int, ...], trim: float = 0.2, lag1: float = 0.0
) -> NDArray[np.float64]:
    """The sorted smallest nominal p-values over *looks* under no change, for a host of lag-1
    *lag1* (simulated once per host and kept under the cache directory)."""
    lag1 = lag1_grid(lag1)
    path = cache_dir() / "levels" / f"looks-{_key(looks, trim, lag1)}.npy"
    try:
        stored = np.load(path)
        if stored.shape == (PATHS,):
            return np.asarray(stored, dtype=np.float64)
    except (OSError, ValueError):
        pass
    values = _simulate(looks, trim, lag1)
    buffer = io.BytesIO()
    np.save(buffer, values)
    try:
        atomic_write_bytes(path, buffer.getvalue())
    except OSError:
        pass  # a read-only cache: simulate again next time
    return values


@functools.lru_cache(maxsize=256)
def per_look_alpha(
    looks: tuple[int, ...], alpha: float, trim: float = 0.2, lag1: float = 0.0
) -> float:
    """The two-sided level every look uses so that over all *looks* the interval misses the
    true ratio with probability *alpha* (on a host of lag-1 *lag1*)."""
    return float(np.quantile(null_smallest_p(looks, trim, lag1), alpha))


def margin_p(
    log_ratios: Sequence[float] | NDArray[np.float64],
    looks: tuple[int, ...],
    margin: float,
    *,
    trim: float = 0.2,
    floor: float = 0.0,
    blocks: Sequence[int] | None = None,
    dependence: Dependence = NO_DEPENDENCE,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The sequential p-values against "no slowdown beyond *margin*" (the ratio at or above
    ``1 - margin``) and against "no speedup beyond it" (at or below ``1 + margin``), one value
    each for each row of *log_ratios* (a verdict's rounds; one row, or many, with the same
    *blocks*). Each look of *looks* the rounds reached gives a one-sided nominal p-value of the
    trimmed t with the interval's own standard error (its *dependence* over *blocks*, at least
    *floor* / sqrt(n)), computed once a look for both directions; each direction's smallest,
    doubled, is read against the simulated two-sided distribution of the smallest p over all
    of *looks* (the design's, reached or not): a conservative p-value of the whole design."""
    d = np.atleast_2d(np.asarray(log_ratios, dtype=np.float64))
    reached = tuple(n for n in looks if n <= d.shape[1]) or (d.shape[1],)
    low, high = math.log(1 - margin), math.log(1 + margin)
    slower, faster = np.ones(d.shape[0]), np.ones(d.shape[0])
    for n in reached:
        got = robust_rows(d[:, :n], trim=trim, blocks=blocks, dependence=dependence, floor=floor)
        se = np.maximum(got.se, 1e-300)
        np.minimum(slower, t_sf((low - got.mean) / se, got.df), out=slower)
        np.minimum(faster, t_sf((got.mean - high) / se, got.df), out=faster)
    null = null_smallest_p(looks, trim, dependence.lag1)

    def design(smallest: NDArray[np.float64]) -> NDArray[np.float64]:
        doubled = np.minimum(1.0, 2.0 * smallest)
        return np.searchsorted(null, doubled, side="right") / len(null)

    return design(slower), design(faster)
