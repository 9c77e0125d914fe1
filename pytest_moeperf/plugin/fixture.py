"""The ``moeperf`` fixture: what a perf test uses to start servers, measure and judge."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import NoReturn

import pytest

from ..config.profiles import Configuration, HostLacks, Profile, host_owns
from ..defaults import MARGIN, MIN_REL_SPREAD
from ..errors import ConfigError, MoeperfError, StartupWarning, Unavailable
from ..llama.server import LlamaServer
from ..measure.measurement import Measurement
from ..measure.workload import Workload
from ..report.reference import reference_failure
from ..report.tables import baseline_failure, claim_failure, measured_table
from ..run.crosscheck import bench_in_rounds
from ..run.pool import ServerRecord
from ..run.rounds import (
    Decided,
    cannot_decide,
    decide_baseline,
    decide_pair,
    judged_in_hand,
)
from ..run.session import PerfSession
from ..run.source import Side
from ..store.accepted import host_for
from ..store.record import BenchRound
from ..verdicts.attribution import server_over_bench
from ..verdicts.baseline_check import BaselineCheck, BaselineRow, judge_baseline
from ..verdicts.claims import Claim, Operand
from ..verdicts.creep import SessionTerm
from ..verdicts.judge import Verdict
from ..verdicts.sequential import Rule
from ..verdicts.upgrade import Decision, DecisionKind, verdict_decision

KINDS: dict[str, DecisionKind] = {"claim": "claim", "dead_end": "dead end", "change": "change"}
"""A rule's kind as the upgrade table names its decisions."""


class MoePerf:
    """Measures named configurations of a profile for one test, and judges them.

    ``moeperf.measure("lm-none", "pp512")`` returns the session's measurement of that workload
    on that configuration (taking it on first use); ``moeperf.check("lm-none.pp512 >= 0.9 *
    mmap.pp512")`` judges a claim; ``moeperf.check_baseline("mmap", "pp512")`` compares with
    the stored baseline. Whatever this host, build or replay file cannot provide skips the
    test with the reason."""

    def __init__(
        self,
        session: PerfSession,
        nodeid: str,
        profile: str | None = None,
        side: str | None = None,
        test: str | None = None,
    ) -> None:
        self.session = session
        self.nodeid = nodeid
        self.profile_name = profile
        self.side = side
        """The side of an upgrade check this test runs on (``pinned``, ``candidate``), or
        ``None``: the run checks no upgrade."""
        self.test = test or nodeid
        """The test without its side: the key its decisions are paired by."""
        self.touched: list[Measurement] = []
        self.verdicts: list[Verdict] = []
        self.checks: list[BaselineRow] = []
        self.decisions: list[Decision] = []
        """What this test judged, as an upgrade check's table pairs it."""
        self._warned: set[tuple[str, str, str, str]] = set()
        self._used: set[tuple[str, str]] = set()

    def outcomes(self) -> list[tuple[str, str | None]]:
        """(outcome, reason) of every verdict and baseline check this test judged."""
        return [(v.outcome, v.reason) for v in self.verdicts] + [
            (row.check.outcome, row.check.reason) for row in self.checks
        ]

    @property
    def profile(self) -> Profile:
        return self.session.profile(self.profile_name)

    @property
    def default_build(self) -> str | None:
        """The build an operand, a measurement or a server that names none runs on: the
        candidate's label on an upgrade check's candidate side, else the profile's own."""
        return self.session.candidate if self.side == "candidate" else None

    def configuration(self, name: str) -> Configuration:
        return self.profile.configuration(name)

    def _unavailable(self, exc: Unavailable) -> NoReturn:
        """Skip the test naming what is missing; on the profile's own host (its ``host``
        table matches, or ``required = true``) a key asking for what is not here fails it."""
        key = exc.key if isinstance(exc, HostLacks) else ""
        owner = host_owns(self.profile, self.session.source.host) if key else None
        try:
            if owner is None:
                pytest.skip(str(exc))
            pytest.fail(
                f"{key}: {exc} ({owner}, so this is an error, not a skip: fix {key} or the host)",
                pytrace=False,
            )
        except (pytest.skip.Exception, pytest.fail.Exception) as outcome:
            raise outcome from None  # one line, not "during handling of the above exception"

    def server(self, configuration: str, build: str | None = None) -> LlamaServer:
        """The running llama-server of *configuration* (started on first use)."""
        return self._running(configuration, build).server

    def _running(self, configuration: str, build: str | None) -> ServerRecord:
        servers = self.session.servers
        if servers is None:
            raise ConfigError("replay mode (--moeperf-replay) starts no servers")
        try:
            rec = servers.server(
                self.profile, self.configuration(configuration), build or self.default_build
            )
        except Unavailable as exc:
            self._unavailable(exc)
        self._used.add((configuration, rec.label))
        self._startup_warnings()
        return rec

    def measure(
        self,
        configuration: str,
        workload: str | Workload,
        repetitions: int | None = None,
        build: str | None = None,
    ) -> Measurement:
        """The measurement of *workload* (``"pp512"``, ``"tg64 @ d512"``) on *configuration*
        (on the profile's own build, or the named one of its ``builds`` table)."""
        w = workload if isinstance(workload, Workload) else Workload.parse(workload)
        try:
            m = self.session.source.measure(
                self.profile,
                self.configuration(configuration),
                w,
                repetitions,
                build or self.default_build,
            )
        except Unavailable as exc:
            self._unavailable(exc)
        self._touch(m)
        self._startup_warnings()
        return m

    def _touch(self, m: Measurement) -> None:
        """Keep *m* as this test's latest measurement of its key (for failure tables), and
        its server as used by this test (for startup warnings)."""
        self.touched = [t for t in self.touched if t.key != m.key] + [m]
        self._used.add((m.configuration, m.build))

    def startup_warnings(self, configuration: str, build: str | None = None) -> frozenset[str]:
        """The ids of the known performance warnings (``mmap-tensor-overrides``, ...) the
        server of *configuration* printed at its start (started here if it is not running);
        a replayed run, which starts no server, skips the test saying so."""
        if self.session.servers is None:
            pytest.skip(
                f"{configuration}: a replayed run starts no server, and the stored numbers keep "
                "no startup log to read its warnings from"
            )
        key = (self.profile.name, configuration, self._running(configuration, build).label)
        return frozenset(f.id for f in self.session.journal.findings.get(key, []))

    def _startup_warnings(self) -> None:
        """Warn (or fail, with ``--moeperf-strict-warnings``) about the performance warnings
        the servers this test used printed at start."""
        found = []
        for (profile, config, label), findings in self.session.journal.findings.items():
            if profile != self.profile.name or (config, label) not in self._used:
                continue
            for f in findings:
                key = (profile, config, label, f.id)
                if key not in self._warned:
                    self._warned.add(key)
                    found.append(
                        f"{config} ({label}): llama-server warned at start "
                        f"[{f.id}]: {f.line.strip()} -> {f.advice}"
                    )
        if found and self.session.options.strict_warnings:
            pytest.fail("\n".join(found), pytrace=False)
        for line in found:
            warnings.warn(StartupWarning(line), stacklevel=3)

    def median(self, configuration: str, workload: str | Workload) -> float:
        """Median tok/s of :meth:`measure`."""
        return self.measure(configuration, workload).summary.median

    # -- claims ----------------------------------------------------------------------------------
    def _judged(self, c: Claim, rule: Rule, label: str, asked: str | None = None) -> Verdict:
        """Judge ``left / right`` of *c* by *rule* in the one decision loop: paired rounds until
        the verdict is final or the budget is spent (stored figures judged once). *asked* names
        the decision in an upgrade check's table (default *label*: two claims of one test on
        the same ratio are told apart by their bounds)."""
        session, profile = self.session, self.profile
        if self.side == "candidate" and c.left.build and c.right.build:
            pytest.skip(
                f"{label}: both sides name their builds ({c.left.build}, {c.right.build}), so "
                "the candidate does not enter it; judged on the pinned side, and the "
                "candidate's own change is its gate rows'"
            )
        sides = [
            Side(self.configuration(op.configuration), op.workload, op.build or self.default_build)
            for op in (c.left, c.right)
        ]
        left, right = sides
        beside, bench = self._bench_beside(right, left)
        try:
            got = decide_pair(
                session.source,
                profile,
                rule,
                right,
                left,
                label=label,
                plan=session.plan(
                    profile, metrics=[f"{s.configuration.name}.{s.workload.name}" for s in sides]
                ),
                budget=session.budget(profile),
                busy_limit=session.options.busy_limit,
                after_round=beside,
            )
        except Unavailable as exc:
            self._unavailable(exc)
        if beside is not None:
            self._bench_ratios(got, bench, (right, left))
        for m in (got.b, got.a):
            self._touch(m)
        self._startup_warnings()
        self.verdicts.append(got.verdict)
        # a claim or a dead end with the profile's ``reference``: the verdict's row beside the
        # reference's numbers (for the summary's table and this test's failure message)
        ref = session.reference(profile) if rule.kind != "change" else None
        record = ""
        if ref is not None:
            row = ref.row(self.nodeid, got.verdict, got.b, got.a)
            session.reference_rows.append(row)
            if row.reference_ratio is not None:
                record = f"{ref.label} {row.reference_ratio:.3f}"
        session.journal.judged(got.record(self.nodeid, label))
        self._decided(KINDS[rule.kind], asked or label, got.verdict, record)
        return got.verdict

    def _decided(self, kind: DecisionKind, asked: str, v: Verdict, record: str = "") -> None:
        """A verdict of this test, as an upgrade check's table pairs it."""
        self.decisions.append(replace(verdict_decision(self.test, asked, v, record), kind=kind))

    def _against_reference(self, verdict: Verdict) -> str:
        """The failure message's part on the reference: *verdict*'s reference line and the
        per-configuration table of this test's measurements (empty without a reference)."""
        ref = self.session.reference(self.profile)
        rows = [r for r in self.session.reference_rows if r.verdict is verdict]
        if ref is None or not rows:
            return ""
        return "\n\n" + reference_failure(ref, rows[-1], self.touched, self.profile.workloads)

    def _bench_beside(
        self, a: Side, b: Side
    ) -> tuple[Callable[[int, str, bool], None] | None, tuple[list[float], list[float]]]:
        """With ``--moeperf-bench``, an ``after_round`` running llama-bench of both sides in
        each round (never for traffic); a bench that cannot run is reported once and left out."""
        servers = self.session.servers
        if not self.session.options.bench or a.workload.is_traffic or b.workload.is_traffic:
            return None, ([], [])
        if servers is None:  # a replayed run: stored rounds, no llama-bench beside them
            line = "--moeperf-bench: a replayed run starts no llama-bench; its rounds are stored"
            if line not in self.session.bench_errors:
                self.session.bench_errors.append(line)
            return None, ([], [])
        run, got = bench_in_rounds(servers, self.profile, a, b)
        failed: list[str] = []

        def beside(index: int, first: str, restarts: bool) -> None:
            if failed:
                return
            try:
                run(index, first, restarts)
            except MoeperfError as exc:
                failed.append(str(exc))
                self.session.bench_errors.append(f"{self.nodeid}: llama-bench in rounds: {exc}")

        return beside, got

    def _bench_ratios(
        self, got: Decided, bench: tuple[list[float], list[float]], sides: tuple[Side, Side]
    ) -> None:
        """Each side's server/bench ratio over the rounds, with its interval."""
        plan = got.plan or self.session.plan(self.profile)
        for side, m, rounds, values in zip(sides, (got.a, got.b), got.values, bench, strict=True):
            label = f"{side.configuration.name}.{side.workload.compact} ({m.build})"
            ratio = server_over_bench(
                rounds, values, margin=MARGIN, plan=plan, label=f"{label} server / llama-bench",
                blocks=got.blocks,
            )  # fmt: skip
            if ratio is not None:
                self.session.journal.bench_round(BenchRound(self.nodeid, label, ratio))

    def judge(self, claim: str | Claim) -> Verdict:
        """The verdict of *claim* (holds / fails / undecided) on this session's measurements.

        Both sides are measured in paired rounds (A B, B A, ...) until the verdict is final,
        or undecided when the budget (``--moeperf-budget``, the profile's ``budget``) or the
        round cap (``--moeperf-max-rounds``) is spent."""
        c = claim if isinstance(claim, Claim) else Claim.parse(claim)
        return self._judged(c, c.rule, f"{c.left} / {c.right}", asked=str(c))

    def compare(self, candidate: str, baseline: str, margin: float = MARGIN) -> Verdict:
        """The change from *baseline* to *candidate* (operands such as ``mmap[b11713].tg128``
        and ``mmap[b11053].tg128``): faster / slower / unchanged / undecided, with
        *margin* the smallest change that matters. Does not fail the test by itself."""
        c = Claim.parse(f"{candidate} >= {baseline}")
        c.left.workload.require_rate("compare")  # a latency's faster and slower would flip
        return self._judged(c, Rule("change", margin=margin), f"{c.left} / {c.right}")

    def _undecided(self, verdict: Verdict | BaselineCheck) -> None:
        """Skip the test as undecided (fail it with ``--moeperf-undecided=fail``, let it pass
        with ``pass``: the verdict still shows as undecided in the summary's tables)."""
        message = f"undecided: {verdict.explain()}"
        if self.session.options.undecided == "fail":
            pytest.fail(message, pytrace=False)
        if self.session.options.undecided != "pass":
            pytest.skip(message)

    def check(self, claim: str | Claim) -> Verdict:
        """Judge *claim*; fail the test with the measured table when it fails, and skip it
        (or fail, with ``--moeperf-undecided=fail``) when the noise is too wide to tell."""
        verdict = self.judge(claim)
        if verdict.outcome == "fails":
            pytest.fail(
                claim_failure(verdict, self.touched) + self._against_reference(verdict),
                pytrace=False,
            )
        if verdict.outcome == "undecided":
            self._undecided(verdict)
        return verdict

    def dead_end(
        self, config: str, slower_than: str, metric: str, reason: str = "", margin: float = MARGIN
    ) -> Verdict:
        """A configuration recorded as a dead end: slower than *slower_than* in *metric*.

        Judged on paired rounds: while it stays slower (the interval of the ratio lies below
        1), the test is an expected failure showing the ratio; once the interval reaches
        1 - *margin* (as fast, or faster) the test fails strictly: the dead end may have
        reopened. In between, after the budget, it is undecided."""
        w = Workload.parse(metric).require_rate("a dead end")
        c = Claim(Operand(config, w), "<=", 1.0, Operand(slower_than, w))
        label = f"{config}.{w.name} / {slower_than}.{w.name}"
        verdict = self._judged(c, Rule("dead_end", margin=margin), label)
        why = f" ({reason})" if reason else ""
        if verdict.outcome == "holds":
            pytest.xfail(f"dead end holds{why}: {verdict.explain()}")
        if verdict.outcome == "fails":
            pytest.fail(
                f"dead end may have reopened{why}: {config} is no longer slower than "
                f"{slower_than} in {w.name}: {verdict.explain()}\n"
                f"Re-measure {config} against {slower_than} on the production flags and "
                "update the decision record; then remove or change this dead end.\n\n"
                + measured_table(self.touched)
                + self._against_reference(verdict),
                pytrace=False,
            )
        self._undecided(verdict)
        return verdict

    # -- baselines -------------------------------------------------------------------------------
    def _said_once(self, label: str, head: str, detail: str) -> str:
        """A skip's reason, *head* and *detail*: whole the first time the session says it,
        *head* alone and whose reason it is after that (``mmap.tg64: ... (the reason given in
        full for mmap.pp512)``), so that a reason several tests share is read once."""
        first = self.session.told.setdefault((head.removeprefix(f"{label}: "), detail), label)
        if first == label:
            return f"{head}: {detail}"
        return f"{head} (the reason given in full for {first})"

    def check_baseline(self, configuration: str, workload: str | Workload) -> BaselineCheck:
        """Compare the measurement with the profile's stored baseline: pass while the median
        is no worse than baseline x (1 - tolerance). Only this host's numbers apply: the
        file's host whose fingerprint matches and whose probe figures on the configuration's
        CPUs are within the probe tolerance of this run's. Skips when there is no such host
        (naming the fields or both probe values that differ) or no baseline for it, and is
        undecided when the host's probe moved since the start of the run."""
        m = self.measure(configuration, workload)
        session, profile = self.session, self.profile
        bf = session.baselines(profile)
        if bf is None:
            path = session.baseline_path(profile)
            pytest.skip(
                f"no baseline file {path} for profile {profile.name!r}; "
                "record one with --moeperf-accept"
            )
        host, why = host_for(
            bf,
            session.source.fingerprint(profile),
            m.conditions.probe_cpus,
            session.options.probe_tolerance,
        )
        if host is None:
            head = f"baseline {bf.path} holds no numbers of this host, so none apply"
            pytest.skip(self._said_once(f"{configuration}.{m.workload.name}", head, "; ".join(why)))
        # the candidate of an upgrade check is held to the pinned build's baseline
        build = (self.profile.build_label or m.build) if self.side == "candidate" else m.build
        entry = bf.find(build, m.configuration, m.workload.name, host=host.id)
        if entry is None:
            pytest.skip(
                f"{bf.path} has no baseline for {m.configuration} {m.workload} on "
                f"{build} of host {host.id}; record one with --moeperf-accept"
            )

        # another session's number: the between-session term of this host, configuration
        # and workload (measured from its sessions) widens the interval; the host's calibrated
        # noise is the samples' floor
        term = session.session_term(profile, host, entry, m.conditions.probe_cpus)
        noise = host.noise.get(f"{m.configuration}.{m.workload.name}")
        floor = max(MIN_REL_SPREAD, noise.sample_spread if noise else 0.0)
        label = f"{m.configuration}.{m.workload.name}"
        tolerance = bf.tolerance_for(entry)

        def judge(
            values: list[float], confidence: float, term: SessionTerm = term
        ) -> BaselineCheck:
            return judge_baseline(
                values,
                entry.value,
                tolerance,
                m.workload.higher_is_better,  # a traffic latency fails when it rises
                label=label,
                baseline=entry.operand,
                confidence=confidence,
                min_rel_spread=floor,
                session=term,
            )

        # one measurement's samples at the looks of the round schedule (no process blocks)
        plan = replace(session.plan(profile, first_look=max(2, len(m.samples))), early=False)
        cannot = cannot_decide(label, term, tolerance, m.workload.higher_is_better, plan)
        if cannot is not None and not session.options.measure_anyway:
            # judged once on the samples in hand, the term held at its prior bound while not
            # measured: only an outcome beyond any plausible move between sessions stands
            bounded = term.at_prior()
            checked = judged_in_hand(
                session.source,
                m,
                lambda values, confidence: judge(values, confidence, bounded),
                plan,
                session.options.busy_limit,
            )
            if checked is None or checked.check.outcome == "undecided":
                session.source.notice(cannot)  # said, and nothing measured for it
                head, _, detail = cannot.partition(": ")[2].partition(": ")
                pytest.skip(self._said_once(label, f"{label}: {head}", detail))
        else:
            checked = decide_baseline(
                session.source,
                profile,
                Side(self.configuration(configuration), m.workload),
                judge,
                plan=plan,
                budget=session.budget(profile),
                busy_limit=session.options.busy_limit,
            )
        self._touch(checked.measurement)
        row = BaselineRow(self.nodeid, checked.measurement, checked.check)
        self.checks.append(row)
        session.checked(row)
        check = checked.check
        self.decisions.append(
            Decision(
                self.test,
                f"baseline {label} ({build})",
                "baseline",
                check.outcome,
                f"{check.measured:.1f} tok/s vs {check.baseline:.1f} {check.interval_pct}".strip(),
                why=check.reason or "",
            )
        )
        if check.outcome == "failed":
            pytest.fail(baseline_failure(self.checks, bf.path), pytrace=False)
        if check.outcome == "undecided":
            self._undecided(check)
        return check
