"""The hosts of a baseline file, and which of them a run's numbers may be held against.

A host is its fingerprint *and* its calibration probe's figures: two machines that look the
same to ``/proc/cpuinfo`` can differ by 2.7x, so numbers are only ever held against the host
that recorded them. :func:`host_differences` says why a host is not this one;
:mod:`pytest_moeperf.store.accepted` picks the ``[[host]]`` whose numbers apply to a run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..defaults import PROBE_TOLERANCE
from ..errors import ConfigError
from ..host.probe import probe_differences, probes_of
from ..measure.workload import Workload
from ..verdicts.calibration import NoiseFigure

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


def canonical_workload(name: str) -> str:
    try:
        return Workload.parse(name).name
    except ConfigError:
        return name.strip()


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def fingerprint_mismatch(baseline_fp: Mapping[str, Any], host_fp: Mapping[str, Any]) -> list[str]:
    """One line per field of :data:`IDENTITY_FIELDS` that both fingerprints have and that
    differs: ``cpu_model: baseline 'X', host 'Y'``. Numbers within 2 % of each other count as
    equal (tools report memory sizes slightly differently); lists and tuples compare alike."""
    return [
        f"{name}: baseline {baseline_fp[name]!r}, host {host_fp[name]!r}"
        for name in IDENTITY_FIELDS
        if name in baseline_fp and name in host_fp and not _same(baseline_fp[name], host_fp[name])
    ]


def _same(a: Any, b: Any) -> bool:
    if is_number(a) and is_number(b):
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


def host_key(fingerprint: Mapping[str, Any]) -> str:
    """The name a store files a host's runs under: its hostname and a digest of its identity
    fields (``gpu-01/3fa2c1d04b``), so that two machines of one name, or one name reused on
    other hardware, stay apart. The probe's figures are not in it: a host's state moves, and
    which runs were measured alike is :func:`host_differences`' to say."""
    identity = {name: fingerprint[name] for name in IDENTITY_FIELDS if name in fingerprint}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode())
    return f"{fingerprint.get('hostname') or 'host'}/{digest.hexdigest()[:10]}"
