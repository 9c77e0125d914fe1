"""pytest hooks, options, markers and fixtures of pytest-moeperf (wiring only)."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from ..errors import MoeperfError
from ..fs import check_output, write_output
from ..host.placement import NUMA_MIN_SHARE
from ..host.probe import DEFAULT_TOLERANCE
from ..llama import orphans
from ..llama.build import resolve_server_binary
from ..report.plot import baseline_marks, plot_report
from ..report.tables import (
    BASELINE_HEADERS,
    BENCH_ROUND_HEADERS,
    TRAFFIC_HEADERS,
    baseline_rows,
    bench_round_rows,
    host_lines,
    markdown_report,
    start_lines,
    summary_rows,
    text_table,
    traffic_rows,
    verdict_rows,
)
from ..run.profiles import DEFAULT_BUDGET, host_memory
from ..run.session import REPROBE_SECONDS, Options, PerfSession
from ..store.history import read_history
from ..verdicts.judge import BUSY_LIMIT
from .fixture import MoePerf
from .markers import Declared, check_configurations, read_markers

SESSION = pytest.StashKey[PerfSession]()
ITEM_INDEX = pytest.StashKey[int]()
REAPED = pytest.StashKey[list[int]]()
MARKER_ERROR = pytest.StashKey[str]()
DECLARED = pytest.StashKey[Declared]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("moeperf", "llama.cpp performance suite (pytest-moeperf)")
    group.addoption(
        "--moeperf-profile",
        metavar="NAME",
        help="profile to measure (default: ini moeperf_profile, else 'embedded')",
    )
    group.addoption(
        "--moeperf-config",
        metavar="PATH",
        help="TOML file of profiles and configurations (default: ini moeperf_config, "
        "else [tool.moeperf] in pyproject.toml)",
    )
    group.addoption(
        "--llama-server",
        metavar="PATH",
        help="use this llama-server binary instead of building one "
        "(precedence: this option, ini llama_server, env LLAMA_SERVER)",
    )
    group.addoption(
        "--moeperf-repetitions",
        type=int,
        metavar="N",
        help="timed repetitions per workload (default: the profile's, else 3)",
    )
    group.addoption(
        "--moeperf-replay",
        metavar="PATH",
        help="judge stored numbers instead of starting servers: a results file written by a "
        "run (.moeperf/results-*.json) or a baseline file (baselines/*.toml)",
    )
    group.addoption(
        "--moeperf-report",
        metavar="PATH",
        help="write the run's tables (throughput, baselines, claims, startup warnings, host) "
        "as markdown here, and a PNG of throughput (with run-over-run history from .moeperf/) "
        "beside it",
    )
    group.addoption(
        "--moeperf-accept",
        action="store_true",
        help="write this run's measurements as the new baselines of their profiles "
        "(atomically; previous values kept as history in the file)",
    )
    group.addoption(
        "--moeperf-bench",
        action="store_true",
        help="after the run, measure every configuration's workloads with llama-bench too "
        "(same model, flags, pinning) and show the gap to the server's numbers",
    )
    group.addoption(
        "--moeperf-strict-warnings",
        action="store_true",
        help="fail a test whose server printed a known performance warning at start "
        "(the mmap/tensor-override hint, NUMA balancing, ...) instead of warning",
    )
    group.addoption(
        "--moeperf-max-rounds",
        "--moeperf-max-repetitions",
        dest="moeperf_max_rounds",
        type=int,
        metavar="N",
        default=Options.max_rounds,
        help="the most paired rounds a verdict may take before it must say undecided "
        f"(default {Options.max_rounds})",
    )
    group.addoption(
        "--moeperf-budget",
        type=float,
        metavar="SECONDS",
        help="seconds a verdict (claim, dead end, baseline check) may keep measuring before "
        f"it must say undecided (default: the profile's budget, {DEFAULT_BUDGET:.0f})",
    )
    group.addoption(
        "--moeperf-undecided",
        "--moeperf-inconclusive",
        dest="moeperf_undecided",
        choices=("skip", "fail"),
        default="skip",
        help="what an undecided verdict does to its test (default: skip)",
    )
    group.addoption(
        "--moeperf-startup-timeout",
        type=float,
        metavar="S",
        help="seconds a server may take to become ready (default 300)",
    )
    group.addoption(
        "--moeperf-request-timeout",
        type=float,
        metavar="S",
        help="seconds one measurement request may take (default 600)",
    )
    group.addoption(
        "--moeperf-configuration-timeout",
        type=float,
        metavar="S",
        help="seconds all measurements of one configuration may take in a session "
        "(default: no limit; pytest-timeout's --timeout bounds each test)",
    )
    group.addoption(
        "--moeperf-probe-tolerance",
        type=float,
        metavar="SHARE",
        default=DEFAULT_TOLERANCE,
        help="two calibration probes (memory bandwidth, compute) that differ by more than this "
        "share are two hosts: baselines of the other do not apply, and a host whose probe moved "
        "that much during the run makes later verdicts undecided. Default: %(default)r",
    )
    group.addoption(
        "--moeperf-reprobe-seconds",
        type=float,
        metavar="S",
        default=REPROBE_SECONDS,
        help="a verdict probes its CPUs again when their last probe is older than S seconds, "
        "to notice the host changing under the run (0: before every verdict). "
        "Default: %(default)r",
    )
    group.addoption(
        "--moeperf-busy-limit",
        type=float,
        metavar="SHARE",
        default=BUSY_LIMIT,
        help="share of a server's CPUs that other work may take while it is measured for the "
        "numbers to decide a verdict or be accepted as baselines (above it: undecided, "
        "accept refused). Default: %(default)r",
    )
    group.addoption(
        "--moeperf-numa-min-share",
        type=float,
        metavar="SHARE",
        default=NUMA_MIN_SHARE,
        help="share of a NUMA-pinned server's memory (/proc/PID/numa_maps: model file and "
        "heap) that must lie on its node; below it the test warns (fails with "
        "--moeperf-strict-warnings). Default: %(default)r",
    )
    group.addoption(
        "--moeperf-host-memory",
        metavar="SIZE",
        help="RAM the session's servers may hold together, e.g. 96G (default: env "
        "MOEPERF_HOST_MEMORY, else the host's available memory at the start): a server starts "
        "only where it fits, idle ones are stopped first, and two sides that do not fit "
        "together are measured across restarts",
    )
    group.addoption(
        "--moeperf-results",
        metavar="PATH",
        help="write the results file here (default .moeperf/results-*.json)",
    )
    parser.addini("moeperf_profile", "default profile for perf tests", default="embedded")
    parser.addini("moeperf_config", "TOML file of profiles and configurations", default="")
    parser.addini("llama_server", "llama-server binary to use instead of building one", default="")


def _options(config: pytest.Config) -> Options:
    root = Path(config.rootpath)
    cfg = config.getoption("moeperf_config") or config.getini("moeperf_config")
    try:
        binary = resolve_server_binary(
            config.getoption("llama_server"), config.getini("llama_server") or None, os.environ
        )
    except MoeperfError as exc:
        raise pytest.UsageError(str(exc)) from None
    opts = Options(
        profile=config.getoption("moeperf_profile") or config.getini("moeperf_profile"),
        config_file=(root / cfg) if cfg else None,
        pyproject=root / "pyproject.toml",
        llama_server=binary,
        repetitions=config.getoption("moeperf_repetitions"),
        max_rounds=config.getoption("moeperf_max_rounds"),
        budget=config.getoption("moeperf_budget"),
        undecided=config.getoption("moeperf_undecided"),
        results_dir=root / ".moeperf",
        rootdir=root,
    )
    if config.getoption("moeperf_startup_timeout"):
        opts.startup_timeout = config.getoption("moeperf_startup_timeout")
    if config.getoption("moeperf_configuration_timeout"):
        opts.configuration_timeout = config.getoption("moeperf_configuration_timeout")
    if config.getoption("moeperf_request_timeout"):
        opts.request_timeout = config.getoption("moeperf_request_timeout")
    if config.getoption("moeperf_replay"):
        opts.replay = Path(config.getoption("moeperf_replay"))
    if config.getoption("moeperf_report"):
        opts.report_file = Path(config.getoption("moeperf_report"))
    opts.accept = bool(config.getoption("moeperf_accept"))
    opts.strict_warnings = bool(config.getoption("moeperf_strict_warnings"))
    opts.bench = bool(config.getoption("moeperf_bench"))
    if opts.accept and opts.replay:
        raise pytest.UsageError("--moeperf-accept takes measured results, not --moeperf-replay")
    if config.getoption("moeperf_results"):
        opts.results_file = Path(config.getoption("moeperf_results"))
    outputs = []  # checked before anything is measured: never a PNG without its report
    if opts.report_file is not None:
        outputs += [
            (opts.report_file, "--moeperf-report"),
            (report_png(opts.report_file), "--moeperf-report (its PNG)"),
        ]
    if opts.results_file is not None:
        outputs.append((opts.results_file, "--moeperf-results"))
    try:
        for path, what in outputs:
            check_output(path, what)
    except MoeperfError as exc:
        raise pytest.UsageError(str(exc)) from None
    if opts.repetitions is not None and opts.repetitions < 1:
        raise pytest.UsageError("--moeperf-repetitions must be >= 1")
    if opts.max_rounds < 2:
        raise pytest.UsageError(
            f"--moeperf-max-rounds {opts.max_rounds} must be >= 2 (the most rounds a "
            "verdict may take; a paired interval needs 2)"
        )
    if opts.budget is not None and not (math.isfinite(opts.budget) and opts.budget > 0):
        raise pytest.UsageError(
            f"--moeperf-budget {opts.budget!r}: give the seconds a verdict may measure, e.g. 180"
        )
    tolerance = config.getoption("moeperf_probe_tolerance")
    if not (0 < tolerance < 1):
        raise pytest.UsageError(
            f"--moeperf-probe-tolerance {tolerance!r} must be a share between 0 and 1, e.g. 0.1"
        )
    opts.probe_tolerance = tolerance
    reprobe = config.getoption("moeperf_reprobe_seconds")
    if not reprobe >= 0:
        raise pytest.UsageError(f"--moeperf-reprobe-seconds {reprobe!r} must be >= 0")
    opts.reprobe_seconds = reprobe
    busy_limit = config.getoption("moeperf_busy_limit")
    if not (0 < busy_limit <= 1):
        raise pytest.UsageError(
            f"--moeperf-busy-limit {busy_limit!r} must be a share in (0, 1], e.g. 0.25"
        )
    opts.busy_limit = busy_limit
    numa_min = config.getoption("moeperf_numa_min_share")
    if not (0 <= numa_min <= 1):
        raise pytest.UsageError(
            f"--moeperf-numa-min-share {numa_min!r} must be a share in [0, 1], e.g. 0.9"
        )
    opts.numa_min_share = numa_min
    try:
        opts.host_memory = host_memory(
            config.getoption("moeperf_host_memory"), "--moeperf-host-memory"
        )
    except MoeperfError as exc:
        raise pytest.UsageError(str(exc)) from None
    return opts


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perf: a performance test (deselected unless -m selects it)")
    config.addinivalue_line(
        "markers",
        "moeperf(configurations=[...], profile=None): the configurations a perf test measures; "
        "implies perf; lets the plugin keep each server alive exactly as long as needed",
    )
    config.addinivalue_line(
        "markers",
        "dead_end(config, slower_than, metric, reason='', margin=0.05): a configuration "
        "recorded as slower; xfail while it stays slower, strict failure if it is not",
    )

    def write(line: str, always: bool) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or (not always and config.getoption("verbose") <= 0):
            return
        capture = config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.write_line(line)

    def say(line: str) -> None:
        write(line, always=False)

    def announce(line: str) -> None:
        write(line, always=True)

    try:
        config.stash[SESSION] = PerfSession(_options(config), report=say, progress=announce)
    except MoeperfError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[REAPED] = orphans.reap()  # shown in the header: no reporter here yet
    _stop_on_sigterm()


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


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    perf = session.config.stash[SESSION]
    default = perf.options.profile
    for index, item in enumerate(session.items):
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
    fixture = MoePerf(perf, request.node.nodeid, profile)
    try:
        yield fixture
    except MoeperfError as exc:
        pytest.fail(str(exc), pytrace=False)
    finally:
        logs = sorted({str(m.extra.get("log")) for m in fixture.touched if m.extra.get("log")})
        for log in logs:
            request.node.user_properties.append(("moeperf_log", log))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A MoeperfError shows as its one line, not a traceback; server logs are listed."""
    report = yield
    if call.excinfo is not None and isinstance(call.excinfo.value, MoeperfError):
        report.longrepr = f"{type(call.excinfo.value).__name__}: {call.excinfo.value}"
    logs = [str(v) for k, v in item.user_properties if k == "moeperf_log"]
    if logs and report.when == "call":
        report.sections.append(("moeperf server logs", "\n".join(logs)))
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    perf = session.config.stash.get(SESSION, None)
    if perf is None:
        return
    perf.close()
    interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED
    steps: list[Callable[[], object]] = []
    if not interrupted:
        steps.append(lambda: perf.hostwatch.host_moved(list(perf.probes), force=True))  # at the end
        if perf.options.bench:
            steps.append(perf.cross_check)
    steps.append(lambda: setattr(perf, "results_path", perf.write_results()))
    if perf.options.accept and not interrupted:
        steps.append(lambda: perf.accept_baselines(failed=session.testsfailed))
    if perf.options.report_file is not None:
        steps.append(lambda: _write_report(perf))
    errors = []
    for step in steps:  # one step's error does not cost the others (a refused accept, a report)
        try:
            step()
        except MoeperfError as exc:
            errors.append(str(exc))
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        except OSError as exc:
            errors.append(str(exc))
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    perf.finish_error = "; ".join(errors) or None


def _write_report(perf: PerfSession) -> None:
    """The markdown report, and beside it a PNG of throughput (with run-over-run history)."""
    assert perf.options.report_file is not None
    report = perf.options.report_file
    results = perf.results_dict or perf.results()
    fp = next(iter(results.get("fingerprints", {}).values()), perf.host)
    text = markdown_report(
        list(perf.measurements.values()),
        perf.baseline_rows,
        perf.verdicts,
        fp,
        perf.startup_lines(),
        perf.bench_rows() if perf.bench else None,
        host_lines=_host_lines(perf),
        traffic=results.get("traffic"),
    )
    if perf.measurements:
        png = report_png(report)
        history, perf.history_problems = read_history(perf.options.results_dir)
        profiles = sorted({k[0] for k in perf.measurements})
        marks = baseline_marks(perf.baselines(perf.profile(p)) for p in profiles)
        plot_report(results, history, png, baselines=marks)
        perf.report_files.append(png)
        text += f"\n![throughput per configuration and workload]({png.name})\n"
    write_output(report, text, "--moeperf-report")
    perf.report_files.insert(0, report)


def _host_lines(perf: PerfSession) -> list[str]:
    """The host as this run measured it, and how long its servers took to start, for the
    summary and the report."""
    return host_lines(
        perf.probes.values(), perf.hostwatch.host_changes, perf.measurements.values()
    ) + start_lines(perf.load_times())


def report_png(report: Path) -> Path:
    """The PNG written beside the markdown report *report*."""
    return (
        report.with_suffix(".png")
        if report.suffix != ".png"
        else report.with_name(report.stem + ".plot.png")
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    perf = terminalreporter.config.stash.get(SESSION, None)
    if perf is None:
        return
    if perf.finish_error:
        terminalreporter.write_line(f"moeperf: error: {perf.finish_error}", red=True)
    if not perf.measurements:
        return
    terminalreporter.section("moeperf: throughput (median of repetitions)")
    for line in _host_lines(perf):
        terminalreporter.write_line(line, yellow=line.startswith("host changed"))
    headers, rows = summary_rows(perf.measurements.values())
    if rows:
        terminalreporter.write_line(text_table(headers, rows))
    # the results written at session finish hold every pass already: not serialised again
    traffic = traffic_rows(
        perf.results_dict["traffic"] if perf.results_dict else perf.traffic_runs()
    )
    if traffic:
        terminalreporter.write_line("")
        terminalreporter.write_line("traffic (all passes; prefill and decode summed as logstats):")
        terminalreporter.write_line(text_table(TRAFFIC_HEADERS, traffic))
    if perf.verdicts:
        terminalreporter.write_line("")
        headers, rows = verdict_rows(perf.verdicts)
        terminalreporter.write_line(text_table(headers, rows))
    if perf.baseline_rows:
        terminalreporter.write_line("")
        terminalreporter.write_line(text_table(BASELINE_HEADERS, baseline_rows(perf.baseline_rows)))
    if perf.bench_rounds:
        terminalreporter.write_line("")
        terminalreporter.write_line(
            "llama-bench in the same rounds as the servers (same build, model, flags, pinning):"
        )
        terminalreporter.write_line(
            text_table(BENCH_ROUND_HEADERS, bench_round_rows(perf.bench_rounds))
        )
    if perf.bench or perf.bench_errors:
        terminalreporter.write_line("")
        terminalreporter.write_line("llama-bench cross-check (same model, flags, pinning):")
        terminalreporter.write_line(text_table(*perf.bench_rows()))
        for line in perf.bench_errors:
            terminalreporter.write_line(f"  {line}", yellow=True)
    startup = perf.startup_lines()
    if startup:
        terminalreporter.write_line("")
        terminalreporter.write_line("llama-server startup warnings:")
        for line in startup:
            terminalreporter.write_line(f"  {line}")
    for path in perf.accepted:
        terminalreporter.write_line(f"accepted as new baselines: {path}")
    for line in perf.history_problems:
        terminalreporter.write_line(f"moeperf: skipped history file: {line}", yellow=True)
    for path in perf.report_files:
        terminalreporter.write_line(f"report: {path}")
    if perf.results_path is not None:
        terminalreporter.write_line(f"results: {perf.results_path}")
