"""The per-look level of a sequential verdict, calibrated by simulation on the statistic each
look computes: the trimmed t interval (Yuen's standard error, ``h - 1`` degrees of freedom)
of the per-round log-ratios, at the round counts of the plan's looks.

Under no change the rounds' log-ratios are exchangeable noise (their order is randomised by a
coin each round), so simulated standard normal rounds give the distribution of the smallest
nominal p-value over all looks. Its *alpha* quantile is the level at which every look may
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
from ..measure.student import t_sf, trimmed_t_rows

PATHS = 40_000
"""Simulated verdicts behind each level: its own sampling error is about 1 % of it."""
SEED = 20261201
VERSION = 1
"""Bumped when the statistic or the simulation changes (old cached levels are not read)."""


def _key(looks: tuple[int, ...], trim: float) -> str:
    text = json.dumps({"looks": looks, "trim": trim, "paths": PATHS, "seed": SEED, "v": VERSION})
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _simulate(looks: tuple[int, ...], trim: float) -> NDArray[np.float64]:
    """The smallest two-sided nominal p-value over *looks* of each simulated verdict, sorted."""
    rng = np.random.default_rng(SEED)
    rounds = rng.standard_normal((PATHS, looks[-1]))
    smallest = np.ones(PATHS)
    for n in looks:
        mean, se, df = trimmed_t_rows(rounds[:, :n], trim)
        p = 2.0 * t_sf(np.abs(mean) / se, df)
        np.minimum(smallest, p, out=smallest)
    return np.sort(smallest)


@functools.lru_cache(maxsize=64)
def null_smallest_p(looks: tuple[int, ...], trim: float = 0.2) -> NDArray[np.float64]:
    """The sorted smallest nominal p-values over *looks* under no change (simulated once per
    host and kept under the cache directory)."""
    path = cache_dir() / "levels" / f"looks-{_key(looks, trim)}.npy"
    try:
        stored = np.load(path)
        if stored.shape == (PATHS,):
            return np.asarray(stored, dtype=np.float64)
    except (OSError, ValueError):
        pass
    values = _simulate(looks, trim)
    buffer = io.BytesIO()
    np.save(buffer, values)
    try:
        atomic_write_bytes(path, buffer.getvalue())
    except OSError:
        pass  # a read-only cache: simulate again next time
    return values


def per_look_alpha(looks: tuple[int, ...], alpha: float, trim: float = 0.2) -> float:
    """The two-sided level every look uses so that over all *looks* the interval misses the
    true ratio with probability *alpha*."""
    return float(np.quantile(null_smallest_p(looks, trim), alpha))


def sequential_p(smallest: float, looks: tuple[int, ...], trim: float = 0.2) -> float:
    """The p-value of the sequential design for a verdict whose smallest two-sided nominal
    p-value over its looks was *smallest*: the chance of a smaller one under no change."""
    null = null_smallest_p(looks, trim)
    return float(np.searchsorted(null, smallest, side="right")) / len(null)


def direction_p(
    log_ratios: Sequence[float] | NDArray[np.float64],
    looks: tuple[int, ...],
    bound: float,
    below: bool,
    *,
    trim: float = 0.2,
    floor: float = 0.0,
) -> NDArray[np.float64]:
    """The sequential p-value against "the ratio is not past *bound*": for *below*, that the
    ratio is at or above *bound* (a slowdown beyond a margin); else at or below it; one value
    for each row of *log_ratios* (a verdict's rounds; one row, or many). Each look of *looks*
    the rounds reached gives a one-sided nominal p-value of the trimmed t (its standard error
    at least *floor* / sqrt(n), as the interval's); the smallest, doubled, is read against the
    simulated two-sided distribution of the smallest p over all of *looks* (the design's,
    reached or not): a conservative p-value of the whole design."""
    d = np.atleast_2d(np.asarray(log_ratios, dtype=np.float64))
    reached = tuple(n for n in looks if n <= d.shape[1]) or (d.shape[1],)
    shift = math.log(bound)
    smallest = np.ones(d.shape[0])
    for n in reached:
        mean, se, df = trimmed_t_rows(d[:, :n], trim)
        t = (mean - shift) / np.maximum(se, max(floor / math.sqrt(n), 1e-300))
        np.minimum(smallest, t_sf(-t if below else t, df), out=smallest)
    null = null_smallest_p(looks, trim)
    doubled = np.minimum(1.0, 2.0 * smallest)
    return np.searchsorted(null, doubled, side="right") / len(null)
