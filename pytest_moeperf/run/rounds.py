"""The one decision loop: a verdict's rounds, taken from its source's feed and judged at the
looks of a plan until the verdict is final or its time budget is spent.

Claims, dead ends and ``compare`` (the fixture), gate rows (and so bisect steps) judge two
sides paired in rounds (:func:`decide_pair`); baseline checks judge one side's samples against
a stored baseline (:func:`decide_baseline`). Both run :func:`until_decided`, and both end the
same way: numbers taken while the host was busy with other work on the servers' CPUs never
decide, and neither do numbers of a host that changed under the run (where a move could favour
one side: two configurations; a gate compares one configuration on two builds in the same
rounds, so a moved host moves both alike and its rows say so in a note instead).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..measure.measurement import Measurement
from ..store.record import SideRounds
from ..verdicts.judge import (
    BaselineCheck,
    Verdict,
    busy_reason,
    judge_rounds,
    judge_unpaired,
    overridden,
)
from ..verdicts.sequential import Coin, Plan, Rule
from .profiles import Profile
from .source import Feed, Side, Source

R = TypeVar("R", Verdict, BaselineCheck)
AfterRound = Callable[[int, str, bool], None]
"""Called after each round measured now: (round index, the side that went first in it,
whether the round restarted servers)."""


@dataclass(frozen=True, slots=True)
class Decided:
    """A paired verdict and what it rests on."""

    verdict: Verdict
    """Undecided where a busy host, or one that moved, kept its numbers from deciding."""
    a: Measurement
    b: Measurement
    sides: tuple[SideRounds, ...]
    """Where each side's rounds lie in its measurement's samples."""
    seconds: float
    rounds: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    """Each side's value in each round (a block's median across restarts)."""
    moved: tuple[str, ...] = ()
    """How the host moved under the rounds (one line per probe figure; ``()``: it stayed)."""
    plan: Plan | None = None
    """The plan the rounds were judged by (``None``: stored figures, judged once)."""
    coin: Coin | None = None
    """The coin that chose each round's order (``None``: the rounds were not measured now)."""
    blocks: tuple[int, ...] = ()
    """The process block of each round (empty: one process pair)."""
    taken: str = ""
    """How the rounds were taken (the feed's method)."""

    @property
    def first(self) -> tuple[int, ...]:
        """Index of each side's first sample in this verdict's rounds."""
        return tuple(s.first for s in self.sides)

    @property
    def pair(self) -> tuple[SideRounds, SideRounds] | None:
        """Where the two sides' rounds lie (``None``: judged unpaired, on stored figures)."""
        if len(self.sides) != 2:
            return None
        return (self.sides[0], self.sides[1])


@dataclass(frozen=True)
class Checked:
    """A baseline check and the measurement it was judged on."""

    check: BaselineCheck
    measurement: Measurement


REACH_ALLOWANCE = 1.5
"""Rounds may speed up: the looks a budget can reach are counted with this much room."""


@dataclass(frozen=True)
class Ran(Generic[R]):
    """What :func:`until_decided` ends with."""

    result: R
    rounds: list[tuple[float, ...]]
    seconds: float
    """Seconds spent measuring (server starts and builds not counted)."""
    plan: Plan
    """The plan the rounds were judged by: its looks end where the budget could reach."""


def until_decided(
    feed: Feed,
    judge: Callable[[list[tuple[float, ...]], bool, Plan], tuple[R, bool]],
    plan: Plan,
    budget: float,
    *,
    after_round: AfterRound | None = None,
) -> Ran[R]:
    """Take *feed*'s rounds and *judge* them at the looks of *plan* (rounds the feed holds
    already all at the first look) until *judge* says final, giving it whether no more rounds
    can be had (the budget of *budget* seconds of measuring is spent, or the feed has no more)
    and the plan: after the first look's rounds its looks are cut at the rounds the budget can
    reach at the pace measured so far (a stored feed brings the plan it was judged by). Time
    the source spends starting servers or building is not measuring and is not counted."""
    plan = feed.plan or plan
    reach_fixed = feed.plan is not None
    began, setup = time.monotonic(), feed.setup_seconds()

    def measuring() -> float:
        return time.monotonic() - began - (feed.setup_seconds() - setup)

    rounds: list[tuple[float, ...]] = []
    target = max(plan.first_look, feed.ready)
    with feed.holding():
        while True:
            exhausted = False
            while len(rounds) < target:
                got = feed.take(len(rounds))
                if got is None:
                    exhausted = True
                    break
                rounds.append(got)
                if after_round is not None and len(rounds) > feed.ready:
                    index = len(rounds) - 1
                    after_round(index, feed.first(index), feed.restarts)
                if len(rounds) >= 2 and measuring() > budget:
                    break
            measured = len(rounds) - feed.ready
            if not reach_fixed and measured > 0:
                pace = measuring() / measured
                left = max(budget - measuring(), 0.0)
                plan = plan.within(len(rounds) + math.ceil(REACH_ALLOWANCE * left / pace))
                reach_fixed = True
            spent = exhausted or not feed.more(len(rounds)) or measuring() > budget
            result, final = judge(rounds, spent, plan)
            if final:
                return Ran(result, rounds, measuring(), plan)
            target = plan.next_look(len(rounds))


def _overrides(
    source: Source,
    feed: Feed,
    measurements: Sequence[Measurement],
    busy_limit: float,
    host_decides: bool,
) -> tuple[str | None, tuple[str, ...]]:
    """Why these measurements must not decide (a busy host, or with *host_decides* a host
    that changed under them; ``None`` when they may), and how the host moved (the feed's own
    account of a stored verdict's rounds, else the source's)."""
    moved = feed.moved if feed.moved is not None else tuple(source.host_moved(measurements))
    reasons = [busy_reason(measurements, busy_limit)]
    if host_decides and moved:
        reasons.append(f"host changed under the run: {'; '.join(moved)}")
    return "; ".join(r for r in reasons if r) or None, moved


def decide_pair(
    source: Source,
    profile: Profile,
    rule: Rule,
    a: Side,
    b: Side,
    *,
    label: str,
    plan: Plan,
    budget: float,
    busy_limit: float,
    host_decides: bool = True,
    on_look: Callable[[Verdict, float], None] | None = None,
    after_round: AfterRound | None = None,
) -> Decided:
    """Judge ``b / a`` by *rule*: paired rounds from the source, at the looks of *plan*,
    within *budget* seconds; sides that cannot be paired (stored figures) judged once. The
    verdict is undecided when the host was busier than *busy_limit* or (with *host_decides*)
    changed under the rounds."""
    feed = source.pair(profile, a, b, label=label, relation=_relation(rule))
    began = time.monotonic()
    if feed.unpaired is not None:
        pa, pb = feed.unpaired
        verdict = judge_unpaired(rule, pb, pa, label=label)
        rounds: list[tuple[float, ...]] = []
        seconds = 0.0
    else:

        def judge(taken: list[tuple[float, ...]], spent: bool, looks: Plan) -> tuple[Verdict, bool]:
            va, vb = [r[0] for r in taken], [r[1] for r in taken]
            blocks = feed.blocks[: len(taken)] or None
            v, more = judge_rounds(
                rule, va, vb, looks, spent=spent, label=label, blocks=blocks, taken=feed.method
            )
            if on_look is not None:
                on_look(v, time.monotonic() - began)
            return v, more == 0

        ran = until_decided(feed, judge, plan, budget, after_round=after_round)
        verdict, rounds, seconds, plan = ran.result, ran.rounds, ran.seconds, ran.plan
    ma, mb = feed.measurements()
    reason, moved = _overrides(source, feed, [ma, mb], busy_limit, host_decides)
    per_side = (tuple(r[0] for r in rounds), tuple(r[1] for r in rounds))
    return Decided(
        overridden(verdict, reason),
        ma,
        mb,
        feed.sides(),
        seconds,
        per_side,
        moved,
        plan,
        feed.coin,
        tuple(feed.blocks[: len(rounds)]),
        feed.method,
    )


def decide_baseline(
    source: Source,
    profile: Profile,
    side: Side,
    judge_values: Callable[[list[float], float], BaselineCheck],
    *,
    plan: Plan,
    budget: float,
    busy_limit: float,
) -> Checked:
    """Check one measurement against its stored baseline: *judge_values* (the samples, the
    per-look confidence) at the looks of *plan* within *budget* seconds, more samples while it
    is undecided; undecided on a busy host or one that changed under the measurement."""
    feed = source.series(profile, side.configuration, side.workload)

    def judge(
        taken: list[tuple[float, ...]], spent: bool, looks: Plan
    ) -> tuple[BaselineCheck, bool]:
        check = judge_values([r[0] for r in taken], 1 - looks.nominal_alpha())
        done = check.outcome != "undecided" or spent or len(taken) >= looks.max_rounds
        return check, done

    check = until_decided(feed, judge, plan, budget).result
    (m,) = feed.measurements()
    reason, _moved = _overrides(source, feed, [m], busy_limit, True)
    return Checked(overridden(check, reason), m)


def _relation(rule: Rule) -> str:
    """The relation a verdict of *rule* is shown with (``~``, ``<``, ``>=``, ``<=``)."""
    return {"change": "~", "dead_end": "<", "claim": rule.relation}[rule.kind]
