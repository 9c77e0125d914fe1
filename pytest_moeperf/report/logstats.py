"""The real-traffic table of ADR-0042 (``moeperf logstats``): prefill and decode throughput
of llama-server logs, one column per log, and each log's notes."""

from __future__ import annotations

from ..llama.logs import TrafficStats

__all__ = ["format_traffic_table"]


def _cell(rate: float | None, n: int, digits: int) -> str:
    if rate is None:
        return f"— (n={n:,})"
    return f"{rate:,.{digits}f} tok/s (n={n:,})"


def format_traffic_table(stats_by_label: dict[str, TrafficStats]) -> str:
    """ADR-0042's real-traffic table, one column per label, then each label's notes.

    Row thresholds are taken from the first column; columns built with other thresholds are
    marked in the notes.
    """
    if not stats_by_label:
        return ""
    labels = list(stats_by_label)
    first = stats_by_label[labels[0]]
    rows: list[list[str]] = [["metric", *labels]]
    rows.append(
        [
            f"prefill, requests with ≥{first.prefill_min:,} new tokens, aggregate",
            *(_cell(s.prefill.tok_per_s, s.prefill.n, 1) for s in stats_by_label.values()),
        ]
    )
    rows.append(
        [
            f"prefill, requests with ≥{first.prefill_large_min:,} new tokens, aggregate",
            *(
                _cell(s.prefill_large.tok_per_s, s.prefill_large.n, 1)
                for s in stats_by_label.values()
            ),
        ]
    )
    rows.append(
        [
            f"decode, requests with ≥{first.decode_min:,} generated, aggregate",
            *(_cell(s.decode.tok_per_s, s.decode.n, 2) for s in stats_by_label.values()),
        ]
    )
    rows.append(
        [
            "decode, median",
            *(
                "—" if s.decode_median is None else f"{s.decode_median:,.2f} tok/s"
                for s in stats_by_label.values()
            ),
        ]
    )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def render(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [render(rows[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(render(r) for r in rows[1:])
    notes: list[str] = []
    for label, s in stats_by_label.items():
        if (s.prefill_min, s.prefill_large_min, s.decode_min) != (
            first.prefill_min,
            first.prefill_large_min,
            first.decode_min,
        ):
            notes.append(
                f"{label}: thresholds {s.prefill_min}/{s.prefill_large_min}/{s.decode_min} "
                "differ from the row labels"
            )
        notes.extend(f"{label}: {note}" for note in s.notes)
    if notes:
        out.append("")
        out.extend(f"- {note}" for note in notes)
    return "\n".join(out)
