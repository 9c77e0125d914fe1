"""The hosts of a baseline file, and which of them a run's numbers may be held against.

A host is its fingerprint *and* its calibration probe's figures: two machines that look the
same to ``/proc/cpuinfo`` can differ by 2.7x, so numbers are only ever held against the host
that recorded them. :func:`host_for` picks the ``[[host]]`` whose numbers apply to this run,
:func:`host_differences` says why a host is not this one, and :func:`accepted_history` lists
what one host accepted over time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..defaults import PROBE_TOLERANCE
from ..errors import ConfigError
from ..host.probe import probe_differences, probes_of
from ..measure.workload import Workload
from ..verdicts.calibration import NoiseFigure

if TYPE_CHECKING:
    from ..verdicts.creep import PairedChange
    from .baselines import BaselineEntry, BaselineFile

IDENTITY_FIELDS = (
    "cpu_model",
    "cpus",
    "sockets",
    "cores",
    "numa_nodes",
    "memory_gib",
    "gpus",
    "model",
)
"""Fingerprint fields that name the host and model (as :func:`pytest_moeperf.host.host_fingerprint`
names them, plus ``sockets``, ``cores`` and ``model``); a difference means the figures were
taken on other hardware."""


@dataclass(frozen=True)
class BaselineHost:
    """A host a baseline file holds numbers of: its fingerprint, the probe's figures in it."""

    id: str
    fingerprint: dict[str, Any] = field(default_factory=dict)
    note: str | None = None
    noise: dict[str, NoiseFigure] = field(default_factory=dict)
    """Its noise per metric (``mmap.pp512``), as ``moeperf calibrate`` measured it."""

    def describe(self) -> str:
        """One line: id, CPU, memory, probes."""
        fp = self.fingerprint
        parts = [
            str(fp.get("cpu_model", "?")),
            f"{fp.get('cpus', '?')} CPUs",
            f"{fp.get('memory_gib', '?')} GiB",
        ]
        if fp.get("gpus"):
            parts.append(", ".join(map(str, fp["gpus"])))
        if fp.get("hostname"):
            parts.append(f"hostname {fp['hostname']}")
        probes = probes_of(fp)
        shown = [
            f"{p.bandwidth_gbs:.1f} GB/s, {p.compute_gops:.1f} Gop/s on CPUs {cpus}"
            for cpus, p in sorted(probes.items())
        ]
        parts.append("probe: " + ("; ".join(shown) if shown else "none (recorded without one)"))
        return f"{self.id}: " + ", ".join(parts)


def _canonical_workload(name: str) -> str:
    try:
        return Workload.parse(name).name
    except ConfigError:
        return name.strip()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def fingerprint_mismatch(
    baseline_fp: Mapping[str, Any],
    host_fp: Mapping[str, Any],
    fields: Iterable[str] = IDENTITY_FIELDS,
) -> list[str]:
    """One line per field of *fields* that both fingerprints have and that differs:
    ``cpu_model: baseline 'X', host 'Y'``. Numbers within 2 % of each other count as equal
    (tools report memory sizes slightly differently); lists and tuples compare alike."""
    lines = []
    for name in fields:
        if name not in baseline_fp or name not in host_fp:
            continue
        if not _same(baseline_fp[name], host_fp[name]):
            lines.append(f"{name}: baseline {baseline_fp[name]!r}, host {host_fp[name]!r}")
    return lines


def _same(a: Any, b: Any) -> bool:
    if _number(a) and _number(b):
        return bool(abs(a - b) <= 0.02 * max(abs(a), abs(b)))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def host_differences(
    host: BaselineHost,
    fingerprint: Mapping[str, Any],
    cpus: str | None,
    tolerance: float = PROBE_TOLERANCE,
) -> list[str]:
    """Why *host* (a baseline file's) is not the host *fingerprint* describes, one line per
    reason; empty when it is the same host.

    The same host has the same identity fields (:func:`fingerprint_mismatch`) and measures the
    same: the probe's figures on the CPU set *cpus* (on every CPU set both probed, when
    ``None``) within *tolerance*. Where only one side has probe figures, the two cannot be
    told apart and count as different; where neither has any (a replayed file of an older
    version), the identity fields decide."""
    lines = [f"{host.id}: {line}" for line in fingerprint_mismatch(host.fingerprint, fingerprint)]
    if lines:
        return lines
    here, there = probes_of(fingerprint), probes_of(host.fingerprint)
    if not here and not there:
        return []
    if cpus is not None:
        if cpus not in there:
            return [
                f"{host.id} has no probe figures on CPUs {cpus} (recorded "
                f"{'without a probe' if not there else 'on CPUs ' + ', '.join(sorted(there))}): "
                "record this host's numbers with --moeperf-accept"
            ]
        if cpus not in here:
            return [f"this run has no probe figures on CPUs {cpus} to compare with {host.id}'s"]
        return [
            f"{host.id}: {line}" for line in probe_differences(here[cpus], there[cpus], tolerance)
        ]
    common = sorted(set(here) & set(there))
    if not common:
        return [f"{host.id} and this host were probed on different CPUs, or one of them not at all"]
    return [
        f"{host.id}: {line}"
        for c in common
        for line in probe_differences(here[c], there[c], tolerance)
    ]


def accepted_history(
    bf: BaselineFile, host: str, configuration: str, workload: str
) -> list[BaselineEntry]:
    """Every baseline of (*configuration*, *workload*) on *host* the file holds, current
    entries and replaced ones of any build, oldest first (by date, then file order)."""
    wanted = _canonical_workload(workload)
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
