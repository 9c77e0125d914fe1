"""The upgrade check's table: decision (test and claim) | pinned build | candidate | record |
changed, as the terminal shows it, as markdown for a pull request and as JSON; then the
findings, each with the command that measures it again, and the answer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..verdicts.outcomes import UPGRADE_EXIT_STATUS
from ..verdicts.upgrade import Decision, UpgradeRow, standing, upgrade_outcome
from .tables import markdown_table, text_table

_ANSWERS = {
    "holds": "every decision holds on {candidate}: this host may move to it",
    "worse": "{candidate} changes {n} decision(s) for the worse: stay on {pinned}",
    "undecided": "{candidate} left {n} decision(s) undecided: not yet known whether this host "
    "may move to it",
    "nothing-judged": "nothing was judged on {candidate}: no answer",
}


@dataclass(frozen=True)
class UpgradeCheck:
    """An upgrade check's rows, the two builds it judged, and what it cost."""

    pinned: str
    candidate: str
    rows: Sequence[UpgradeRow]
    seconds: float | None = None
    """Wall seconds of the session that judged it (``None``: not known, a stored run)."""
    notes: Sequence[str] = field(default_factory=tuple)

    @property
    def outcome(self) -> str:
        return upgrade_outcome(self.rows)

    @property
    def exit_status(self) -> int:
        return UPGRADE_EXIT_STATUS[self.outcome]

    @property
    def findings(self) -> list[UpgradeRow]:
        return [r for r in self.rows if r.finding]

    def answer(self) -> str:
        standings = [
            standing(r.candidate.kind, r.candidate.outcome) for r in self.findings if r.candidate
        ]
        bad, undecided = standings.count("bad"), standings.count("undecided")
        n = bad if self.outcome == "worse" else undecided
        text = _ANSWERS[self.outcome].format(candidate=self.candidate, pinned=self.pinned, n=n)
        if self.outcome == "worse" and undecided:
            text += f" ({undecided} more left undecided)"
        return f"upgrade {self.pinned} -> {self.candidate}: {self.outcome}: {text}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "pinned": self.pinned,
            "candidate": self.candidate,
            "outcome": self.outcome,
            "exit_status": self.exit_status,
            "seconds": self.seconds,
            "rows": [r.to_dict() for r in self.rows],
            "notes": list(self.notes),
        }


def _side(d: Decision | None) -> str:
    if d is None:
        return "-"
    text = " ".join(part for part in (d.outcome, d.figure) if part)
    return f"{text} ({d.why})" if d.why and d.outcome in ("undecided", "not judged") else text


def _decision(r: UpgradeRow) -> str:
    test = r.test.rsplit("::", 1)[-1]
    return f"{test}: {r.asked}" if r.asked and r.asked != test else test


def upgrade_table(check: UpgradeCheck) -> tuple[list[str], list[list[str]]]:
    """The headers and rows of the decision table."""
    headers = [
        "decision",
        f"pinned {check.pinned}",
        f"candidate {check.candidate}",
        "record",
        "changed",
    ]
    rows = [
        [
            _decision(r),
            _side(r.pinned) if r.kind not in ("gate", "output") else "(the baseline side)",
            _side(r.candidate),
            r.record or "-",
            r.changed or "-",
        ]
        for r in check.rows
    ]
    return headers, rows


def _finding_lines(check: UpgradeCheck) -> list[str]:
    lines = []
    for r in check.findings:
        c = r.candidate
        assert c is not None
        again = f"; measure again: {c.rerun}" if c.rerun else ""
        lines.append(f"{_decision(r)}: {r.changed or c.outcome}{again}")
    return lines


def _cost(check: UpgradeCheck) -> str:
    if check.seconds is None:
        return ""
    return f" in {check.seconds / 60:.1f} min"


def upgrade_text(check: UpgradeCheck) -> str:
    """The upgrade check as the terminal shows it."""
    lines = [
        f"upgrade check: {len(check.rows)} decision(s) on {check.pinned} (pinned) and "
        f"{check.candidate} (candidate){_cost(check)}",
        text_table(*upgrade_table(check)),
    ]
    lines += [f"finding: {line}" for line in _finding_lines(check)]
    lines += [f"note: {n}" for n in check.notes]
    lines.append(check.answer())
    return "\n".join(lines)


def upgrade_markdown(check: UpgradeCheck) -> str:
    """The upgrade check as markdown, to paste into a pull request."""
    lines = [
        f"# Upgrade check: {check.pinned} -> {check.candidate}",
        "",
        f"{len(check.rows)} decision(s) of the suite judged on both builds on one host in one "
        f"session{_cost(check)}.",
        "",
        markdown_table(*upgrade_table(check)),
        "",
    ]
    findings = _finding_lines(check)
    if findings:
        lines += ["## Findings", ""] + [f"- {line}" for line in findings] + [""]
    lines += [f"- note: {n}" for n in check.notes]
    lines += ["", f"**{check.answer()}**", ""]
    return "\n".join(lines)


def upgrade_json(check: UpgradeCheck) -> str:
    return json.dumps(check.to_dict(), indent=1) + "\n"
