"""The real-traffic table of ADR-0042 (``moeperf logstats``): prefill and decode throughput
of llama-server logs, one column per log, and each log's notes; with ``--baseline``, one log's
rows against a file's stored traffic figures, each with its interval and verdict; of two logs,
the new one's rows over the old one's, each with its interval, the term that dominates it and
its verdict."""

from __future__ import annotations

from collections.abc import Sequence

from ..llama.logs import Aggregate, TrafficStats
from ..verdicts.logchange import LogChange
from ..verdicts.reference import TrafficCheck


def _cell(a: Aggregate, digits: int) -> str:
    rate = a.tok_per_s
    return f"— (n={a.n:,})" if rate is None else f"{rate:,.{digits}f} tok/s (n={a.n:,})"


def format_traffic_table(stats_by_label: dict[str, TrafficStats]) -> str:
    """ADR-0042's real-traffic table, one column per label, then each label's notes.

    Row thresholds are taken from the first column; columns built with other thresholds are
    marked in the notes.
    """
    if not stats_by_label:
        return ""
    labels = list(stats_by_label)
    first = stats_by_label[labels[0]]
    stats = list(stats_by_label.values())
    rows = [
        ["metric", *labels],
        [f"prefill, requests with ≥{first.prefill_min:,} new tokens, aggregate"]
        + [_cell(s.prefill, 1) for s in stats],
        [f"prefill, requests with ≥{first.prefill_large_min:,} new tokens, aggregate"]
        + [_cell(s.prefill_large, 1) for s in stats],
        [f"decode, requests with ≥{first.decode_min:,} generated, aggregate"]
        + [_cell(s.decode, 2) for s in stats],
        ["decode, median"]
        + ["—" if s.decode_median is None else f"{s.decode_median:,.2f} tok/s" for s in stats],
    ]
    out = _render(rows)
    notes: list[str] = []
    for label, s in stats_by_label.items():
        thresholds = (s.prefill_min, s.prefill_large_min, s.decode_min)
        if thresholds != (first.prefill_min, first.prefill_large_min, first.decode_min):
            notes.append(
                f"{label}: thresholds {'/'.join(map(str, thresholds))} differ from the row labels"
            )
        notes.extend(f"{label}: {note}" for note in s.notes)
    if notes:
        out.append("")
        out.extend(f"- {note}" for note in notes)
    return "\n".join(out)


def _render(rows: Sequence[Sequence[str]]) -> list[str]:
    """*rows* (the first is the header) as the table's lines, columns padded."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def render(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [
        render(rows[0]),
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
        *(render(r) for r in rows[1:]),
    ]


def _rate(value: float, decode: bool) -> str:
    return f"{value:,.{2 if decode else 1}f}"


def _counted(value: float | None, n: int, decode: bool) -> str:
    return f"— (n={n:,})" if value is None else f"{_rate(value, decode)} (n={n:,})"


def format_traffic_checks(log: str, stored: str, checks: Sequence[TrafficCheck]) -> str:
    """One log's real-traffic rows against the stored figures of the column *stored* (a
    baseline file's traffic configuration): metric | the log's tok/s (n) | log / stored with
    its interval | stored ± its spread | limit | verdict, failing and undecided rows marked,
    then one line per failing row."""
    confidence = round(100 * checks[0].confidence) if checks else 95
    rows = [
        [
            "metric",
            f"{log} tok/s (n)",
            f"{log} / {stored} [{confidence} % interval]",
            f"{stored} tok/s",
            "limit",
            "verdict",
        ]
    ]
    for c in checks:
        decode = c.workload.startswith("decode")
        mark = " *" if c.outcome != "holds" else ""
        if c.value is None or c.low is None or c.high is None:
            here, ratio = f"— (n={c.n:,})", "—"
        else:
            here = _counted(c.value, c.n, decode)
            ratio = f"{c.value / c.stored:.2f} [{c.low:.2f}, {c.high:.2f}]"
        spread = f" ± {100 * c.rel_spread:.0f} %" if c.rel_spread else ""
        rows.append(
            [
                c.label,
                here,
                ratio,
                f"{_rate(c.stored, decode)}{spread}",
                _rate(c.limit, decode),
                c.outcome + mark,
            ]
        )
    out = _render(rows)
    failed = [c for c in checks if c.outcome == "fails"]
    if failed:
        out.append("")
        out += [f"fails: {c.explain()}" for c in failed]
    open_rows = [c for c in checks if c.outcome == "undecided" and c.value is not None]
    if open_rows:
        out.append("")
        for c in open_rows:
            why = (
                f"the record's {100 * c.rel_spread:.0f} % spread dominates the width (the "
                f"log's {c.n:,} requests give ±{100 * c.request_width:.1f} %): more requests "
                "will not decide it"
                if c.dominant == "the record's spread"
                else f"the log's {c.n:,} requests dominate the width: a longer log narrows it"
            )
            out.append(f"undecided: {c.label}: {why}")
    return "\n".join(out)


def format_log_changes(old: str, new: str, changes: Sequence[LogChange]) -> str:
    """Two logs' rows: metric | old tok/s (n) | new tok/s (n) | new / old with its interval |
    the terms of its width (log standard deviations of the difference) | verdict, rows that
    are not a pass marked; then the between-session term's basis and each row's line."""
    confidence = f"{100 * changes[0].confidence:.1f}" if changes else "95"
    rows = [
        [
            "metric",
            f"{old} tok/s (n)",
            f"{new} tok/s (n)",
            f"{new} / {old} [{confidence} % interval]",
            "± requests / sessions",
            "verdict",
        ]
    ]
    for c in changes:
        decode = c.label.startswith("decode")
        ratio = (
            "—"
            if c.ratio is None or c.low is None or c.high is None
            else f"{c.ratio:.2f} [{c.low:.2f}, {c.high:.2f}]"
        )
        terms = f"{100 * c.request_sd:.1f} % / {100 * c.session_sd:.1f} %"
        if c.ratio is not None:
            terms += f" ({c.dominant} dominates)"
        mark = "" if c.outcome in ("unchanged", "faster", "small-faster", "small-slower") else " *"
        old_cell, new_cell = _counted(c.old, c.n_old, decode), _counted(c.new, c.n_new, decode)
        rows.append([c.label, old_cell, new_cell, ratio, terms, c.outcome + mark])
    out = _render(rows)
    sessions = [c.session for c in changes if c.session is not None]
    out.append("")
    if not changes:
        return "\n".join(out)
    if not sessions:
        out.append("between sessions: none (the same requests twice are one session)")
    else:
        widest = max(sessions, key=lambda s: s.log_sd)
        out.append(
            f"{widest.describe()}, the widest row's: each log is one session's level (sessions "
            "are a log's server restarts, and its hours where it has timestamps)"
        )
    return "\n".join(out)
