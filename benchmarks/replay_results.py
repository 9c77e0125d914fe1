"""Every paired verdict of real results files judged again through the decision loop on a
stored host of its run alone: whether each replays as it was recorded (outcome, ratio,
interval, rounds), and how many rounds set aside it carried. What a new results format, or a
change to the loop, must keep: a stored run judges as it was judged.

Usage: ``.venv/bin/python benchmarks/replay_results.py .moeperf/results-*.json [--json]``;
exits 1 when a verdict replays otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from pytest_moeperf.config.profiles import Configuration, Pinning
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.run.replayed import StoredHost
from pytest_moeperf.run.rounds import Decided, decide_pair
from pytest_moeperf.run.source import Side
from pytest_moeperf.store.record import RunRecord, VerdictRecord, read_record
from pytest_moeperf.verdicts.sequential import Plan, Rule


@dataclass
class StoredProfile:
    """What a stored host asks of a profile: its name and configurations (those the run
    measured), nothing of a profiles file."""

    name: str
    names: set[str]
    build_label: str | None = None
    source: str = "the stored run"
    configurations: dict[str, Configuration] = field(init=False)

    def __post_init__(self) -> None:
        self.configurations = {
            c: Configuration(name=c, profile=self.name, flags=(), pinning=Pinning())
            for c in self.names
        }


def rule_of(v: VerdictRecord) -> Rule:
    """The rule a stored verdict was judged by, read off the verdict."""
    verdict = v.verdict
    if verdict.relation == "~":
        return Rule("change", margin=verdict.margin or 0.05)
    if verdict.relation == "<":
        return Rule("dead_end", margin=verdict.margin or 0.05)
    relation = ">=" if verdict.relation == ">=" else "<="
    return Rule("claim", threshold=verdict.threshold or 1.0, relation=relation)


def replayed(record: RunRecord, path: Path) -> list[tuple[VerdictRecord, Decided]]:
    """Each paired verdict of *record* judged again on a stored host of it alone (a gate's
    row as a gate judges it: the host's moves do not keep it from deciding)."""
    names: dict[str, set[str]] = {}
    for m in record.measurements:
        names.setdefault(m.conditions.profile or "", set()).add(m.configuration)
    profiles = {p: StoredProfile(p, c) for p, c in names.items()}
    out = []
    for v in record.verdicts:
        if v.sides is None:
            continue
        host = StoredHost(replace(record, verdicts=[v]), profiles, path=path)  # type: ignore[arg-type]
        profile = profiles[v.sides[0].profile]
        a, b = (
            Side(profile.configurations[s.configuration], Workload.parse(s.workload), s.build)
            for s in v.sides
        )
        got = decide_pair(
            host, profile, rule_of(v), a, b, label=v.asked, plan=Plan(), budget=1e9,  # type: ignore[arg-type]
            busy_limit=0.25, host_decides=not v.test.startswith("gate"),
        )  # fmt: skip
        out.append((v, got))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true", help="one line a verdict")
    args = parser.parse_args(argv)
    verdicts = aside = same = 0
    for path in args.files:
        for v, got in replayed(read_record(path), path):
            verdicts += 1
            aside += sum(1 for r in v.rounds if r.aside is not None)
            kept = got.verdict == v.verdict
            same += kept
            if args.json or not kept:
                shown = {"file": path.name, "test": v.test, "replays": kept}
                print(
                    json.dumps(
                        {
                            **shown,
                            "replayed": got.verdict.to_dict(),
                            "recorded": v.verdict.to_dict(),
                        }
                    )
                )
    files = len(args.files)
    print(f"{verdicts} paired verdicts of {files} files ({aside} rounds set aside): ", end="")
    print(f"{same} replay as recorded")
    return 0 if same == verdicts else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
