"""The sessions a host has measured one build in: the session medians a baseline check's
between-session term is estimated from (:func:`pytest_moeperf.verdicts.creep.session_spread`).

A session is one stored run whose profile's fingerprint is the baseline file's host (same
identity, probe figures within the tolerance): its median of the
(build, configuration, workload). The stored baseline's own value is one more session when no
results file holds it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..defaults import PROBE_TOLERANCE
from .hosts import BaselineHost, host_differences
from .runstore import SessionPoint

SAME_MEDIAN = 1e-4
"""Two session medians this close (relatively) are one session stored twice (a results file
and the baseline accepted from it)."""


def session_medians(
    points: Iterable[SessionPoint],
    host: BaselineHost,
    *,
    cpus: str | None,
    tolerance: float = PROBE_TOLERANCE,
    stored: Iterable[float] = (),
) -> list[float]:
    """The medians of *points* (one stored run's median of a build, configuration and
    workload each: :meth:`~pytest_moeperf.store.runstore.RunStore.session_points`) measured on
    *host*, one per session, then each *stored* value (the baseline file's entries of that
    build) that no session already holds."""
    medians = [
        p.median for p in points if not host_differences(host, p.fingerprint, cpus, tolerance)
    ]
    for value in stored:
        if not any(abs(value - m) <= SAME_MEDIAN * m for m in medians):
            medians.append(value)
    return medians
