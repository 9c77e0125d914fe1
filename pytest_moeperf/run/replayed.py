"""The replayed source: stored numbers judged without starting a server.

It reads a results file a run wrote (raw samples, the conditions they were taken in, and each
verdict's rounds as they were taken: their samples, process blocks, those set aside) or a baseline
file (a decision record's table cells as figures with a spread, or accepted samples). A
verdict's feed gives the rounds that were measured for it, so that a replayed verdict is the
verdict that was measured; a file without them (results format 1, baseline files) pairs every
stored sample of both sides in order. What it stores is all there is: no feed gives more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..config.profiles import Configuration, Profile
from ..errors import ResultsError
from ..measure.measurement import Measurement
from ..measure.round import judged
from ..measure.workload import Workload
from ..store.journal import MeasurementKey
from ..store.record import RunRecord, matching
from ..store.replay import find_stored, read_stored
from ..verdicts.sequential import Plan
from .source import (
    PAIRED_METHOD,
    Feed,
    Host,
    Side,
    StoredFeed,
    block_length,
    paired_in_order,
    side_of,
)


class StoredHost(Host):
    """A stored host: the measurements and rounds of a stored run's record (a results file,
    the store, a baseline file), read where it keeps them. What it gives the run is read, not
    taken: :attr:`measurements` are its own, and the run's journal gets no measurement of it."""

    def __init__(
        self,
        record: RunRecord,
        profiles: Mapping[str, Profile],
        *,
        path: Path,
        option: str = "--moeperf-replay",
        profile: str | None = None,
    ) -> None:
        super().__init__()
        self.record = record
        self.path, self.option = path, option
        """Where the run was read from, and the option that named it (for messages)."""
        self.profile = profile
        """The profile a baseline file belongs to (``None``: results files name it per row)."""
        self.given: dict[MeasurementKey, Measurement] = {}
        """Each stored measurement the run was given, by (profile, configuration, build,
        workload)."""
        self._unused = list(record.verdicts)
        check_configurations(self, profiles)

    @classmethod
    def read(
        cls, path: Path, profiles: Mapping[str, Profile], option: str = "--moeperf-replay"
    ) -> StoredHost:
        """The stored run of a results file (JSON) or a baseline file (TOML)."""
        record, profile = read_stored(path, option)
        return cls(record, profiles, path=path, option=option, profile=profile)

    @property
    def measurements(self) -> dict[MeasurementKey, Measurement]:
        return self.given

    def measure(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        repetitions: int | None = None, build: str | None = None,
    ) -> Measurement:  # fmt: skip
        m = find_stored(
            self.record.measurements, self.path, profile.name, configuration.name, workload,
            build, profile.build_label,
        )  # fmt: skip
        self.given[(profile.name, m.configuration, m.build, workload.name)] = m
        return m

    def pair(self, profile: Profile, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        # looked up in the order a claim names them (its left side first)
        mb = self.measure(profile, b.configuration, b.workload, None, b.build)
        ma = self.measure(profile, a.configuration, a.workload, None, a.build)
        if min(len(ma.samples), len(mb.samples)) < 2:  # stored figures: no rounds
            feed = StoredFeed((ma, mb), [], [])
            feed.unpaired = (ma.operand, mb.operand)
            return feed
        keys = [(profile.name, m.configuration, m.build, m.workload.name) for m in (ma, mb)]
        sides = (side_of(profile, ma), side_of(profile, mb))
        found = matching(self._unused, label, relation, keys)
        if found is None or not self._unused[found].rounds:  # every stored sample, in order
            return StoredFeed((ma, mb), paired_in_order((ma.values, mb.values)), sides)
        record = self._unused.pop(found)
        assert record.sides is not None
        stored = record.plan
        plan = None if stored is None else Plan.from_dict(stored)
        if plan is not None and "block" not in (stored or {}):  # kept before blocks were
            plan = replace(plan, block=block_length([r.block for r in judged(record.rounds)]))
        return StoredFeed(
            (ma, mb),
            record.rounds,
            record.sides,
            record.taken or PAIRED_METHOD,
            record.moved,
            plan,
            record.busy,
        )

    def series(self, profile: Profile, configuration: Configuration, workload: Workload) -> Feed:
        m = self.measure(profile, configuration, workload)
        return StoredFeed((m,), paired_in_order((m.values,)), (side_of(profile, m),))

    def fingerprint(self, profile: Profile, label: str | None = None) -> dict[str, Any]:
        return self.record.host_fingerprint

    @property
    def measured_on(self) -> dict[str, Any]:
        return self.record.host_fingerprint

    @property
    def host_changes(self) -> list[str]:
        return list(self.record.host_changes)

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        return list(self.record.host_changes)


def check_configurations(stored: StoredHost, profiles: Mapping[str, Profile]) -> None:
    """Every stored measurement names a profile and configuration this session knows: an
    entry of another configuration would be ignored silently, so it is an error naming it."""
    for m in stored.record.measurements:
        name = m.conditions.profile or stored.profile
        if name is None:
            continue
        profile = profiles.get(name)
        where = f"{stored.option} {stored.path}: {m.configuration} {m.workload} ({m.build})"
        if profile is None:
            config = "--moeperf-config" if stored.option.startswith("--moeperf") else "--config"
            raise ResultsError(
                f"{where} is of profile {name!r}, which no configuration file here defines; "
                f"replay it with the moeperf config that ran it ({config})"
            )
        if m.configuration not in profile.configurations:
            known = ", ".join(profile.configurations)
            raise ResultsError(
                f"{where}: profile {name!r} ({profile.source}) has no configuration "
                f"{m.configuration!r} (known: {known}); add it to the profile, or replay the "
                "file with the configuration file that ran it"
            )
