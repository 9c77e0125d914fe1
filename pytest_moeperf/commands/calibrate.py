"""``moeperf calibrate``: N A/A gates (a build against itself) of chosen configurations on this
host; per metric, the false alarms, the undecided rows, the round spread, the lag-1
autocorrelation and the MDE the budget reaches, with a plot. The figures are stored with this
host's ``[[host]]`` in the profile's baseline file (``--no-store`` keeps them out), where
baseline checks and gates read them."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import MoeperfError
from ..fs import check_output
from ..measure.workload import Workload
from ..report.calibrate import (
    calibration_json,
    calibration_markdown,
    calibration_text,
    plot_calibration,
)
from ..run.calibrate import GATES, run_calibration
from ..run.gate import CANDIDATE
from ..store.accept import accept_noise
from .common import (
    add_run_arguments,
    add_workload_argument,
    check_run_arguments,
    configurations,
    live_session,
    say,
    write_reports,
)
from .gate import side


def add_arguments(g: argparse.ArgumentParser) -> None:
    add_run_arguments(g, configurations="configuration(s) to calibrate, comma separated")
    add_workload_argument(g)
    g.add_argument("--gates", type=int, default=GATES, help=f"A/A gates to run (default {GATES})")
    g.add_argument(
        "--build",
        help="build number or llama-server binary on both sides (default: the profile's build)",
    )
    g.add_argument("--plot", help="write the plot of every A/A gate's rounds here (PNG)")
    g.add_argument(
        "--no-store",
        action="store_true",
        help="do not store the figures with this host in the profile's baseline file",
    )


def run(args: argparse.Namespace) -> int:
    check_run_arguments(args)
    if args.gates < 1:
        raise MoeperfError(f"--gates {args.gates}: run at least 1 A/A gate")
    if args.plot:
        check_output(Path(args.plot), "--plot")
    session, live = live_session(args)
    profile = session.profile()
    names = configurations(args, profile)
    if not names:
        raise MoeperfError(
            f"-c/--configuration: name the configuration(s) to calibrate (profile "
            f"{profile.name!r} has {', '.join(profile.configurations)})"
        )
    build = args.build or (str(profile.build) if profile.build is not None else None)
    if build is None:
        raise MoeperfError(f"--build: profile {profile.name!r} names no build; give one")
    path = None if args.no_store else session.writable_baseline(profile, "moeperf calibrate")
    workloads = [Workload.parse(w) for w in args.workload] or None
    try:
        calibration = run_calibration(
            session,
            profile,
            side(build),
            configurations=names,
            workloads=workloads,
            gates=args.gates,
            budget=args.budget,
            margin=args.margin,
            on_gate=lambda i, result: say(
                f"A/A gate {i + 1}/{args.gates}: "
                + "; ".join(r.verdict.explain() for r in result.rows)
            ),
        )
        fingerprint = live.fingerprint(profile, label=CANDIDATE)
    finally:
        session.close()
    figures = calibration.figures()
    stored = None
    if not args.no_store:
        assert path is not None
        _, host = accept_noise(
            path,
            profile.name,
            fingerprint,
            figures,
            probe_tolerance=session.options.probe_tolerance,
        )
        stored = f"the figures of {', '.join(figures)} with [[host]] {host} in {path}"
    rows, label = calibration.rows, calibration.build
    print(calibration_text(rows, figures, build=label, margin=args.margin, stored=stored))
    write_reports(
        args,
        calibration_markdown(rows, figures, build=label, margin=args.margin),
        calibration_json(rows, figures),
        keep=(session, "calibration"),
    )
    if args.plot:
        plot_calibration(rows, figures, args.margin, Path(args.plot))
    return 0
