"""The host as a run measures it: a pre-flight of each configuration before its first
measurement (neighbours on its CPUs, ``numa_balancing``, a node the page cache fills), the
calibration probe of each CPU set, probes again before verdicts and at the end, and how the
host moved between them (a move beyond the probe tolerance makes later verdicts between
configurations undecided)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from ..defaults import BANDWIDTH_MOVE
from ..host.locks import measuring
from ..host.machine import OtherWork, format_cpu_list, online_cpus, parse_cpu_list
from ..host.preflight import neighbours, node_memory, numa_balancing, preflight_lines
from ..host.probe import Probe, probe_moved, probe_slower, run_probe
from ..store.journal import Journal
from .options import Options

FIRST_PROBES = 4
"""The most probes a CPU set's first reading takes: probes until two in a row agree (within
the probe tolerance), so that one slow reading at the start (a neighbour finishing, a cold
cache) does not become the run's reference and make every later verdict "host changed"."""


QUIET_SHARE = 0.05
"""A probe is quiet when other work took at most this share of its CPUs' time while it ran
(this project's idle VMs show 1-3 %). A reference probe that was not quiet gives way to the
first quiet one that reads no lower: other work only lowers a probe."""


def _reading(cpus: frozenset[int] | None) -> tuple[Probe, float]:
    """A probe of *cpus*, and the share of their time other work took while it ran."""
    other = OtherWork(cpus=cpus)
    probe = run_probe(cpus)
    return probe, other.share()


class HostWatch:
    """The probes of a run by CPU set (``"0-1"``) and the host changes they show."""

    def __init__(
        self, settings: Options, report: Callable[[str], None], journal: Journal | None = None
    ) -> None:
        self.settings = settings
        self.report = report
        self.journal = journal if journal is not None else Journal()
        """The run's journal: each probe, later probe and move of the host is appended to it as
        it happens."""
        self._probed_at: dict[str, float] = {}
        self._flown: set[str] = set()
        self._busy_reference: dict[str, float] = {}
        """The CPU sets whose reference probe was not quiet (:data:`QUIET_SHARE`), and other
        work's share of it: the first quiet probe that reads no lower replaces it (a minute of
        a co-tenant at the start is not the host moving)."""

    def preflight(
        self,
        name: str,
        cpus: frozenset[int] | None,
        numa_node: int | None,
        private_bytes: int,
        ours: Iterable[int],
        busy_limit: float,
    ) -> list[str]:
        """Once per configuration *name*: what would make its verdicts blind, said before it
        is measured (:func:`~pytest_moeperf.host.preflight.preflight_lines`)."""
        if name in self._flown:
            return []
        self._flown.add(name)
        watched = cpus if cpus is not None else online_cpus()
        return preflight_lines(
            name,
            cpus=watched,
            numa_node=numa_node,
            private_bytes=private_bytes,
            busy_limit=busy_limit,
            others=neighbours(watched, ours=ours),
            balancing=numa_balancing(),
            memory=node_memory(numa_node) if numa_node is not None else None,
        )

    @staticmethod
    def probe_key(cpus: frozenset[int] | None) -> str:
        """The CPU set a server pinned to *cpus* runs on, as a kernel list (``"0-1"``)."""
        return format_cpu_list(cpus if cpus is not None else online_cpus())

    def probe(self, cpus: frozenset[int] | None) -> Probe | None:
        """The calibration probe of the CPU set *cpus*, taken once per run under the CPUs'
        lock: probes until two in a row agree (at most :data:`FIRST_PROBES`), the later of
        them kept."""
        key = self.probe_key(cpus)
        if key not in self.journal.probes:
            tolerance = self.settings.probe_tolerance
            with measuring(cpus):
                readings = [_reading(cpus), _reading(cpus)]
                while len(readings) < FIRST_PROBES and probe_moved(
                    readings[-2][0], readings[-1][0], tolerance=tolerance
                ):
                    readings.append(_reading(cpus))
            taken = [p for p, _ in readings]
            probe, busy = readings[-1]
            self.journal.probed(key, probe)
            self._probed_at[key] = time.time()
            self.report(f"moeperf: host probe: {probe.describe()} in {probe.seconds:.1f} s")
            if busy > QUIET_SHARE:
                self._busy_reference[key] = busy
                self.report(
                    f"moeperf: host probe of CPUs {key} taken while other work held "
                    f"{100 * busy:.0f} % of them: the first quiet probe that reads no lower "
                    "replaces it as the run's reference"
                )
            if probe_moved(taken[-2], probe, tolerance=tolerance):
                self.report(
                    f"moeperf: host probe of CPUs {key} unsteady: {len(taken)} probes and no two "
                    "in a row agree; the last is the reference"
                )
            elif len(taken) > 2:
                first = "; ".join(probe_moved(taken[0], probe, tolerance=tolerance))
                self.report(
                    f"moeperf: host probe of CPUs {key}: the first reading was off ({first}); "
                    f"{len(taken)} probes before two agreed"
                )
        return self.journal.probes[key]

    def host_moved(self, keys: set[str] | list[str], *, force: bool = False) -> list[str]:
        """Probe the CPU sets *keys* again (when their last probe is older than
        ``options.reprobe_seconds``, or always with *force*) and say how each moved from its first
        probe beyond the probe tolerance (memory bandwidth: beyond
        :data:`~pytest_moeperf.defaults.BANDWIDTH_MOVE` at the least): one line per figure,
        ``[]`` when the host is as it was. Every move is also kept in the journal."""
        lines = []
        tolerance = self.settings.probe_tolerance
        wide = max(tolerance, BANDWIDTH_MOVE)  # the bandwidth probe swings where llama.cpp does not
        for key in sorted(keys):
            first = self.journal.probes.get(key)
            if first is None:
                continue
            seen = self.journal.reprobes.get(key, [])
            last_at = seen[-1][0] if seen else self._probed_at.get(key, 0.0)
            if force or time.time() - last_at >= self.settings.reprobe_seconds:
                cpus = parse_cpu_list(key)
                with measuring(cpus):
                    again, busy = _reading(cpus)
                self.journal.reprobed(key, time.time(), again)
                if self._rebased(key, first, again, busy):
                    continue
                seen = self.journal.reprobes[key]
                if probe_moved(first, seen[-1][1], tolerance=tolerance, bandwidth_tolerance=wide):
                    with measuring(cpus):  # a move must be confirmed by a second probe
                        self.journal.reprobed(key, time.time(), run_probe(cpus))
            if not seen:
                continue
            recent = [p for _, p in seen[-2:]]
            for line in probe_moved(first, *recent, tolerance=tolerance, bandwidth_tolerance=wide):
                lines.append(line)
                self.journal.host_changed(line)  # the latest of its figure, last
        return lines

    def _rebased(self, key: str, first: Probe, again: Probe, busy: float) -> bool:
        """Whether *again*, a quiet probe of CPU set *key* that reads no lower than its
        reference *first* taken beside other work, became the reference (said when it does)."""
        held = self._busy_reference.get(key)
        quiet = busy <= QUIET_SHARE
        if held is None or not quiet or probe_slower(first, again, self.settings.probe_tolerance):
            return False
        del self._busy_reference[key]
        self.journal.probed(key, again)
        self.report(
            f"moeperf: host probe of CPUs {key} quiet ({100 * busy:.0f} % other work): "
            f"{again.describe()}, the run's reference now (the first, {first.describe()}, ran "
            f"beside {100 * held:.0f} % other work)"
        )
        return True
