"""The tuning race's report: one row a duel (challenger, its flags, the leader it met, the
ratio with its interval, its fate, rounds, seconds), the answer and what was skipped, as text,
a decision record's markdown and JSON."""

from __future__ import annotations

from collections.abc import Sequence

from ..defaults import FAMILY_ALPHA
from ..verdicts.race import Duel, RaceResult
from .tables import markdown_table, text_table

HEADERS = ["candidate", "flags", "against", "ratio [interval]", "verdict", "rounds", "seconds"]


def duel_rows(result: RaceResult) -> list[list[str]]:
    """candidate | flags | against | ratio [interval] | verdict | rounds | seconds: one row a
    duel, in the order they ran, the confirmation last."""
    duels: Sequence[Duel] = [*result.duels, *([result.confirmation] if result.confirmation else [])]
    rows = []
    for d in duels:
        v = d.verdict
        fate: str = v.outcome
        if d.dead_end(result.margin):
            fate += " (dead end)"
        elif v.outcome == "slower":
            fate += " (dropped)"
        elif v.outcome == "faster" and d is not result.confirmation:
            fate += " (leads)"
        rows.append(
            [
                d.challenger,
                " ".join(result.flags.get(d.challenger, ())) or "(base)",
                d.leader,
                f"{v.ratio:.3f} [{v.low:.3f}, {v.high:.3f}]",
                fate,
                str(v.rounds or "-"),
                f"{d.seconds:.0f}",
            ]
        )
    return rows


def _notes(result: RaceResult, family: int) -> list[str]:
    notes = [f"{name}: skipped: {why}" for name, why in result.skipped.items()]
    notes.append(
        f"family: {family} duel(s), each judged at {100 * FAMILY_ALPHA / family:.2g} % over its "
        "looks, so the chance that any duel calls a loser faster or a winner slower is at most "
        f"{100 * FAMILY_ALPHA:.0f} %"
    )
    return notes


def race_text(result: RaceResult, family: int) -> str:
    lines = [text_table(HEADERS, duel_rows(result)), "", result.answer()]
    return "\n".join(lines + _notes(result, family)) + "\n"


def race_markdown(result: RaceResult, family: int, title: str) -> str:
    """The race as a decision record: the question, the evidence table, the decision."""
    lines = [
        f"# {title}",
        "",
        "## Evidence",
        "",
        markdown_table(HEADERS, duel_rows(result)),
        "",
        "## Decision",
        "",
        result.answer(),
        "",
        *(f"- {n}" for n in _notes(result, family)),
    ]
    return "\n".join(lines) + "\n"
