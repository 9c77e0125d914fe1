"""The journal of one run: what happens in it, appended as it happens by the host (its
fingerprint, probes, how it moved, servers' starts, traffic, each measurement as it grows), the
decision loop (what a verdict learned before spending its budget) and the fixture, gate and
cross-check (verdicts, baseline checks, llama-bench's rounds and numbers). Frozen, it is the run
record the store and the results file keep (:meth:`Journal.freeze`); read back from either, that
record is what a stored host replays (:class:`~pytest_moeperf.run.replayed.StoredHost`).

Nothing else holds these facts: a report, the store and an accept read them here, so that what a
run says of itself is what it recorded, in the order it happened.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from ..host.probe import Probe
from ..llama.bench import BenchResult
from ..llama.startup import StartupFinding
from ..measure.measurement import Measurement
from ..measure.traffic import TrafficRun
from .record import BenchRound, CheckRecord, RunRecord, VerdictRecord, bench_entry

ServerKey = tuple[str, str, str]
"""(profile, configuration, build label): one server of a run."""
MeasurementKey = tuple[str, str, str, str]
"""(profile, configuration, build label, workload)."""


def server_names(keys: Iterable[ServerKey]) -> dict[ServerKey, str]:
    """Each server's name as reports show it, ``mmap (b11434)``, with its profile in front
    (``embedded: mmap (b11434)``) when the keys span more than one profile."""
    keys = list(keys)
    several = len({k[0] for k in keys}) > 1
    return {k: (f"{k[0]}: " if several else "") + f"{k[1]} ({k[2]})" for k in keys}


class Journal:
    """What one run measured, judged and saw of its host, in the order it happened."""

    def __init__(self) -> None:
        self.host: dict[str, Any] = {}
        """The host's fingerprint (without builds and models), once it was taken."""
        self.fingerprints: dict[str, dict[str, Any]] = {}
        """Each profile's fingerprint (the build its servers run, the model), when first
        measured; the run's probes are added to each when frozen."""
        self.probes: dict[str, Probe] = {}
        """The calibration probe of each CPU set (``"0-1"``), as it was taken."""
        self.reprobes: dict[str, list[tuple[float, Probe]]] = {}
        """Later probes of each CPU set (wall time, probe)."""
        self.changes: dict[str, str] = {}
        """How the host changed under the run: the latest line of each probe figure that moved."""
        self.starts: dict[ServerKey, list[float]] = {}
        """Seconds each start of each server took until it answered."""
        self.traffic: dict[ServerKey, TrafficRun] = {}
        """Every pass of traffic sent to each server."""
        self.measurements: dict[MeasurementKey, Measurement] = {}
        """Each measurement as it stands (more samples replace it under its key), in the order
        they were first taken."""
        self.verdicts: list[VerdictRecord] = []
        self.checks: list[CheckRecord] = []
        self.bench_rounds: list[BenchRound] = []
        self.bench: dict[MeasurementKey, BenchResult] = {}
        self.notices: list[str] = []
        """What verdicts learned before spending their budgets, in order."""
        self.findings: dict[ServerKey, list[StartupFinding]] = {}
        """The performance warnings each server printed at its (last) start, and where its
        memory landed when that was a warning."""
        self.setup_seconds = 0.0
        """Seconds spent on builds, models and server starts: outside every verdict's budget."""

    # -- the host -----------------------------------------------------------------------------
    def hosted(self, fingerprint: dict[str, Any]) -> None:
        self.host = dict(fingerprint)

    def fingerprinted(self, profile: str, fingerprint: dict[str, Any]) -> None:
        self.fingerprints[profile] = dict(fingerprint)

    def probed(self, cpus: str, probe: Probe) -> None:
        self.probes[cpus] = probe

    def reprobed(self, cpus: str, at: float, probe: Probe) -> None:
        self.reprobes.setdefault(cpus, []).append((at, probe))

    def host_changed(self, line: str) -> None:
        """A probe figure moved: *line* (``"compute on CPUs 0-1: ..."``), kept as the latest
        of the figure it is about, last."""
        figure = line.split(":", 1)[0]
        self.changes.pop(figure, None)
        self.changes[figure] = line

    @property
    def host_changes(self) -> list[str]:
        return list(self.changes.values())

    @property
    def measured_on(self) -> dict[str, Any]:
        """The fingerprint the run's numbers are judged on: the host's, with the run's probes."""
        fp = dict(self.host)
        if self.probes and "probes" not in fp:
            fp["probes"] = {k: p.to_dict() for k, p in sorted(self.probes.items())}
        return fp

    def started(self, server: ServerKey, seconds: float) -> None:
        self.starts.setdefault(server, []).append(seconds)

    def found(self, server: ServerKey, findings: Iterable[StartupFinding], *, start: bool) -> None:
        """What *server* warned of: at a *start*, its findings so far replaced; else added."""
        if start:
            self.findings[server] = []
        self.findings.setdefault(server, []).extend(findings)

    def set_up(self, seconds: float) -> None:
        self.setup_seconds += seconds

    # -- measurements and verdicts ------------------------------------------------------------
    def measured(self, key: MeasurementKey, measurement: Measurement) -> None:
        self.measurements[key] = measurement

    def forget(self, profile: str, labels: Iterable[str]) -> None:
        """Drop what the servers of these build labels of *profile* measured and sent: a
        gate's sides (``baseline``, ``candidate``) about to name other builds."""
        gone = set(labels)
        tables: tuple[dict[Any, Any], ...] = (
            self.measurements,
            self.traffic,
            self.starts,
            self.findings,
        )
        for table in tables:
            for key in [k for k in table if k[0] == profile and k[2] in gone]:
                del table[key]

    def judged(self, verdict: VerdictRecord) -> None:
        self.verdicts.append(verdict)

    def checked(self, check: CheckRecord) -> None:
        self.checks.append(check)

    def benched(self, key: MeasurementKey, result: BenchResult) -> None:
        self.bench[key] = result

    def bench_round(self, entry: BenchRound) -> None:
        self.bench_rounds.append(entry)

    def noticed(self, line: str) -> None:
        self.notices.append(line)

    @property
    def taken(self) -> list[Measurement]:
        """The measurements with samples this run took (what its record holds)."""
        return [m for m in self.measurements.values() if m.samples]

    # -- the record ---------------------------------------------------------------------------
    def load_times(self) -> dict[str, list[float]]:
        """Seconds each start of each server took, by the server's name."""
        return {name: list(self.starts[k]) for k, name in server_names(self.starts).items()}

    def startup_findings(self) -> dict[str, list[dict[str, Any]]]:
        """Each server's startup warnings, by the server's name."""
        keys = [k for k, found in self.findings.items() if found]
        return {
            name: [asdict(f) for f in self.findings[k]] for k, name in server_names(keys).items()
        }

    def traffic_runs(self) -> dict[str, dict[str, Any]]:
        """Each server's traffic, every pass and request, by the server's name."""
        keys = [k for k, run in self.traffic.items() if run.passes]
        return {name: self.traffic[k].to_dict() for k, name in server_names(keys).items()}

    def freeze(self) -> RunRecord:
        """The run record of what was appended so far (the results file's document)."""
        probes = {k: p.to_dict() for k, p in sorted(self.probes.items())}
        profiles = sorted({m.conditions.profile for m in self.measurements.values()} - {""})
        return RunRecord(
            fingerprint=dict(self.host),
            fingerprints={
                p: {**self.fingerprints.get(p, self.host), "probes": probes} for p in profiles
            },
            probes=probes,
            reprobes={
                k: [{"at": at, **p.to_dict()} for at, p in seen]
                for k, seen in sorted(self.reprobes.items())
            },
            host_changes=self.host_changes,
            server_starts=self.load_times(),
            measurements=list(self.measurements.values()),
            traffic=self.traffic_runs(),
            verdicts=list(self.verdicts),
            bench_rounds=list(self.bench_rounds),
            bench=[bench_entry(k, b) for k, b in self.bench.items()],
            baseline_checks=list(self.checks),
            notices=list(self.notices),
            startup_findings=self.startup_findings(),
            setup_seconds=round(self.setup_seconds, 3),
        )
