"""Tables in the ADR's layout: terminal text and markdown."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .measurement import Measurement


def text_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A plain-text table with aligned columns (numbers right-aligned)."""
    body = [list(map(str, r)) for r in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)
    ]

    def fmt(cells: Sequence[str]) -> str:
        out = []
        for i, c in enumerate(cells):
            numeric = (i > 0 and c[:1].isdigit()) or (c[:1] in "+-" and c[1:2].isdigit())
            out.append(c.rjust(widths[i]) if numeric else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(headers), sep, *(fmt(r) for r in body)])


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """The same table as GitHub markdown."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(str, r)).replace("\n", " ") + " |" for r in rows]
    return "\n".join(lines)


def summary_rows(measurements: Iterable[Measurement]) -> tuple[list[str], list[list[str]]]:
    """One row per (configuration, build), one column per workload, in the shape of ADR-0042's
    llama-bench table: configuration | pp tok/s | tg tok/s | spread | build."""
    ms = list(measurements)
    workloads = sorted({m.workload for m in ms}, key=lambda w: (w.kind != "pp", w.depth, w.tokens))
    groups: dict[tuple[str, str, str], dict[str, Measurement]] = {}
    for m in ms:
        profile = str(m.extra.get("profile", ""))
        groups.setdefault((profile, m.configuration, m.build), {})[m.workload.name] = m
    profiles = {k[0] for k in groups}
    headers = ["configuration", *(f"{w.name} tok/s" for w in workloads), "spread (cv)", "build"]
    rows = []
    for (profile, config, build), by_w in groups.items():
        name = f"{profile}/{config}" if len(profiles) > 1 else config
        cells = [name]
        spreads = []
        for w in workloads:
            m = by_w.get(w.name)
            if m is None:
                cells.append("-")
                continue
            s = m.summary
            cells.append(f"{s.median:.1f}")
            spreads.append(f"{w.kind} {100 * s.cv:.1f}%")
        rows.append([*cells, ", ".join(spreads) or "-", build])
    return headers, rows
