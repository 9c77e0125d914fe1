"""Student's t and the trimmed t statistic: the survival function and quantiles from SciPy
(vectorized over the values and the degrees of freedom, which need not be whole: a
Satterthwaite approximation's are not), and Yuen's trimmed-mean statistic of many rows at once
(what the per-look level is calibrated on by simulation), written here because SciPy's
``trim_mean`` gives neither Yuen's winsorized standard error nor rows at once."""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import ArrayLike, NDArray


def t_sf(t: ArrayLike, df: ArrayLike) -> NDArray[np.float64]:
    """P(T > t) for Student's t with *df* degrees of freedom (> 0, not necessarily whole; a
    number, or an array broadcast against *t*), elementwise (SciPy's ``stdtr``)."""
    from scipy.special import stdtr  # type: ignore[import-untyped]  # here: --help stays fast

    dfs = np.asarray(df, dtype=np.float64)
    if not np.all(dfs > 0):
        raise ValueError(f"df {df!r} must be > 0")
    return np.asarray(stdtr(dfs, -np.asarray(t, dtype=np.float64)), dtype=np.float64)


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The *p* quantile of Student's t with *df* degrees of freedom (``p`` in (0.5, 1); *df*
    above 0, not necessarily whole; SciPy's ``stdtrit``)."""
    from scipy.special import stdtrit  # type: ignore[import-untyped]

    if not 0.5 < p < 1:
        raise ValueError(f"p {p!r} must be between 0.5 and 1")
    if not df > 0:
        raise ValueError(f"df {df!r} must be > 0")
    q = float(stdtrit(df, p))
    return q if math.isfinite(q) else math.inf


def trim_count(n: int, trim: float) -> int:
    """Values trimmed from each end of *n* (at least two kept)."""
    g = int(trim * n)
    return (n - 2) // 2 if n - 2 * g < 2 else g


def trimmed_t_rows(
    x: NDArray[np.float64], trim: float = 0.2
) -> tuple[NDArray[np.float64], NDArray[np.float64], int]:
    """The *trim*-trimmed mean of each row of *x*, its standard error after Yuen
    (``sqrt(sum of squared deviations of the winsorized row / (h (h - 1)))``, *h* the values
    kept) and the degrees of freedom of its t interval (``h - 1``)."""
    n = x.shape[1]
    if n < 2:
        raise ValueError("a trimmed mean's spread needs at least 2 values")
    g = trim_count(n, trim)
    s = np.sort(x, axis=1)
    h = n - 2 * g
    mean = s[:, g : n - g].mean(axis=1)
    w = s.copy()
    if g:
        w[:, :g] = s[:, [g]]
        w[:, n - g :] = s[:, [n - g - 1]]
    squares = ((w - w.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    return mean, np.sqrt(squares / (h * (h - 1))), h - 1
