"""``moeperf changes``: every series of the store (one host, profile, configuration and
workload over its runs) searched for change points; each printed with the two builds it lies
between, the change with its interval, whether other hosts show it, and the ``moeperf
bisect`` that names the first bad build. Exit 1 when a change point (not the host's) lies after
the last accepted baseline of its host and profile, for a nightly job; 0 otherwise."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..defaults import MARGIN, check_margin
from ..report.changes import changes_text
from ..run.profiles import store_setting
from ..store.database import checked_store_url
from ..store.runstore import open_store
from ..store.series import find_changes, series_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        metavar="URL",
        help="sqlite:///PATH or postgresql://USER@HOST/DB (default: env MOEPERF_STORE, else "
        "store = in the profiles file, else .moeperf/moeperf.sqlite)",
    )
    p.add_argument("--config", help="TOML file of profiles (default ./moeperf.toml if present)")
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
    root = Path.cwd()
    config = Path(args.config) if args.config else None
    if config is None and (root / "moeperf.toml").is_file():
        config = root / "moeperf.toml"
    text, where = store_setting(args.store, "--store", config, root / "pyproject.toml", os.environ)
    store = open_store(checked_store_url(text, where, root / ".moeperf"))
    try:
        wanted = {
            k: v
            for k, v in {
                "host": args.host,
                "profile": args.profile,
                "configuration": args.configuration,
                "workload": args.workload,
            }.items()
            if v
        }
        all_series = series_of(store.series_rows(**wanted))
        accepted = {s.host: store.accepted_at(s.host) for s in all_series}
        name = store.name
    finally:
        store.close()
    found = find_changes(all_series, accepted, args.margin)
    print(changes_text(name, all_series, found))
    return 1 if any(f.after_accept and not f.change.host for f in found) else 0
