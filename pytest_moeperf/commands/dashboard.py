"""``moeperf dashboard --output DIR``: the store's series as static pages (they open from disk,
with no server and no network); ``--serve`` serves them on 127.0.0.1 until Ctrl-C."""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import time
from pathlib import Path

from sqlalchemy.engine import URL

from ..defaults import MARGIN, check_margin
from ..errors import MoeperfError
from ..report.dashboard import Site, Table, write_site
from ..report.reference import configuration_rows, reference_title
from ..run.profiles import load_profiles, store_setting
from ..run.session import profile_reference
from ..store.database import checked_store_url
from ..store.runstore import open_store
from ..store.series import find_changes, series_of
from .common import say


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", required=True, metavar="DIR", help="folder to write the pages to")
    p.add_argument(
        "--store",
        metavar="URL",
        help="sqlite:///PATH or postgresql://USER@HOST/DB (default: env MOEPERF_STORE, else "
        "store = in the profiles file, else .moeperf/moeperf.sqlite)",
    )
    p.add_argument("--config", help="TOML file of profiles (default ./moeperf.toml if present)")
    p.add_argument(
        "--margin",
        type=float,
        default=MARGIN,
        help=f"smallest change a change point is (default {MARGIN:g})",
    )
    p.add_argument(
        "--serve", action="store_true", help="then serve the pages on 127.0.0.1 until Ctrl-C"
    )
    p.add_argument("--port", type=int, default=8000, help="--serve's port (default 8000)")


def _references(root: Path, config: Path | None, store_at: URL) -> dict[str, list[Table]]:
    """Per host, each profile's recorded reference (ADR-0042's tables) beside the host's newest
    run of that profile, in the record's layout; a reference that cannot be read is said and
    left out."""
    out: dict[str, list[Table]] = {}
    profiles = load_profiles(config, root / "pyproject.toml")
    store = open_store(store_at)
    try:
        for profile in profiles.values():
            try:
                ref = profile_reference(profile, root)
            except MoeperfError as exc:
                say(f"dashboard: {exc}")
                continue
            if ref is None:
                continue
            pairs = {(profile.name, c) for c in profile.configurations}
            for host in store.hosts(profile.name):
                newest = store.recent_runs(host, pairs, limit=1)
                ms = newest[0].measurements if newest else []
                headers, rows = configuration_rows(ms, ref, profile.workloads)
                title = f"{reference_title(ref)}, beside this host's newest run of {profile.name}"
                out.setdefault(host, []).append(Table(title, headers, rows))
    finally:
        store.close()
    return out


def run(args: argparse.Namespace) -> int:
    check_margin(args.margin, "--margin")
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise MoeperfError(f"--output {out}: not a folder; name a folder for the pages")
    root = Path.cwd()
    config = Path(args.config) if args.config else None
    if config is None and (root / "moeperf.toml").is_file():
        config = root / "moeperf.toml"
    text, where = store_setting(args.store, "--store", config, root / "pyproject.toml", os.environ)
    began = time.monotonic()
    store_at = checked_store_url(text, where, root / ".moeperf")
    store = open_store(store_at)
    try:
        all_series = series_of(store.series_rows())
        hosts = sorted({s.host for s in all_series})
        accepted = {h: store.accepted_at(h) for h in hosts}
        records = {h: store.records(h) for h in hosts}
        verdicts = {h: store.verdict_rows(h) for h in hosts}
        name = store.name
    finally:
        store.close()
    found = find_changes(all_series, accepted, args.margin)
    site = Site(name, all_series, found, records, verdicts, _references(root, config, store_at))
    written = write_site(site, out)
    say(
        f"dashboard: {len(written)} files in {out} ({len(all_series)} series of {len(hosts)} "
        f"host(s), {len(found)} change point(s)) in {time.monotonic() - began:.1f} s; open "
        f"{out / 'index.html'}"
    )
    if args.serve:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
        with http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler) as server:
            say(f"dashboard: serving http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)")
            try:
                server.serve_forever()
            except KeyboardInterrupt:
                pass
    return 0
