"""The sessions a host has measured one build in: the session medians a baseline check's
between-session term is estimated from (:func:`pytest_moeperf.verdicts.creep.session_spread`).

A session is one results file in the history folder whose profile's fingerprint is the
baseline file's host (same identity, probe figures within the tolerance): its median of the
(build, configuration, workload). The stored baseline's own value is one more session when no
results file holds it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from ..defaults import PROBE_TOLERANCE
from .hosts import BaselineHost, canonical_workload, host_differences
from .record import RunRecord

SAME_MEDIAN = 1e-4
"""Two session medians this close (relatively) are one session stored twice (a results file
and the baseline accepted from it)."""


def session_medians(
    results: Iterable[RunRecord],
    host: BaselineHost,
    *,
    profile: str,
    build: str,
    configuration: str,
    workload: str,
    cpus: str | None,
    tolerance: float = PROBE_TOLERANCE,
    stored: Iterable[float] = (),
) -> list[float]:
    """The medians of (*build*, *configuration*, *workload*) of *profile* in each run record
    of *results* measured on *host*, one per session, then each *stored* value (the
    baseline file's entries of that build) that no session already holds."""
    wanted = canonical_workload(workload)
    medians: list[float] = []
    for record in results:
        fingerprint = record.fingerprints.get(profile)
        if fingerprint is None or host_differences(host, fingerprint, cpus, tolerance):
            continue
        for m in record.measurements:
            same = (m.build, m.configuration, m.workload.name) == (build, configuration, wanted)
            if same and m.conditions.profile in ("", profile) and m.values:
                medians.append(statistics.median(m.values))
                break
    for value in stored:
        if not any(abs(value - m) <= SAME_MEDIAN * m for m in medians):
            medians.append(value)
    return medians
