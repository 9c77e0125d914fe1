"""``moeperf gate``: a candidate llama.cpp build against a baseline build on the same
configurations, in paired rounds; exit 0 pass, 1 a metric slower, 3 undecided. With
``--accept``, a gate that passes writes the candidate's numbers as baselines (the one accept,
under the file's lock)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from pathlib import Path

from ..config.profiles import load_profiles
from ..defaults import FIRST_LOOK, MAX_ROUNDS
from ..errors import MoeperfError
from ..host.machine import parse_cpu_list
from ..llama.build import binary_build
from ..measure.workload import Workload
from ..report.gate import gate_markdown, gate_text
from ..run.gate import CANDIDATE, BuildUnderTest, StoredStage, run_gate
from ..run.replayed import StoredHost
from ..run.session import PerfSession
from ..store.accept import accept_measurements, refusals, refuse
from ..store.stored import gate_json_text, read_gate
from ..verdicts.gate import UNDECIDED_POLICIES
from .common import (
    add_run_arguments,
    add_workload_argument,
    check_replay,
    check_run_arguments,
    configurations,
    live_session,
    run_options,
    say,
    write_reports,
)


def add_arguments(g: argparse.ArgumentParser) -> None:
    g.add_argument("--baseline", help="build number (e.g. 11053) or binary path")
    g.add_argument("--candidate", help="build number (e.g. 11434) or binary path")
    g.add_argument(
        "--replay",
        metavar="GATE.json",
        help="judge a gate's --json again from the rounds it stored, starting no build and no "
        "server (with the --config and --profile it ran with): the same rows and verdicts",
    )
    add_run_arguments(g, configurations="configuration(s) to gate, comma separated (default: all)")
    add_workload_argument(g)
    g.add_argument(
        "-r",
        "--repetitions",
        type=int,
        default=FIRST_LOOK,
        help=f"paired rounds before the first look (default {FIRST_LOOK})",
    )
    g.add_argument(
        "--max-rounds",
        "--max-repetitions",
        dest="max_rounds",
        type=int,
        default=MAX_ROUNDS,
        help=f"the most rounds a row may take (default {MAX_ROUNDS})",
    )
    g.add_argument(
        "--undecided",
        choices=UNDECIDED_POLICIES,
        default="exit-3",
        help="what undecided rows make of the gate: exit code 3 (default), pass (0) or fail (1)",
    )
    g.add_argument(
        "--allow-different-output",
        action="store_true",
        help="pass the gate even when the candidate's greedy output differs from the "
        "baseline's (the correctness guard still reports where they part)",
    )
    g.add_argument(
        "--attribute",
        action="store_true",
        help="also run llama-bench of both builds in every round (same model, flags, "
        "pinning): each row gets its server/bench ratio with an interval and says whether a "
        "change is in the server layer or in the compute",
    )
    g.add_argument(
        "--allow-creep",
        action="store_true",
        help="with --accept: accept even when the candidate is slower than the oldest "
        "accepted baseline",
    )
    g.add_argument(
        "--candidate-label",
        help="what a candidate binary is called in the table, the store and the baselines "
        "(default: b<number> its --version prints), e.g. pr-29887",
    )
    g.add_argument(
        "--baseline-label",
        help="what a baseline binary is called (default: b<number> its --version prints)",
    )
    g.add_argument(
        "--candidate-cpus",
        help="pin the candidate's servers here (a deliberate slowdown to check the gate, e.g. 0)",
    )
    g.add_argument(
        "--accept",
        action="store_true",
        help="if the gate passes, write the candidate's measurements as baselines",
    )


def side(
    value: str, cpus: str | None = None, label: str | None = None, option: str = "--candidate"
) -> BuildUnderTest:
    """A build number or a binary path, as the gate measures it: a binary is named by the
    build its ``--version`` prints (``b11800``), or by *label*; never by its file name."""
    if value.isdigit():
        return BuildUnderTest(int(value), cpus, label)
    try:
        build = binary_build(value)
    except MoeperfError as exc:
        raise MoeperfError(f"{option} {value}: {exc}") from None
    if label is None and build.number is None:
        raise MoeperfError(
            f"{option} {value}: its --version prints no build number (built without it): "
            f"name it with {option}-label, e.g. pr-29887"
        )
    return BuildUnderTest(value, cpus, label or build.label)


def check_arguments(args: argparse.Namespace) -> None:
    """Every gate argument checked before any build or server work: one line each."""
    if args.replay is not None:  # what only a measuring gate uses: a replay has the rows
        check_replay(
            args,
            "gate",
            "its builds, rows, margin and looks",
            ("--baseline", args.baseline is not None),
            ("--candidate", args.candidate is not None),
            ("--candidate-cpus", args.candidate_cpus is not None),
            ("--candidate-label", args.candidate_label is not None),
            ("--baseline-label", args.baseline_label is not None),
            ("--accept", args.accept),
            ("--attribute", args.attribute),
            ("-w", bool(args.workload)),
            ("-r", args.repetitions != FIRST_LOOK),
            ("--max-rounds", args.max_rounds != MAX_ROUNDS),
        )
    elif args.baseline is None or args.candidate is None:
        missing = " and ".join(
            o
            for o, v in (("--baseline", args.baseline), ("--candidate", args.candidate))
            if v is None
        )
        raise MoeperfError(f"{missing}: give both builds to gate (or --replay GATE.json)")
    if args.repetitions < 2:
        raise MoeperfError(
            f"-r/--repetitions {args.repetitions}: give at least 2 rounds before the first look"
        )
    if args.max_rounds < args.repetitions:
        raise MoeperfError(
            f"--max-rounds {args.max_rounds} is below --repetitions "
            f"{args.repetitions}: give at least as many"
        )
    if args.candidate_cpus is not None:
        try:
            parse_cpu_list(args.candidate_cpus)
        except MoeperfError as exc:
            raise MoeperfError(f"--candidate-cpus: {exc}") from None
    check_run_arguments(args)


def replay(args: argparse.Namespace) -> int:
    """A stored gate judged again: each row's stored rounds through the same loop, looks and
    Holm as when it ran (its stored plan and process blocks), its table printed."""
    path = Path(args.replay)
    stored = read_gate(path)
    options = run_options(args)
    profiles = load_profiles(options.config_file, options.pyproject)
    source = StoredHost(stored.record, profiles, path=path, option="--replay")
    stage = StoredStage(stored.busy, stored.loadavg, stored.skipped)
    session = PerfSession(options, progress=say, source=source, profiles=profiles, stage=stage)
    configurations = list(dict.fromkeys(c for c, _ in stored.rows))
    workloads = [Workload.parse(w) for w in dict.fromkeys(w for _, w in stored.rows)]
    result = run_gate(
        session,
        session.profile(),
        BuildUnderTest(stored.baseline),
        BuildUnderTest(stored.candidate),
        configurations=configurations + [c for c, _ in stored.skipped],
        workloads=workloads or None,
        margin=stored.margin,
        undecided_policy=args.undecided,
        check_output=False,
    )
    result.rows = [  # the time each row measured, as the gate took it
        dataclasses.replace(r, seconds=s) for r, s in zip(result.rows, stored.seconds, strict=True)
    ]
    say(f"replayed {path}: no server started; the rows judged again from its stored rounds")
    print(gate_text(result))
    write_reports(args, gate_markdown(result), gate_json_text(result, stored.record))
    return result.exit_code()


def run(args: argparse.Namespace) -> int:
    check_arguments(args)
    if args.replay is not None:
        return replay(args)
    session, live = live_session(args)
    profile = session.profile()
    path = session.writable_baseline(profile, "--accept") if args.accept else None
    baseline = side(args.baseline, label=args.baseline_label, option="--baseline")
    candidate = side(args.candidate, args.candidate_cpus, args.candidate_label)
    workloads = [Workload.parse(w) for w in args.workload] or None
    try:
        result = run_gate(
            session,
            profile,
            baseline,
            candidate,
            configurations=configurations(args, profile) or None,
            workloads=workloads,
            first_look=args.repetitions,
            max_rounds=args.max_rounds,
            budget=args.budget,
            margin=args.margin,
            undecided_policy=args.undecided,
            allow_different=args.allow_different_output,
            attribute_bench=args.attribute,
            on_row=lambda r: say(f"  {r.configuration} {r.workload}: {r.verdict.explain()}"),
            on_look=(lambda n, v, t: say(f"    {n}: {t:.0f} s: {v.explain()}"))
            if args.verbose
            else None,
        )
        record = session.journal.freeze()  # the rows' rounds, for --replay
    finally:
        session.close()
    print(gate_text(result))
    write_reports(
        args, gate_markdown(result), gate_json_text(result, record), keep=(session, "gate")
    )
    if args.accept:
        refused = refusals(
            slower=[r.name for r in result.slower],
            different=[c.configuration for c in result.different]
            if not args.allow_different_output
            else [],
            undecided=([] if args.undecided == "pass" else [r.name for r in result.undecided])
            + [f"{c} (not measured)" for c, _ in result.skipped],
            crept=[] if args.allow_creep else [r.name for r in result.crept],
            host_changes=live.host_changes,
        )
        refuse("--accept", refused)
        assert path is not None
        ms = [dataclasses.replace(r.candidate, build=candidate.name) for r in result.rows]
        today = dt.date.today().isoformat()
        accept_measurements(
            path,
            profile.name,
            ms,
            live.fingerprint(profile, label=CANDIDATE),  # the candidate's llama-server
            source=f"moeperf gate --accept, {today}, {candidate.name} over {baseline.name}",
            probe_tolerance=session.options.probe_tolerance,
            changes={(r.configuration, r.workload.name): r.change for r in result.rows if r.change},
        )
        say(f"accepted {len(ms)} measurement(s) of {candidate.name} as baselines in {path}")
    return result.exit_code()
