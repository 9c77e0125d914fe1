"""What the verbs that measure builds against each other share (gate, bisect, sweep): their
arguments, the checks those get before any build or server work, the session they measure
in, and writing their reports."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sqlalchemy.engine import URL

from ..config.profiles import Profile, default_profile, host_memory, store_setting
from ..defaults import (
    BUDGET,
    BUSY_LIMIT,
    MARGIN,
    STARTUP_TIMEOUT,
    check_budget,
    check_busy_limit,
    check_margin,
    check_rounds,
    check_seconds,
)
from ..errors import MoeperfError
from ..fs import check_output, write_output
from ..run.feeds import MAX_AUTO_BLOCK
from ..run.live import LiveHost
from ..run.opening import perf_session
from ..run.options import Options
from ..run.session import PerfSession
from ..store.database import checked_store_url
from ..store.runstore import RunStore, open_store


def say(line: str) -> None:
    """A progress line, on stderr (stdout is the command's result)."""
    print(line, file=sys.stderr, flush=True)


def add_workload_argument(p: argparse.ArgumentParser) -> None:
    """``-w/--workload``, repeatable: the workloads a gate or a calibration measures."""
    p.add_argument(
        "-w",
        "--workload",
        action="append",
        default=[],
        help="workload(s), e.g. pp512 (default: the profile's)",
    )


def add_margin(p: argparse.ArgumentParser, what: str = "that counts, relative") -> None:
    p.add_argument("--margin", type=float, default=MARGIN,
                   help=f"smallest change {what} (default {MARGIN:g})")  # fmt: skip


def add_store_arguments(p: argparse.ArgumentParser) -> None:
    """``--config`` and ``--store``: the profiles file and the results store a command reads."""
    p.add_argument("--config", help="TOML file of profiles (default ./moeperf.toml if present)")
    p.add_argument(
        "--store",
        metavar="URL",
        help="results store: sqlite:///PATH or postgresql://USER@HOST/DB (default: env "
        "MOEPERF_STORE, else store = in the profiles file, else .moeperf/moeperf.sqlite)",
    )


def config_file(args: argparse.Namespace) -> Path | None:
    """The profiles file: --config, else ./moeperf.toml when there is one."""
    if args.config:
        return Path(args.config)
    here = Path.cwd() / "moeperf.toml"
    return here if here.is_file() else None


def store_text(args: argparse.Namespace) -> tuple[str, URL]:
    """The results store as named (--store, $MOEPERF_STORE, store = in the profiles file; empty:
    the default) and its URL; a bad one fails here, before any build work."""
    root = Path.cwd()
    text, where = store_setting(
        args.store, "--store", config_file(args), root / "pyproject.toml", os.environ
    )
    return text, checked_store_url(text, where, root / ".moeperf")


def opened_store(args: argparse.Namespace) -> RunStore:
    """The results store *args* name, opened."""
    return open_store(store_text(args)[1])


def profile_help() -> str:
    """``--profile``'s help, with the default in force here: the project's (pytest's ini
    ``moeperf_profile`` in pyproject.toml, else ``default_profile`` in ./moeperf.toml), else
    ``embedded``."""
    here = Path.cwd() / "moeperf.toml"
    try:
        name, where = default_profile(
            None, here if here.is_file() else None, Path.cwd() / "pyproject.toml"
        )
    except MoeperfError as exc:
        return f"profile (default: the project's, which cannot be read here: {exc})"
    return f"profile (default here: {name}, {where}; with --config, that file's default_profile)"


def profile_of(args: argparse.Namespace) -> str:
    """The profile a command measures: ``--profile``, else the project's default
    (:func:`~pytest_moeperf.config.profiles.default_profile` of --config or ./moeperf.toml),
    else ``embedded``."""
    if args.profile:
        return str(args.profile)
    return default_profile(None, config_file(args), Path.cwd() / "pyproject.toml")[0]


def add_run_arguments(p: argparse.ArgumentParser, *, configurations: str) -> None:
    """The arguments of a command that measures builds or configurations (gate, bisect,
    sweep)."""
    p.add_argument("--profile", help=profile_help())
    add_store_arguments(p)
    p.add_argument("-c", "--configuration", action="append", default=[], help=configurations)
    add_margin(p)
    p.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="seconds each comparison (configuration and metric) may measure before it is "
        f"undecided (default: the profile's budget, {BUDGET:g} on the embedded profile)",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=STARTUP_TIMEOUT,
        metavar="SECONDS",
        help=f"seconds a server may take to become ready (default {STARTUP_TIMEOUT:g})",
    )
    p.add_argument(
        "--busy-limit",
        type=float,
        default=None,
        metavar="SHARE",
        help="share of a server's CPUs other work may take while it is measured for a row to "
        f"decide (default {BUSY_LIMIT:g}; above it the row is undecided)",
    )
    p.add_argument(
        "--host-memory",
        metavar="SIZE",
        help="RAM the servers may hold together, e.g. 96G (default: $MOEPERF_HOST_MEMORY, "
        "else the host's available memory); sides that do not fit together are measured "
        "across server restarts",
    )
    p.add_argument(
        "--process-block",
        type=int,
        metavar="N",
        help="paired rounds a pair of server processes serves before both are restarted "
        "(0: never; default: the profile's, else where the variance is and what a restart "
        f"costs, at most {MAX_AUTO_BLOCK} on a host not calibrated)",
    )
    p.add_argument("--markdown", help="also write the table as markdown here")
    p.add_argument("--json", help="also write machine-readable JSON here")
    p.add_argument("-v", "--verbose", action="store_true", help="progress of servers")


def check_run_arguments(args: argparse.Namespace) -> None:
    """The arguments gate, bisect and sweep share, checked before any build or server work."""
    check_budget(args.budget, "--budget", "a row")
    check_margin(args.margin, "--margin")
    check_seconds(
        args.startup_timeout, "--startup-timeout", "the startup timeout", example=STARTUP_TIMEOUT
    )
    host_memory(args.host_memory, "--host-memory")  # a bad size fails before any work
    check_busy_limit(args.busy_limit, "--busy-limit")
    if args.process_block is not None:
        check_rounds(args.process_block, "--process-block", at_least=0, what="0: never")
    if args.config is not None and not Path(args.config).is_file():
        what = "is a directory" if Path(args.config).is_dir() else "does not exist"
        raise MoeperfError(f"--config {args.config}: {what}; name a TOML file of profiles")
    for option, value in (("--markdown", args.markdown), ("--json", args.json)):
        if value:
            check_output(Path(value), option)


def check_replay(args: argparse.Namespace, what: str, takes: str, *own: tuple[str, bool]) -> None:
    """--replay's file exists, and nothing is asked that only a measuring *what* uses: its own
    options *own* (each with whether it was given) and the measuring ones of
    :func:`add_run_arguments`; a replay takes what they shape (*takes*) from the file."""
    measuring = (
        *own,
        ("-c", bool(args.configuration)),
        ("--margin", args.margin != MARGIN),
        ("--budget", args.budget is not None),
        ("--process-block", args.process_block is not None),
        ("--host-memory", args.host_memory is not None),
    )
    given = [option for option, used in measuring if used]
    if given:
        raise MoeperfError(
            f"--replay: {', '.join(given)} shape a {what} that measures; a replayed {what} "
            f"takes {takes} from the file: leave them out"
        )
    if not Path(args.replay).is_file():
        raise MoeperfError(f"--replay {args.replay}: no such file; name a {what}'s --json")


def configurations(args: argparse.Namespace, profile: Profile) -> list[str]:
    """The -c names (comma separated, repeatable), each checked against *profile* before any
    build work; empty when none was given."""
    names = [c for arg in args.configuration for c in arg.split(",") if c]
    for name in names:
        profile.configuration(name)  # unknown names fail here
    return names


def run_options(args: argparse.Namespace) -> Options:
    """The options of a gate, bisect or sweep: profiles from --config (else ./moeperf.toml),
    results under ./.moeperf, replies streamed so that every build is measured alike (a
    replay gives its session its stored source itself)."""
    root = Path.cwd()
    store, _ = store_text(args)
    return Options(
        profile=profile_of(args),
        config_file=config_file(args),
        pyproject=root / "pyproject.toml",
        store=store,
        results_dir=root / ".moeperf",
        rootdir=root,
        startup_timeout=args.startup_timeout,
        host_memory=host_memory(args.host_memory, "--host-memory"),
        **({"busy_limit": args.busy_limit} if args.busy_limit is not None else {}),
        stream=True,  # both builds measured alike (older builds need streamed replies)
        process_block=args.process_block,
    )


def live_session(args: argparse.Namespace) -> tuple[PerfSession, LiveHost]:
    """The session of a gate, bisect or sweep, and its live source (:func:`run_options`)."""
    session = perf_session(run_options(args), say if args.verbose else None, say)
    assert isinstance(session.source, LiveHost)  # run_options replays nothing
    return session, session.source


def write_reports(
    args: argparse.Namespace,
    markdown: str,
    json_text: str,
    *,
    keep: tuple[PerfSession, str] | None = None,
) -> None:
    """The --markdown and --json files, when asked; then, with *keep* (the session and the
    kind of document: ``gate``), the --json document into the session's store, under its
    host, whether asked or not (after the files: a store that fails loses none of them)."""
    if args.markdown:
        write_output(Path(args.markdown), markdown, "--markdown")
    if args.json:
        write_output(Path(args.json), json_text, "--json")
    if keep is not None:
        session, kind = keep
        try:
            session.keep_document(kind, json.loads(json_text))
        finally:
            session.store.close()
