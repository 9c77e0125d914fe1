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
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from ..config.profiles import Profile
from ..defaults import BUDGET, MARGIN, MIN_SESSIONS, SESSION_GAP, SESSION_PRIOR_BOUND
from ..measure.dependence import ProcessEvidence
from ..measure.measurement import Measurement
from ..measure.round import Round, busy_share, judged
from ..store.record import VerdictRecord, VerdictSide
from ..verdicts.baseline_check import BaselineCheck, overridden
from ..verdicts.creep import SessionTerm
from ..verdicts.judge import Verdict, busy_reason, judge_rounds, judge_unpaired
from ..verdicts.sequential import Coin, Plan, Rule
from .source import Feed, Host, Side

R = TypeVar("R", Verdict, BaselineCheck)
AfterRound = Callable[[int, str, bool], None]
"""Called after each round measured now: (round index, the side that went first in it,
whether the round restarted servers)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decided:
    """A paired verdict and what it rests on."""

    verdict: Verdict
    """Undecided where a busy host, or one that moved, kept its numbers from deciding."""
    a: Measurement
    b: Measurement
    sides: tuple[VerdictSide, ...]
    """The measurement each side's rounds are of."""
    seconds: float
    rounds: tuple[Round, ...] = ()
    """Every round taken, in order, those set aside and measured again among them (with why):
    the interval is of the others."""
    moved: tuple[str, ...] = ()
    """How the host moved under the rounds (one line per probe figure; ``()``: it stayed)."""
    plan: Plan | None = None
    """The plan the rounds were judged by (``None``: stored figures, judged once)."""
    coin: Coin | None = None
    """The coin that chose each round's order (``None``: the rounds were not measured now)."""
    taken: str = ""
    """How the rounds were taken (the feed's method)."""
    resolution: str = ""
    """What the verdict said it could resolve before it measured (a calibrated host; empty
    otherwise)."""
    stored_busy: float | None = None
    """The judged rounds' busy share as a stored verdict recorded it apart from its rounds
    (format 2; ``None``: the rounds say it)."""

    @property
    def busy(self) -> float | None:
        """The share of the judged rounds' time other work took on the servers' CPUs (``None``:
        not kept apart from the measurements')."""
        return self.stored_busy if self.stored_busy is not None else busy_share(self.rounds)

    @property
    def judged(self) -> tuple[Round, ...]:
        """The rounds judged, in order."""
        return tuple(judged(self.rounds))

    @property
    def values(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Each side's value in each judged round (a block's median across restarts)."""
        kept = self.judged
        return (tuple(r.values[0] for r in kept), tuple(r.values[1] for r in kept))

    @property
    def blocks(self) -> tuple[int, ...]:
        """The process block of each judged round."""
        return tuple(r.block for r in self.judged)

    @property
    def aside(self) -> tuple[tuple[int, str], ...]:
        """The rounds set aside: each one's place among every round taken, and why."""
        return tuple((i, r.aside) for i, r in enumerate(self.rounds) if r.aside is not None)

    def record(self, test: str, asked: str) -> VerdictRecord:
        """The verdict as the run record keeps it, with all a replay needs to judge its
        rounds again: the rounds as they were taken, the looks, the coin."""
        # the two sides (None: judged unpaired, on stored figures)
        pair = (self.sides[0], self.sides[1]) if len(self.sides) == 2 else None
        a, b = self.values
        measured = self.coin is not None and len(a) >= 3  # rounds of this run's own
        evidence = (
            ProcessEvidence.of([math.log(y / x) for x, y in zip(a, b, strict=True)], self.blocks)
            if measured and all(x > 0 for x in (*a, *b))
            else None
        )
        return VerdictRecord(
            test=test,
            verdict=self.verdict,
            sides=pair,
            asked=asked,
            rounds=self.rounds if pair is not None else (),
            moved=self.moved,
            plan=self.plan.to_dict() if self.plan else None,
            coin={"seed": self.coin.seed, "orders": list(self.coin.orders)} if self.coin else None,
            taken=self.taken,
            evidence=evidence,
            busy=self.stored_busy,
        )


@dataclass(frozen=True)
class Checked:
    """A baseline check and the measurement it was judged on."""

    check: BaselineCheck
    measurement: Measurement


REACH_ALLOWANCE = 1.0
"""How much faster than the first look's pace the rounds a budget can reach are counted: the
plan's last look is where the budget runs out at that pace (rounds that go faster end the
verdict there with budget left; rounds that go slower end it sooner, at a look of its own
that the level is calibrated for, :meth:`~pytest_moeperf.verdicts.sequential.Plan.within`)."""
MIN_ROUNDS = 2
"""The rounds every verdict measures, budget or not: one round has no spread to judge."""
AUTO_ROUNDS = 40
"""An automatic budget (a profile's ``budget = "auto"``) buys this many rounds at the pace of
the first: looks at 6, 8, 10, 13, 16, 20, 25, 31 and 39 rounds."""
AUTO_CAP = 1800.0
"""The most seconds an automatic budget gives one verdict."""


def auto_budget(pace: float, rounds: int | None = None) -> float:
    """The budget of a verdict whose first round took *pace* seconds: *rounds* rounds (those
    the host's calibrated noise needs to resolve the margin; :data:`AUTO_ROUNDS` when it was
    not calibrated), at least the default budget, at most :data:`AUTO_CAP`."""
    return min(AUTO_CAP, max(BUDGET, (rounds or AUTO_ROUNDS) * pace))


def reach_notice(label: str, pace: float, plan: Plan, budget: float) -> str | None:
    """What to say when, at *pace* seconds a round, the rounds *budget* seconds reach hold no
    look of *plan*'s main schedule (``None`` when they do): only its early looks can decide,
    a large change. On a host not calibrated the main schedule starts at the third process
    block (the first whose spread estimates the process term), and its early looks hold the
    term at its prior bound, so a change nearer its bound than that bound's width stays
    undecided; names the budget that reaches the main schedule twice over."""
    if plan.block == 0 and not plan.dependence.calibrated:  # no budget buys a main look
        width = 100 * math.expm1(2.5 * plan.prior_process)
        return (
            f"{label}: its rounds are one process pair (never restarted), so on a host not "
            "calibrated only its early looks can decide, the process term held at its prior "
            f"bound of {100 * plan.prior_process:g} %: a change within about {width:.0f} % of "
            "its bound stays undecided; give a process block (the profile's process_block, "
            "--process-block or --moeperf-process-block) or calibrate this host (moeperf "
            "calibrate)"
        )
    reach = max(MIN_ROUNDS, math.floor(budget / pace) + 1)
    reached = plan.within(reach)
    first = plan.main_looks[0] if plan.main_looks and plan.can_decide else plan.first_look
    if reached.main_looks and reached.can_decide and reach >= first:
        return None
    enough = math.ceil(2 * first * pace / 10) * 10
    head = (
        f"{label}: a round takes {pace:.1f} s, so the budget of {budget:g} s reaches about "
        f"{reach} rounds, short of the main schedule's first look ({first} rounds)"
    )
    if plan.early_dependence is plan.dependence:  # a calibrated host: its own term early
        what = "only its early looks can decide, a large change"
    else:
        blocks = max(1, reached.judged(reach) // (plan.block or reach)) if plan.block else 1
        width = 100 * math.expm1(2.5 * plan.prior_process / math.sqrt(blocks))
        what = (
            "on a host not calibrated only its early looks can decide, the process term held "
            f"at its prior bound of {100 * plan.prior_process:g} %: a change within about "
            f"{width:.0f} % of its bound stays undecided"
        )
    return (
        f'{head}: {what}; give the profile budget = {enough} (or budget = "auto", or '
        f"--moeperf-budget {enough}), or calibrate this host (moeperf calibrate)"
    )


@dataclass(frozen=True)
class Ran(Generic[R]):
    """What :func:`until_decided` ends with."""

    result: R
    rounds: tuple[Round, ...]
    """Every round taken, in order, those set aside marked so (with why)."""
    seconds: float
    """Seconds spent measuring (server starts and builds not counted)."""
    plan: Plan
    """The plan the rounds were judged by: its looks end where the budget could reach."""

    @property
    def judged(self) -> list[Round]:
        return judged(self.rounds)


Judge = Callable[[list[Round], bool, Plan], tuple[R, bool]]
"""Judges the rounds of a look (those not set aside), given whether no more can be had and the
plan's looks: the result, and whether it is final."""


def until_decided(
    feed: Feed,
    judge: Judge[R],
    plan: Plan,
    budget: float | None,
    *,
    after_round: AfterRound | None = None,
    label: str = "",
    notice: Callable[[str], None] | None = None,
    auto_rounds: int | None = None,
) -> Ran[R]:
    """Take *feed*'s rounds (:class:`_Taking`) and *judge* them at the looks of *plan*
    (:class:`_Looks`: rounds the feed holds already all at the first look) until *judge* says
    final, giving it whether no more rounds can be had (the budget of *budget* seconds of
    measuring is spent, or the feed has no more) and the plan: after the first look's rounds
    its looks are cut at the rounds the budget can reach at the pace measured so far (a stored
    feed brings the plan it was judged by); when the budget runs out before the plan's last
    look, the rounds taken are judged at a last look of their own, the plan's looks ending
    there (so the level is calibrated for the looks the verdict took, and :attr:`Ran.plan`
    says which). Time the source spends starting servers or building is not measuring and is
    not counted.

    After the first round measured now, its pace sets a budget of ``None`` (automatic: see
    :func:`auto_budget`, *auto_rounds* of them), and *notice* hears at once when the budget
    reaches no look of the plan's main schedule (:func:`reach_notice`), instead of the verdict
    spending it to end undecided without a word."""
    looks = _Looks(feed, plan, budget, label, auto_rounds)
    taking = _Taking(feed, looks, after_round, notice)
    target = looks.plan.looks[0]
    with feed.holding():
        while True:
            exhausted = taking.until(target)
            kept = taking.judged()
            spent = looks.at_look(len(kept), taking.measured, exhausted or not feed.more())
            result, final = judge(kept, spent, looks.plan)
            if final:
                return Ran(result, taking.marked(), looks.measuring(), looks.plan)
            target = looks.plan.next_look(len(kept))


class _Looks:
    """The look schedule of one verdict and the budget it is cut at: seconds measuring
    (server starts and builds not counted), the budget once the first round's pace is known,
    the plan cut where the budget reaches after the first look, and at the last look the
    rounds there are."""

    def __init__(
        self, feed: Feed, plan: Plan, budget: float | None, label: str, auto_rounds: int | None
    ) -> None:
        self.feed, self.budget, self.label, self.auto_rounds = feed, budget, label, auto_rounds
        self.given = feed.plan is not None
        """Whether the feed brings the looks its rounds were judged at (a stored verdict)."""
        self.plan = feed.plan or plan
        self._cut = self.given
        self.limit = math.inf if budget is None else budget
        self.paced = False
        """Whether the pace is known: of a round measured now, beyond those the feed holds."""
        self._began, self._setup = time.monotonic(), feed.setup_seconds()

    def measuring(self) -> float:
        return time.monotonic() - self._began - (self.feed.setup_seconds() - self._setup)

    def over(self) -> bool:
        return self.measuring() > self.limit

    def pace_of_first(self) -> list[str]:
        """The budget set by the pace of the first round measured now; what to say of it."""
        self.paced = True
        pace = self.measuring()
        self.limit, said = _paced(
            self.label, pace, self.plan, self.budget, self.auto_rounds, self.given
        )
        return said

    def at_look(self, judged: int, measured: int, exhausted: bool) -> bool:
        """At a look of *judged* rounds, *measured* of them measured now: the plan cut where
        the budget reaches (after the first look), and at the last (the budget spent, or
        *exhausted*) the rounds there are; whether it is the last."""
        if not self._cut and measured > 0:
            pace = self.measuring() / measured
            left = max(self.limit - self.measuring(), 0.0)  # runs out in the round after
            self.plan = self.plan.within(judged + math.floor(REACH_ALLOWANCE * left / pace) + 1)
            self._cut = True
        spent = exhausted or self.over()
        if spent and not self.given:  # the last look is the rounds there are, a look of the
            self.plan = self.plan.within(judged)  # plan's own (a given plan is one)
        return spent


class _Taking:
    """The rounds a verdict took from its feed, in order. A round measured now that the
    host's watch marked busy is set aside at once and measured again, while the budget lasts
    and as many as the plan holds have not been set aside (beyond that the host is busy, not
    disturbed: the rounds are kept and the verdict's busy override reads them); among the rest,
    those whose servers' CPUs sat idle beyond the verdict's own median are marked again at
    every look over all rounds so far, by the same rule. The rules are fixed before any
    outcome; rounds the feed held already come with their own marks."""

    def __init__(
        self,
        feed: Feed,
        looks: _Looks,
        after_round: AfterRound | None,
        notice: Callable[[str], None] | None,
    ) -> None:
        self.feed, self.looks, self.after_round, self.notice = feed, looks, after_round, notice
        self.rounds: list[Round] = []
        self.index = 0
        """The index of the next round asked (a round set aside is asked again)."""
        self.measured = 0
        """Rounds measured now and not set aside at once."""

    def until(self, target: int) -> bool:
        """Take rounds until the feed's own are all taken and *target* are kept, or the budget
        runs out (after two); whether the feed ran out of rounds."""
        while len(self.rounds) < self.feed.ready or len(self.judged()) < target:
            got = self.feed.take(self.index)
            if got is None:
                return True
            now = len(self.rounds) >= self.feed.ready  # measured now, not held already
            self.rounds.append(self._set_aside(got) if now else got)
            if self.rounds[-1].aside is not None:
                continue
            self.index += 1
            if now:
                self.measured += 1
                self._measured(got)
            if self.index >= MIN_ROUNDS and self.looks.over():
                return False
        return False

    def _set_aside(self, got: Round) -> Round:
        busy = sum(1 for r in self.rounds if r.aside is not None)
        may = not self.looks.over() and busy < self.looks.plan.max_rounds
        return replace(got, aside=got.marked) if got.marked is not None and may else got

    def _measured(self, got: Round) -> None:
        if self.after_round is not None:
            self.after_round(self.index - 1, got.first, self.feed.restarts)
        if not self.looks.paced:
            for line in self.looks.pace_of_first():
                if self.notice is not None:
                    self.notice(line)

    def _idle(self) -> dict[int, str]:
        """Place among :attr:`rounds` -> why, of the rounds measured now marked idle."""
        now = [
            (i, r.idle)
            for i, r in enumerate(self.rounds)
            if i >= self.feed.ready and r.aside is None
        ]
        if len(now) < MIN_ROUNDS:
            return {}
        median = statistics.median(x for _, x in now)
        return {
            i: f"servers' CPUs {100 * x:.0f} % idle (the verdict's median {100 * median:.0f} "
            "%): a server stopped or throttled"
            for i, x in now
            if x > median + IDLE_JUMP
        }

    def judged(self) -> list[Round]:
        """The rounds judged at this look, in order."""
        return judged(self.marked())

    def marked(self) -> tuple[Round, ...]:
        """Every round taken, those marked idle at this look set aside with why."""
        idle = self._idle()
        return tuple(
            replace(r, aside=idle[i]) if i in idle else r for i, r in enumerate(self.rounds)
        )


IDLE_JUMP = 0.10
"""How far above the verdict's own median a round's idle share of its servers' CPUs (where
their threads cover them) must lie for the watch to mark it: a server stopped or throttled for
part of a round (a co-tenant's cgroup cap, a SIGSTOP) leaves its CPUs idle that the rounds
around it keep busy (an idle share of 1-5 % is this project's VMs' own)."""


def _paced(
    label: str,
    pace: float,
    plan: Plan,
    budget: float | None,
    auto_rounds: int | None,
    looks_given: bool,
) -> tuple[float, list[str]]:
    """The budget once the first round's *pace* is known (an automatic one is set by it), and
    what to say of it: the automatic budget, and a budget short of the main schedule."""
    said = []
    limit = math.inf if budget is None else budget
    if budget is None:
        limit = auto_budget(pace, auto_rounds)
        said.append(
            f"{label}: a round takes {pace:.1f} s: an automatic budget of {limit:.0f} s "
            f"({auto_rounds or AUTO_ROUNDS} rounds, at most {AUTO_CAP:g} s)"
        )
    line = None if looks_given else reach_notice(label, pace, plan, limit)
    return limit, said + ([line] if line is not None else [])


def _overrides(
    source: Host,
    feed: Feed | None,
    measurements: Sequence[Measurement],
    busy_limit: float,
    host_decides: bool,
    rounds: Sequence[Round] = (),
) -> tuple[str | None, tuple[str, ...]]:
    """Why these measurements must not decide (a busy host: the busy share of the judged
    *rounds* where it is known, the feed's record of it, else the measurements'; or with
    *host_decides* a host that changed under them; ``None`` when they may), and how the host
    moved (the feed's own account of a stored verdict's rounds, else the source's)."""
    if feed is not None and feed.moved is not None:
        moved = feed.moved
    else:
        moved = tuple(source.host_moved(measurements))
    kept = None if feed is None else feed.kept_busy
    busy = kept if kept is not None else busy_share(rounds)
    if busy is None:
        reasons = [busy_reason(measurements, busy_limit)]
    else:  # the rounds set aside are not in it: what was judged was this busy
        reasons = [f"host {100 * busy:.0f} % busy with other work" if busy > busy_limit else None]
    if host_decides and moved:
        reasons.append(f"host changed under the run: {'; '.join(moved)}")
    return "; ".join(r for r in reasons if r) or None, moved


def decide_pair(
    source: Host,
    profile: Profile,
    rule: Rule,
    a: Side,
    b: Side,
    *,
    label: str,
    plan: Plan,
    budget: float | None,
    busy_limit: float,
    host_decides: bool = True,
    on_look: Callable[[Verdict, float], None] | None = None,
    after_round: AfterRound | None = None,
) -> Decided:
    """Judge ``b / a`` by *rule*: paired rounds from the source, at the looks of *plan*,
    within *budget* seconds; sides that cannot be paired (stored figures) judged once. The
    verdict is undecided when the host was busier than *busy_limit* or (with *host_decides*)
    changed under the rounds."""
    relation = {"change": "~", "dead_end": "<", "claim": rule.relation}[rule.kind]  # as shown
    feed = source.pair(profile, a, b, label=label, relation=relation)
    feed.size_blocks(*plan.block_terms(), calibrated=plan.dependence.calibrated)
    plan = replace(plan, block=feed.process_block)  # the looks keep to its process blocks
    said = ""
    if feed.unpaired is not None:
        pa, pb = feed.unpaired
        verdict = judge_unpaired(rule, pb, pa, label=label)
        rounds: tuple[Round, ...] = ()
        seconds = 0.0
    else:
        resolution = plan.resolution()
        auto_rounds = None
        if resolution is not None:  # a calibrated host: what it can resolve, said first
            margin = rule.margin if rule.kind != "claim" else MARGIN
            auto_rounds = resolution.rounds_for(margin)
            said = resolution.describe(label, margin, budget)
            source.notice(said)
        ran = until_decided(
            feed,
            _pair_judge(rule, label, feed.method, on_look),
            plan,
            budget,
            after_round=after_round,
            label=label,
            notice=source.notice,
            auto_rounds=auto_rounds,
        )
        verdict, rounds, seconds, plan = ran.result, ran.rounds, ran.seconds, ran.plan
        _tell_aside(source, label, rounds)
    ma, mb = feed.measurements()
    reason, moved = _overrides(source, feed, [ma, mb], busy_limit, host_decides, rounds)
    return Decided(
        verdict=overridden(verdict, reason),
        a=ma,
        b=mb,
        sides=feed.sides(),
        seconds=seconds,
        rounds=rounds,
        moved=moved,
        plan=plan,
        coin=feed.coin,
        taken=feed.method,
        resolution=said,
        stored_busy=feed.kept_busy,
    )


def _pair_judge(
    rule: Rule, label: str, method: str, on_look: Callable[[Verdict, float], None] | None
) -> Judge[Verdict]:
    """The judge of a paired verdict's looks: *rule* on the rounds' values in their process
    blocks; *on_look* hears each look's verdict and the seconds since the first."""
    began = time.monotonic()

    def judge(taken: list[Round], spent: bool, looks: Plan) -> tuple[Verdict, bool]:
        va, vb = [r.values[0] for r in taken], [r.values[1] for r in taken]
        blocks = [r.block for r in taken]
        v, more = judge_rounds(
            rule, va, vb, looks, spent=spent, label=label, blocks=blocks, taken=method
        )
        if on_look is not None:
            on_look(v, time.monotonic() - began)
        return v, more == 0

    return judge


def _tell_aside(source: Host, label: str, rounds: Sequence[Round]) -> None:
    """Say which rounds the host's watch set aside (nothing when none was)."""
    aside = [r.aside for r in rounds if r.aside is not None]
    if aside:
        whys = sorted(set(aside))
        source.notice(
            f"{label}: {len(aside)} round(s) set aside and measured again, the host's "
            f"watch having marked them ({'; '.join(whys[:3])}): the verdict is of the "
            f"{len(rounds) - len(aside)} others"
        )


def decide_baseline(
    source: Host,
    profile: Profile,
    side: Side,
    judge_values: Callable[[list[float], float], BaselineCheck],
    *,
    plan: Plan,
    budget: float | None,
    busy_limit: float,
) -> Checked:
    """Check one measurement against its stored baseline: *judge_values* (the samples, the
    per-look confidence) at the looks of *plan* within *budget* seconds, more samples while it
    is undecided; undecided on a busy host or one that changed under the measurement."""
    feed = source.series(profile, side.configuration, side.workload)

    def judge(taken: list[Round], spent: bool, looks: Plan) -> tuple[BaselineCheck, bool]:
        check = judge_values([r.values[0] for r in taken], 1 - looks.nominal_alpha())
        done = check.outcome != "undecided" or spent or len(taken) >= looks.max_rounds
        return check, done

    label = f"{side.configuration.name}.{side.workload.name}"
    plan = replace(plan, early=False)  # one measurement's samples: the main schedule's looks
    ran = until_decided(feed, judge, plan, budget, label=label, notice=source.notice)
    (m,) = feed.measurements()
    reason, _moved = _overrides(source, feed, [m], busy_limit, True, ran.rounds)
    check = ran.result
    return Checked(overridden(check, reason), m)


def cannot_decide(
    label: str, term: SessionTerm, tolerance: float, higher_is_better: bool, plan: Plan
) -> str | None:
    """What to say, before measuring, of a baseline check that cannot decide at what is known
    already (``None`` when it can): the host's between-session term is not measured yet (a
    baseline of another session says nothing of this one without it), or it alone puts the
    limit inside any interval (no number of repetitions can pass it). Names what would let it
    decide."""
    limit = -math.log1p(-tolerance) if higher_is_better else math.log1p(tolerance)
    anyway = "--moeperf-measure-anyway measures its budget regardless"
    if not term.measured:
        return (
            f"{label}: baseline check not measured further: {term.describe()}: a baseline of "
            "another session says nothing of this one nearer than the host's level moves "
            f"between sessions, and the samples in hand do not clear the limit by a move of "
            f"{100 * SESSION_PRIOR_BOUND:g} % (its prior bound); it decides near its limit once "
            f"the store holds {MIN_SESSIONS} sessions of this host {SESSION_GAP / 3600:g} h "
            f"apart or more (run pytest -m perf again later; {anyway})"
        )
    confidence = 1 - plan.nominal_alpha()
    reach = term.reach(confidence)
    if reach < limit:
        return None
    more = next(
        (
            n
            for n in range(term.sessions + 1, 100)
            if replace(term, sessions=n).reach(confidence) < limit
        ),
        None,
    )
    needs = (
        f"about {more} sessions at this spread would let it"
        if more is not None
        else f"this host's level wanders too far for a tolerance of {100 * tolerance:g} %"
    )
    return (
        f"{label}: baseline check cannot pass here: {term.describe()} alone puts "
        f"+-{100 * math.expm1(reach):.0f} % around any median, beyond the tolerance of "
        f"{100 * tolerance:g} %: more repetitions cannot decide, only a drop beyond it fails "
        f"({needs}; {anyway})"
    )


def judged_in_hand(
    source: Host,
    m: Measurement,
    judge_values: Callable[[list[float], float], BaselineCheck],
    plan: Plan,
    busy_limit: float,
) -> Checked | None:
    """A baseline check judged once on the samples *m* holds (none measured for it), at the
    first look's level; undecided on a busy host or one that moved. ``None`` with fewer than
    two samples."""
    if len(m.values) < 2:
        return None
    check = judge_values(list(m.values), 1 - plan.nominal_alpha())
    reason, _moved = _overrides(source, None, [m], busy_limit, True)
    return Checked(overridden(check, reason), m)
