"""``moeperf sweep``: one configuration's traffic at ``-np 1, 2, 4, ...`` with as many clients
as slots (throughput of all slots and of one, prefill, latencies), or with ``--ncmoe
0,4,8,...`` (or ``all``) its prefill and decode with the experts of the first N layers in
system RAM (tok/s, GPU memory, PCIe traffic); a table and a plot."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..defaults import REPETITIONS
from ..errors import MoeperfError
from ..report.sweep import NcmoeSweepResult, SweepResult
from ..report.sweep_plot import plot_ncmoe_sweep, plot_sweep
from ..run.sweep import NCMOE_POINTS, parse_ncmoe, run_ncmoe_sweep, run_sweep
from .common import (
    add_run_arguments,
    check_run_arguments,
    configurations,
    live_session,
    write_reports,
)

DEFAULT_SLOTS = "1,2,4"


def add_arguments(sw: argparse.ArgumentParser) -> None:
    add_run_arguments(
        sw,
        configurations="the configuration to sweep (one: with a traffic table for --np, "
        "on GPUs for --ncmoe)",
    )
    sw.add_argument(
        "--np",
        default=None,
        metavar="N,N,...",
        help=f"slot counts, comma separated (default {DEFAULT_SLOTS})",
    )
    sw.add_argument(
        "--ncmoe",
        default=None,
        metavar="N,N,...|all",
        help="sweep -ncmoe instead of -np: layer counts whose experts go to system RAM, comma "
        f"separated, or all (0 to the model's layers, at most {NCMOE_POINTS} points); "
        "measures the profile's prefill and decode workloads at each",
    )
    sw.add_argument(
        "-r",
        "--repetitions",
        type=int,
        default=REPETITIONS,
        help="passes per point, or with --ncmoe repetitions of each workload per point "
        f"(default {REPETITIONS})",
    )
    sw.add_argument("--plot", metavar="PNG", help="also draw the sweep here")


def run(args: argparse.Namespace) -> int:
    check_run_arguments(args)
    if args.np is not None and args.ncmoe is not None:
        raise MoeperfError("--np and --ncmoe sweep different flags: give one of them")
    ncmoe = parse_ncmoe(args.ncmoe) if args.ncmoe is not None else None  # None: all
    spec = args.np if args.np is not None else DEFAULT_SLOTS
    try:
        slots = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise MoeperfError(f"--np {spec!r}: give slot counts, e.g. 1,2,4") from None
    if args.repetitions < 1:
        raise MoeperfError(f"-r/--repetitions {args.repetitions}: give at least 1 pass")
    session, live = live_session(args)
    profile = session.profile()
    names = configurations(args, profile)
    if len(names) != 1:
        example = "experts-on-cpu" if args.ncmoe is not None else "traffic"
        raise MoeperfError(f"sweep: name the one configuration to sweep with -c, e.g. -c {example}")
    try:
        config = profile.configuration(names[0])
        if args.ncmoe is not None:
            title, plot = "-ncmoe sweep", plot_ncmoe_sweep
            result: SweepResult | NcmoeSweepResult = run_ncmoe_sweep(
                live, live.stage, profile, config, ncmoe, repetitions=args.repetitions
            )
        else:
            title, plot = "slots sweep", plot_sweep
            result = run_sweep(
                live, live.stage, profile, config, slots, repetitions=args.repetitions
            )
        record = session.journal.freeze()  # every point's measurements, in the --json
    finally:
        session.close()
    print(result.text())
    write_reports(args, result.markdown(), result.json_text(record), keep=(session, "sweep"))
    if args.plot:
        title = f"{title}: {result.configuration} ({profile.name})"
        plot([p.to_dict() for p in result.points], title, Path(args.plot))
        print(f"plot: {args.plot}")
    return 0
