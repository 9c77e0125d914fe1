"""Statistics of throughput samples: medians, spreads and intervals of ratios."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..defaults import CONFIDENCE, MIN_REL_SPREAD
from .dependence import DEFAULT_DEPENDENCE, Dependence, robust_rows
from .student import t_quantile

LOG_CEILING = 700.0
"""The largest log-ratio an interval's end is written at (about 1e304): a handful of rounds
whose ratios differ twentyfold, at a strict level, give an end beyond a float's range; so
wide an end says "unbounded" all the same and stays a number in JSON."""


def bounded_exp(x: float) -> float:
    """``exp(x)``, its argument held within +-:data:`LOG_CEILING` (no overflow)."""
    return math.exp(max(-LOG_CEILING, min(LOG_CEILING, x)))


MEDIAN_SE = 1.2533
"""A median's standard error over a mean's, of normal samples (sqrt(pi / 2))."""


@dataclass(frozen=True)
class Summary:
    """Median, range and spread of one measurement's samples (tok/s)."""

    n: int
    median: float
    min: float
    max: float
    mad: float
    """Median absolute deviation from the median (unscaled)."""

    @property
    def cv(self) -> float:
        """Robust coefficient of variation: 1.4826 * MAD / median (0 for one sample)."""
        return 1.4826 * self.mad / self.median if self.median else math.inf


def summarize(values: Sequence[float]) -> Summary:
    """The :class:`Summary` of *values*; raises ``ValueError`` for no values or non-finite ones."""
    if not values:
        raise ValueError("no samples to summarize")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"non-finite sample in {list(values)!r}")
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return Summary(n=len(values), median=med, min=min(values), max=max(values), mad=mad)


class Figure(NamedTuple):
    """A stored figure without raw samples: a value (tok/s) and its relative standard
    uncertainty (0.01 = 1 %), e.g. a table cell of a decision record."""

    value: float
    rel_spread: float


@dataclass(frozen=True)
class RatioInterval:
    """A confidence interval of ``median(a) / median(b)``."""

    ratio: float
    low: float
    high: float
    confidence: float
    method: str
    """``"bootstrap"`` (from raw samples) or ``"propagated"`` (from relative spreads)."""
    floor: float = 0.0
    """Half-width in log space that more repetitions cannot shrink (the ``min_rel_spread``
    floor); 0 when there is none."""

    def __post_init__(self) -> None:
        if not (0 < self.low <= self.ratio <= self.high):
            raise ValueError(f"interval [{self.low}, {self.high}] does not hold {self.ratio}")


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence!r} must be between 0 and 1")
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2)


def log_sigma(rel_spread: float) -> float:
    """Log-normal sigma of a relative standard uncertainty."""
    return math.sqrt(math.log1p(rel_spread * rel_spread))


def _check_positive(name: str, values: Sequence[float]) -> None:
    if not values:
        raise ValueError(f"no samples in {name}")
    for v in values:
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"sample {v!r} in {name} is not a positive finite number")


def relative_uncertainty(values: Sequence[float], *, min_rel_spread: float = 0.0) -> float:
    """Relative standard uncertainty of the median of *values*, never below *min_rel_spread*.

    One sample carries no spread of its own, so its uncertainty is *min_rel_spread*."""
    _check_positive("values", values)
    if len(values) == 1:
        return min_rel_spread
    med = statistics.median(values)
    se = statistics.stdev(values) * math.sqrt(math.pi / 2) / math.sqrt(len(values))
    return max(min_rel_spread, se / med)


def ratio_interval_from_summary(
    a_value: float,
    a_rel_spread: float,
    b_value: float,
    b_rel_spread: float,
    *,
    confidence: float = CONFIDENCE,
) -> RatioInterval:
    """Interval of ``a_value / b_value`` for stored figures without samples: each value is
    taken as log-normal with its relative standard uncertainty, and the two as independent."""
    for name, v in (("a_value", a_value), ("b_value", b_value)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} {v!r} is not a positive finite number")
    for name, s in (("a_rel_spread", a_rel_spread), ("b_rel_spread", b_rel_spread)):
        if not (math.isfinite(s) and s >= 0):
            raise ValueError(f"{name} {s!r} is not a finite number >= 0")
    ratio = a_value / b_value
    half = _z(confidence) * math.hypot(log_sigma(a_rel_spread), log_sigma(b_rel_spread))
    return RatioInterval(
        ratio=ratio,
        low=min(ratio, ratio * bounded_exp(-half)),
        high=max(ratio, ratio * bounded_exp(half)),
        confidence=confidence,
        method="propagated",
    )


def ratio_interval(
    a: Sequence[float],
    b: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = 4000,
    seed: int = 0,
    min_rel_spread: float = MIN_REL_SPREAD,
) -> RatioInterval:
    """Interval of ``median(a) / median(b)`` from raw throughput samples.

    A seeded percentile bootstrap of the ratio of medians (the same inputs and seed always give
    the same interval), in which each side's relative uncertainty is raised to at least
    *min_rel_spread*: a few samples that happen to agree say little about run-to-run drift.
    With a single sample on either side there is nothing to resample, and the interval is
    propagated from :func:`relative_uncertainty` of each side instead."""
    _check_positive("a", a)
    _check_positive("b", b)
    if not (math.isfinite(min_rel_spread) and min_rel_spread >= 0):
        raise ValueError(f"min_rel_spread {min_rel_spread!r} must be a finite number >= 0")
    if resamples < 100:
        raise ValueError(f"resamples {resamples!r} is too few for a percentile interval")
    z = _z(confidence)
    sigma_floor = log_sigma(min_rel_spread)
    floor = z * math.sqrt(2) * sigma_floor
    ratio = statistics.median(a) / statistics.median(b)
    if len(a) == 1 or len(b) == 1:
        prop = ratio_interval_from_summary(
            statistics.median(a),
            relative_uncertainty(a, min_rel_spread=min_rel_spread),
            statistics.median(b),
            relative_uncertainty(b, min_rel_spread=min_rel_spread),
            confidence=confidence,
        )
        return RatioInterval(ratio, prop.low, prop.high, confidence, "propagated", floor)

    rng = np.random.default_rng(seed)
    sides = []
    for values in (a, b):
        arr = np.asarray(values, dtype=float)
        idx = rng.integers(0, len(arr), size=(resamples, len(arr)))
        logs = np.log(np.median(arr[idx], axis=1))
        sd = float(logs.std())
        if sd < sigma_floor:
            logs = logs + rng.normal(0.0, math.sqrt(sigma_floor**2 - sd**2), resamples)
        sides.append(logs)
    log_ratios = sides[0] - sides[1]
    alpha = 1 - confidence
    lo, hi = np.quantile(log_ratios, [alpha / 2, 1 - alpha / 2])
    return RatioInterval(
        ratio=ratio,
        low=min(ratio, bounded_exp(float(lo))),
        high=max(ratio, bounded_exp(float(hi))),
        confidence=confidence,
        method="bootstrap",
        floor=floor,
    )


def with_session_term(
    interval: RatioInterval, log_sd: float, df: float | None = None
) -> RatioInterval:
    """*interval* of a ratio of two sessions' medians, widened by their levels' difference
    (*log_sd*: its log standard deviation, measured on *df* degrees of freedom: a t on them;
    ``None``: a normal quantile) added in quadrature on each side. More repetitions cannot
    shrink that term: it joins the interval's :attr:`~RatioInterval.floor`."""
    if not (math.isfinite(log_sd) and log_sd >= 0):
        raise ValueError(f"log_sd {log_sd!r} must be >= 0")
    if log_sd == 0:
        return interval
    q = _z(interval.confidence) if df is None else t_quantile(0.5 + interval.confidence / 2, df)
    extra = q * log_sd
    centre = math.log(interval.ratio)
    down = math.hypot(centre - math.log(interval.low), extra)
    up = math.hypot(math.log(interval.high) - centre, extra)
    return RatioInterval(
        ratio=interval.ratio,
        low=bounded_exp(centre - down),
        high=bounded_exp(centre + up),
        confidence=interval.confidence,
        method=f"{interval.method} + between sessions",
        floor=math.hypot(interval.floor, extra),
    )


def repetitions_to_decide(interval: RatioInterval, threshold: float, n: int) -> int | None:
    """Roughly how many more repetitions per side would make *interval* exclude *threshold*,
    taking its width as shrinking like ``1/sqrt(n)`` down to its :attr:`~RatioInterval.floor`.

    0 if it already excludes the threshold; ``None`` if the ratio sits on the threshold or the
    floor alone reaches it, so that no number of repetitions can decide."""
    if n < 1:
        raise ValueError(f"n {n!r} must be >= 1")
    if not (math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold {threshold!r} is not a positive finite number")
    distance = abs(math.log(interval.ratio) - math.log(threshold))
    if distance < 1e-12:
        return None
    if interval.ratio > threshold:
        half = math.log(interval.ratio) - math.log(interval.low)
    else:
        half = math.log(interval.high) - math.log(interval.ratio)
    if half < distance:
        return 0
    if interval.floor >= distance:
        return None
    needed = n * (half**2 - interval.floor**2) / (distance**2 - interval.floor**2)
    return max(1, math.ceil(needed) - n)


# -- paired rounds -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairedInterval:
    """An interval of the ratio ``b / a`` from paired rounds: the trimmed mean of the per-round
    log-ratios ``log(b_i / a_i)`` and a trimmed t interval around it."""

    ratio: float
    low: float
    high: float
    rounds: int
    se: float
    """Standard error of the trimmed mean of the log-ratios."""
    critical: float
    """The t multiplier the interval used (wider than 1.96 where looks are corrected)."""
    design_effect: float = 1.0
    """How much the rounds' dependence (process blocks, drift) widened the standard error's
    square over Yuen's (1: not at all)."""
    df: float = math.inf
    """Degrees of freedom of the t multiplier."""
    estimable: bool = True
    """False when the rounds cannot bound the process term (one process pair on a host whose
    term is not calibrated): the interval then holds the rounds' own spread only, and no rule
    may decide on it."""

    def mde(self, power: float = 0.8) -> float:
        """The smallest relative change these rounds would have detected with *power*: the
        critical value plus the power quantile, in standard errors (0.05 = 5 %)."""
        z = statistics.NormalDist().inv_cdf(power)
        return bounded_exp((self.critical + z) * self.se) - 1.0


def paired_log_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """``log(b_i / a_i)`` of each round (``a`` and ``b`` in round order, same length)."""
    _check_positive("a", a)
    _check_positive("b", b)
    if len(a) != len(b):
        raise ValueError(f"paired rounds need as many a samples ({len(a)}) as b ({len(b)})")
    return [math.log(y / x) for x, y in zip(a, b, strict=True)]


def paired_interval(
    a: Sequence[float],
    b: Sequence[float],
    *,
    alpha: float = 0.05,
    trim: float = 0.2,
    min_rel_spread: float = MIN_REL_SPREAD,
    blocks: Sequence[int] | None = None,
    dependence: Dependence = DEFAULT_DEPENDENCE,
) -> PairedInterval:
    """Two-sided ``1 - alpha`` interval of ``b / a`` from rounds (``a[i]``, ``b[i]`` measured
    back to back), at least 2 of them: a t interval on the *trim*-trimmed mean of the per-round
    log-ratios. Trimming keeps the interval honest on this kind of host, where now and then one
    sample of a round is hit by a stall (a -50 % decode sample beside a normal one) and a plain
    t interval would be driven by those few rounds. The per-round spread is raised to at least
    *min_rel_spread*: a few rounds that happen to agree say little about the next ones. The
    standard error carries the rounds' dependence (:mod:`.dependence`): the process term of
    *dependence* over the rounds' *blocks* (the process block of each round; ``None``: one
    pair), and drift between rounds; its degrees of freedom are the evidence's (the rounds', the
    blocks', the calibration's)."""
    d = paired_log_ratios(a, b)
    n = len(d)
    if n < 2:
        raise ValueError("a paired interval needs at least 2 rounds")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha {alpha!r} must be between 0 and 1")
    got = robust_rows(
        np.asarray([d]),
        trim=trim,
        blocks=blocks,
        dependence=dependence,
        floor=log_sigma(min_rel_spread),
    )
    centre, se, df = float(got.mean[0]), float(got.se[0]), float(got.df[0])
    crit = t_quantile(1 - alpha / 2, df)
    half = crit * se
    return PairedInterval(
        ratio=math.exp(centre),
        low=bounded_exp(centre - half),
        high=bounded_exp(centre + half),
        rounds=n,
        se=se,
        critical=crit,
        design_effect=float(got.inflation[0]),
        df=df,
        estimable=got.estimable,
    )
