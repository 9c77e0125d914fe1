"""pytest-moeperf's command-line and ini options, and the session :class:`Options` they make:
every value checked once, where its setting is defined (:mod:`pytest_moeperf.defaults`),
before anything is measured; a bad one is a usage error of one line."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..config.profiles import default_profile, host_memory, store_setting
from ..defaults import (
    BUDGET,
    BUSY_LIMIT,
    MAX_ROUNDS,
    NUMA_MIN_SHARE,
    PROBE_TOLERANCE,
    REPETITIONS,
    REPROBE_SECONDS,
    REQUEST_TIMEOUT,
    STARTUP_TIMEOUT,
    SettingError,
    check_budget,
    check_busy_limit,
    check_numa_min_share,
    check_probe_tolerance,
    check_reprobe,
    check_rounds,
    check_seconds,
)
from ..errors import MoeperfError
from ..fs import check_output
from ..llama.build import binary_build, resolve_server_binary
from ..run.feeds import MAX_AUTO_BLOCK
from ..run.options import Options
from ..run.rounds import AUTO_CAP, AUTO_ROUNDS
from ..store.database import checked_store_url
from ..verdicts.claims import BUILD_NAME


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``--moeperf-*`` options and the ini keys (pytest's hook, :mod:`.hooks` has it)."""
    group = parser.getgroup("moeperf", "llama.cpp performance suite (pytest-moeperf)")
    group.addoption(
        "--moeperf-profile",
        metavar="NAME",
        help="profile of the tests whose marker names none (default: ini moeperf_profile, "
        "else the profiles file's default_profile, else 'embedded'); a name that is no "
        "profile is a usage error, and so is a "
        "--moeperf-profile no collected test uses",
    )
    group.addoption(
        "--moeperf-config",
        metavar="PATH",
        help="TOML file of profiles and configurations (default: ini moeperf_config, "
        "else [tool.moeperf] in pyproject.toml)",
    )
    group.addoption(
        "--moeperf-store",
        metavar="URL",
        help="results store: sqlite:///PATH or postgresql://USER@HOST/DB (precedence: this "
        "option, env MOEPERF_STORE, store = in the profiles file; default: "
        ".moeperf/moeperf.sqlite)",
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
        help="timed repetitions per workload (default: the profile's repetitions, else "
        f"{REPETITIONS})",
    )
    group.addoption(
        "--moeperf-replay",
        metavar="PATH",
        help="judge stored numbers instead of starting servers: a results file written by a "
        "run (.moeperf/results-*.json), a baseline file (baselines/*.toml), or store:KEY, a "
        "run of the results store by the first digits of its key (moeperf store list)",
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
        default=MAX_ROUNDS,
        help="the most paired rounds a verdict may take before it must say undecided "
        f"(default {MAX_ROUNDS}; --moeperf-max-repetitions is the old name)",
    )
    group.addoption(
        "--moeperf-budget",
        type=float,
        metavar="SECONDS",
        help="seconds a verdict (claim, dead end, baseline check) may keep measuring before "
        "it must say undecided, servers' starts not counted (default: the profile's budget, "
        f'{BUDGET:g}; a profile\'s budget = "auto" buys each verdict {AUTO_ROUNDS} rounds at '
        f"the pace of its first, at most {AUTO_CAP:g} s)",
    )
    group.addoption(
        "--moeperf-undecided",
        "--moeperf-inconclusive",
        dest="moeperf_undecided",
        choices=("skip", "pass", "fail"),
        default="skip",
        help="what an undecided verdict does to its test: skip it (default), let it pass (the "
        "summary still shows it undecided) or fail it, as the gate's --undecided does to a run "
        "(--moeperf-inconclusive is the old name)",
    )
    group.addoption(
        "--moeperf-measure-anyway",
        action="store_true",
        help="measure a verdict's whole budget even where it says before measuring that it "
        "cannot decide (a baseline check whose host's between-session term is not measured, "
        "or alone reaches the tolerance): the numbers, for a user who wants them",
    )
    group.addoption(
        "--moeperf-no-history",
        action="store_true",
        help="on a host not calibrated, take no round spread or process term from this host's "
        "own verdicts (stored, and this run's earlier ones): each verdict's own process blocks "
        "alone estimate its process term",
    )
    group.addoption(
        "--moeperf-allow-empty",
        action="store_true",
        default=None,
        help="exit 0 from a perf session that decided no verdict (every perf test skipped or "
        "undecided); by default such a session exits 5, as pytest does when no test ran "
        "(ini moeperf_allow_empty)",
    )
    group.addoption(
        "--moeperf-startup-timeout",
        type=float,
        metavar="S",
        default=STARTUP_TIMEOUT,
        help=f"seconds a server may take to become ready (default {STARTUP_TIMEOUT:g}; must be "
        "> 0, like every timeout)",
    )
    group.addoption(
        "--moeperf-request-timeout",
        type=float,
        metavar="S",
        default=REQUEST_TIMEOUT,
        help=f"seconds one measurement request may take (default {REQUEST_TIMEOUT:g})",
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
        default=PROBE_TOLERANCE,
        help="two calibration probes (memory bandwidth, compute) that differ by more than this "
        "share are two hosts: baselines of the other do not apply, and a host whose probe moved "
        "that much during the run makes later verdicts undecided (default %(default)r)",
    )
    group.addoption(
        "--moeperf-reprobe-seconds",
        type=float,
        metavar="S",
        default=REPROBE_SECONDS,
        help="a verdict probes its CPUs again when their last probe is older than S seconds, "
        f"to notice the host changing under the run (default {REPROBE_SECONDS:g}; 0: before "
        "every verdict)",
    )
    group.addoption(
        "--moeperf-busy-limit",
        type=float,
        metavar="SHARE",
        default=BUSY_LIMIT,
        help="share of a server's CPUs that other work may take while it is measured for the "
        "numbers to decide a verdict or be accepted as baselines (above it: undecided, "
        "accept refused; default %(default)r)",
    )
    group.addoption(
        "--moeperf-numa-min-share",
        type=float,
        metavar="SHARE",
        default=NUMA_MIN_SHARE,
        help="share of a NUMA-pinned server's memory (/proc/PID/numa_maps: model file and "
        "heap) that must lie on its node; below it the test warns (fails with "
        "--moeperf-strict-warnings; default %(default)r)",
    )
    group.addoption(
        "--moeperf-host-memory",
        metavar="SIZE",
        help="RAM the session's servers may hold together, e.g. 96G (default: env "
        "MOEPERF_HOST_MEMORY, else the host's available memory, MemAvailable, at the start): "
        "a server starts only where it fits, idle ones are stopped first, and two sides that "
        "do not fit together are measured across restarts",
    )
    group.addoption(
        "--moeperf-process-block",
        type=int,
        metavar="N",
        help="paired rounds a pair of server processes serves before both are restarted "
        "(0: never; default: the profile's process_block, else where the variance is and "
        "what a restart costs, Kalibera and Jones: sqrt((restart / round) x (round spread / "
        f"process term)^2), at most {MAX_AUTO_BLOCK} on a host not calibrated)",
    )
    group.addoption(
        "--moeperf-candidate",
        metavar="BUILD|PATH",
        help="check an upgrade: judge every perf test on the pinned build and on this one (a "
        "published build number, built as the profile says, or a llama-server binary), gate "
        "each configuration the tests use between the two, and end with one table of every "
        "decision on both builds; exit 0 every decision holds on it, 1 one changed for the "
        "worse, 6 one undecided, 5 nothing judged",
    )
    group.addoption(
        "--moeperf-candidate-label",
        metavar="NAME",
        help="what the candidate is called in tables, stored runs and baselines (default: "
        "b<number> its --version prints), e.g. pr-29887 for a binary built from a pull request",
    )
    group.addoption(
        "--moeperf-dry-run",
        action="store_true",
        help="with --moeperf-accept and --moeperf-candidate: print the diff accepting would "
        "make (the profiles file's pin, the baselines) and write nothing",
    )
    group.addoption(
        "--moeperf-pinned",
        metavar="BUILD|PATH",
        help="take this build as every profile's own (pinned) build for the run: a published "
        "build number or a llama-server binary (default: the profile's build)",
    )
    group.addoption(
        "--moeperf-upgrade-report",
        metavar="PATH",
        help="with --moeperf-candidate: write the decision table as markdown here, and as JSON "
        "beside it (PATH with .json)",
    )
    group.addoption(
        "--moeperf-results",
        metavar="PATH",
        help="write the results file here (default .moeperf/results-*.json)",
    )
    parser.addini(
        "moeperf_profile",
        "default profile for perf tests (else the profiles file's default_profile, else embedded)",
        default="",
    )
    parser.addini("moeperf_config", "TOML file of profiles and configurations", default="")
    parser.addini("llama_server", "llama-server binary to use instead of building one", default="")
    parser.addini(
        "moeperf_allow_empty",
        "exit 0 from a perf session that decided no verdict (default: exit 5)",
        type="bool",
        default=False,
    )


def report_png(report: Path) -> Path:
    """The PNG written beside the markdown report *report*."""
    if report.suffix == ".png":
        return report.with_name(report.stem + ".plot.png")
    return report.with_suffix(".png")


def _build_option(value: str, option: str) -> tuple[int | str, int | None]:
    """A build number or a llama-server binary as *option* names it, with the build number
    (a binary's, as its ``--version`` prints it; ``None`` when it prints none)."""
    text = value.strip()
    if not text:
        raise MoeperfError(f"{option}: empty; give a build number (11800) or a llama-server path")
    if text.isdigit():
        return int(text), int(text)
    try:
        build = binary_build(text)
    except MoeperfError as exc:
        raise MoeperfError(f"{option} {text}: {exc}") from None
    return str(build.server), build.number


def upgrade_options(
    candidate: str | None, label: str | None, pinned: str | None
) -> tuple[tuple[int | str, str] | None, tuple[int | str, int] | None]:
    """``--moeperf-candidate`` with its label, and ``--moeperf-pinned`` with its build number,
    each checked (a binary asked its ``--version``); a bad one is a one-line error."""
    if label is not None and candidate is None:
        raise MoeperfError("--moeperf-candidate-label: names a candidate; give --moeperf-candidate")
    if label is not None and (not BUILD_NAME.fullmatch(label) or label.isdigit()):
        raise MoeperfError(
            f"--moeperf-candidate-label {label!r}: letters, digits and -_./+: only, not a bare "
            "number (write b11800), e.g. pr-29887"
        )
    cand = None
    if candidate is not None:
        target, number = _build_option(candidate, "--moeperf-candidate")
        if label is None and number is None:
            raise MoeperfError(
                f"--moeperf-candidate {candidate}: its --version prints no build number (built "
                "without it): name it with --moeperf-candidate-label, e.g. pr-29887"
            )
        cand = (target, label or f"b{number}")
    pin = None
    if pinned is not None:
        target, number = _build_option(pinned, "--moeperf-pinned")
        if number is None:
            raise MoeperfError(
                f"--moeperf-pinned {pinned}: its --version prints no build number (built without "
                "it): give a binary built with its number, or a published build number"
            )
        pin = (target, number)
    if cand is not None and pin is not None and cand[1] == f"b{pin[1]}":
        raise MoeperfError(
            f"--moeperf-candidate {candidate} is the pinned build b{pin[1]} (--moeperf-pinned): "
            "give the build to move to"
        )
    return cand, pin


def options_of(config: pytest.Config) -> Options:
    """The session's options from pytest's; a bad value is a :class:`pytest.UsageError` of one
    line naming the option."""
    try:
        return _options(config)
    except (MoeperfError, SettingError) as exc:
        raise pytest.UsageError(str(exc)) from None


def _options(config: pytest.Config) -> Options:
    root = Path(config.rootpath)
    cfg = config.getoption("moeperf_config") or config.getini("moeperf_config")
    get = config.getoption
    config_file = (root / cfg) if cfg else None
    store, where = store_setting(
        get("moeperf_store"), "--moeperf-store", config_file, root / "pyproject.toml", os.environ
    )
    checked_store_url(store, where, root / ".moeperf")  # a bad URL: a usage error, at once
    profile = (
        get("moeperf_profile")
        or default_profile(
            config.getini("moeperf_profile") or "", config_file, root / "pyproject.toml"
        )[0]
    )
    opts = Options(
        profile=profile,
        profile_named=bool(get("moeperf_profile")),
        config_file=config_file,
        pyproject=root / "pyproject.toml",
        store=store,
        llama_server=resolve_server_binary(
            get("llama_server"), config.getini("llama_server") or None, os.environ
        ),
        repetitions=get("moeperf_repetitions"),
        max_rounds=get("moeperf_max_rounds"),
        budget=get("moeperf_budget"),
        undecided=get("moeperf_undecided"),
        allow_empty=bool(
            get("moeperf_allow_empty")
            if get("moeperf_allow_empty") is not None
            else config.getini("moeperf_allow_empty")
        ),
        startup_timeout=get("moeperf_startup_timeout"),
        request_timeout=get("moeperf_request_timeout"),
        configuration_timeout=get("moeperf_configuration_timeout"),
        results_dir=root / ".moeperf",
        results_file=Path(get("moeperf_results")) if get("moeperf_results") else None,
        report_file=Path(get("moeperf_report")) if get("moeperf_report") else None,
        replay=Path(get("moeperf_replay")) if get("moeperf_replay") else None,
        accept=bool(get("moeperf_accept")),
        bench=bool(get("moeperf_bench")),
        strict_warnings=bool(get("moeperf_strict_warnings")),
        rootdir=root,
        probe_tolerance=get("moeperf_probe_tolerance"),
        reprobe_seconds=get("moeperf_reprobe_seconds"),
        busy_limit=get("moeperf_busy_limit"),
        numa_min_share=get("moeperf_numa_min_share"),
        host_memory=host_memory(get("moeperf_host_memory"), "--moeperf-host-memory"),
        process_block=get("moeperf_process_block"),
        measure_anyway=bool(get("moeperf_measure_anyway")),
        history=not get("moeperf_no_history"),
    )
    _upgrade(opts, get)
    _check_outputs(opts)
    _check_values(opts)
    return opts


def _upgrade(opts: Options, get: Callable[[str], Any]) -> None:
    """The upgrade check's options into *opts*, and what they exclude."""
    opts.candidate, opts.pinned = upgrade_options(
        get("moeperf_candidate"), get("moeperf_candidate_label"), get("moeperf_pinned")
    )
    opts.dry_run = bool(get("moeperf_dry_run"))
    if opts.dry_run and not (opts.accept and opts.candidate):
        raise SettingError(
            "--moeperf-dry-run: shows what --moeperf-accept of an upgrade check would write; "
            "give both, with --moeperf-candidate"
        )
    upgrade_report = get("moeperf_upgrade_report")
    if upgrade_report is not None:
        if opts.candidate is None:
            raise SettingError(
                "--moeperf-upgrade-report: give the build to check, --moeperf-candidate"
            )
        opts.upgrade_report = Path(upgrade_report)
        check_output(opts.upgrade_report, "--moeperf-upgrade-report")
        check_output(
            opts.upgrade_report.with_suffix(".json"), "--moeperf-upgrade-report (its JSON)"
        )
    if opts.candidate is not None and opts.replay is not None:
        raise SettingError(
            "--moeperf-candidate measures a build; --moeperf-replay measures nothing: leave one out"
        )
    if opts.accept and opts.replay:
        raise SettingError("--moeperf-accept takes measured results, not --moeperf-replay")


def _check_outputs(opts: Options) -> None:
    """The files the run will write, checked before anything is measured."""
    if opts.report_file is not None:  # checked before anything is measured: never a PNG alone
        check_output(opts.report_file, "--moeperf-report")
        check_output(report_png(opts.report_file), "--moeperf-report (its PNG)")
    if opts.results_file is not None:
        check_output(opts.results_file, "--moeperf-results")


def _check_values(opts: Options) -> None:
    """Each option's value in its range; one line naming the option where it is not."""
    if opts.repetitions is not None:
        check_rounds(opts.repetitions, "--moeperf-repetitions", at_least=1, what="repetitions")
    check_rounds(
        opts.max_rounds,
        "--moeperf-max-rounds",
        at_least=2,
        what="the most rounds a verdict may take; a paired interval needs 2",
    )
    check_budget(opts.budget, "--moeperf-budget")
    for value, name, example in (
        (opts.startup_timeout, "startup", STARTUP_TIMEOUT),
        (opts.request_timeout, "request", REQUEST_TIMEOUT),
        (opts.configuration_timeout, "configuration", 1800),
    ):
        check_seconds(value, f"--moeperf-{name}-timeout", f"the {name} timeout", example=example)
    if opts.process_block is not None:
        check_rounds(opts.process_block, "--moeperf-process-block", at_least=0, what="0: never")
    check_probe_tolerance(opts.probe_tolerance, "--moeperf-probe-tolerance")
    check_reprobe(opts.reprobe_seconds, "--moeperf-reprobe-seconds")
    check_busy_limit(opts.busy_limit, "--moeperf-busy-limit")
    check_numa_min_share(opts.numa_min_share, "--moeperf-numa-min-share")
