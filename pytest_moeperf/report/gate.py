"""The build gate's report: its table (text and markdown, in the layout of the ADR's tables),
notes and verdict line (its JSON: :mod:`pytest_moeperf.store.stored`)."""

from __future__ import annotations

from ..verdicts.gate import GateResult, GateRow, versus
from .tables import markdown_table, text_table


def _attributed(r: GateRow) -> list[str]:
    a = r.attribution
    if a is None:
        return ["-", "-"]
    sb = a.server_bench
    return [f"{sb.ratio:.3f} [{sb.low:.3f}, {sb.high:.3f}]", a.where(r.verdict)]


def gate_rows(result: GateResult) -> tuple[list[str], list[list[str]]]:
    """configuration | metric | baseline | candidate | ratio [interval] | rounds | verdict |
    since oldest accepted, chained (| server/bench | where the change is, with ``--attribute``)."""
    headers = [
        "configuration",
        "metric",
        f"baseline {result.baseline} tok/s",
        f"candidate {result.candidate} tok/s",
        "ratio [interval]",
        "rounds",
        "verdict",
        "since oldest accepted (chained)",
    ]
    attributed = any(r.attribution for r in result.rows)
    if attributed:
        headers += ["server/bench [interval]", "where the change is"]
    rows = []
    for r in result.rows:
        v = r.verdict
        mark = " *" if v.outcome in ("slower", "undecided") else ""
        why = ""
        if v.outcome == "undecided" and v.reason:
            why = f" ({v.reason})"
        elif v.outcome == "undecided" and v.mde_text:
            mde = v.mde or 0.0
            lean = f", {v.leaning.split(',')[0]}" if v.leaning else ""
            why = f"{lean} (MDE -{100 * (1 - 1 / (1 + mde)):.1f}/+{100 * mde:.1f} %)"
        rows.append(
            [
                r.configuration,
                r.workload.name,
                f"{r.baseline.summary.median:.1f}",
                f"{r.candidate.summary.median:.1f}",
                f"{v.ratio:.3f}x [{v.low:.3f}, {v.high:.3f}]",
                f"{v.rounds or '-'} ({r.seconds:.0f} s)",
                f"{v.outcome}{why}{mark}",
                versus(r.oldest),
                *(_attributed(r) if attributed else []),
            ]
        )
    for name, why in result.skipped:
        rows.append(
            [name, "-", "-", "-", "-", "-", f"skipped ({why})", "-"]
            + (["-", "-"] if attributed else [])
        )
    return headers, rows


def _head(result: GateResult) -> str:
    return (
        f"margin {100 * result.margin:.0f} %; host {100 * result.host_busy_before:.0f} % busy "
        f"before start, load average {result.loadavg_before[0]:.2f}"
    )


def _notes(result: GateResult) -> list[str]:
    """The gate's notes, and each undecided row's lean the family's Holm step-down saw."""
    leans = [f"{r.configuration}.{r.workload.name}: {r.family}" for r in result.rows if r.family]
    return [*result.notes, *leans, *result.creep_notes]


def gate_text(result: GateResult) -> str:
    """The gate as the terminal shows it."""
    head = f"build gate: candidate {result.candidate} vs baseline {result.baseline}, "
    lines = [head + _head(result), "", text_table(*gate_rows(result))]
    lines += [f"output: {line}" for line in result.output_lines]
    lines += [f"note: {n}" for n in _notes(result)]
    lines.append("verdict: " + result.summary())
    return "\n".join(lines)


def gate_markdown(result: GateResult) -> str:
    """The gate as a markdown report."""
    head = _head(result)
    lines = [
        f"# Build gate: {result.candidate} vs {result.baseline}",
        "",
        f"{head[0].upper()}{head[1:]}.",
        "",
        markdown_table(*gate_rows(result)),
        "",
    ]
    lines += [f"- output: {line}" for line in result.output_lines]
    lines += [f"- note: {n}" for n in _notes(result)]
    lines.append("")
    lines.append("**" + result.summary() + "**")
    return "\n".join(lines)
