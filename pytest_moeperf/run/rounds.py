"""Paired rounds on a session's servers: two sides measured in turn (A B, B A, A B, ...) until
a sequential verdict is final or its time budget is spent.

Two sides whose servers do not fit in memory together are measured across restarts instead:
each round is two blocks (A then B, or B then A), each block a fresh server process that is
warmed up and gives :data:`BLOCK_SAMPLES` samples, and the block's median is the round's value
of that side. The process is then the unit of repetition: what differs between two starts of
one server (where its pages landed, its threads) is part of the noise the interval sees.

The fixture (claims, dead ends, ``compare``), the gate and bisect all judge through
:func:`measure_rounds`; the arithmetic is :func:`pytest_moeperf.verdicts.judge.judge_rounds`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import MoeperfError
from ..measure.measurement import Measurement
from ..measure.workload import Workload
from ..verdicts.judge import Verdict, judge_rounds
from ..verdicts.sequential import Plan, Rule, first_in_round
from .profiles import Configuration, Profile
from .session import PerfSession

BLOCK_SAMPLES = 3
"""Samples per server process when the sides are measured across restarts."""
RESTART_METHOD = (
    f"paired server restarts (median of {BLOCK_SAMPLES} samples per process), trimmed t, "
    "corrected for looks"
)


@dataclass(frozen=True)
class Side:
    """One side of a paired verdict: a workload on a configuration (on a named build)."""

    configuration: Configuration
    workload: Workload
    build: str | None = None


@dataclass(frozen=True)
class Paired:
    """A paired verdict and both sides' measurements (all their samples, earlier ones too)."""

    verdict: Verdict
    a: Measurement
    b: Measurement
    first: tuple[int, int]
    """Index of each side's first sample in this verdict's rounds."""
    seconds: float
    rounds: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    """Each side's value in each round (a block's median across restarts)."""


def plan_for(session: PerfSession, profile: Profile, first_look: int | None = None) -> Plan:
    """The look schedule of a verdict: the first look after ``max(6, repetitions)`` rounds
    (or *first_look*), the round cap of the session's options."""
    reps = session.options.repetitions or profile.repetitions
    first = first_look or max(6, reps)
    return Plan(first_look=first, max_rounds=max(first, session.options.max_rounds))


def measure_rounds(
    session: PerfSession,
    profile: Profile,
    rule: Rule,
    a: Side,
    b: Side,
    *,
    label: str,
    plan: Plan | None = None,
    budget: float | None = None,
    on_look: Callable[[Verdict, float], None] | None = None,
    after_round: Callable[[int, bool], None] | None = None,
) -> Paired:
    """Measure *a* and *b* in rounds and judge ``b / a`` by *rule* at each look of *plan*,
    until the verdict is final or *budget* seconds (the session's, else the profile's) are
    spent. A replayed session cannot measure more: its stored samples are paired in order and
    judged once, as the budget spent. *after_round* (round index, across restarts or not) runs
    after each round, inside it as far as time goes: the gate's llama-bench samples."""
    plan = plan or plan_for(session, profile)
    seconds = budget or session.options.budget or profile.budget
    began = time.monotonic()

    def take(side: Side, n: int | None) -> Measurement:
        return session.measure(profile, side.configuration, side.workload, n, side.build)

    if not session.can_measure_more:
        ma, mb = take(a, None), take(b, None)
        n = min(len(ma.samples), len(mb.samples))
        if n < 2:
            raise MoeperfError(
                f"{label}: the replayed file holds {n} sample(s) of a side; a paired verdict "
                "needs 2 rounds at least"
            )
        verdict, _ = judge_rounds(rule, ma.values[:n], mb.values[:n], plan, spent=True, label=label)
        return Paired(verdict, ma, mb, (0, 0), 0.0, (tuple(ma.values[:n]), tuple(mb.values[:n])))
    sides = (a, b)
    got = [take(a, 1), take(b, 1)]  # starts both servers; earlier samples are kept, not paired
    if got[0].key == got[1].key:
        raise MoeperfError(f"{label}: both sides are the same measurement; name two")
    first = (len(got[0].samples), len(got[1].samples))
    keys = [(profile.name, s.configuration.name, m.build) for s, m in zip(sides, got, strict=True)]
    restarts = keys[0] != keys[1] and not session.fit_together(  # one server: it fits
        profile, [(s.configuration, m.build) for s, m in zip(sides, got, strict=True)]
    )
    values: list[list[float]] = [[], []]

    def one_round(index: int) -> None:
        for i in (0, 1) if first_in_round(index) == "a" else (1, 0):
            if restarts:  # a block: a fresh, warmed-up process and its median
                session.restart(profile, sides[i].configuration, sides[i].build)
                got[i] = take(sides[i], len(got[i].samples) + BLOCK_SAMPLES)
                values[i].append(statistics.median(got[i].values[-BLOCK_SAMPLES:]))
            else:
                got[i] = take(sides[i], first[i] + index + 1)
                values[i].append(got[i].values[-1])

    rounds, target = 0, plan.first_look
    with session.pool.using([] if restarts else keys):
        while True:
            while rounds < target:
                one_round(rounds)
                if after_round:
                    after_round(rounds, restarts)
                rounds += 1
                if rounds >= 2 and time.monotonic() - began > seconds:
                    break
            spent = time.monotonic() - began > seconds
            verdict, more = judge_rounds(rule, values[0], values[1], plan, spent=spent, label=label)
            if restarts:
                verdict = replace(verdict, method=RESTART_METHOD)
            if on_look:
                on_look(verdict, time.monotonic() - began)
            if more == 0:
                per_round = (tuple(values[0]), tuple(values[1]))
                seconds = time.monotonic() - began
                return Paired(verdict, got[0], got[1], first, seconds, per_round)
            target = rounds + more


def bench_in_rounds(
    session: PerfSession, profile: Profile, a: Side, b: Side
) -> tuple[Callable[[int, bool], None], tuple[list[float], list[float]]]:
    """An ``after_round`` for :func:`measure_rounds` that runs one llama-bench repetition of
    each side (same build, model, flags, pinning and workload as its server) in the round's
    order, and the lists it fills: each side's bench tok/s per round. Across restarts the
    servers are stopped first: a llama-bench needs the room of one."""
    got: tuple[list[float], list[float]] = ([], [])

    def beside(index: int, restarts: bool) -> None:
        if restarts:
            session.stop_servers()
        for i in (0, 1) if first_in_round(index) == "a" else (1, 0):
            side = (a, b)[i]
            got[i].append(
                session.bench_sample(profile, side.configuration, side.workload, side.build)
            )

    return beside, got
