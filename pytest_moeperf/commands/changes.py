"""``moeperf changes``: every series of the store (one host, profile, configuration and
workload over its runs) searched for change points; each printed with the two builds it lies
between, the change with its interval, whether other hosts show it, and the ``moeperf
bisect`` that names the first bad build. Exit 1 when a change point (not the host's) lies after
the last accepted baseline of its host and profile, for a nightly job; 0 otherwise."""

from __future__ import annotations

import argparse

from ..defaults import MARGIN, check_margin
from ..report.changes import changes_text
from ..store.series import store_changes
from ..verdicts.outcomes import exit_status
from .common import add_store_arguments, opened_store


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_store_arguments(p)
    p.add_argument("--host", help="only this host's series (its store name, host/digest)")
    p.add_argument("--profile", help="only this profile's series")
    p.add_argument("-c", "--configuration", help="only this configuration's series")
    p.add_argument("-w", "--workload", help="only this workload's series (tg64, pp512, ...)")
    p.add_argument(
        "--margin",
        type=float,
        default=MARGIN,
        help=f"smallest change that counts, relative (default {MARGIN:g})",
    )


def run(args: argparse.Namespace) -> int:
    check_margin(args.margin, "--margin")
    wanted = {
        "host": args.host,
        "profile": args.profile,
        "configuration": args.configuration,
        "workload": args.workload,
    }
    store = opened_store(args)
    try:
        all_series, found = store_changes(
            store, args.margin, **{k: v for k, v in wanted.items() if v}
        )
    finally:
        store.close()
    print(changes_text(store.name, all_series, found))
    return exit_status("alarm" if any(f.alarms for f in found) else "quiet")
