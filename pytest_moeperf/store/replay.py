"""Replay: stored numbers read back as a run record, for a stored host to judge without
starting servers (:class:`~pytest_moeperf.run.replayed.StoredHost`).

The source is a results file that a real run wrote (``.moeperf/results-*.json``: raw samples)
or a baseline file (``baselines/*.toml``: stored figures such as a decision record's table
cells, or accepted samples); a bisect's ``--json`` holds the run record of each of its gates.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ..defaults import MIN_REL_SPREAD
from ..errors import ResultsError, Unavailable
from ..measure.measurement import Conditions, Measurement, Sample
from ..measure.stats import Figure
from ..measure.workload import Workload
from ..verdicts.reference import stand_in
from .baselines import BaselineEntry, BaselineFile, load_baselines
from .record import RunRecord, read_record


def read_stored(path: Path, option: str = "--moeperf-replay") -> tuple[RunRecord, str | None]:
    """The stored run in *path* (named by *option*): a results file's record (JSON), or a
    baseline file's entries as a record of its host (TOML) with the profile it belongs to
    (``None`` for a results file, which names it per measurement)."""
    if not path.is_file():
        raise ResultsError(f"{option} {path}: no such file")
    if path.suffix == ".toml":
        return _from_baselines(path, option)
    return read_record(path, option), None


def _from_baselines(path: Path, option: str) -> tuple[RunRecord, str]:
    bf = load_baselines(path)
    if len(bf.hosts) > 1:
        raise ResultsError(
            f"{option} {path}: holds the numbers of {len(bf.hosts)} hosts "
            f"({', '.join(h.id for h in bf.hosts)}); replay a results file of one run instead"
        )
    ms = _traffic_stand_ins(bf)
    for e in bf.entries:
        if e.kind != "bench":
            continue
        w = Workload.parse(e.workload)
        told = _conditions(bf, e, e.source)
        if e.samples:
            samples = tuple(Sample.of_value(w, v) for v in e.samples)
            ms.append(Measurement(e.configuration, e.build, w, samples, told))
        else:
            fig = Figure(e.value, e.rel_spread or MIN_REL_SPREAD)
            ms.append(Measurement(e.configuration, e.build, w, (), told, figure=fig))
    first: dict[tuple[str | None, str, str, str], Measurement] = {}
    for m in ms:  # the first of a key, as a lookup finds it
        first.setdefault((m.conditions.profile, m.configuration, m.build, m.workload.name), m)
    return RunRecord(
        fingerprint=dict(bf.fingerprint), measurements=list(first.values())
    ), bf.profile


def find_stored(
    measurements: Iterable[Measurement],
    where: Path,
    profile: str,
    configuration: str,
    workload: Workload,
    build: str | None,
    profile_build: str | None = None,
) -> Measurement:
    """The stored measurement (of the run read from *where*) of *profile*'s *configuration*;
    without *build*, the profile's own build (*profile_build*), or the only build stored for
    it. Missing data is :class:`~pytest_moeperf.errors.Unavailable`."""
    rows = [
        m
        for m in measurements
        if m.configuration == configuration
        and m.workload == workload
        and (m.conditions.profile or profile) == profile
    ]
    if build is None and len(rows) > 1:
        build = profile_build
        if build is None:
            builds = ", ".join(sorted(m.build for m in rows))
            raise ResultsError(
                f"{where}: {configuration} {workload} is stored for builds {builds}; "
                f"name one in the claim, e.g. {configuration}[{rows[0].build}]."
                f"{workload.compact}"
            )
    for m in rows:
        if build is None or m.build == build:
            return m
    on = f" on build {build}" if build else ""
    raise Unavailable(f"replay file {where} has no {configuration} {workload}{on}")


def _conditions(bf: BaselineFile, e: BaselineEntry, source: str) -> Conditions:
    return Conditions(profile=bf.profile, source=source, flags=tuple((e.flags or "").split()))


def _traffic_stand_ins(bf: BaselineFile) -> list[Measurement]:
    """The file's traffic rows as the profile's ``traffic.prefill`` and ``traffic.decode`` of
    each configuration and build (:func:`~pytest_moeperf.verdicts.reference.stand_in`: a
    record's aggregate row is what a pass's metric computes), figures with their spread."""
    traffic = [e for e in bf.entries if e.kind == "traffic"]
    long = sorted(
        {m[1] for e in traffic if (m := re.fullmatch(r"prefill-aggregate>=(\d+)", e.workload))}
    )
    ms = []
    for configuration, build in dict.fromkeys((e.configuration, e.build) for e in traffic):
        own = [e for e in traffic if e.build == build]
        for rate in ("prefill", "decode", *(f"prefill_{n}" for n in long)):
            w = Workload.traffic(rate)
            e = stand_in(own, configuration, w.name, build)
            if e is None:
                continue
            told = _conditions(bf, e, f"{e.source} (stands for {w.name})".strip())
            fig = Figure(e.value, e.rel_spread or MIN_REL_SPREAD)
            ms.append(Measurement(configuration, build, w, (), told, figure=fig))
    return ms
