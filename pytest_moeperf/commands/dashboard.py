"""``moeperf dashboard --output DIR``: the store's series as static pages (they open from disk,
with no server and no network); ``--serve`` serves them on 127.0.0.1 until Ctrl-C."""

from __future__ import annotations

import argparse
import functools
import http.server
import time
from pathlib import Path

from ..config.profiles import load_profiles
from ..config.reference import profile_reference
from ..defaults import check_margin
from ..errors import MoeperfError
from ..report.dashboard import Site, Table, drawn_runs, write_site
from ..report.reference import configuration_rows, reference_title
from ..store.runstore import RunStore
from ..store.series import store_changes
from .common import add_margin, add_store_arguments, config_file, opened_store, say


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", required=True, metavar="DIR", help="folder to write the pages to")
    add_store_arguments(p)
    add_margin(p, "a change point is")
    p.add_argument(
        "--serve", action="store_true", help="then serve the pages on 127.0.0.1 until Ctrl-C"
    )
    p.add_argument("--port", type=int, default=8000, help="--serve's port (default 8000)")


def _references(store: RunStore, args: argparse.Namespace) -> dict[str, list[Table]]:
    """Per host, each profile's recorded reference (ADR-0042's tables) beside the host's newest
    run of that profile, in the record's layout; a reference that cannot be read is said and
    left out."""
    root = Path.cwd()
    out: dict[str, list[Table]] = {}
    for profile in load_profiles(config_file(args), root / "pyproject.toml").values():
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
    return out


def run(args: argparse.Namespace) -> int:
    check_margin(args.margin, "--margin")
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise MoeperfError(f"--output {out}: not a folder; name a folder for the pages")
    began = time.monotonic()
    store = opened_store(args)
    try:
        all_series, found = store_changes(store, args.margin)
        hosts = sorted({s.host for s in all_series})
        site = Site(
            store.name,
            all_series,
            found,
            records={h: store.records(h) for h in hosts},
            verdicts={h: store.verdict_rows(h) for h in hosts},
            references=_references(store, args),
        )
        site.runs = dict(store.records_of(drawn_runs(all_series)))
    finally:
        store.close()
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
