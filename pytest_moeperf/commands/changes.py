"""``moeperf changes``: every series of the store (one host, profile, configuration and
workload over its runs) searched for change points; each printed with the two builds it lies
between, the change with its interval, whether other hosts show it, and the ``moeperf
bisect`` that names the first bad build. Exit 1 when a change point (not the host's) lies after
the last accepted baseline of its host and profile and no one has triaged it, for a nightly
job; 0 otherwise. ``moeperf changes ack|invalid|fixed ID [--note TEXT]`` triages one, in the
store; ``--since DATE`` and ``--json`` are for a job that posts them."""

from __future__ import annotations

import argparse
import json

from ..defaults import check_margin
from ..errors import MoeperfError
from ..report.changes import changes_text
from ..store.series import mark_change, since, store_changes
from ..verdicts.outcomes import ChangePointOutcome, exit_status
from ..verdicts.series import MARK_STATES, RunRatio, run_ratios
from .common import add_margin, add_store_arguments, opened_store


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "mark",
        nargs="*",
        metavar="ack|invalid|fixed ID",
        help="triage the change point of this id (as printed): acknowledged (explained, e.g. "
        "filed), invalid (not a real change) or fixed; a marked one no longer fails the run",
    )
    p.add_argument("--note", default="", help="with a mark: why (an issue, a cause)")
    p.add_argument("--since", help="only change points dated this day or later (2026-12-01)")
    p.add_argument("--json", action="store_true", help="print them as JSON, newest first")
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN", "RUN"),
        help="instead: every series two runs (keys, or their first digits) both hold, the "
        "second's median over the first's with its 95 %% interval",
    )
    add_store_arguments(p)
    p.add_argument("--host", help="only this host's series (its store name, host/digest)")
    p.add_argument("--profile", help="only this profile's series")
    p.add_argument("-c", "--configuration", help="only this configuration's series")
    p.add_argument("-w", "--workload", help="only this workload's series (tg64, pp512, ...)")
    add_margin(p)


def run(args: argparse.Namespace) -> int:
    check_margin(args.margin, "--margin")
    if args.mark and (len(args.mark) != 2 or args.mark[0] not in MARK_STATES):
        raise MoeperfError(
            f"moeperf changes {' '.join(args.mark)}: give {'|'.join(MARK_STATES)} and one id"
        )
    if args.note and not args.mark:
        raise MoeperfError("--note: only with a mark (moeperf changes ack ID --note TEXT)")
    asked = {
        "host": args.host,
        "profile": args.profile,
        "configuration": args.configuration,
        "workload": args.workload,
    }
    where = {k: v for k, v in asked.items() if v}
    store = opened_store(args)
    if args.compare:
        try:
            rows = store.series_rows(**where)
        finally:
            store.close()
        return _compare(run_ratios(rows, *args.compare), args.json)
    try:
        all_series, found = store_changes(store, args.margin, **where)
        if args.mark:
            marked, mark = mark_change(store, found, args.mark[1], args.mark[0], args.note)
            print(f"{marked.id} {marked.series.name}: {mark.describe()}")
            return 0
    finally:
        store.close()
    if args.since:
        found = since(found, args.since)
    if args.json:
        newest = sorted(found, key=lambda f: f.change.date, reverse=True)
        print(json.dumps([f.to_dict() for f in newest], indent=1))
    else:
        print(changes_text(store.name, all_series, found))
    outcome: ChangePointOutcome = "alarm" if any(f.untriaged for f in found) else "quiet"
    return exit_status(outcome)


def _compare(ratios: list[RunRatio], as_json: bool) -> int:
    """``--compare``: the ratios, as a table or JSON."""
    if as_json:
        print(json.dumps([r.to_dict() for r in ratios], indent=1))
        return 0
    for r in ratios:
        print(
            f"{r.host} {r.profile} {r.configuration} {r.workload}: {r.b:.4g} / {r.a:.4g} = "
            f"{r.ratio:.4f} [{r.low:.4f}, {r.high:.4f}]"
        )
    if not ratios:
        print("the two runs hold no series in common")
    return 0
