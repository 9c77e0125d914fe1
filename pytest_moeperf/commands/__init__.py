"""The ``moeperf`` command: one module per verb, each with ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status), callable from tests; rendering lives in ``report/``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..defaults import SettingError
from ..errors import MoeperfError
from . import baselines, bisect, build, gate, logstats, model, sweep

VERBS = (
    ("build", build),
    ("make-model", model),
    ("gate", gate),
    ("bisect", bisect),
    ("baselines", baselines),
    ("sweep", sweep),
    ("logstats", logstats),
)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moeperf", description="llama.cpp performance decisions as a pytest suite."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, verb in VERBS:
        p = sub.add_parser(name, help=verb.HELP)
        verb.add_arguments(p)
        p.set_defaults(run=verb.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``moeperf`` console command."""
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (MoeperfError, SettingError) as exc:
        print(f"moeperf {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"moeperf {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
