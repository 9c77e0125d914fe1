"""``moeperf store import DIR`` / ``moeperf store export DIR``: results files into the store
(twice is once) and back out, one file per run; ``moeperf store info``: what it holds."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import MoeperfError
from ..store.database import shown
from ..store.transfer import export_folder, import_folder
from .common import add_store_arguments, opened_store


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
    add_store_arguments(p)
    p.add_argument("--last", type=int, default=20, help="list: how many runs (default 20)")


def run(args: argparse.Namespace) -> int:
    if args.action == "export" and not args.folder:
        raise MoeperfError("moeperf store export: name the folder to write the results files to")
    folder = Path(args.folder or ".moeperf")
    if args.action == "import" and not folder.is_dir():
        raise MoeperfError(f"moeperf store import {folder}: no such folder of results files")
    store = opened_store(args)
    try:
        if args.action == "info":
            print(f"store {store.name}: {store.count()} run(s)")
            return 0
        if args.action == "list":
            runs = store.latest(args.last)
            for key, date, host, n in runs:
                print(f"{key[:12]}  {date}  {host}  {n} measurement(s)")
            if not runs:
                print(f"store {store.name}: no runs yet")
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
