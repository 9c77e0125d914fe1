"""``moeperf store import DIR`` / ``moeperf store export DIR``: results files into the store
(twice is once) and back out, one file per run; ``moeperf store info``: what it holds."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import MoeperfError
from ..run.profiles import store_setting
from ..store.database import checked_store_url, shown
from ..store.runstore import RunStore, open_store
from ..store.transfer import export_folder, import_folder


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=("import", "export", "info", "list"),
        help="import results files, export runs as results files, say how many runs it holds, "
        "or list the newest runs with their keys (for --moeperf-replay store:KEY)",
    )
    p.add_argument(
        "folder",
        nargs="?",
        help="import: a folder of results-*.json (default .moeperf); export: the folder to "
        "write them to",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help="sqlite:///PATH or postgresql://USER@HOST/DB (default: env MOEPERF_STORE, else "
        "store = in the profiles file, else .moeperf/moeperf.sqlite)",
    )
    p.add_argument("--config", help="TOML file of profiles (default ./moeperf.toml if present)")
    p.add_argument("--last", type=int, default=20, help="list: how many runs (default 20)")


def _opened(args: argparse.Namespace) -> RunStore:
    root = Path.cwd()
    config = Path(args.config) if args.config else None
    if config is None and (root / "moeperf.toml").is_file():
        config = root / "moeperf.toml"
    text, where = store_setting(args.store, "--store", config, root / "pyproject.toml", os.environ)
    return open_store(checked_store_url(text, where, root / ".moeperf"))


def run(args: argparse.Namespace) -> int:
    if args.action == "export" and not args.folder:
        raise MoeperfError("moeperf store export: name the folder to write the results files to")
    folder = Path(args.folder or ".moeperf")
    if args.action == "import" and not folder.is_dir():
        raise MoeperfError(f"moeperf store import {folder}: no such folder of results files")
    store = _opened(args)
    try:
        if args.action == "info":
            print(f"store {store.name}: {store.count()} run(s)")
            return 0
        if args.action == "list":
            for key, date, host, n in store.latest(args.last):
                print(f"{key[:12]}  {date}  {host}  {n} measurement(s)")
            return 0
        if args.action == "import":
            done = import_folder(store, folder)
            for line in done.problems:
                print(f"skipped {line}", file=sys.stderr)
            print(f"store {shown(store.db.url)}: " + done.line("imported", f"from {folder}"))
        else:
            done = export_folder(store, folder)
            print(f"store {shown(store.db.url)}: " + done.line("exported", f"to {folder}"))
    finally:
        store.close()
    return 0
