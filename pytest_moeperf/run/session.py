"""Run-wide state of a perf session: its options, its profiles, its source of samples, what its
tests judged, and the run record it writes.

One :class:`PerfSession` lives for a pytest session (one per xdist worker), or for one
``moeperf`` command. Its source is chosen once, by :func:`~.opening.perf_session`: live
servers, or a replayed file (``--moeperf-replay``); nothing else in the session asks which,
and nothing here imports the live host.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..config.profiles import Profile, load_profiles, upgraded
from ..config.reference import profile_reference
from ..errors import BaselineError, ConfigError, StoreError
from ..fs import write_output
from ..measure.dependence import Dependence, ProcessEvidence
from ..measure.measurement import Measurement
from ..store.accept import accept_measurements, accepted_tolerance, refusals, refuse
from ..store.accepted import accepted_history, dependence_for, noise_for
from ..store.baselines import BaselineEntry, BaselineFile, load_baselines
from ..store.database import store_url
from ..store.history import write_history
from ..store.hosts import BaselineHost, canonical_workload, host_key
from ..store.journal import Journal
from ..store.record import CheckRecord, RunRecord, VerdictRecord
from ..store.runstore import RunStore, run_key
from ..store.sessions import session_levels
from ..store.transfer import StoreHandle
from ..verdicts.baseline_check import BaselineRow
from ..verdicts.calibration import NoiseFigure, history_dependence
from ..verdicts.creep import SessionTerm, session_term
from ..verdicts.reference import Reference, ReferenceRow
from ..verdicts.sequential import Plan
from .options import Options
from .pin import pin_moves
from .replayed import StoredHost
from .source import Host, MeasurementKey, Servers, Stage

STORE_RUN = "store:"
"""``--moeperf-replay store:KEY`` replays a run of the store (the first digits of its key)."""


class PerfSession:
    """The run-wide state of pytest-moeperf."""

    def __init__(
        self,
        options: Options,
        report: Callable[[str], None] | None = None,
        progress: Callable[[str], None] | None = None,
        source: Host | None = None,
        servers: Servers | None = None,
        profiles: dict[str, Profile] | None = None,
        stage: Stage | None = None,
    ) -> None:
        self.options = options
        self.report = report or (lambda line: None)
        """Progress lines shown with ``-v`` (server started, measuring)."""
        self.progress = progress or self.report
        """Lines of long work shown always (building llama.cpp, writing the model)."""
        self._profiles = profiles
        """The profiles (given, or loaded from the options' files when first asked)."""
        self._baselines: dict[str, BaselineFile | None] = {}
        self._dependence: dict[str, Dependence] = {}
        self._evidence: dict[str, ProcessEvidence] = {}
        self.store = StoreHandle(
            store_url(options.store, options.results_dir),
            options.results_dir,
            default=not options.store,
            say=self.progress,
        )
        """Where this run is kept with every other (opened when first asked)."""
        if source is None:
            if options.replay is None:
                raise ValueError("a live session is opened by run.opening.perf_session")
            source = self._replay(options.replay)
        self.source: Host = source
        """The host samples come from: live servers, or a stored run."""
        self.journal: Journal = source.journal
        """What happens in this run, appended as it happens by the host, the loop and the
        tests (:mod:`pytest_moeperf.store.journal`); frozen, the run record."""
        self.servers: Servers | None = servers
        """The servers this session starts (``None``: a replayed run starts none)."""
        self.stage: Stage | None = servers if servers is not None else stage
        """What a gate (bisect, tune, calibrate, the upgrade check) asks of the host beside
        its rounds: the live servers, or a stored gate's ``StoredStage`` (``None``: a
        replayed run of tests, which gates nothing)."""
        self.last_use: dict[tuple[str, str], int] = {}
        self.baseline_rows: list[BaselineRow] = []
        """Each baseline check with its measurement, for the report (the journal keeps the
        check)."""
        self.reference_rows: list[ReferenceRow] = []
        """Each claim and dead end of a profile with a ``reference``, beside its numbers."""
        self._references: dict[str, Reference | None] = {}
        self.bench_errors: list[str] = []
        self.results_path: Path | None = None
        self.record: RunRecord | None = None
        """The run record, once written."""
        self.record_key = ""
        """Its key in the store (:func:`~pytest_moeperf.store.runstore.run_key`), once written."""
        self.accepted: list[Path] = []
        self.finish_error: str | None = None
        self.history_problems: list[str] = []
        self.report_files: list[Path] = []
        self.told: dict[tuple[str, str], str] = {}
        """Each skip reason the tests gave (head, detail), and the first test's label that gave
        it: said whole once."""
        self.accept_lines: list[str] = []
        """What an accepting upgrade check changed in the profiles files, as diffs."""
        self.upgrade: Any = None
        """The upgrade check's result once the session ended (the plugin's
        :class:`~pytest_moeperf.report.upgrade.UpgradeCheck`), for the terminal summary."""

    def stage_for(self, what: str) -> Stage:
        """The session's stage, which *what* (a gate, a race) needs; ``ValueError`` in a
        session of replayed tests, which has none."""
        if self.stage is None:
            raise ValueError(
                f"{what} runs in a session with a stage: live servers or a stored gate's"
            )
        return self.stage

    def _replay(self, named: Path) -> StoredHost:
        """The stored run *named*: a results or baseline file, or ``store:KEY`` (a run of the
        store, by the first digits of its key)."""
        text = str(named)
        if not text.startswith(STORE_RUN):
            return StoredHost.read(named, self.profiles)
        run = self.store.open().run(text.removeprefix(STORE_RUN))
        return StoredHost(run.record, self.profiles, path=Path(STORE_RUN + run.key[:12]))

    # -- declarations ---------------------------------------------------------------------------
    @property
    def profiles(self) -> dict[str, Profile]:
        if self._profiles is None:
            loaded = load_profiles(self.options.config_file, self.options.pyproject)
            self._profiles = upgraded(loaded, self.options.pinned, self.options.candidate)
        return self._profiles

    @property
    def candidate(self) -> str | None:
        """The label of the build an upgrade check judges beside the pinned one (``None``:
        this run checks no upgrade)."""
        return self.options.candidate[1] if self.options.candidate else None

    def profile(self, name: str | None = None) -> Profile:
        name = name or self.options.profile
        try:
            return self.profiles[name]
        except KeyError:
            raise ConfigError(
                f"no profile {name!r}; known: {', '.join(self.profiles)} "
                f"(set --moeperf-profile or add [profiles.{name}] to your moeperf config)"
            ) from None

    @property
    def measurements(self) -> dict[MeasurementKey, Measurement]:
        """Every measurement the session's source gave."""
        return self.source.measurements

    def plan(
        self, profile: Profile, first_look: int | None = None, metrics: Sequence[str] = ()
    ) -> Plan:
        """The look schedule of a verdict: the first look after ``max(6, repetitions)`` rounds
        (or *first_look*), the round cap of the session's options, this host's dependence,
        and the calibrated noise of the noisiest of the verdict's *metrics* (``mmap.pp512``)
        where this host has one."""
        reps = self.options.repetitions or profile.repetitions
        first = first_look or max(Plan.first_look, reps)
        return Plan(
            first_look=first,
            max_rounds=max(first, self.options.max_rounds),
            dependence=self.dependence(profile),
            noise=self.noise(profile, metrics) if metrics else None,
        )

    def noise(self, profile: Profile, metrics: Sequence[str]) -> NoiseFigure | None:
        """This host's calibrated noise of the noisiest of *metrics* (``None``: none)."""
        return noise_for(self.baselines(profile), self.source.fingerprint(profile), metrics)

    def dependence(self, profile: Profile) -> Dependence:
        """How this host's rounds depend on each other: its calibrated process term and
        lag-1 (stored with its ``[[host]]`` in *profile*'s baseline file), else the terms its
        own verdicts' process blocks show once they hold enough degrees of freedom (its stored
        verdicts of *profile* and this run's earlier ones: :func:`history_dependence`), else
        the default (each verdict's own blocks): every verdict's error carries it."""
        if profile.name not in self._dependence:
            found = dependence_for(self.baselines(profile), self.source.fingerprint(profile))
            self._dependence[profile.name] = found
        found = self._dependence[profile.name]
        if found.calibrated or not self.options.history or self.options.replay is not None:
            return found
        pooled = self._stored_evidence(profile)
        for v in self.journal.verdicts:
            if (
                v.evidence is not None
                and v.sides is not None
                and v.sides[0].profile == profile.name
            ):
                pooled += v.evidence
        return history_dependence(pooled) or found

    def _stored_evidence(self, profile: Profile) -> ProcessEvidence:
        """What this host's stored verdicts of *profile* showed of its process blocks (read
        once a session; nothing where the store cannot be read)."""
        if profile.name not in self._evidence:
            pooled = ProcessEvidence()
            try:
                store = self.store.existing()
                docs = store.recent_verdicts(host_key(self.source.host)) if store else []
            except StoreError:
                docs = []
            for doc in docs:
                try:
                    record = VerdictRecord.from_dict(doc)
                except (KeyError, TypeError, ValueError):
                    continue  # a verdict the store holds in a shape of its own: not evidence
                sides = record.sides
                if record.evidence is not None and sides and sides[0].profile == profile.name:
                    pooled += record.evidence
            self._evidence[profile.name] = pooled
        return self._evidence[profile.name]

    def budget(self, profile: Profile) -> float | None:
        """Seconds a verdict of *profile* may measure."""
        return self.options.budget or profile.budget

    def release_after(self, index: int) -> None:
        """Stop the servers no test after item *index* declares."""
        if self.servers is not None:
            self.servers.stop_servers(keep=lambda k: self.last_use.get((k[0], k[1]), -1) > index)

    def close(self) -> None:
        """Stop every server this session started (the store stays open for the run's
        record, until its ``store.close()``)."""
        if self.servers is not None:
            self.servers.close()

    # -- baselines -------------------------------------------------------------------------------
    def baseline_path(self, profile: Profile) -> Path | None:
        return profile.path(profile.baseline, self.options.rootdir) if profile.baseline else None

    def baselines(self, profile: Profile) -> BaselineFile | None:
        """*profile*'s baseline file (``None`` when it names none or it does not exist yet)."""
        if profile.name not in self._baselines:
            path = self.baseline_path(profile)
            bf = None
            if path is not None and path.exists():
                bf = load_baselines(path, known_configurations=profile.configurations)
                if bf.profile != profile.name:
                    raise BaselineError(
                        f"{path}: holds baselines of profile {bf.profile!r}, not "
                        f"{profile.name!r}; point the profile's baseline at its own file"
                    )
            self._baselines[profile.name] = bf
        return self._baselines[profile.name]

    def reference(self, profile: Profile) -> Reference | None:
        """*profile*'s recorded reference (:func:`profile_reference`), read once."""
        if profile.name not in self._references:
            self._references[profile.name] = profile_reference(profile, self.options.rootdir)
        return self._references[profile.name]

    def session_term(
        self, profile: Profile, host: BaselineHost, entry: BaselineEntry, cpus: str | None
    ) -> SessionTerm:
        """How far *entry*'s build, configuration and workload wanders between the sessions
        of the baseline file's *host*, measured from its sessions: the store's runs of it on
        that host (fingerprint and probe matching) and the file's accepted values of that
        build, runs an hour apart or more counting as sessions (:func:`session_term`)."""
        points = self.store.open().session_points(
            profile=profile.name,
            configuration=entry.configuration,
            workload=canonical_workload(entry.workload),
            build=entry.build,
            cpu_model=host.fingerprint.get("cpu_model"),
        )
        bf = self.baselines(profile)
        accepted = accepted_history(bf, host.id, entry.configuration, entry.workload) if bf else []
        stored = [(e.date, e.value) for e in accepted if e.build == entry.build and e.samples]
        levels = session_levels(
            points, host, cpus=cpus, tolerance=self.options.probe_tolerance, stored=stored
        )
        return session_term(levels)

    def writable_baseline(self, profile: Profile, what: str) -> Path:
        """*profile*'s baseline file, for *what* (``--moeperf-accept``) to write: never a file
        a profile reads as its ``reference`` (a record's own numbers, which no command
        writes); a profile that names none is a :class:`ConfigError` saying how to name one."""
        path = self.baseline_path(profile)
        if path is None:
            raise ConfigError(
                f"{what}: profile {profile.name!r} ({profile.source}) names no baseline file; "
                f'add baseline = "baselines/{profile.name}.toml" to it'
            )
        for other in self.profiles.values():
            if other.reference and other.path(other.reference, self.options.rootdir) == path:
                raise ConfigError(
                    f"{what}: {path} is profile {other.name!r}'s reference (the record's own "
                    f"numbers), which no command writes: give profile {profile.name!r} a "
                    'baseline file of its own (baseline = "baselines/NAME-host.toml")'
                )
        return path

    def accept_baselines(self, failed: int = 0, build: str | None = None) -> list[Path]:
        """Write this session's measurements (those of *build* alone, when given: an upgrade's
        candidate) as the new baselines of their profiles, on this host: refused, nothing
        written, when tests failed, the host changed under the run or a measurement was taken
        on a busy host (:func:`~pytest_moeperf.store.accept.refusals`)."""
        by_profile = self._taken_by_profile(build)
        taken = [m for ms in by_profile.values() for m in ms]
        refused = refusals(
            failed=failed,
            host_changes=self.source.host_changes,
            busy=[
                f"{m.configuration} {m.workload} ({100 * m.conditions.host_busy:.0f} %)"
                for m in taken
                if m.conditions.host_busy > self.options.busy_limit
            ],
        )
        refuse("--moeperf-accept", refused)
        written = []
        paths = {n: self.writable_baseline(self.profile(n), "--moeperf-accept") for n in by_profile}
        for name, ms in by_profile.items():
            profile, path = self.profile(name), paths[name]
            today = dt.date.today().isoformat()
            fingerprint = self.source.fingerprint(profile, build)  # the candidate's binary
            kept = accept_measurements(
                path,
                name,
                ms,
                fingerprint,
                source=f"pytest-moeperf {__version__} accept, {today}",
                probe_tolerance=self.options.probe_tolerance,
            )
            self._baselines.pop(name, None)
            written.append(path)
            self.keep_document(  # the accepted history, beside the file that is reviewed
                "accept",
                {
                    "profile": name,
                    "file": str(path),
                    "date": today,
                    "run": self.record_key or None,
                    "accepted": [
                        {
                            "measurement": list(m.key),
                            "median": m.summary.median,
                            "tolerance": accepted_tolerance(kept, fingerprint, m),
                        }
                        for m in ms
                        if m.values
                    ],
                },
            )
        self.accepted = written
        return written

    def _taken_by_profile(self, build: str | None) -> dict[str, list[Measurement]]:
        """This session's measurements (of *build* alone, when given) by profile, in order."""
        by_profile: dict[str, list[Measurement]] = {}
        for m in self.journal.taken:
            if build is None or m.build == build:
                by_profile.setdefault(m.conditions.profile, []).append(m)
        return by_profile

    def accept_upgrade(self, outcome: str, dry_run: bool = False) -> list[str]:
        """Accept an upgrade check whose *outcome* is ``holds`` (``undecided`` too under
        ``--moeperf-undecided pass``): the candidate's measurements become the baselines of
        their profiles (:meth:`accept_baselines`), and each of those profiles takes the
        candidate as its own build in its profiles file, the build it leaves kept in its
        ``builds`` (:func:`~.pin.pin_moves`). Returns each file's diff; with *dry_run* only
        that, nothing written. Refused, nothing written, for any other outcome."""
        assert self.options.candidate is not None
        label = self.options.candidate[1]
        if outcome != "holds" and not (outcome == "undecided" and self.options.undecided == "pass"):
            refuse(
                "--moeperf-accept",
                [f"the upgrade check's answer is {outcome}, not holds: the pin stays on the "
                 "pinned build (its table says which decisions)"],
            )  # fmt: skip
        by_profile = self._taken_by_profile(label)
        moves = pin_moves(
            [self.profile(n) for n in by_profile], self.options.candidate, self.options.rootdir
        )
        diffs = [m.diff() for m in moves]
        if dry_run:
            for name, measured in by_profile.items():
                path = self.writable_baseline(self.profile(name), "--moeperf-accept")
                ms = [m for m in measured if m.values]
                what = ", ".join(f"{m.configuration} {m.workload.name}" for m in ms)
                diffs.append(f"{path} would take {label}'s {len(ms)} measurement(s): {what}")
            return diffs
        self.accept_baselines(build=label)
        for move in moves:
            move.write()
        return diffs

    # -- the run record ---------------------------------------------------------------------------
    def checked(self, row: BaselineRow) -> None:
        """A test's baseline check: into the journal, and the report's rows."""
        self.journal.checked(CheckRecord(row.nodeid, row.measurement.key, row.check))
        self.baseline_rows.append(row)

    def write_results(self) -> Path | None:
        """Write the run record into the history folder (results file, pytest-benchmark saved
        run, llama-bench JSONL rows), atomically, then into the store in one transaction;
        ``None`` when this run measured nothing. A store that cannot take it is a
        :class:`~pytest_moeperf.errors.StoreError` raised after the files are written."""
        if not self.journal.taken:
            return None
        try:  # opened first: a new default store takes in the older runs' files, not this one's
            store: RunStore | StoreError = self.store.open()
        except StoreError as exc:
            store = exc
        record = self.record = self.journal.freeze()
        written = write_history(record, self.options.results_dir)
        path = written[0]
        if self.options.results_file is not None:
            write_output(self.options.results_file, record.json_text(), "--moeperf-results")
            path = self.options.results_file
        self.record_key = run_key(record)  # the record's hash: once, for the store and history
        try:
            if isinstance(store, StoreError):
                raise store
            store.add_run(record, key=self.record_key)
        except StoreError as exc:
            raise StoreError(
                f"{exc} (this run is in {written[0]}: moeperf store import "
                f"{self.options.results_dir} once the store is back)"
            ) from None
        return path

    def keep_document(self, kind: str, body: dict[str, Any]) -> bool:
        """A command's outcome (a gate's --json document) into the store, under this host."""
        return self.store.open().add_document(kind, host_key(self.source.host), body)

    def history(self, record: RunRecord) -> list[RunRecord]:
        """The earlier runs of this host a report of *record* draws, oldest first (the
        newest :data:`~pytest_moeperf.store.runstore.HISTORY_RUNS` that measured one of its
        (profile, configuration) pairs)."""
        wanted = {(m.conditions.profile, m.configuration) for m in record.measurements}
        key = self.record_key if record is self.record and self.record_key else run_key(record)
        return self.store.open().recent_runs(host_key(record.fingerprint), wanted, exclude=key)
