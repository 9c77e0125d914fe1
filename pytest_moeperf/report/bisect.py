"""Bisect's report: the table of steps (build, ratio against good and bad with intervals,
verdict, time), the conclusion, markdown and JSON."""

from __future__ import annotations

from collections.abc import Sequence

from ..verdicts.bisect import BisectResult, Comparison
from .tables import markdown_table, text_table


def _named(comparisons: Sequence[Comparison], result: BisectResult) -> str:
    one = len(result.configurations) == 1
    return "; ".join(c.text() if one else f"{c.configuration} {c.text()}" for c in comparisons)


def bisect_rows(result: BisectResult) -> tuple[list[str], list[list[str]]]:
    """build | vs good | vs bad | verdict | time, one row per measured step."""
    headers = ["build", "vs good", "vs bad", "verdict", "time"]
    rows = []
    for name in result.builds:
        step = result.steps.get(name)
        if step is None:
            continue
        rows.append(
            [
                name,
                _named(step.against_good, result),
                _named(step.against_bad, result),
                step.verdict,
                f"{step.seconds:.0f} s",
            ]
        )
    return headers, rows


def bisect_text(result: BisectResult) -> str:
    premise = _named(result.premise, result)
    head = (
        f"bisect {', '.join(result.configurations)} {result.metric}: {result.builds[-1]} / "
        f"{result.builds[0]} = {premise}; {len(result.builds) - 2} build(s) between"
    )
    table = [text_table(*bisect_rows(result)), ""] if result.steps else []
    return "\n".join([head, "", *table, result.conclusion()])


def bisect_markdown(result: BisectResult) -> str:
    return "\n".join(
        [
            f"# Bisect: {result.metric} from {result.builds[0]} to {result.builds[-1]}",
            "",
            *([markdown_table(*bisect_rows(result)), ""] if result.steps else []),
            f"**{result.conclusion()}**",
            "",
        ]
    )
