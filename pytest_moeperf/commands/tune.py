"""``moeperf tune``: race a configuration's knobs on this host with paired verdicts and write
the finding down as a profile (``<profile>-tuned``) and a test file; exit 0 a winner, 3 a tie
or nothing decided."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from pathlib import Path

from ..config.profile_file import existing_profiles
from ..config.profiles import builtin_profiles
from ..errors import MoeperfError
from ..fs import check_output
from ..measure.workload import Workload
from ..report.tune import race_markdown, race_text
from ..report.tune_plot import plot_race
from ..run.tune import Knob, Race, RaceState, duels_of, run_race, write_finding
from ..verdicts.outcomes import exit_status
from . import common


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_run_arguments(
        p, configurations="the configuration to tune (default: the profile's first)"
    )
    p.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="FLAG=V1,V2",
        help="a lever and its values, tried one knob at a time, written with '=' after --knob: "
        "--knob=-t=1,2, --knob=-ub=64,256,512, --knob=-lm=mmap,none, --knob=-fa=on,off, "
        "--knob=--no-op-offload=-,+ (- left out, + given), "
        "--knob=env:GGML_OP_OFFLOAD_MIN_BATCH=32,1024, --knob=numa_node=0,1 (repeatable)",
    )
    p.add_argument(
        "-w", "--workload", help="the objective, e.g. pp512 or tg64 (default: the profile's first)"
    )
    p.add_argument(
        "--output",
        default="moeperf.toml",
        help="the moeperf.toml the tuned profile is added to (default ./moeperf.toml); an "
        "existing profile of that name is never replaced",
    )
    p.add_argument("--name", help="the tuned profile's name (default: <profile>-tuned)")
    p.add_argument(
        "--tests",
        help="the test file of the finding (default tests/perf/test_<name>.py; never replaced)",
    )
    p.add_argument("--plot", help="draw the duels with their intervals as a PNG here")


def _paths(args: argparse.Namespace, name: str) -> tuple[Path, Path]:
    """The profile file and the test file, checked before any work."""
    if name in builtin_profiles():
        raise MoeperfError(f"--name {name}: a built-in profile has that name; choose another")
    output = Path(args.output)
    existing_profiles(output, name, what="--output")  # refuses a profile of that name
    tests = Path(args.tests or f"tests/perf/test_{re.sub(r'[^A-Za-z0-9_]', '_', name)}.py")
    if not args.tests:
        tests.parent.mkdir(parents=True, exist_ok=True)
    check_output(tests, "--tests")
    if args.plot:
        check_output(Path(args.plot), "--plot")
    if tests.exists():
        raise MoeperfError(f"--tests {tests}: exists already; name another file")
    return output, tests


def run(args: argparse.Namespace) -> int:
    common.check_run_arguments(args)
    knobs = tuple(Knob.parse(k) for k in args.knob)
    if not knobs:
        raise MoeperfError("tune: give the knobs to try, e.g. --knob=-t=1,2 --knob=-ub=64,512")
    session, _ = common.live_session(args)
    profile = session.profile()
    names = common.configurations(args, profile) or [next(iter(profile.configurations))]
    if len(names) != 1:
        raise MoeperfError(f"tune: name one configuration to tune with -c, not {names}")
    if not args.workload and not profile.workloads:
        raise MoeperfError(f"profile {profile.name!r} lists no workloads: give -w pp512")
    objective = Workload.parse(args.workload) if args.workload else profile.workloads[0]
    objective = objective.require_rate("tune")
    name = args.name or f"{profile.name}-tuned"
    output, tests = _paths(args, name)
    budget = args.budget or session.budget(profile)
    family = duels_of(knobs)
    common.say(
        f"tune {profile.name}.{names[0]} on {objective.name}: at most {family} duel(s) of "
        f"{budget or 'an automatic budget'} s each (server starts not counted)"
        + (f", about {family * budget / 60:.0f} min" if budget else "")
    )
    base = profile.configuration(names[0])
    identity = {
        "profile": profile.name,
        "configuration": [names[0], list(base.flags), dict(base.env), base.pinning.describe()],
        "build": [profile.build, profile.binary, base.build, base.binary],
        "model": [profile.model, dict(profile.model_overrides)],
        "budget": budget,
        "knobs": [[k.name, list(k.values)] for k in knobs],
        "objective": objective.name,
        "margin": args.margin,
    }
    race = Race(
        session,
        profile,
        base,
        knobs,
        objective,
        args.margin,
        budget,
        RaceState(Path.cwd() / ".moeperf" / "tune", identity),
        common.say,
    )
    try:
        result = run_race(race)
    finally:
        session.close()
    print(race_text(result, family))
    today = dt.date.today().isoformat()
    if result.outcome != "none":
        write_finding(race, result, name, output, tests, date=today)
        print(f"profile {name!r} written to {output}; its tests to {tests}")
    title = f"Tuning {profile.name}.{names[0]} for {objective.name} on this host ({today})"
    common.write_reports(
        args,
        race_markdown(result, family, title),
        json.dumps(result.to_dict(), indent=1) + "\n",
        keep=(session, "tune"),
    )
    if args.plot:
        print(f"plot: {plot_race(result, title, Path(args.plot))}")
    return exit_status(result.outcome)  # 3: a tie, unconfirmed, or nothing measured
