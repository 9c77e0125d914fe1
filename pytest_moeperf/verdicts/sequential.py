"""Sequential verdicts on paired rounds: look again after more rounds, without looking
inflating the false alarms.

A verdict measures in *rounds*: one sample of side A and one of side B back to back, which
goes first decided by a seeded coin each round (:class:`Coin`), so that "second in the round"
is no side's habit and a host whose noise lingers from one sample to the next (per-sample
autocorrelation) does not make the rounds' log-ratios correlated. Each round gives one
log-ratio ``log(b / a)``; a slow phase of the host that falls on both samples of a round
cancels in it. At each *look* the rounds so far give a t interval of the ratio around their
trimmed mean, with the standard error and degrees of freedom the rounds' process blocks and
the host's calibration give it (:mod:`pytest_moeperf.measure.dependence`); a :class:`Rule`
reads an outcome off it, or says "not yet".

Looking again and again at a growing sample and stopping at the first decisive interval would
raise the error rate well above the nominal 5 %. The looks therefore come on a fixed schedule
(:attr:`Plan.looks`: the first after a few rounds, then each about 25 % later than the last,
up to the rounds the budget can reach), and every look uses the same stricter per-look level
(:meth:`Plan.nominal_alpha`), calibrated by simulating that very statistic at those very looks
(:mod:`pytest_moeperf.verdicts.levels`), so that the chance that *any* look's interval misses
the true ratio is ``alpha``. On a host whose process term is not calibrated the looks keep to
whole process blocks, from the third on (one block cannot show the term, two show it on one
degree of freedom, and whole blocks make the interval's t exact whatever the term is). The
budget's end is a look of the schedule too: when the budget runs out before the schedule's
last look, the verdict is judged at the rounds it has, with the level calibrated for the looks
it took (:meth:`Plan.within`). At the end an interval that still holds a decision point is
undecided, never decided by its centre.

:func:`look` is the one function of a look the fixture, the gate and bisect share: given both
sides' rounds so far, the rule and whether the budget is spent, it returns the verdict and how
many more rounds to take before the next look (0: done).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from ..defaults import (
    EARLY_ROUNDS,
    EARLY_SHARE,
    FIRST_LOOK,
    MARGIN,
    MAX_ROUNDS,
    MIN_REL_SPREAD,
    PRIOR_PROCESS_TERM,
    PROCESS_TERM,
    ROUND_SPREAD,
)
from ..measure.dependence import DEFAULT_DEPENDENCE, Dependence
from ..measure.stats import PairedInterval, log_sigma, paired_interval
from .calibration import NoiseFigure, Resolution
from .levels import HELD_BACK, Design, design_p, nominal_margin_p, per_look_alpha
from .outcomes import Decision


@dataclass(frozen=True)
class Plan:
    """When to look, and how strictly: the first look after *first_look* rounds, later ones
    each *growth* times the rounds of the last (at least one more), up to *max_rounds* (on a
    host whose process term is not calibrated, rounded up to whole process blocks of *block*,
    from the third block on: two blocks give the interval one degree of freedom, which the
    budget's end alone is worth spending a look on); over all looks together the interval
    misses the true ratio with probability *alpha*."""

    first_look: int = FIRST_LOOK
    max_rounds: int = MAX_ROUNDS
    growth: float = 1.25
    alpha: float = 0.05
    trim: float = 0.2
    """Share of the rounds' log-ratios trimmed from each end (stalls cannot drive it)."""
    dependence: Dependence = DEFAULT_DEPENDENCE
    """How the host's rounds depend on each other (its calibrated process term and lag-1):
    the interval's error carries it and the per-look level is calibrated at its lag-1."""
    block: int | None = None
    """Rounds a pair of server processes serves before both are restarted (the verdict's
    feed's: 1, every round a fresh pair; 0, one pair for all); ``None``: samples that are in no
    process blocks (a baseline check's)."""
    noise: NoiseFigure | None = field(default=None, compare=False)
    """The host's calibrated noise of the verdict's metric, when ``moeperf calibrate`` measured
    it: what the verdict can resolve is said before it measures, and an automatic budget is
    sized from it (not stored with the plan)."""
    early: bool = True
    """Whether the verdict looks early: at :data:`~pytest_moeperf.defaults.EARLY_ROUNDS` and at
    the round schedule's looks before the main schedule's first (on a host not calibrated, its
    third whole process block), each at a Bonferroni share of
    :data:`~pytest_moeperf.defaults.EARLY_SHARE` of the error rate (a stored plan of before
    early looks has none, so that it is judged again as it was)."""
    prior_process: float = PRIOR_PROCESS_TERM
    """The prior upper bound on the process term an early look of a host not calibrated takes
    its interval at (a calibrated host's early looks take the host's own term)."""
    first_early: int = min(EARLY_ROUNDS)
    """The rounds of the first early look, and no early look before it (a stored plan of
    before 2026-12-06 looked after 2 rounds as well, and is judged again so)."""

    def __post_init__(self) -> None:
        if self.first_early < 2:
            raise ValueError(f"first early look after {self.first_early} rounds: give at least 2")
        if self.first_look < 2:
            raise ValueError(f"first look after {self.first_look} rounds: give at least 2")
        if self.max_rounds < self.first_look:
            raise ValueError(
                f"max rounds {self.max_rounds} is below the first look ({self.first_look})"
            )
        if not self.growth > 1:
            raise ValueError(f"growth {self.growth!r} must be above 1")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha {self.alpha!r} must be between 0 and 0.5")

    @property
    def blockwise(self) -> bool:
        """Whether the looks keep to whole process blocks: the host's process term is not
        calibrated, so only the verdict's own blocks can show it."""
        return self.block is not None and self.block >= 2 and not self.dependence.calibrated

    @property
    def can_decide(self) -> bool:
        """False when no look of the main schedule can decide: the rounds are one process pair
        (never restarted), or the looks keep to process blocks and the budget reaches no third
        one, on a host whose process term is not calibrated (an early look may still decide a
        large effect: :attr:`early_looks`)."""
        if self.dependence.calibrated:
            return True
        if self.blockwise:
            if not self.early:  # a stored plan of before: a look on two blocks decided
                return self.max_rounds >= 2 * (self.block or 0)
            return bool(self.main_looks)
        return self.block != 0

    def judged(self, rounds: int) -> int:
        """The rounds a look after *rounds* rounds judges: the whole process blocks among them
        where the looks keep to blocks (all of them when there is not one whole block), else
        all."""
        if not self.blockwise:
            return rounds
        assert self.block is not None
        whole = rounds // self.block * self.block
        return whole if whole >= self.block else rounds

    def _schedule(self) -> list[int]:
        """The round schedule: the first look, then each about *growth* times the last."""
        out = [self.first_look]
        while out[-1] < self.max_rounds:
            out.append(min(self.max_rounds, max(out[-1] + 1, math.ceil(out[-1] * self.growth))))
        return out

    @property
    def main_looks(self) -> tuple[int, ...]:
        """The looks of the main schedule, whose per-look level is simulated: the round
        schedule, or on a host not calibrated whole process blocks from the third on (none when
        the rounds reach no third block: their budget's end is an early look)."""
        out = self._schedule()
        if not self.blockwise:
            return tuple(out)
        assert self.block is not None
        end = self.judged(self.max_rounds)
        if end < 3 * self.block:  # a look on two blocks has one df: the prior bound's look
            return () if self.early else (end,)
        whole = [max(3 * self.block, math.ceil(n / self.block) * self.block) for n in out]
        return tuple(sorted({min(n, end) for n in whole}))

    @property
    def early_looks(self) -> tuple[int, ...]:
        """The early looks: :data:`~pytest_moeperf.defaults.EARLY_ROUNDS`, and on a host not
        calibrated the end of each process block before the main schedule's first look (the
        round schedule where the main schedule cannot decide), within the rounds the plan
        reaches; the budget's end is one when it comes before the main schedule. Few, so that
        each spends enough of the early share to decide a change of 15 % on its first process
        pair of a host like ADR-0042's (``benchmarks/decision_speed.py``)."""
        if not self.early:
            return ()
        main = self.main_looks if self.can_decide else ()
        first = main[0] if main else self.max_rounds + 1
        wanted = {self.first_early, *EARLY_ROUNDS, self.max_rounds}
        if self.blockwise:  # each block's end before the main schedule
            assert self.block is not None
            wanted |= {self.block, 2 * self.block}
        elif not main:  # nothing else can decide: the round schedule
            wanted |= set(self._schedule())
        least = self.first_early  # fewer rounds cannot show their own spread to an early look
        return tuple(sorted(n for n in wanted if n < first and least <= n <= self.max_rounds))

    @property
    def looks(self) -> tuple[int, ...]:
        """The round counts at which the rounds are judged: the early looks and the main
        schedule's."""
        main = self.main_looks if (self.can_decide or not self.early) else ()
        looks = tuple(sorted({*self.early_looks, *main}))
        return looks or (self.max_rounds,)

    def next_look(self, rounds: int) -> int:
        """The first look after *rounds* rounds (``max_rounds`` at most)."""
        return next((n for n in self.looks if n > rounds), self.max_rounds)

    def is_early(self, rounds: int) -> bool:
        """Whether a look after *rounds* rounds is an early one (before the main schedule's
        first look, or where the main schedule cannot decide)."""
        if not self.early or not self.early_looks:
            return False
        main = self.main_looks if self.can_decide else ()
        return not main or rounds < main[0]

    def design(self) -> Design:
        """What the per-look level of the main schedule is simulated as: its looks on this
        host."""
        return Design.of(
            self.main_looks or (self.max_rounds,), self.trim, self.dependence, self.block
        )

    def _main_share(self) -> float:
        return 1.0 - EARLY_SHARE if self.early_looks else 1.0

    def nominal_alpha(self) -> float:
        """The two-sided level each look of the main schedule uses, so that all looks together
        (early ones included) err with *alpha*: calibrated on the verdict's statistic at these
        looks, on this host, for the share of *alpha* the early looks leave."""
        return per_look_alpha(self.design(), self.alpha * self._main_share())

    def early_alpha(self) -> float:
        """The two-sided level of each early look: a Bonferroni share of what the main
        schedule's simulated level keeps (``(1 - HELD_BACK) * alpha``)."""
        looks = self.early_looks
        if not looks:
            return 0.0
        return (1.0 - HELD_BACK) * self.alpha * EARLY_SHARE / len(looks)

    @property
    def early_dependence(self) -> Dependence:
        """The dependence an early look's interval carries: the host's calibrated terms, else
        (rounds in process blocks of a host not calibrated) the process term at its prior
        upper bound :attr:`prior_process`, with no degrees of freedom to spend on it."""
        d = self.dependence
        if d.calibrated or self.block is None or self.block == 1:
            return d
        return Dependence(self.prior_process, d.lag1, math.inf, 0.0)

    def margin_p(
        self, log_ratios: Sequence[float], margin: float, blocks: Sequence[int]
    ) -> tuple[float, float]:
        """The sequential p-values of a verdict's rounds (a gate row's) against "no slowdown
        beyond *margin*" and "no speedup beyond it", each look with the interval's own error
        (this plan's dependence over the rounds' process *blocks*, the spread floor): the main
        schedule's smallest nominal p read against its simulated design, the early looks' with
        their Bonferroni share, the smaller of the two each divided by its share of the error
        rate (so that a verdict whose interval decided at any look has one at or below
        *alpha*); 1.0 with under 2 rounds."""
        n = len(log_ratios)
        if n < 2:
            return 1.0, 1.0
        judged = functools.partial(
            nominal_margin_p,
            log_ratios,
            margin=margin,
            trim=self.trim,
            floor=log_sigma(MIN_REL_SPREAD),
            blocks=list(blocks) or None,
        )
        slower = faster = 1.0
        main = [k for k in self.main_looks if k <= n] if self.can_decide else []
        if main:
            design, share = self.design(), self._main_share()
            ms, mf = design_p(design, np.array(judged(main, dependence=self.dependence)))
            slower, faster = float(ms) / share, float(mf) / share
        early = [k for k in self.early_looks if k <= n]
        if early:
            es, ef = judged(early, dependence=self.early_dependence)
            weight = len(self.early_looks) / EARLY_SHARE  # Bonferroni over the early looks
            slower, faster = min(slower, es * weight), min(faster, ef * weight)
        return min(1.0, slower), min(1.0, faster)

    def block_terms(self) -> tuple[float, float]:
        """The round spread and process term a verdict's process blocks are sized by: the
        host's calibrated figures (its noise of the verdict's metric first), else the
        defaults."""
        d = self.dependence
        spread = self.noise.round_spread if self.noise else (d.round_spread or ROUND_SPREAD)
        return spread, d.process if d.calibrated else PROCESS_TERM

    def resolution(self) -> Resolution | None:
        """What a verdict of this plan can resolve on this host (``None``: not calibrated)."""
        if self.noise is None:
            return None
        return Resolution(self.noise, self.dependence, self.nominal_alpha())

    def within(self, rounds: int) -> Plan:
        """This plan with no look beyond *rounds* (the rounds a budget can reach, or reached:
        its last look judges them, whole process blocks where the looks keep to blocks; the
        first look stays)."""
        reach = self.judged(min(self.max_rounds, rounds))
        return replace(self, max_rounds=max(self.first_look, reach))

    def to_dict(self) -> dict[str, float | None]:
        d = self.dependence
        return {
            "first_look": self.first_look,
            "max_rounds": self.max_rounds,
            "growth": self.growth,
            "alpha": self.alpha,
            "trim": self.trim,
            "process": d.process,
            "lag1": d.lag1,
            "process_df": d.process_df,
            "round_spread": d.round_spread,
            "block": self.block,
            "prior_process": self.prior_process if self.early else None,
            "first_early": self.first_early if self.early else None,
        }

    @classmethod
    def from_dict(cls, stored: Mapping[str, float | None]) -> Plan:
        """The look schedule a stored verdict was judged by (:meth:`to_dict`'s); a record of
        before the process term's evidence was stored is judged as on a host not calibrated
        (its blocks decide), one of before early looks with none."""

        def number(key: str, default: float | None = None) -> float:
            value = stored.get(key) if default is not None else stored[key]
            return default if value is None else float(value)  # type: ignore[return-value]

        block = stored.get("block")
        return cls(
            first_look=int(number("first_look")),
            max_rounds=int(number("max_rounds")),
            growth=number("growth"),
            alpha=number("alpha"),
            trim=number("trim"),
            dependence=Dependence(
                number("process", 0.0),
                number("lag1", 0.0),
                number("process_df", 0.0),
                number("round_spread", 0.0),
            ),
            block=None if block is None else int(block),
            early=stored.get("prior_process") is not None,  # before early looks: none
            prior_process=number("prior_process", PRIOR_PROCESS_TERM),
            first_early=int(number("first_early", 2.0)),  # before 2026-12-06: after 2 rounds
        )


@dataclass(frozen=True)
class Rule:
    """How an interval of a ratio becomes an outcome.

    - ``change`` (gates, ``moeperf.compare``): *margin* around 1 is the smallest change that
      matters. ``slower``/``faster`` when the whole interval is past ``1 ∓ margin``;
      ``small-slower``/``small-faster`` (a real change within the margin, which passes) when
      it excludes 1 but lies within the margin; ``unchanged`` when it holds 1 and lies within
      ``1 ± margin``. At the end of the budget an interval that still holds a decision point (1,
      or a margin edge) is ``undecided``, with the way it leans: never decided by its centre,
      which near the margin would be a coin toss reported as a decision.
    - ``claim``: ``holds`` when the whole interval lies on the claim's side of *threshold*
      (``>=`` or ``<=``), ``fails`` when it lies wholly on the other.
    - ``dead_end``: ``holds`` (still slower) when the interval lies below 1, ``fails`` (it may
      have reopened) when it lies at or above ``1 - margin``."""

    kind: Literal["change", "claim", "dead_end"]
    margin: float = MARGIN
    threshold: float = 1.0
    relation: Literal[">=", "<="] = ">="

    def __post_init__(self) -> None:
        if not (math.isfinite(self.margin) and 0 <= self.margin < 1):
            raise ValueError(f"margin {self.margin!r} must be in [0, 1)")
        if not (math.isfinite(self.threshold) and self.threshold > 0):
            raise ValueError(f"threshold {self.threshold!r} must be a positive finite number")

    def outcome(self, ratio: float, low: float, high: float, *, final: bool) -> Decision | None:
        """The outcome of ``[low, high]`` around *ratio*, or ``None`` for "look again"
        (never ``None`` when *final*)."""
        if self.kind == "claim":
            t = self.threshold
            ok, bad = (low >= t, high < t) if self.relation == ">=" else (high <= t, low > t)
            return "holds" if ok else "fails" if bad else ("undecided" if final else None)
        if self.kind == "dead_end":
            if high < 1.0:
                return "holds"
            if low >= 1.0 - self.margin:
                return "fails"
            return "undecided" if final else None
        lo_edge, hi_edge = 1.0 - self.margin, 1.0 + self.margin
        if high < lo_edge:
            return "slower"
        if low > hi_edge:
            return "faster"
        if high < 1.0 and low >= lo_edge:
            return "small-slower"
        if low > 1.0 and high <= hi_edge:
            return "small-faster"
        if lo_edge <= low and high <= hi_edge:
            return "unchanged"
        return "undecided" if final else None


@dataclass(frozen=True)
class Look:
    """Where a sequential verdict stands after a look."""

    decision: Decision
    """The outcome so far (``undecided`` while more rounds are wanted)."""
    interval: PairedInterval
    more: int
    """Rounds to take before the next look; 0 when the verdict is final."""
    final: bool
    """Decided, or the budget (time or rounds) is spent."""


def look(
    rule: Rule,
    a: Sequence[float],
    b: Sequence[float],
    plan: Plan,
    *,
    spent: bool = False,
    blocks: Sequence[int] | None = None,
) -> Look:
    """Judge the rounds so far (``a[i]``, ``b[i]``; the ratio is ``b / a``): the whole process
    blocks among them where the plan's looks keep to blocks. *spent*: no more rounds can be
    taken (time budget over, or the source gives no more samples)."""
    taken = min(len(a), len(b))
    final = spent or taken >= plan.max_rounds
    if plan.is_early(taken):  # every round so far, the process term at its prior bound
        n = max(2, taken)
        alpha, dependence = plan.early_alpha(), plan.early_dependence
    else:
        n = max(2, plan.judged(taken))
        alpha = plan.nominal_alpha() if plan.can_decide else plan.alpha  # shown, never judged
        dependence = plan.dependence
        final = final or not plan.can_decide
    iv = paired_interval(
        a[:n],
        b[:n],
        alpha=alpha,
        trim=plan.trim,
        blocks=blocks[:n] if blocks else None,
        dependence=dependence,
    )
    decision = rule.outcome(iv.ratio, iv.low, iv.high, final=final) if iv.estimable else None
    if decision is None and final:
        decision = "undecided"
    if decision is not None:
        return Look(decision, iv, 0, True)
    return Look("undecided", iv, max(1, plan.next_look(taken) - taken), False)


@dataclass
class Coin:
    """Which side goes first in each round: a seeded coin, its seed and its throws kept (the
    run record stores both, so the order of every round is known afterwards)."""

    seed: int = field(default_factory=lambda: random.SystemRandom().randrange(2**32))
    orders: list[str] = field(default_factory=list)
    """``"ab"`` or ``"ba"`` for each round thrown so far."""

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def first(self, index: int) -> Literal["a", "b"]:
        """The side that goes first in round *index* (0-based; asked in order, at most once a
        round)."""
        while len(self.orders) <= index:
            self.orders.append("ab" if self._rng.random() < 0.5 else "ba")
        return "a" if self.orders[index] == "ab" else "b"
