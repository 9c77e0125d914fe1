"""What a baseline file's hosts accepted, and whose numbers apply to a run:
:func:`host_for` picks the ``[[host]]`` whose numbers apply to this run (by
:func:`~pytest_moeperf.store.hosts.host_differences`), :func:`accepted_history` lists what one
host accepted over time, :func:`accepted_chain` follows its gated builds back and
:func:`repeated_links` finds the build pairs it accepted more than once (what a link's
between-session term is measured from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..defaults import PROBE_TOLERANCE
from ..measure.dependence import DEFAULT_DEPENDENCE, Dependence
from ..verdicts.calibration import NoiseFigure, host_dependence
from ..verdicts.creep import PairedChange
from .baselines import BaselineEntry, BaselineFile
from .hosts import BaselineHost, canonical_workload, fingerprint_mismatch, host_differences


def accepted_history(
    bf: BaselineFile, host: str, configuration: str, workload: str
) -> list[BaselineEntry]:
    """Every baseline of (*configuration*, *workload*) on *host* the file holds, current
    entries and replaced ones of any build, oldest first (by date, then file order)."""
    wanted = canonical_workload(workload)
    found = [
        e
        for e in (*bf.history, *bf.entries)
        if e.host == host and e.configuration == configuration and e.workload == wanted
    ]
    return sorted(found, key=lambda e: e.date)


def accepted_chain(
    bf: BaselineFile, host: str, configuration: str, workload: str, build: str
) -> list[tuple[str, PairedChange]] | None:
    """The accepted chain that ends at *build* on *host*: each ``(build, its paired change)``
    oldest first, followed back from *build*'s newest entry through the builds each was gated
    against, as far as the links go (an entry accepted without a gate, or one whose older end
    the file does not hold, starts the chain). ``None`` when *host* never accepted *build*."""
    history = accepted_history(bf, host, configuration, workload)
    ends = [e for e in history if e.build == build]
    if not ends:
        return None
    links: list[tuple[str, PairedChange]] = []
    entry, seen = ends[-1], {build}
    while entry.change is not None:
        older = [e for e in history if e.build == entry.change.against and e.date <= entry.date]
        links.append((entry.build, entry.change))
        if not older or entry.change.against in seen:
            break
        seen.add(entry.change.against)
        entry = older[-1]
    return links[::-1]


def repeated_links(bf: BaselineFile, host: str) -> list[list[PairedChange]]:
    """The paired changes *host* accepted more than once for one build pair, configuration and
    workload, grouped (each group oldest first; an entry the file holds twice, as current and
    as history of the same date, counts once)."""
    groups: dict[tuple[str, ...], dict[tuple[str, float, float], PairedChange]] = {}
    for e in sorted((*bf.history, *bf.entries), key=lambda e: e.date):
        if e.host != host or e.change is None:
            continue
        key = (e.configuration, e.workload, e.build, e.change.against)
        once = (e.date, e.change.log_ratio, e.change.se)
        groups.setdefault(key, {})[once] = e.change
    return [list(g.values()) for g in groups.values() if len(g) >= 2]


def host_for(
    bf: BaselineFile,
    fingerprint: Mapping[str, Any],
    cpus: str | None,
    tolerance: float = PROBE_TOLERANCE,
) -> tuple[BaselineHost | None, list[str]]:
    """The host of *bf* whose numbers apply to the host *fingerprint* describes on the CPU set
    *cpus*, and, when none does, every reason why not (one line per host)."""
    reasons: list[str] = []
    for host in bf.hosts:
        why = host_differences(host, fingerprint, cpus, tolerance)
        if not why:
            return host, []
        reasons += why
    return None, reasons or ["the file holds no host"]


def calibrated_figures(
    bf: BaselineFile | None, fingerprint: Mapping[str, Any]
) -> list[tuple[str, NoiseFigure]]:
    """Every noise figure ``moeperf calibrate`` stored with a ``[[host]]`` of *bf* whose
    identity (hostname, CPU model, ...) is this host's, as (metric, figure). Identity alone
    decides: the figures are wanted before any server has started (and probed the CPUs)."""
    if bf is None:
        return []
    return [
        (metric, f)
        for host in bf.hosts
        if host.noise and not fingerprint_mismatch(host.fingerprint, fingerprint)
        for metric, f in host.noise.items()
    ]


def dependence_for(bf: BaselineFile | None, fingerprint: Mapping[str, Any]) -> Dependence:
    """How this host's rounds depend on each other: the largest terms of its calibrated
    figures (:func:`calibrated_figures`); the default (:data:`DEFAULT_DEPENDENCE`) where none
    was calibrated."""
    figures = [f for _, f in calibrated_figures(bf, fingerprint)]
    return host_dependence(figures) if figures else DEFAULT_DEPENDENCE


def noise_for(
    bf: BaselineFile | None, fingerprint: Mapping[str, Any], metrics: Sequence[str]
) -> NoiseFigure | None:
    """The calibrated figure of the noisiest of *metrics* (``mmap.pp512``) on this host
    (``None``: none of them was calibrated here)."""
    wanted = set(metrics)
    found = [f for m, f in calibrated_figures(bf, fingerprint) if m in wanted]
    return max(found, key=lambda f: f.round_spread, default=None)
