"""pytest hooks, options, markers and fixtures of pytest-moeperf (wiring only)."""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from functools import partial

import pytest

from ..defaults import MARGIN
from ..errors import MoeperfError
from ..fs import write_output
from ..llama import orphans
from ..report.upgrade import upgrade_json, upgrade_markdown, upgrade_text
from ..run.artifacts import stand_in_checked
from ..run.crosscheck import cross_check
from ..run.opening import perf_session
from ..run.session import PerfSession
from ..store.hosts import host_key
from ..verdicts.upgrade import base_test
from .fixture import MoePerf
from .judged import NOTHING_JUDGED, Judged, verdict_property
from .markers import Declared, check_configurations, read_markers
from .options import options_of, pytest_addoption  # noqa: F401 (the hook, registered here)
from .summary import judged_summary, terminal_summary, write_report
from .upgrade import (
    GateItem,
    Upgrades,
    decisions_property,
    parametrize_sides,
    report_decisions,
    rerun_command,
    side_of,
)

SESSION = pytest.StashKey[PerfSession]()
ITEM_INDEX = pytest.StashKey[int]()
REAPED = pytest.StashKey[list[int]]()
MARKER_ERROR = pytest.StashKey[str]()
DECLARED = pytest.StashKey[Declared]()
JUDGED = pytest.StashKey[Judged]()
UPGRADES = pytest.StashKey[Upgrades]()


PATH_OPTIONS = (
    "--moeperf-candidate",
    "--moeperf-pinned",
    "--llama-server",
    "--moeperf-upgrade-report",
)
"""Options whose value may be a path (a binary, the report) that pytest, reading it as a separate
word before the plugin is known, would take for a test path."""


def _path_taken_for_rootdir(config: pytest.Config) -> str | None:
    """pytest finds its rootdir before this plugin's options are known, so a path given as a
    separate word (``--moeperf-candidate /opt/b11800/bin/llama-server``) is read as a test path:
    the rootdir becomes what it shares with the working directory and the project's ini is
    not found. Returns the one-line fix when that happened."""
    args = list(config.invocation_params.args)
    here = config.invocation_params.dir
    rootdir = config.rootpath
    if config.inipath is not None or rootdir == here or rootdir not in here.parents:
        return None
    for option, value in itertools.pairwise(args):
        if option in PATH_OPTIONS:
            return (
                f"{option} {value}: pytest took the path for a test path when it looked for its "
                f"rootdir (found {rootdir}, without the project's ini): write {option}={value}"
            )
    return None


def pytest_configure(config: pytest.Config) -> None:
    wrong_root = _path_taken_for_rootdir(config)
    if wrong_root is not None:
        raise pytest.UsageError(wrong_root)
    for marker in (
        "perf: a performance test (deselected unless -m selects it)",
        "moeperf(configurations=[...], profile=None): the configurations a perf test measures; "
        "implies perf; lets the plugin keep each server alive exactly as long as needed",
        f"dead_end(config, slower_than, metric, reason='', margin={MARGIN}): a configuration "
        "recorded as slower; xfail while it stays slower, strict failure if it is not",
    ):
        config.addinivalue_line("markers", marker)

    def write(line: str, always: bool) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or (not always and config.getoption("verbose") <= 0):
            return
        capture = config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.write_line(line)

    options = options_of(config)
    say, announce = partial(write, always=False), partial(write, always=True)
    try:
        config.stash[SESSION] = perf = perf_session(options, report=say, progress=announce)
        if options.profile_named and options.profile not in perf.profiles:
            raise pytest.UsageError(
                f"--moeperf-profile {options.profile!r}: no such profile; known: "
                f"{', '.join(perf.profiles)} (add [profiles.{options.profile}] to your moeperf "
                "config, or name one of those)"
            )
    except MoeperfError as exc:
        raise pytest.UsageError(str(exc)) from None
    if hasattr(config, "workerinput"):  # an xdist worker lives no longer than its controller
        orphans.end_with_controller()
    config.stash[REAPED] = orphans.reap()  # shown in the header: no reporter here yet
    config.stash[JUDGED] = judged = Judged()
    config.pluginmanager.register(judged, "moeperf-judged")  # its pytest_runtest_logreport
    if perf.candidate is not None:
        pinned = perf.profile().build_label or "the pinned build"
        if pinned == perf.candidate:
            raise pytest.UsageError(
                f"--moeperf-candidate: {perf.candidate} is profile {perf.options.profile!r}'s "
                "own, pinned build; give the build to move to"
            )
        config.stash[UPGRADES] = upgrades = Upgrades(perf, pinned, perf.candidate, _declared)
        config.pluginmanager.register(upgrades, "moeperf-upgrades")
    _stop_on_sigterm()


def _nothing_judged(session: pytest.Session, perf: PerfSession) -> None:
    """A perf session that decided no verdict exits :data:`NOTHING_JUDGED`, not 0 (unless
    ``--moeperf-allow-empty``); an xdist worker leaves that to the controller."""
    judged = session.config.stash[JUDGED]
    if hasattr(session.config, "workerinput") or not judged.nothing_judged:
        return
    if session.exitstatus == pytest.ExitCode.OK and not perf.options.allow_empty:
        session.exitstatus = judged.exit_status = NOTHING_JUDGED


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"moeperf: stopped llama-server pid {pid} left running by a killed session"
        for pid in config.stash.get(REAPED, [])
    ]


def _stop_on_sigterm() -> None:
    """SIGTERM to pytest unwinds like Ctrl-C, so every server is stopped on the way out."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):

        def interrupt(signum: int, frame: object) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, interrupt)


def _declared(item: pytest.Item) -> Declared:
    """What the test's ``moeperf`` and ``dead_end`` markers declare, read once and kept in
    its stash; a :class:`MarkerError` when they do not parse."""
    declared = item.stash.get(DECLARED, None)
    if declared is None:
        declared = read_markers(
            [(m.args, m.kwargs) for m in item.iter_markers("moeperf")],
            [(m.args, m.kwargs) for m in item.iter_markers("dead_end")],
        )
        item.stash[DECLARED] = declared
    return declared


def _marker_error(item: pytest.Item, perf: PerfSession) -> str | None:
    """Why the test's markers cannot mean what they say (one line), or ``None``."""
    try:
        declared = _declared(item)
        if declared.dead_end is None and not item.get_closest_marker("moeperf"):
            return None
        profile = perf.profile(declared.profile)
        marker = "moeperf" if declared.dead_end is None else "dead_end"
        check_configurations(declared.configurations, profile, marker)
    except MoeperfError as exc:
        return f"{item.nodeid}: {exc}"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that declare configurations are perf tests; plain ``pytest`` deselects perf tests."""
    for item in items:
        dead_end = item.get_closest_marker("dead_end")
        if (item.get_closest_marker("moeperf") or dead_end) and not item.get_closest_marker("perf"):
            item.add_marker(pytest.mark.perf)
        names = getattr(item, "fixturenames", None)
        if dead_end is not None and isinstance(names, list) and "moeperf" not in names:
            names.append("moeperf")
    if not config.getoption("markexpr"):
        keep = [i for i in items if not i.get_closest_marker("perf")]
        dropped = [i for i in items if i.get_closest_marker("perf")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep


def _unused_profile(items: list[pytest.Item], perf: PerfSession) -> str | None:
    """Why the profile named by ``--moeperf-profile`` is used by no collected test (their
    markers name profiles of their own), or ``None`` (the ini's is the project's default: a
    run of some of its tests may well not use it)."""
    name = perf.options.profile
    if not perf.options.profile_named:
        return None
    named = set()
    for item in items:
        uses = item.get_closest_marker("moeperf") or item.get_closest_marker("dead_end")
        if not uses and "moeperf" not in getattr(item, "fixturenames", ()):
            continue
        try:
            profile = _declared(item).profile
        except MoeperfError:
            continue  # the item fails at setup with its own line
        if profile in (None, name):
            return None
        named.add(profile)
    theirs = f"the tests name {', '.join(sorted(named))}" if named else "no test measures"
    return (
        f"--moeperf-profile {name!r}: no collected test uses that profile ({theirs}); select "
        "tests that do, or drop the option"
    )


def _stand_in_error(items: list[pytest.Item], perf: PerfSession) -> str | None:
    """Why ``--llama-server`` cannot stand in for the build of a profile the collected tests
    use (its ``--version`` prints another), or ``None``."""
    if perf.options.llama_server is None or perf.options.replay is not None:
        return None
    uses = {}
    for item in items:
        try:
            declared = _declared(item)
            profile = perf.profile(declared.profile)
            for name in declared.configurations:
                uses[(profile.name, name)] = (profile, profile.configuration(name))
        except MoeperfError:
            continue  # the item fails at setup with its own line
    try:
        stand_in_checked(perf.options, uses.values())
    except MoeperfError as exc:
        return str(exc)
    return None


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """In an upgrade check, every perf test runs on the pinned build and on the candidate."""
    perf = metafunc.config.stash.get(SESSION, None)
    if perf is None or perf.candidate is None:
        return
    definition = metafunc.definition
    perf_test = (
        "moeperf" in metafunc.fixturenames
        or definition.get_closest_marker("moeperf") is not None
        or definition.get_closest_marker("dead_end") is not None
    )
    if perf_test:
        parametrize_sides(metafunc)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    perf = session.config.stash[SESSION]
    default = perf.options.profile
    usage = _unused_profile(session.items, perf) or _stand_in_error(session.items, perf)
    if usage is not None and not hasattr(session.config, "workerinput"):
        raise pytest.UsageError(usage)
    for index, item in enumerate(session.items):
        if usage is not None:  # under xdist a worker's usage error is a crash: fail each test
            item.stash[MARKER_ERROR] = usage
            continue
        item.stash[ITEM_INDEX] = index
        error = _marker_error(item, perf)
        if error is not None:
            item.stash[MARKER_ERROR] = error
            continue
        declared = _declared(item)
        for name in declared.configurations:
            perf.last_use[(declared.profile or default, name)] = index


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test whose marker does not parse fails here, with the marker's one line."""
    error = item.stash.get(MARKER_ERROR, None)
    if error is not None:
        pytest.fail(error, pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield
    perf = item.config.stash[SESSION]
    perf.release_after(item.stash.get(ITEM_INDEX, -1))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """After the body of a ``dead_end`` test, judge the dead end."""
    result = yield
    if item.get_closest_marker("dead_end") is not None:
        fixture = getattr(item, "funcargs", {}).get("moeperf")
        if fixture is None:
            raise pytest.UsageError(f"{item.nodeid}: dead_end needs the moeperf fixture")
        try:
            dead = _declared(item).dead_end
            assert dead is not None
            fixture.dead_end(dead.config, dead.slower_than, dead.metric, dead.reason, dead.margin)
        except MoeperfError as exc:
            pytest.fail(str(exc), pytrace=False)
    return result


@pytest.fixture
def moeperf(request: pytest.FixtureRequest) -> Iterator[MoePerf]:
    """Measure named configurations of the profile (``--moeperf-profile``, or the test's
    ``moeperf(profile=...)`` marker)."""
    perf = request.config.stash[SESSION]
    try:
        profile = _declared(request.node).profile
    except MoeperfError as exc:  # already reported at setup; never a traceback here
        pytest.fail(str(exc), pytrace=False)
    side = side_of(request.node)
    nodeid = request.node.nodeid
    fixture = MoePerf(perf, nodeid, profile, side, base_test(nodeid, side) if side else nodeid)
    try:
        yield fixture
    except MoeperfError as exc:
        pytest.fail(str(exc), pytrace=False)
    finally:
        logs = sorted({m.conditions.log for m in fixture.touched if m.conditions.log})
        for log in logs:
            request.node.user_properties.append(("moeperf_log", log))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A MoeperfError shows as its one line, not a traceback; server logs are listed."""
    report = yield
    fixture = getattr(item, "funcargs", {}).get("moeperf")
    if report.when == "call" and isinstance(fixture, MoePerf):  # counted where reports meet
        outcomes = fixture.outcomes()
        measured_on = fixture.session.source.measured_on if outcomes else {}
        host = host_key(measured_on) if measured_on else ""  # a replay: the stored run's host
        report.user_properties.append(verdict_property(outcomes, host))
    if report.when == "call" and isinstance(item, GateItem):
        report.user_properties += item.properties()
    side = side_of(item)
    if side is not None and (report.when == "call" or not report.passed):
        _side_decisions(item, report, side, fixture if isinstance(fixture, MoePerf) else None)
    if call.excinfo is not None and isinstance(call.excinfo.value, MoeperfError):
        report.longrepr = f"{type(call.excinfo.value).__name__}: {call.excinfo.value}"
    logs = [str(v) for k, v in item.user_properties if k == "moeperf_log"]
    if logs and report.when == "call":
        report.sections.append(("moeperf server logs", "\n".join(logs)))
    return report


def _side_decisions(
    item: pytest.Item, report: pytest.TestReport, side: str, fixture: MoePerf | None
) -> None:
    """An upgrade check's test report carries the decisions its side judged (once: at its
    call, or at a setup that did not pass)."""
    if report.when != "call" and (report.when != "setup" or report.passed):
        return
    perf = item.config.stash[SESSION]
    test = base_test(item.nodeid, side)
    outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
    why = _skip_reason(report) if report.skipped else ""
    rerun = rerun_command(perf, item.nodeid)
    decisions = [replace(d, rerun=rerun) for d in (fixture.decisions if fixture else [])]
    decisions = report_decisions(decisions, test, outcome, why, rerun)
    report.user_properties.append(decisions_property(side, decisions))


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(text).removeprefix("Skipped: ")


def _upgrade_check(session: pytest.Session, perf: PerfSession) -> None:
    """The upgrade check's table and answer: its exit status, its markdown and JSON."""
    upgrades = session.config.stash.get(UPGRADES, None)
    if upgrades is None or hasattr(session.config, "workerinput"):
        return
    check = upgrades.check()
    perf.upgrade = check
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, NOTHING_JUDGED):
        session.exitstatus = check.exit_status
    report = perf.options.upgrade_report
    if report is not None:
        write_output(report, upgrade_markdown(check), "--moeperf-upgrade-report")
        write_output(report.with_suffix(".json"), upgrade_json(check), "--moeperf-upgrade-report")


def _finish_steps(session: pytest.Session, perf: PerfSession) -> list[Callable[[], object]]:
    """What a session does at its end, in order: the host at the end, the llama-bench
    cross-check, the results file and store, the accept (an upgrade check's moves the pin),
    the markdown report."""
    interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED
    steps: list[Callable[[], object]] = []
    if not interrupted:
        steps.append(lambda: perf.source.host_moved([], force=True))  # the host at the end
        if perf.options.bench:
            steps.append(lambda: cross_check(perf))
    steps.append(lambda: setattr(perf, "results_path", perf.write_results()))
    check = perf.upgrade
    if perf.options.accept and not interrupted and check is not None:
        dry = perf.options.dry_run
        steps.append(lambda: perf.accept_lines.extend(perf.accept_upgrade(check.outcome, dry)))
    elif perf.options.accept and not interrupted and perf.candidate is None:
        steps.append(lambda: perf.accept_baselines(failed=session.testsfailed))
    if perf.options.report_file is not None:
        steps.append(lambda: write_report(perf))
    return steps


def pytest_sessionfinish(session: pytest.Session) -> None:
    perf = session.config.stash.get(SESSION, None)
    if perf is None:
        return
    if session.exitstatus != pytest.ExitCode.INTERRUPTED:
        try:
            _upgrade_check(session, perf)
        except OSError as exc:
            perf.finish_error = str(exc)
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    perf.close()
    errors = [perf.finish_error] if perf.finish_error else []
    for step in _finish_steps(session, perf):  # one step's error costs no other
        try:
            step()
        except MoeperfError as exc:
            errors.append(str(exc))
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        except OSError as exc:
            errors.append(str(exc))
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    if perf.upgrade is None and not perf.accepted:  # a run that wrote baselines did something
        _nothing_judged(session, perf)
    perf.store.close()
    perf.finish_error = "; ".join(errors) or None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    config = terminalreporter.config
    perf = config.stash.get(SESSION, None)
    if perf is not None:
        terminal_summary(perf, terminalreporter)
        if perf.upgrade is not None:
            terminalreporter.section("moeperf upgrade check")
            for line in upgrade_text(perf.upgrade).splitlines():
                terminalreporter.write_line(line)
        judged = config.stash.get(JUDGED, None)
        if judged is not None and judged.tests and not hasattr(config, "workerinput"):
            judged_summary(judged, perf.options.allow_empty, terminalreporter)
