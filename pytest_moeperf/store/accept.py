"""Accepting measurements as baselines: the one way numbers get into a baseline file.

``pytest -m perf --moeperf-accept`` and ``moeperf gate --accept`` both go through
:func:`accept_measurements`: first the whole refusal policy (:func:`refusals`: failed tests, a
slower or undecided gate row, different output, creep past the oldest accepted baseline, a
busy host, a host that changed), then the read-modify-write of the file under its lock, so
that two accepts at once (two xdist workers, a gate beside a pytest run) take turns and lose
nothing. Nothing is written when anything refuses.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..defaults import PROBE_TOLERANCE
from ..errors import BaselineError
from ..fs import atomic_write_text, cache_dir, file_lock
from ..measure.measurement import Measurement
from ..verdicts.calibration import NoiseFigure
from ..verdicts.creep import PairedChange
from .baselines import BaselineEntry, BaselineFile, dump_baselines, load_baselines, parse_baselines
from .hosts import BaselineHost, host_differences


def refusals(
    *,
    failed: int = 0,
    host_changes: Sequence[str] = (),
    busy: Sequence[str] = (),
    slower: Sequence[str] = (),
    different: Sequence[str] = (),
    undecided: Sequence[str] = (),
    crept: Sequence[str] = (),
) -> list[str]:
    """Why the numbers of a run must not become baselines, one reason per kind; ``[]`` when
    nothing refuses. *busy*, *slower*, *different*, *undecided* and *crept* name what they
    concern (measurements, gate rows, configurations)."""
    reasons = []
    if failed:
        reasons.append(f"{failed} test(s) failed; fix or deselect them")
    if slower:
        reasons.append(f"the candidate is slower: {', '.join(slower)}")
    if different:
        reasons.append(
            f"the candidate's output differs from the baseline's ({', '.join(different)}; "
            "--allow-different-output to accept anyway)"
        )
    if undecided:
        reasons.append(
            f"undecided rows (budget spent): {', '.join(undecided)}; give --budget more "
            "seconds, or --undecided pass to accept anyway"
        )
    if crept:
        reasons.append(
            f"{', '.join(crept)} slower than the oldest accepted baseline (the accepted chain "
            "adds up to a regression); --allow-creep accepts anyway"
        )
    if host_changes:
        reasons.append(f"the host changed under the run ({'; '.join(host_changes)})")
    if busy:
        reasons.append(f"the host was busy with other work while measuring {', '.join(busy)}")
    return reasons


def refuse(what: str, reasons: Sequence[str]) -> None:
    """One :class:`BaselineError` line when *reasons* refuse the accept *what* names."""
    if reasons:
        raise BaselineError(f"{what} refused, nothing written: {'; '.join(reasons)}; run again")


@contextlib.contextmanager
def baseline_lock(path: Path) -> Iterator[None]:
    """The cross-process lock of the baseline file *path* (by its absolute path): every
    accept of that file, in any process, holds it for its read-modify-write."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    with file_lock(cache_dir() / "locks" / f"baseline-{digest}.lock"):
        yield


def accept_measurements(
    path: Path | str,
    profile: str,
    measurements: Iterable[Measurement],
    fingerprint: Mapping[str, Any],
    *,
    source: str,
    date: str | dt.date | None = None,
    probe_tolerance: float = PROBE_TOLERANCE,
    changes: Mapping[tuple[str, str], PairedChange] | None = None,
) -> BaselineFile:
    """Store *measurements* as *profile*'s baselines of the host *fingerprint* describes in the
    file at *path* (:func:`refuse` heard first). *changes* (a gate's accept) gives each
    (configuration, workload) its paired change, stored with its entry as a link of the
    accepted chain.

    The host is the file's ``[[host]]`` that :func:`host_differences` finds the same
    (fingerprint fields equal, probe figures within *probe_tolerance*); its fingerprint
    becomes *fingerprint*. A host the file does not hold yet is added as a new ``[[host]]``:
    another host's numbers are never replaced. Each measurement replaces this host's entry
    with the same (build, configuration, workload) in place, keeping its per-entry tolerance;
    the replaced entry moves under ``[[history]]`` with ``replaced = date``. The file (created
    if missing) is read, changed and written atomically under its lock: a failure leaves the
    old file as it was. Returns what was written."""
    path = Path(path)
    with baseline_lock(path):
        when = date or dt.date.today()
        day = when.isoformat() if isinstance(when, dt.date) else str(when)
        old = _read_for(path, profile)
        hosts, host_id = _this_host(old, fingerprint, probe_tolerance)
        entries = list(old.entries)
        history = list(old.history)
        index = {e.key: i for i, e in enumerate(entries) if e.host == host_id}
        accepted: set[tuple[str, str, str]] = set()
        for m in measurements:
            samples = tuple(_round(v) for v in m.values)
            if not samples:
                raise BaselineError(f"{path}: measurement {m.key} has no samples to accept")
            flags = " ".join(m.conditions.flags)
            new = BaselineEntry(
                build=m.build,
                configuration=m.configuration,
                workload=m.workload.name,
                value=statistics.median(samples),
                date=day,
                source=source,
                samples=samples,
                repetitions=len(samples),
                flags=flags or None,
                host=host_id,
                change=(changes or {}).get((m.configuration, m.workload.name)),
            )
            if new.key in accepted:
                raise BaselineError(
                    f"{path}: two measurements of {', '.join(new.key)} given to accept; pass one"
                )
            accepted.add(new.key)
            if new.key in index:
                previous = entries[index[new.key]]
                history.append(replace(previous, replaced=day))
                entries[index[new.key]] = replace(new, tolerance=previous.tolerance)
            else:
                index[new.key] = len(entries)
                entries.append(new)
        bf = BaselineFile(
            profile=profile,
            tolerance=old.tolerance,
            hosts=tuple(hosts),
            entries=tuple(entries),
            history=tuple(history),
            note=old.note,
            path=path,
        )
        return _write(path, bf)


def _round(value: float) -> float:
    """Six significant digits: far below run-to-run noise, and short in the file."""
    return float(f"{value:.6g}")


def _read_for(path: Path, profile: str) -> BaselineFile:
    """The baseline file at *path* (an empty one of *profile* when there is none yet)."""
    if not path.exists():
        return BaselineFile(profile=profile)
    old = load_baselines(path)
    if old.profile != profile:
        raise BaselineError(
            f"{path}: holds baselines of profile {old.profile!r}, not {profile!r}; "
            "accept into that profile's own file"
        )
    return old


def accepted_tolerance(
    kept: BaselineFile, fingerprint: Mapping[str, Any], m: Measurement
) -> float | None:
    """The tolerance the checks of *m*'s entry in *kept* (as :func:`accept_measurements`
    wrote it for the host *fingerprint* describes) pass down to; ``None`` when it holds none."""
    _, host_id = _this_host(kept, fingerprint, PROBE_TOLERANCE, refresh=False)
    entry = kept.find(m.build, m.configuration, m.workload.name, host_id)
    return None if entry is None else kept.tolerance_for(entry)


def _this_host(
    old: BaselineFile,
    fingerprint: Mapping[str, Any],
    probe_tolerance: float,
    *,
    refresh: bool = True,
) -> tuple[list[BaselineHost], str]:
    """*old*'s hosts with this one's fingerprint brought up to date (or added as a new
    ``[[host]]`` when the file holds none that is the same), and this host's id. Up to date:
    this run's facts, its probes merged over the stored ones (a CPU set this run did not probe
    keeps the probe its numbers were taken with); with *refresh* false the stored fingerprint
    stays as it is (figures stored beside numbers of another day)."""
    hosts = list(old.hosts)
    same = [h for h in hosts if not host_differences(h, fingerprint, None, probe_tolerance)]
    if same:
        host_id = same[0].id
        if refresh:
            hosts = [
                replace(h, fingerprint=_merged(h.fingerprint, fingerprint))
                if h.id == host_id
                else h
                for h in hosts
            ]
        return hosts, host_id
    taken = {h.id for h in hosts}
    host_id = next(f"host-{n}" for n in range(1, len(taken) + 2) if f"host-{n}" not in taken)
    hosts.append(BaselineHost(host_id, dict(fingerprint)))
    return hosts, host_id


def _merged(stored: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, Any]:
    """*now*'s fingerprint with the probes of *stored* that *now* did not take kept."""
    probes = {**dict(stored.get("probes") or {}), **dict(now.get("probes") or {})}
    return {**dict(now), "probes": probes} if probes else dict(now)


def _write(path: Path, bf: BaselineFile) -> BaselineFile:
    """Write *bf* to *path* atomically, after reading its text back (a file this could not read
    again is never written)."""
    text = dump_baselines(bf)
    checked = parse_baselines(text, name=str(path))
    try:
        atomic_write_text(path, text)
    except OSError as e:
        raise BaselineError(f"{path}: cannot write: {e}") from None
    return replace(checked, path=path)


def accept_noise(
    path: Path | str,
    profile: str,
    fingerprint: Mapping[str, Any],
    figures: Mapping[str, NoiseFigure],
    *,
    probe_tolerance: float = PROBE_TOLERANCE,
) -> tuple[BaselineFile, str]:
    """Store *figures* (``moeperf calibrate``'s, per metric) with this host's ``[[host]]`` in
    the baseline file at *path* (adding the host when the file has none that is the same), each
    replacing that metric's earlier figure; under the file's lock, atomically. Returns the file
    written and the host's id."""
    path = Path(path)
    with baseline_lock(path):
        old = _read_for(path, profile)
        hosts, host_id = _this_host(old, fingerprint, probe_tolerance, refresh=False)
        hosts = [replace(h, noise={**h.noise, **figures}) if h.id == host_id else h for h in hosts]
        return _write(path, replace(old, hosts=tuple(hosts), path=path)), host_id
