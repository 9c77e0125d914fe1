"""``moeperf logstats``: the real-traffic table of llama-server logs (ADR-0042), the
performance warnings each log contains, and optionally a log's request mix for replay.

Mounted by :func:`pytest_moeperf.commands.make_parser` through :func:`add_arguments` and
:func:`run`; :func:`main` runs it alone (``python -m pytest_moeperf.commands.logstats``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ..errors import MoeperfError
from ..fs import write_output
from ..llama.logs import (
    ParsedLog,
    TrafficStats,
    mix_of,
    parse_log_files,
    rotated_series,
    traffic_stats,
)
from ..report.logstats import format_traffic_table

__all__ = ["add_arguments", "main", "run"]


_PROG = "moeperf logstats"


def _non_negative(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``moeperf logstats``'s arguments on *parser*."""
    parser.description = (
        "Real-traffic prefill/decode throughput from llama-server print_timing lines (the "
        "ADR-0042 table), one column per log, and the performance warnings each log contains."
    )
    parser.add_argument(
        "logs", nargs="+", metavar="SERVER.log", help="llama-server log (plain, gzip, bz2, xz)"
    )
    parser.add_argument(
        "--prefill-min",
        type=_non_negative,
        default=256,
        metavar="N",
        help="prefill row: requests with >= N newly prefilled tokens (default 256)",
    )
    parser.add_argument(
        "--prefill-large-min",
        type=_non_negative,
        default=4000,
        metavar="N",
        help="large-prefill row: requests with >= N newly prefilled tokens (default 4000)",
    )
    parser.add_argument(
        "--decode-min",
        type=_non_negative,
        default=32,
        metavar="N",
        help="decode rows: requests with >= N generated tokens (default 32)",
    )
    parser.add_argument(
        "--rotated",
        action="store_true",
        help="also read each log's rotated predecessors (LOG.1, LOG.2.gz, ...), oldest first",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--mix",
        metavar="FILE",
        help="also write the log's request mix (prompt and generated tokens of each request, "
        "and arrival gaps where the log has timestamps) as a mix file a profile's traffic "
        "table can name; one log only",
    )


def _labels(paths: Sequence[str]) -> list[str]:
    names = [Path(p).name for p in paths]
    if len(set(names)) == len(names):
        return names
    if len(set(paths)) == len(paths):
        return [str(p) for p in paths]
    return [f"{i + 1}:{p}" for i, p in enumerate(paths)]


def run(args: argparse.Namespace) -> int:
    """Run ``moeperf logstats`` with parsed *args*; 0 on success, 2 on a user error."""
    mix_path = args.mix
    if mix_path and len(args.logs) != 1:
        print(
            f"{_PROG}: error: --mix writes the mix of one log; {len(args.logs)} were given "
            "(use --rotated for a log's rotated predecessors)",
            file=sys.stderr,
        )
        return 2
    try:
        labels = _labels(args.logs)
        parsed: dict[str, ParsedLog] = {}
        stats: dict[str, TrafficStats] = {}
        for label, log in zip(labels, args.logs, strict=True):
            series = rotated_series(log) if args.rotated else [Path(log)]
            parsed[label] = parse_log_files(series)
            stats[label] = traffic_stats(
                parsed[label].timings,
                prefill_min=args.prefill_min,
                prefill_large_min=args.prefill_large_min,
                decode_min=args.decode_min,
            )
        if mix_path:
            label = labels[0]
            mix, mix_notes = mix_of(parsed[label].timings, str(args.logs[0]))
            write_output(Path(mix_path), json.dumps(mix.to_dict(), indent=1) + "\n", "--mix")
    except MoeperfError as e:
        print(f"{_PROG}: error: {e}", file=sys.stderr)
        return 2
    if mix_path:
        print(
            f"mix: {mix.describe()}{', with arrival gaps' if mix.has_gaps else ''} -> {mix_path}",
            file=sys.stderr,
        )
        for note in mix_notes:
            print(f"mix: {note}", file=sys.stderr)
    if args.json:
        doc = {
            label: {
                "paths": list(p.paths),
                "lines": p.lines,
                "malformed_timing_lines": p.malformed,
                "stats": stats[label].to_dict(),
                "startup_findings": [asdict(f) for f in p.findings],
            }
            for label, p in parsed.items()
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(format_traffic_table(stats))
    extra: list[str] = []
    for label, p in parsed.items():
        if p.malformed:
            extra.append(f"{label}: {p.malformed:,} print_timing line(s) with unreadable numbers")
        for f in p.findings:
            times = f" ({f.count:,} times)" if f.count > 1 else ""
            extra.append(
                f"{label}: warning {f.id}{times} at {f.path}:{f.line_no}: {f.line.strip()}"
            )
            extra.append(f"{' ' * len(label)}  -> {f.advice}")
    if extra:
        print("\nread from the logs:")
        print("\n".join(f"- {e}" if not e.startswith(" ") else f"  {e}" for e in extra))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``moeperf logstats`` as a stand-alone command; returns the exit status."""
    parser = argparse.ArgumentParser(prog=_PROG)
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already printed by argparse
        return e.code if isinstance(e.code, int) else 2
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
