"""A recorded reference beside this host's numbers, in the layout of the record's tables: one
line per claim or dead end (``ADR-0042 391.4 / 189.0 = 2.07 | here 300.0 / 189.0 = 1.59
[1.54, 1.63] | bound >= 2.00 | fails``), the table of every such row, and the per-configuration
table of the record's llama-bench layout (configuration | pp2048 ADR-0042 | pp2048 here |
tg128 ADR-0042 | tg128 here | build). A reference's numbers come from another host: they are
labelled with it and never shown as a change."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..measure.measurement import Measurement
from ..measure.workload import Workload
from ..verdicts.judge import Verdict
from ..verdicts.reference import Reference, ReferenceRow, pick_figure, rate_text
from .tables import markdown_table, text_table


def bound_text(v: Verdict) -> str:
    """The bound a verdict's ratio is held to: ``>= 2.00``, ``<= 0.70``, ``< 1 (reopened at
    >= 0.95)`` for a dead end."""
    if v.relation == "<":
        return f"< 1 (reopened at >= {1 - (v.margin or 0):.2f})"
    if v.relation == "~":
        return f"~ 1 ± {v.margin or 0:.2f}"
    return f"{v.relation} {v.threshold:.2f}"


def _reference_side(row: ReferenceRow) -> str:
    left, right = row.reference_left, row.reference_right
    shown = [rate_text(f.value) if f is not None else "—" for f in (left, right)]
    ratio = row.reference_ratio
    return f"{shown[0]} / {shown[1]} = {f'{ratio:.2f}' if ratio is not None else '—'}"


def _here_side(row: ReferenceRow) -> str:
    v = row.verdict
    here = f"{rate_text(row.left.summary.median)} / {rate_text(row.right.summary.median)}"
    return f"{here} = {v.ratio:.2f} [{v.low:.2f}, {v.high:.2f}]"


def _notes(row: ReferenceRow) -> list[str]:
    """Which reference entry stands in where the measured build has none, or none at all."""
    notes = []
    for m, f in ((row.left, row.reference_left), (row.right, row.reference_right)):
        what = f"{m.configuration} {m.workload.name}"
        if f is None:
            notes.append(f"{row.reference} has no {what}")
        elif f.note:
            notes.append(f"{row.reference} {what} is {f.note}")
    return list(dict.fromkeys(notes))


def reference_line(row: ReferenceRow) -> str:
    """One line: ``ADR-0042 391.4 / 189.0 = 2.07 | here 300.0 / 189.0 = 1.59 [1.54, 1.63] |
    bound >= 2.00 | fails``, then which entries stand in for another build."""
    parts = [
        f"{row.reference} {_reference_side(row)}",
        f"here {_here_side(row)}",
        f"bound {bound_text(row.verdict)}",
        row.verdict.outcome,
        *_notes(row),
    ]
    return " | ".join(parts)


def reference_title(ref: Reference) -> str:
    """Whose numbers a reference holds: ``ADR-0042 (baselines/adr-0042.toml), numbers of
    host adr-0042: a reference beside this host's, never a change``."""
    ids = ", ".join(dict.fromkeys(ref.hosts)) or "unknown"
    which = "host" if "," not in ids else "hosts"
    return (
        f"{ref.label} ({ref.path}), numbers of {which} {ids}: a reference beside this host's, "
        "never a change"
    )


def reference_rows(rows: Iterable[ReferenceRow]) -> tuple[list[str], list[list[str]]]:
    """One row per claim or dead end: claim | bound | {label} | here [interval] | verdict |
    test (the label of the first row heads its column)."""
    rows = list(rows)
    label = rows[0].reference if rows else "reference"
    headers = ["claim", "bound", label, "here [interval]", "verdict", "test"]
    return headers, [
        [
            r.verdict.label,
            bound_text(r.verdict),
            _reference_side(r),
            _here_side(r),
            r.verdict.outcome + (" *" if r.verdict.outcome in ("fails", "undecided") else ""),
            r.nodeid.split("::")[-1],
        ]
        for r in rows
    ]


def record_order(ref: Reference, configuration: str, build: str) -> tuple[int, int]:
    """Where a (configuration, build) row stands in the record's own table: at its first
    entry of that configuration and build, else of that configuration, else after them."""
    same = [i for i, e in enumerate(ref.entries) if e.configuration == configuration]
    exact = [i for i in same if ref.entries[i].build == build]
    return (exact[0], 0) if exact else (same[0] if same else len(ref.entries), 1)


def configuration_rows(
    measurements: Iterable[Measurement], ref: Reference, workloads: Iterable[Workload] = ()
) -> tuple[list[str], list[list[str]]]:
    """The record's llama-bench layout, the reference beside this host: one row per measured
    (configuration, build), per workload (*workloads*, such as the profile's, and every one
    measured) a column of the reference's number (with its build where the measured build
    has none) and one of this host's median: configuration | pp2048 {label} | pp2048 here |
    tg128 {label} | tg128 here | build."""
    ms = [m for m in measurements if not m.workload.is_traffic]
    shown = {w for w in workloads if not w.is_traffic} | {m.workload for m in ms}
    columns = sorted(shown, key=Workload.table_order)
    groups: dict[tuple[str, str], dict[str, Measurement]] = {}
    for m in ms:
        groups.setdefault((m.configuration, m.build), {})[m.workload.name] = m
    headers = ["configuration"]
    for w in columns:
        headers += [f"{w.name} {ref.label}", f"{w.name} here"]
    headers.append("build")
    rows = []
    for config, build in sorted(groups, key=lambda cb: record_order(ref, *cb)):
        by_w = groups[(config, build)]
        cells = [config]
        for w in columns:
            f = pick_figure(ref.entries, config, w.name, build)
            cells.append(
                "—" if f is None else rate_text(f.value) + ("" if f.matched else f" ({f.build})")
            )
            here = by_w.get(w.name)
            cells.append("-" if here is None else rate_text(here.summary.median))
        cells.append(build)
        rows.append(cells)
    return headers, rows


def reference_failure(
    ref: Reference,
    row: ReferenceRow,
    measurements: Sequence[Measurement],
    workloads: Iterable[Workload] = (),
) -> str:
    """What a failing claim or dead end adds to its message: its reference line and the
    per-configuration table of the measurements the test touched."""
    return "\n".join(
        [
            f"against {reference_title(ref)}:",
            reference_line(row),
            "",
            text_table(*configuration_rows(measurements, ref, workloads)),
        ]
    )


def reference_text(
    ref: Reference,
    rows: Sequence[ReferenceRow],
    measurements: Sequence[Measurement],
    workloads: Iterable[Workload] = (),
) -> list[str]:
    """The terminal summary's lines of one reference: its title, the table of every row, the
    per-configuration table of *measurements*."""
    return [
        f"against {reference_title(ref)}:",
        text_table(*reference_rows(rows)),
        "",
        text_table(*configuration_rows(measurements, ref, workloads)),
    ]


def reference_markdown(
    ref: Reference,
    rows: Sequence[ReferenceRow],
    measurements: Sequence[Measurement],
    workloads: Iterable[Workload] = (),
) -> str:
    """The markdown report's section of one reference: title, every row, the configuration
    table."""
    return "\n".join(
        [
            f"## Against the reference {ref.label}",
            "",
            reference_title(ref) + ".",
            "",
            markdown_table(*reference_rows(rows)),
            "",
            markdown_table(*configuration_rows(measurements, ref, workloads)),
            "",
        ]
    )
