"""``moeperf logstats`` run as the console command runs it (``moeperf logstats ARGS``), its
usage errors returned as argparse's exit status rather than raised."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_moeperf.commands import main


def logstats(argv: Sequence[str]) -> int:
    try:
        return main(["logstats", *argv])
    except SystemExit as e:  # a usage error argparse printed, or --help
        return e.code if isinstance(e.code, int) else 2
