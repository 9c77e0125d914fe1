"""``moeperf logstats``: the real-traffic table of llama-server logs (ADR-0042), the
performance warnings each log contains, and optionally a log's request mix for replay; with
``--baseline``, a production log's rows judged against a baseline file's recorded
``kind = "traffic"`` figures, for cron: exit 0 every row holds, 1 a row fails, 3 undecided.
Two logs (``OLD.log NEW.log``, or ``NEW.log --baseline OLD.log``) are compared row by row
(:mod:`pytest_moeperf.verdicts.logchange`), exit 0/1/3 as a gate's.

Mounted by :func:`pytest_moeperf.commands.make_parser` through :func:`add_arguments` and
:func:`run`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..defaults import FAMILY_ALPHA, MARGIN, SESSION_SPREAD
from ..errors import BaselineError, MoeperfError
from ..fs import write_output
from ..llama.logs import (
    ParsedLog,
    RequestTiming,
    TrafficStats,
    mix_of,
    parse_log_files,
    rotated_series,
    traffic_stats,
)
from ..measure.mix import Mix
from ..report.logstats import format_log_changes, format_traffic_checks, format_traffic_table
from ..store.baselines import TRAFFIC_METRIC, BaselineEntry, BaselineFile, load_baselines
from ..verdicts.logchange import LogChange, LogRow, compare_logs, log_rows, logs_outcome
from ..verdicts.outcomes import exit_status
from ..verdicts.reference import (
    RESAMPLES,
    Metric,
    Statistic,
    TrafficCheck,
    judge_traffic,
    log_requests,
    pick_entry,
    traffic_outcome,
)

SEED = 0
"""The bootstrap's seed: the same log gives the same intervals."""


def _non_negative(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def _fraction(value: str) -> float:
    try:
        f = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not (0 <= f < 1):
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {f:g} (0.10 is 10 %)")
    return f


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Real-traffic prefill/decode throughput from llama-server print_timing lines (the "
        "ADR-0042 table), one column per log, and the performance warnings each log contains."
    )
    parser.add_argument(
        "logs", nargs="+", metavar="SERVER.log", help="llama-server log (plain, gzip, bz2, xz)"
    )
    for flag, default, rows in (
        ("--prefill-min", 256, "prefill row: requests with >= N newly prefilled"),
        ("--prefill-large-min", 4000, "large-prefill row: requests with >= N newly prefilled"),
        ("--decode-min", 32, "decode rows: requests with >= N generated"),
    ):
        help_text = f"{rows} tokens (default {default})"
        parser.add_argument(flag, type=_non_negative, default=default, metavar="N", help=help_text)
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
    parser.add_argument(
        "--baseline",
        metavar="FILE",
        help="judge the log's rows against FILE: a baseline file (.toml), its kind = "
        '"traffic" entries of one configuration (each row with a bootstrap interval over the '
        "log's requests and a verdict against the entry's tolerance and spread; exit 0 every "
        "row holds, 1 a row fails, 3 undecided), or an older log (as OLD.log NEW.log); one log "
        "only",
    )
    parser.add_argument(
        "--session-spread",
        type=_fraction,
        default=SESSION_SPREAD,
        metavar="F",
        help="two logs: the spread of one session's level (log standard deviation, 0.10 = "
        f"10 %%) assumed where the logs hold too few sessions to measure it (default "
        f"{SESSION_SPREAD:g}: this project's hosts drift 10-20 %% between hours)",
    )
    parser.add_argument(
        "--configuration",
        "--column",
        dest="configuration",
        metavar="NAME",
        help="with --baseline: the traffic entries' configuration (a column of the record's "
        "table, e.g. serve-legacy or serve-new); needed when the file holds more than one",
    )


def _labels(paths: Sequence[str]) -> list[str]:
    names = [Path(p).name for p in paths]
    if len(set(names)) == len(names):
        return names
    if len(set(paths)) == len(paths):
        return [str(p) for p in paths]
    return [f"{i + 1}:{p}" for i, p in enumerate(paths)]


def _stored(bf: BaselineFile, configuration: str | None) -> tuple[str, list[BaselineEntry]]:
    """The traffic configuration to judge against and its entries (the newest of each
    metric); a one-line :class:`BaselineError` naming ``--baseline`` or ``--configuration``
    when the file has none or more than one and none was named."""
    traffic = [e for e in bf.entries if e.kind == "traffic"]
    names = list(dict.fromkeys(e.configuration for e in traffic))
    where = f"--baseline {bf.path}"
    if not names:
        raise BaselineError(
            f'{where}: holds no kind = "traffic" entries; add the recorded real-traffic '
            'figures as [[entry]] tables with kind = "traffic"'
        )
    if configuration is None:
        if len(names) > 1:
            raise BaselineError(
                f"{where}: holds the traffic of {', '.join(names)}; name one with "
                "--configuration (or --column)"
            )
        configuration = names[0]
    elif configuration not in names:
        raise BaselineError(
            f"--configuration {configuration}: {bf.path} has no traffic entries of it "
            f"(it has {', '.join(names)})"
        )
    metrics = dict.fromkeys(e.workload for e in traffic if e.configuration == configuration)
    chosen = [pick_entry(traffic, configuration, w, "", kind="traffic") for w in metrics]
    return configuration, [e for e in chosen if e is not None]


def _row_label(what: Metric, how: Statistic, n: int, named: bool) -> str:
    """A row as the real-traffic table names it (``decode, median`` where the entry names no
    threshold: the table's median is over the decode rows' requests)."""
    if how == "median" and not named:
        return f"{what}, median"
    new = "new tokens" if what == "prefill" else "generated"
    return f"{what}, requests with ≥{n:,} {new}, {how}"


def judge_log(
    timings: Sequence[RequestTiming],
    bf: BaselineFile,
    entries: Sequence[BaselineEntry],
    *,
    prefill_min: int,
    decode_min: int,
) -> list[TrafficCheck]:
    """Each stored traffic entry against the log's *timings*: the entry's metric
    (``prefill-aggregate>=256``, ``decode-median``; a metric without its ``>=N`` takes
    *prefill_min* or *decode_min*) over the log's requests, judged by
    :func:`~pytest_moeperf.verdicts.reference.judge_traffic` against the entry's value,
    tolerance and spread."""
    checks = []
    for e in entries:
        m = TRAFFIC_METRIC.fullmatch(e.workload)
        assert m is not None  # the file's reader checked it
        what: Metric = "prefill" if m.group(1) == "prefill" else "decode"
        how: Statistic = "aggregate" if m.group(2) == "aggregate" else "median"
        n = int(m.group(3)) if m.group(3) else (prefill_min if what == "prefill" else decode_min)
        checks.append(
            judge_traffic(
                log_requests(timings, what, n),
                how,
                e.value,
                label=_row_label(what, how, n, m.group(3) is not None),
                workload=e.workload,
                tolerance=bf.tolerance_for(e),
                rel_spread=e.rel_spread or 0.0,
                seed=SEED,
            )
        )
    return checks


def _check_usage(args: argparse.Namespace, baseline: str | None) -> None:
    for flag, used in (("--mix", args.mix), ("--baseline", baseline)):
        if used and len(args.logs) != 1:
            what = "writes the mix of" if flag == "--mix" else "judges"
            raise MoeperfError(
                f"{flag} {what} one log; {len(args.logs)} were given "
                "(use --rotated for a log's rotated predecessors)"
            )
    configuration = args.configuration
    if configuration and not (baseline and _is_record(baseline)):
        raise MoeperfError(
            f"--configuration {configuration} names a traffic column of a --baseline file; "
            "give --baseline FILE too (a baseline file, .toml)"
        )


def _is_record(baseline: str) -> bool:
    """Whether ``--baseline`` names a baseline file (TOML) rather than an older log."""
    return Path(baseline).suffix == ".toml"


def _print_findings(parsed: dict[str, ParsedLog]) -> None:
    """What the logs say besides their timings: unreadable lines, performance warnings."""
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


def _verdict_line(outcome: str, rows: Sequence[tuple[str, str]]) -> str:
    """``verdict: fails (row; row)``: the rows behind an outcome that is not a pass."""
    named = [label for label, o in rows if o == outcome and exit_status(outcome) != 0]
    return f"verdict: {outcome} ({'; '.join(named)})" if named else f"verdict: {outcome}"


@dataclass(frozen=True)
class _Logs:
    """What ``moeperf logstats`` read, by label (an older log of ``--baseline`` first): each
    log parsed and its traffic table, and the rows of the verdict: judged against a baseline
    file (*record*, of *configuration*) or compared between two logs (*compare*)."""

    labels: list[str]
    parsed: dict[str, ParsedLog]
    stats: dict[str, TrafficStats]
    record: bool
    compare: bool
    rows: list[LogRow]
    changes: list[LogChange]
    configuration: str | None
    checks: list[TrafficCheck]
    mix: tuple[Mix, list[str]] | None
    """``--mix``: the log's request mix (already written) and its notes."""


def _read(args: argparse.Namespace, baseline: str | None) -> _Logs:
    """Read the logs, write ``--mix``, and judge them against ``--baseline FILE.toml`` or
    compare two logs; raises :class:`MoeperfError` for a log or file that cannot be read."""
    record = baseline is not None and _is_record(baseline)
    paths = [baseline, *args.logs] if baseline and not record else list(args.logs)
    compare = len(paths) == 2 and not record
    labels = _labels(paths)
    parsed = {
        label: parse_log_files(rotated_series(log) if args.rotated else [Path(log)])
        for label, log in zip(labels, paths, strict=True)
    }
    stats = {
        label: traffic_stats(
            p.timings,
            prefill_min=args.prefill_min,
            prefill_large_min=args.prefill_large_min,
            decode_min=args.decode_min,
        )
        for label, p in parsed.items()
    }
    mix = None
    if args.mix:
        mix = mix_of(parsed[labels[0]].timings, str(args.logs[0]))
        write_output(Path(args.mix), json.dumps(mix[0].to_dict(), indent=1) + "\n", "--mix")
    checks: list[TrafficCheck] = []
    configuration = None
    if record and baseline is not None:
        try:
            bf = load_baselines(baseline)
        except BaselineError as e:
            raise BaselineError(f"--baseline {e}") from None
        configuration, entries = _stored(bf, args.configuration)
        checks = judge_log(
            parsed[labels[0]].timings,
            bf,
            entries,
            prefill_min=args.prefill_min,
            decode_min=args.decode_min,
        )
    rows = log_rows(args.prefill_min, args.prefill_large_min, args.decode_min)
    changes: list[LogChange] = []
    if compare:
        old, new = parsed[labels[0]].timings, parsed[labels[1]].timings
        changes = compare_logs(old, new, rows, prior=args.session_spread, seed=SEED)
    return _Logs(labels, parsed, stats, record, compare, rows, changes, configuration, checks, mix)


def _outcome(logs: _Logs) -> tuple[str, int, list[tuple[str, str]]]:
    """The verdict of ``--baseline FILE.toml`` or of two logs: its outcome, the exit status
    and each row's label and outcome (``""``, 0 and none without either)."""
    if logs.record:
        held = traffic_outcome(logs.checks)
        return held, exit_status(held), [(c.label, c.outcome) for c in logs.checks]
    if logs.compare:
        moved = logs_outcome(logs.changes)
        return moved, exit_status(moved), [(c.label, c.outcome) for c in logs.changes]
    return "", 0, []


def _json_doc(logs: _Logs, baseline: str | None, outcome: str) -> dict[str, Any]:
    """``--json``: each log's table and findings, by label, with its verdict's rows."""
    labels = logs.labels
    doc: dict[str, Any] = {
        label: {
            "paths": list(p.paths),
            "lines": p.lines,
            "malformed_timing_lines": p.malformed,
            "stats": logs.stats[label].to_dict(),
            "startup_findings": [asdict(f) for f in p.findings],
        }
        for label, p in logs.parsed.items()
    }
    if logs.record:
        doc[labels[0]]["baseline"] = {
            "path": str(baseline),
            "configuration": logs.configuration,
            "outcome": outcome,
            "checks": [{**asdict(c), "explain": c.explain()} for c in logs.checks],
        }
    if logs.compare:
        doc["compare"] = {
            "old": labels[0],
            "new": labels[1],
            "outcome": outcome,
            "rows": [
                {**asdict(c), "dominant": c.dominant, "explain": c.explain()} for c in logs.changes
            ],
        }
    return doc


def _print_tables(logs: _Logs, baseline: str | None) -> None:
    """The real-traffic table, or the log's rows judged against a baseline file; then two
    logs' rows compared."""
    labels, changes = logs.labels, logs.changes
    if logs.record:
        print(
            f"{labels[0]} against {baseline}, configuration {logs.configuration} (interval over "
            f"the log's requests: bootstrap of {RESAMPLES:,} resamples, seed {SEED}, widened "
            "by the stored figure's spread)"
        )
        print(format_traffic_checks(labels[0], str(logs.configuration), logs.checks))
    else:
        print(format_traffic_table(logs.stats))
    if logs.compare:
        print(
            f"\n{labels[1]} against {labels[0]} (interval: both logs' bootstrap over requests "
            f"and the between-session term; each row at {100 * FAMILY_ALPHA:g} % / "
            f"{len(changes)} rows, margin {100 * MARGIN:g} %)"
        )
        print(format_log_changes(labels[0], labels[1], changes))
        empty = [r.label for r in logs.rows if r.label not in {c.label for c in changes}]
        if empty:
            print(f"left out, no request of them in either log: {'; '.join(empty)}")


def run(args: argparse.Namespace) -> int:
    """Run ``moeperf logstats`` with parsed *args*; 0 on success, 2 on a user error; with
    ``--baseline FILE.toml``, 0 every row holds, 1 a row fails, 3 undecided; of two logs, 0
    no row slower and none undecided, 1 a row slower, 3 undecided."""
    baseline: str | None = args.baseline
    _check_usage(args, baseline)
    logs = _read(args, baseline)
    if logs.mix is not None:
        mix, mix_notes = logs.mix
        print(
            f"mix: {mix.describe()}{', with arrival gaps' if mix.has_gaps else ''} -> {args.mix}",
            file=sys.stderr,
        )
        for note in mix_notes:
            print(f"mix: {note}", file=sys.stderr)
    outcome, status, judged = _outcome(logs)
    if args.json:
        print(json.dumps(_json_doc(logs, baseline, outcome), indent=2))
        return status
    _print_tables(logs, baseline)
    _print_findings(logs.parsed)
    if outcome:
        print("\n" + _verdict_line(outcome, judged))
    return status
