"""The sessions a host has measured one build in: the session levels a baseline check's
between-session term is measured from (:func:`pytest_moeperf.verdicts.creep.session_term`).

A session is one stored run whose profile's fingerprint is the baseline file's host (same
identity, probe figures within the tolerance): its time and its median of the
(build, configuration, workload). The stored baseline's own value is one more run when no
results file holds it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from ..defaults import PROBE_TOLERANCE
from .hosts import BaselineHost, host_differences
from .runstore import SessionPoint

SAME_MEDIAN = 1e-4
"""Two session medians this close (relatively) are one session stored twice (a results file
and the baseline accepted from it)."""


def session_levels(
    points: Iterable[SessionPoint],
    host: BaselineHost,
    *,
    cpus: str | None,
    tolerance: float = PROBE_TOLERANCE,
    stored: Iterable[tuple[str, float]] = (),
) -> list[tuple[float, float]]:
    """The (time, median) of each of *points* (one stored run's median of a build,
    configuration and workload each: :meth:`~pytest_moeperf.store.runstore.RunStore.
    session_points`) measured on *host*, then each *stored* (date, value) (the baseline file's
    accepted entries of that build, at noon of their day) that no run already holds."""
    levels = [
        (p.written, p.median)
        for p in points
        if not host_differences(host, p.fingerprint, cpus, tolerance)
    ]
    for date, value in stored:
        if not any(abs(value - m) <= SAME_MEDIAN * m for _, m in levels):
            levels.append((_noon(date), value))
    return levels


def _noon(date: str) -> float:
    """Noon (UTC) of a baseline entry's ``YYYY-MM-DD`` date, seconds since the epoch (0 for a
    date that is not one)."""
    try:
        day = dt.date.fromisoformat(date[:10])
    except ValueError:
        return 0.0
    return dt.datetime(day.year, day.month, day.day, 12, tzinfo=dt.UTC).timestamp()
