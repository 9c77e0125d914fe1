"""``moeperf sweep``: one configuration's traffic at ``-np 1, 2, 4, ...`` with as many clients
as slots: throughput of all slots and of one, prefill, latencies; a table and a plot."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..defaults import REPETITIONS
from ..errors import MoeperfError
from ..report.plot import plot_sweep
from ..run.sweep import run_sweep
from .common import (
    add_run_arguments,
    check_run_arguments,
    configurations,
    live_session,
    write_reports,
)


def add_arguments(sw: argparse.ArgumentParser) -> None:
    add_run_arguments(sw, configurations="the configuration to sweep (one, with a traffic table)")
    sw.add_argument(
        "--np",
        default="1,2,4",
        metavar="N,N,...",
        help="slot counts, comma separated (default 1,2,4)",
    )
    sw.add_argument(
        "-r",
        "--repetitions",
        type=int,
        default=REPETITIONS,
        help=f"passes per point (default {REPETITIONS})",
    )
    sw.add_argument("--plot", metavar="PNG", help="also draw the sweep here")


def run(args: argparse.Namespace) -> int:
    check_run_arguments(args)
    try:
        slots = [int(x) for x in args.np.split(",") if x.strip()]
    except ValueError:
        raise MoeperfError(f"--np {args.np!r}: give slot counts, e.g. 1,2,4") from None
    if args.repetitions < 1:
        raise MoeperfError(f"-r/--repetitions {args.repetitions}: give at least 1 pass")
    session, live = live_session(args)
    profile = session.profile()
    names = configurations(args, profile)
    if len(names) != 1:
        raise MoeperfError("sweep: name the one configuration to sweep with -c, e.g. -c traffic")
    try:
        result = run_sweep(
            live, profile, profile.configuration(names[0]), slots, repetitions=args.repetitions
        )
    finally:
        session.close()
    print(result.text())
    write_reports(args, result.markdown(), result.json_text())
    if args.plot:
        plot_sweep(
            [p.to_dict() for p in result.points],
            f"slots sweep: {result.configuration} ({profile.name})",
            Path(args.plot),
        )
        print(f"plot: {args.plot}")
    return 0
