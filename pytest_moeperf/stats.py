"""Statistics of throughput samples: medians and spreads."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


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
