"""A tuning race's verdicts: each duel of a challenger against the leader of its moment, what
the duels make of each candidate (leader, dropped, tied, skipped), and the race's answer: a
winner, a tie within the margin, or no answer within the budget.

A duel is a change verdict (:class:`~pytest_moeperf.verdicts.judge.Verdict` of ``challenger /
leader`` by the ``change`` rule): *faster* makes the challenger the leader, *slower* drops it
(a *dead end* when even its interval's upper end lies twice the margin below the leader), and
anything else (unchanged, small-faster, small-slower, undecided) leaves the leader where it is
and the challenger standing beside it: a tie, never guessed either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .judge import Verdict
from .outcomes import RaceOutcome


@dataclass(frozen=True)
class Duel:
    """One challenger measured against the leader in paired rounds."""

    leader: str
    challenger: str
    verdict: Verdict
    """``challenger / leader``."""
    seconds: float

    @property
    def outcome(self) -> str:
        return self.verdict.outcome

    def dead_end(self, margin: float) -> bool:
        """Lost by a wide margin: the whole interval lies more than twice the margin below."""
        return self.outcome == "slower" and self.verdict.high < 1.0 - 2 * margin

    def to_dict(self) -> dict[str, Any]:
        return {
            "leader": self.leader,
            "challenger": self.challenger,
            "seconds": self.seconds,
            **self.verdict.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Duel:
        return cls(
            str(d["leader"]), str(d["challenger"]), Verdict.from_dict(d), float(d["seconds"])
        )


@dataclass
class RaceResult:
    """Every duel of a race, in order, and the candidates it skipped with why."""

    objective: str
    margin: float
    start: str
    """The candidate the race started from (the base configuration)."""
    flags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Each candidate's flags beyond the base configuration's."""
    duels: list[Duel] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    confirmation: Duel | None = None
    """The final leader measured once more against the start (``None``: it is the start)."""

    @property
    def leader(self) -> str:
        """The candidate standing after the last duel."""
        leader = self.start
        for d in self.duels:
            if d.leader == leader and d.outcome == "faster":
                leader = d.challenger
        return leader

    def tied(self) -> list[Duel]:
        """Challengers left standing beside the final leader: their duel against it decided
        neither faster nor slower."""
        leader = self.leader
        return [
            d for d in self.duels if d.leader == leader and d.outcome not in ("faster", "slower")
        ]

    @property
    def outcome(self) -> RaceOutcome:
        """``winner``: one candidate stands, confirmed faster than the start, or the start with
        every challenger decided slower; ``tie``: challengers stand within the margin (or
        undecided) beside it; ``unconfirmed``: the leader, measured against the start once
        more, was not decided faster; ``none``: nothing was measured."""
        if not self.duels:
            return "none"
        if self.confirmation is not None and self.confirmation.outcome != "faster":
            return "unconfirmed"
        return "tie" if self.tied() else "winner"

    def answer(self) -> str:
        """One line: what the race found."""
        leader = self.leader
        if self.outcome == "none":
            return f"no candidate was measured ({len(self.skipped)} skipped)"
        if self.outcome == "tie":
            names = ", ".join(d.challenger for d in self.tied())
            return (
                f"tie: {leader} leads, {names} not decided apart from it on {self.objective} "
                f"(within the margin of {100 * self.margin:g} %, or undecided at the budget)"
            )
        if self.outcome == "unconfirmed":
            assert self.confirmation is not None
            return (
                f"unconfirmed: {leader} led the duels, but against {self.start} again it reads "
                f"{self.confirmation.verdict.explain()}: no winner is claimed"
            )
        if leader == self.start:
            return f"winner: {leader} (the start): every challenger decided slower"
        c = self.confirmation
        against = f"; {c.verdict.explain()}" if c is not None else ""
        return f"winner: {leader} on {self.objective}{against}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "margin": self.margin,
            "start": self.start,
            "flags": {k: list(v) for k, v in self.flags.items()},
            "duels": [d.to_dict() for d in self.duels],
            "skipped": dict(self.skipped),
            "confirmation": None if self.confirmation is None else self.confirmation.to_dict(),
            "outcome": self.outcome,
            "leader": self.leader,
            "answer": self.answer(),
        }
