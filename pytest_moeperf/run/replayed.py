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
from typing import Any

from ..config.profiles import Configuration, Profile
from ..defaults import PRIOR_PROCESS_TERM
from ..errors import ResultsError
from ..measure.dependence import Dependence
from ..measure.measurement import Measurement
from ..measure.round import judged
from ..measure.workload import Workload
from ..store.journal import MeasurementKey
from ..store.record import matching
from ..store.replay import Replay
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


def stored_plan(stored: Mapping[str, float | None]) -> Plan:
    """The look schedule a stored verdict was judged by (a record of before the process
    term's evidence was stored is judged as on a host not calibrated: its blocks decide)."""

    def number(key: str, default: float | None = None) -> float:
        value = stored.get(key) if default is not None else stored[key]
        return default if value is None else float(value)  # type: ignore[return-value]

    block = stored.get("block")
    return Plan(
        first_look=int(number("first_look")),
        max_rounds=int(number("max_rounds")),
        growth=number("growth"),
        alpha=number("alpha"),
        trim=number("trim"),
        dependence=Dependence(
            number("process", 0.0),
            number("lag1", 0.0),
            number("process_df", 0.0),
            number("round_spread", 0.0),
        ),
        block=None if block is None else int(block),
        early=stored.get("prior_process") is not None,  # a plan of before early looks: none
        prior_process=number("prior_process", PRIOR_PROCESS_TERM),
        first_early=int(number("first_early", 2.0)),  # before 2026-12-06: looked after 2 rounds
    )


class StoredHost(Host):
    """A stored host: measurements and rounds read back from a stored run's journal (a
    results file, the store, a baseline file). What it gives the run is read, not taken:
    :attr:`measurements` are its own, and the run's journal gets no measurement of it."""

    def __init__(self, replay: Replay, profiles: Mapping[str, Profile]) -> None:
        super().__init__()
        self.replay = replay
        self.given: dict[MeasurementKey, Measurement] = {}
        """Each stored measurement the run was given, by (profile, configuration, build,
        workload)."""
        self._unused = list(replay.journal.verdicts)
        check_configurations(replay, profiles)

    @property
    def measurements(self) -> dict[MeasurementKey, Measurement]:
        return self.given

    def measure(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        repetitions: int | None = None, build: str | None = None,
    ) -> Measurement:  # fmt: skip
        m = self.replay.find(profile.name, configuration.name, workload, build, profile.build_label)
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
        plan = None if stored is None else stored_plan(stored)
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
        return dict(self.replay.journal.measured_on)

    @property
    def measured_on(self) -> dict[str, Any]:
        return dict(self.replay.journal.measured_on)

    @property
    def host_changes(self) -> list[str]:
        return self.replay.journal.host_changes

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        return self.replay.journal.host_changes


def check_configurations(replay: Replay, profiles: Mapping[str, Profile]) -> None:
    """Every stored measurement names a profile and configuration this session knows: an
    entry of another configuration would be ignored silently, so it is an error naming it."""
    for m in replay.journal.measurements.values():
        name = m.conditions.profile or replay.profile
        if name is None:
            continue
        profile = profiles.get(name)
        where = f"{replay.option} {replay.path}: {m.configuration} {m.workload} ({m.build})"
        if profile is None:
            config = "--moeperf-config" if replay.option.startswith("--moeperf") else "--config"
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
