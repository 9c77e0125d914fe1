"""The upgrade check in a pytest session (``--moeperf-candidate``): every perf test runs twice,
on the pinned build (``[pinned]``) and on the candidate (``[candidate]``), the pinned side
first so that each side's servers are started once; then one gate item a configuration the
tests use and a workload of its profile (``moeperf-upgrade::gate[...]``), the candidate against
the pinned build in paired rounds on the same servers, the first of each configuration also
comparing both builds' greedy output. Each item's report carries its decisions
(:data:`PROPERTY`), so that the table is the same under xdist, where the controller reads the
workers' reports; :class:`Upgrades` gathers them into the one table and its exit status."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from ..errors import MoeperfError, Unavailable
from ..llama.build import label_number
from ..measure.workload import Workload
from ..report.upgrade import UpgradeCheck
from ..run.gate import upgrade_row
from ..run.session import PerfSession
from ..store.hosts import host_key
from ..verdicts.gate import GateRow
from ..verdicts.upgrade import (
    NOT_JUDGED,
    Decision,
    UpgradeRow,
    ratio_text,
    standing,
    upgrade_rows,
)
from .judged import verdict_property
from .markers import Declared

PINNED, CANDIDATE = "pinned", "candidate"
SIDE = "moeperf_side"
"""The parameter a perf test's side is under (``test_x[pinned]``, ``test_x[candidate]``)."""
PROPERTY = "moeperf_decisions"
"""The user property a report carries: ``{"side": "pinned", "decisions": [...]}``."""
GATE_PREFIX = "moeperf-upgrade::gate"


def side_of(item: pytest.Item) -> str | None:
    """The side a test runs on in an upgrade check (``None``: the run checks none)."""
    callspec = getattr(item, "callspec", None)
    side = callspec.params.get(SIDE) if callspec is not None else None
    return str(side) if side is not None else None


def parametrize_sides(metafunc: pytest.Metafunc) -> None:
    """Run the perf test *metafunc* defines on both sides of the upgrade check."""
    if SIDE not in metafunc.fixturenames:
        metafunc.fixturenames.append(SIDE)  # a dead_end test that names no fixture
    metafunc.parametrize(SIDE, [PINNED, CANDIDATE], ids=[PINNED, CANDIDATE])


def rerun_command(perf: PerfSession, nodeid: str) -> str:
    """The command that judges test *nodeid* on the candidate again."""
    words = ["pytest", "-m", "perf", *candidate_options(perf), nodeid]
    return shlex.join(words)


def candidate_options(perf: PerfSession) -> list[str]:
    """The options that name this run's candidate (and pinned build) again."""
    opts = perf.options
    assert opts.candidate is not None
    target, label = opts.candidate
    words = [f"--moeperf-candidate={target}"]  # one word: pytest reads a path for its rootdir
    if isinstance(target, str) or label != f"b{target}":
        words += [f"--moeperf-candidate-label={label}"]
    if opts.pinned is not None:
        words += [f"--moeperf-pinned={opts.pinned[0]}"]
    return words


def decisions_property(
    side: str | None, decisions: Sequence[Decision]
) -> tuple[str, dict[str, Any]]:
    return PROPERTY, {"side": side, "decisions": [d.to_dict() for d in decisions]}


def report_decisions(
    decisions: Sequence[Decision], test: str, outcome: str, why: str, rerun: str
) -> list[Decision]:
    """The decisions of a test's report: what it judged, and what its own outcome adds (a
    test that failed on its own assertions, one that judged nothing, one skipped before it
    judged)."""
    out = list(decisions)
    broke = any(standing(d.kind, d.outcome) == "bad" for d in out)
    if outcome == "failed" and not broke:
        out.append(Decision(test, "its assertions", "test", "failed", rerun=rerun, why=why))
    elif not out:
        word = {"passed": "passed", "failed": "failed"}.get(outcome, NOT_JUDGED)
        out.append(Decision(test, "", "test", word, rerun=rerun, why=why))
    return out


@dataclass(frozen=True)
class GatePlan:
    """One gate item: a configuration of a profile and one of its workloads."""

    profile: str
    configuration: str
    workload: str
    family: int
    first_of_configuration: bool


class GateItem(pytest.Item):
    """A gate row of the upgrade check: the candidate against the pinned build on one
    configuration and workload, in paired rounds."""

    def __init__(self, *, perf: PerfSession, plan: GatePlan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.perf = perf
        self.plan = plan
        self.decisions: list[Decision] = []
        self.verdicts: list[tuple[str, str | None]] = []
        self.add_marker(pytest.mark.perf)
        self.add_marker(
            pytest.mark.moeperf(configurations=[plan.configuration], profile=plan.profile)
        )

    def reportinfo(self) -> tuple[str, int | None, str]:
        return GATE_PREFIX, None, self.name

    def _rerun(self) -> str:
        perf, plan = self.perf, self.plan
        profile = perf.profile(plan.profile)
        assert perf.options.candidate is not None
        pinned = perf.options.pinned[0] if perf.options.pinned else profile.build or profile.binary
        target, label = perf.options.candidate
        words = ["moeperf", "gate", "--profile", plan.profile, "--baseline", str(pinned)]
        words += ["--candidate", str(target)]
        if isinstance(target, str) and label_number(label) is None:
            words += ["--candidate-label", label]
        return shlex.join([*words, "-c", plan.configuration, "-w", plan.workload])

    def runtest(self) -> None:
        perf, plan = self.perf, self.plan
        assert perf.servers is not None and perf.candidate is not None
        profile = perf.profile(plan.profile)
        test = f"{GATE_PREFIX}[{plan.profile}]"
        measured = {(k[0], k[1]) for k in perf.measurements}
        if (plan.profile, plan.configuration) not in measured:
            why = (
                f"{plan.configuration}: no test measured it (its tests were skipped, or only "
                "started its server), so no decision reads its numbers: not gated"
            )
            self.decisions.append(
                Decision(test, f"{plan.configuration}.{plan.workload}", "gate", NOT_JUDGED, why=why)
            )
            pytest.skip(why)
        try:
            row, output, notes = upgrade_row(
                perf,
                profile,
                plan.configuration,
                Workload.parse(plan.workload),
                perf.candidate,
                family=plan.family,
                check_output=plan.first_of_configuration,
            )
        except Unavailable as exc:
            self.decisions.append(
                Decision(
                    test, f"{plan.configuration}.{plan.workload}", "gate", NOT_JUDGED, why=str(exc)
                )
            )
            pytest.skip(str(exc))
        except MoeperfError as exc:
            pytest.fail(str(exc), pytrace=False)
        for line in notes:
            perf.source.notice(line)
        rerun = self._rerun()
        if output is not None:
            word = "same-output" if output.same else "different-output"
            figure = output.describe(profile.build_label or PINNED, perf.candidate)
            self.decisions.append(
                Decision(
                    test, f"{plan.configuration} greedy output", "output", word, figure, rerun=rerun
                )
            )
        self.decisions.append(gate_decision(perf, test, row, rerun))
        v = row.verdict
        self.verdicts.append((v.outcome, v.reason))
        if output is not None and not output.same:
            pytest.fail(output.describe(profile.build_label or PINNED, perf.candidate), False)
        if v.outcome == "slower":
            pytest.fail(f"slower on {perf.candidate}: {v.explain()}", pytrace=False)
        if v.outcome == "undecided":
            message = f"undecided: {v.explain()}"
            if perf.options.undecided == "fail":
                pytest.fail(message, pytrace=False)
            if perf.options.undecided != "pass":
                pytest.skip(message)

    def properties(self) -> list[tuple[str, dict[str, Any]]]:
        """What this item's call report carries: its verdicts and its decisions."""
        host = self.perf.source.measured_on
        return [
            verdict_property(self.verdicts, host_key(host) if host else ""),
            decisions_property(None, self.decisions),
        ]


def gate_decision(perf: PerfSession, test: str, row: GateRow, rerun: str) -> Decision:
    v = row.verdict
    figure = (
        f"{row.candidate.summary.median:.1f} / {row.baseline.summary.median:.1f} tok/s = "
        f"{ratio_text(v)}"
    )
    record = ""
    ref = perf.reference(perf.profile(row.baseline.conditions.profile))
    found = ref.figure(row.baseline) if ref is not None else None
    if ref is not None and found is not None:
        record = f"{ref.label} {found.value:g} ({found.build})"
    return Decision(test, row.name, "gate", v.outcome, figure, record, rerun, v.reason or "")


def gate_items(
    session: pytest.Session, perf: PerfSession, declared: Iterable[tuple[str, Sequence[str]]]
) -> list[GateItem]:
    """The gate items of the configurations the pinned side's tests declare (*declared*:
    profile and configurations of each), each workload of its profile, in the order the tests
    first name them."""
    wanted: dict[tuple[str, str], None] = {}
    for profile, names in declared:
        for name in names:
            wanted[(profile, name)] = None
    plans = []
    for profile_name, name in wanted:
        try:
            workloads = perf.profile(profile_name).workloads
        except MoeperfError:
            continue  # no such profile: its tests fail at their setup with its own line
        for i, w in enumerate(workloads):
            plans.append((profile_name, name, w.name, i == 0))
    items = []
    for profile_name, name, workload, first in plans:
        plan = GatePlan(profile_name, name, workload, len(plans), first)
        item_name = f"gate[{profile_name}.{name}.{workload}]"
        items.append(
            GateItem.from_parent(
                session,
                name=item_name,
                nodeid=f"moeperf-upgrade::{item_name}",
                perf=perf,
                plan=plan,
            )
        )
    return items


@dataclass(eq=False)  # hashable, as a registered plugin is
class Upgrades:
    """The decisions of an upgrade check's reports, gathered as they arrive (the controller's,
    under xdist), and the check they make."""

    perf: PerfSession
    pinned: str
    candidate: str
    declared: Callable[[pytest.Item], Declared]
    """What a test's markers declare (the plugin's reading, kept in its stash)."""
    started: float = field(default_factory=time.monotonic)
    sides: dict[str, list[Decision]] = field(default_factory=lambda: {PINNED: [], CANDIDATE: []})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Once the selection is made: the pinned side's tests first, then the candidate's
        (each side's servers started once), then a gate item per configuration the selected
        tests use and workload of its profile."""
        pinned = [i for i in items if side_of(i) == PINNED]
        candidate = [i for i in items if side_of(i) == CANDIDATE]
        rest = [i for i in items if side_of(i) is None]
        declared = []
        for item in pinned:
            try:
                d = self.declared(item)
            except MoeperfError:
                continue  # it fails at its setup with its own line
            declared.append((d.profile or self.perf.options.profile, d.configurations))
        items[:] = [*rest, *pinned, *candidate, *gate_items(session, self.perf, declared)]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" and not (report.when == "setup" and not report.passed):
            return
        found = next((v for k, v in report.user_properties if k == PROPERTY), None)
        if not isinstance(found, dict):
            return
        decisions = [Decision.from_dict(d) for d in found.get("decisions", [])]
        side = found.get("side")
        if side == PINNED:
            self.sides[PINNED] += decisions
        else:  # the candidate's, and the gate's (judged of both builds at once)
            self.sides[CANDIDATE] += decisions

    def check(self) -> UpgradeCheck:
        rows = upgrade_rows(self.sides[PINNED], self.sides[CANDIDATE])
        neither = [r for r in rows if _judged_by_neither(r)]
        kept = [r for r in rows if not _judged_by_neither(r)]
        notes = _not_judged_notes(neither)
        return UpgradeCheck(
            self.pinned, self.candidate, kept, time.monotonic() - self.started, notes
        )


def _judged_by_neither(row: UpgradeRow) -> bool:
    return all(d is None or d.outcome == NOT_JUDGED for d in (row.pinned, row.candidate))


def _not_judged_notes(rows: Sequence[UpgradeRow]) -> list[str]:
    """The decisions neither build judged, said once per reason with their tests."""
    by_why: dict[str, list[str]] = {}
    for r in rows:
        why = next((d.why for d in (r.pinned, r.candidate) if d and d.why), "no reason given")
        name = r.test.rsplit("::", 1)[-1]
        if r.kind == "gate":
            name = f"{name} {r.asked}"
        by_why.setdefault(why.splitlines()[0], []).append(name)
    return [
        f"not judged on either build ({len(tests)}: {', '.join(tests)}): {why}"
        for why, tests in by_why.items()
    ]
