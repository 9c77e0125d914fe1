"""Student's t and the trimmed t statistic, with numpy only: the survival function through the
regularized incomplete beta function (a continued fraction, vectorized over the values and the
degrees of freedom, which need not be whole: a Satterthwaite approximation's are not), its
quantiles by bisection, and Yuen's trimmed-mean statistic of many rows at once (what the
per-look level is calibrated on by simulation)."""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

_EPS = 1e-15
_TINY = 1e-300


def _betacf(
    a: float | NDArray[np.float64], b: float | NDArray[np.float64], x: NDArray[np.float64]
) -> NDArray[np.float64]:
    """The continued fraction of the incomplete beta function (modified Lentz), elementwise
    (*a* and *b* numbers, or arrays as long as *x*)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones_like(x)
    d = 1.0 - qab * x / qap
    d = 1.0 / np.where(np.abs(d) < _TINY, _TINY, d)
    h = d.copy()
    for m in range(1, 1000):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / np.where(np.abs(d) < _TINY, _TINY, d)
            c = 1.0 + aa / c
            c = np.where(np.abs(c) < _TINY, _TINY, c)
            step = d * c
            h = h * step
        if np.all(np.abs(step - 1.0) < _EPS):
            break
    return h


def _lgamma(a: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray([math.lgamma(v) for v in a.ravel()], dtype=np.float64).reshape(a.shape)


def betainc(a: ArrayLike, b: float, x: ArrayLike) -> NDArray[np.float64]:
    """The regularized incomplete beta function I_x(a, b), elementwise over *x* in [0, 1] (and
    over *a*, a number or an array broadcast against *x*)."""
    x = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    a_all = np.broadcast_to(np.asarray(a, dtype=np.float64), x.shape)
    out = np.where(x >= 1.0, 1.0, 0.0)
    inside = (x > 0.0) & (x < 1.0)
    if not np.any(inside):
        return out
    xi, ai = x[inside], a_all[inside]
    log_front = _lgamma(ai + b) - _lgamma(ai) - math.lgamma(b) + ai * np.log(xi) + b * np.log1p(-xi)
    front = np.exp(log_front)
    direct = xi < (ai + 1.0) / (ai + b + 2.0)
    value = np.empty_like(xi)
    if np.any(direct):
        ad = ai[direct]
        value[direct] = front[direct] * _betacf(ad, b, xi[direct]) / ad
    if np.any(~direct):
        ar = ai[~direct]
        # I_x(a, b) = 1 - I_{1-x}(b, a): the fraction with the roles of a and b swapped
        value[~direct] = 1.0 - front[~direct] * _betacf(b, ar, 1.0 - xi[~direct]) / b
    out[inside] = value
    return out


def t_sf(t: ArrayLike, df: ArrayLike) -> NDArray[np.float64]:
    """P(T > t) for Student's t with *df* degrees of freedom (> 0, not necessarily whole; a
    number, or an array broadcast against *t*), elementwise."""
    dfs = np.asarray(df, dtype=np.float64)
    if not np.all(dfs > 0):
        raise ValueError(f"df {df!r} must be > 0")
    t = np.asarray(t, dtype=np.float64)
    t, dfs = np.broadcast_arrays(t, dfs)
    tail = 0.5 * betainc(dfs / 2.0, 0.5, dfs / (dfs + t * t))
    return np.where(t >= 0, tail, 1.0 - tail)


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The *p* quantile of Student's t with *df* degrees of freedom (``p`` in (0.5, 1); *df*
    above 0, not necessarily whole)."""
    if not 0.5 < p < 1:
        raise ValueError(f"p {p!r} must be between 0.5 and 1")
    if not df > 0:
        raise ValueError(f"df {df!r} must be > 0")
    target = 1.0 - p
    low, high = 0.0, 1.0
    while float(t_sf(high, df)) > target:
        low, high = high, high * 2
        if high > 1e12:
            return math.inf
    for _ in range(100):
        mid = (low + high) / 2
        if float(t_sf(mid, df)) > target:
            low = mid
        else:
            high = mid
        if high - low < 1e-10 * high:
            break
    return (low + high) / 2


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
