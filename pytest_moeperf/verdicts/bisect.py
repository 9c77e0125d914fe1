"""Bisect's verdicts: each step's comparisons against the good and the bad build, what they
make of the step (good, bad, undecided), and the bisect's outcome."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .judge import Verdict
from .outcomes import BisectOutcome, StepOutcome, exit_status

GateRecords = dict[tuple[str, str], dict[str, Any]]
"""Each gate's run record (as the results file holds it) by its (baseline, candidate) builds:
what ``moeperf bisect --replay`` judges again."""


@dataclass(frozen=True)
class Comparison:
    """One configuration's verdict of a step against a reference build (``step / ref``)."""

    configuration: str
    verdict: Verdict

    @property
    def outcome(self) -> str:
        return self.verdict.outcome

    def text(self) -> str:
        v = self.verdict
        return f"{v.ratio:.3f} [{v.low:.3f}, {v.high:.3f}] {v.outcome}"

    def to_dict(self) -> dict[str, Any]:
        return {"configuration": self.configuration, "verdict": self.verdict.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Comparison:
        return cls(str(d["configuration"]), Verdict.from_dict(d["verdict"]))


@dataclass(frozen=True)
class BisectStep:
    """One measured build of the bisect."""

    build: str
    against_good: tuple[Comparison, ...]
    against_bad: tuple[Comparison, ...]
    seconds: float

    @property
    def verdict(self) -> StepOutcome:
        return classify(self.against_good, self.against_bad)

    def to_dict(self) -> dict[str, Any]:
        return {
            "build": self.build,
            "verdict": self.verdict,
            "seconds": self.seconds,
            "against_good": [c.to_dict() for c in self.against_good],
            "against_bad": [c.to_dict() for c in self.against_bad],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BisectStep:
        return cls(
            build=str(d["build"]),
            against_good=tuple(Comparison.from_dict(c) for c in d["against_good"]),
            against_bad=tuple(Comparison.from_dict(c) for c in d["against_bad"]),
            seconds=float(d["seconds"]),
        )


def classify(against_good: Sequence[Comparison], against_bad: Sequence[Comparison]) -> StepOutcome:
    """Bad when a configuration is surely slower than the good build and not surely faster
    than the bad one; good when every configuration is surely faster than the bad build and
    none surely slower than the good one; undecided otherwise: neither is sure, or a step
    lies between the two (slower than good *and* faster than bad: part of the slowdown)."""
    pairs = list(zip(against_good, against_bad, strict=True))
    if not pairs:
        return "undecided"
    if any(g.outcome == "slower" and b.outcome != "faster" for g, b in pairs):
        return "bad"
    if all(b.outcome == "faster" and g.outcome != "slower" for g, b in pairs):
        return "good"
    return "undecided"


@dataclass
class BisectResult:
    """A finished (or stopped) bisect."""

    builds: list[str]
    metric: str
    configurations: list[str]
    premise: tuple[Comparison, ...]
    margin: float
    steps: dict[str, BisectStep] = field(default_factory=dict)
    boundaries: list[tuple[str, str]] = field(default_factory=list)
    """(last good, first bad) pairs; more than one when undecided steps split the search."""
    stopped: str | None = None
    """Why the bisect did not search (the premise does not hold), or ``None``."""
    records: GateRecords = field(default_factory=dict)
    """The run record of each gate it ran (the premise's and each step's two)."""

    @property
    def outcome(self) -> BisectOutcome:
        if self.stopped is not None:
            undecided = any(c.outcome == "undecided" for c in self.premise)
            return "undecided" if undecided else "no-slowdown"
        return "found" if len(self.boundaries) == 1 else "undecided"

    @property
    def exit_code(self) -> int:
        """0 one first bad build found, 1 no slowdown between good and bad, 3 undecided."""
        return exit_status(self.outcome)

    def conclusion(self) -> str:
        if self.stopped is not None:
            return self.stopped
        if self.outcome == "found":
            last_good, first_bad = self.boundaries[0]
            return f"first bad build: {first_bad} (last good: {last_good})"
        found = ", ".join(f"{bad} (after {good})" for good, bad in self.boundaries)
        return "undecided steps left more than one candidate; first bad build is one of: " + found
