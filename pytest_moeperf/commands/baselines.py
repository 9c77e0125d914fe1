"""``moeperf baselines FILE...``: the hosts each baseline file holds numbers of, with their
fingerprints, probe figures and the noise ``moeperf calibrate`` measured there."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from ..store.baselines import load_baselines


def add_arguments(bl: argparse.ArgumentParser) -> None:
    bl.add_argument("files", nargs="+", metavar="FILE", help="baseline file(s), baselines/*.toml")


def run(args: argparse.Namespace) -> int:
    for i, name in enumerate(args.files):
        bf = load_baselines(Path(name))
        counts = Counter(e.host for e in bf.entries)
        if i:
            print()
        print(f"{name}: profile {bf.profile}, {len(bf.hosts)} host(s)")
        for host in bf.hosts:
            dates = sorted({e.date for e in bf.entries if e.host == host.id})
            to = f" to {dates[-1]}" if len(dates) > 1 else ""
            when = f", recorded {dates[0]}{to}" if dates else ""
            print(f"  {host.describe()}; {counts.get(host.id, 0)} entries{when}")
            for metric, figure in sorted(host.noise.items()):
                print(f"    noise of {metric}: {figure.describe()}")
    return 0
