"""Judging: claims between two measurements, dead ends and build-change gates.

Every verdict comes from an interval, never from two point values, so noise alone makes a
result *undecided* rather than a pass or a failure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..defaults import BUSY_LIMIT, CONFIDENCE, MIN_REL_SPREAD
from ..measure.measurement import optional
from ..measure.stats import (
    Figure,
    RatioInterval,
    ratio_interval,
    ratio_interval_from_summary,
    relative_uncertainty,
    repetitions_to_decide,
)
from .outcomes import DECISIONS, Decision
from .sequential import Plan, Rule, look

if TYPE_CHECKING:
    from ..measure.measurement import Measurement

Values = Sequence[float] | Figure
"""Raw throughput samples (tok/s), or a stored :class:`~pytest_moeperf.stats.Figure`."""


@dataclass(frozen=True)
class Verdict:
    """The judgement of one ratio against a threshold (claims) or a margin around 1 (gates)."""

    outcome: Decision
    ratio: float
    low: float
    high: float
    threshold: float
    more_repetitions: int | None = None
    """For an undecided verdict, roughly how many more repetitions per side would decide
    it; ``None`` when unknown (stored figures) or when no number would."""
    label: str = ""
    """What the ratio is of, e.g. ``lm-none.pp2048 / mmap.pp2048``."""
    relation: str = ">="
    """``>=``/``<=`` for claims; ``~`` for a gate (threshold 1, :attr:`margin` around it)."""
    margin: float | None = None
    confidence: float = CONFIDENCE
    method: str = ""
    rounds: int | None = None
    """Paired rounds behind the verdict (``None``: judged on unpaired samples or figures)."""
    mde: float | None = None
    """The smallest change the rounds could have detected at the noise they saw (0.05 = 5 %),
    with 80 % power; set for paired verdicts."""
    interim: bool = False
    """A look before the end: an undecided interim verdict gets more rounds."""
    reason: str | None = None
    """Why the numbers could not decide (host busy, host changed), when that made the
    verdict undecided."""

    @property
    def passed(self) -> bool:
        """Not a failure: a claim that holds, a dead end that still holds, a change that is
        not slower beyond the margin (small changes pass). Undecided is neither."""
        return self.outcome in ("holds", "faster", "small-faster", "small-slower", "unchanged")

    @property
    def change_pct(self) -> float:
        """``(ratio - 1)`` in percent."""
        return (self.ratio - 1.0) * 100.0

    @property
    def decided(self) -> bool:
        return self.outcome != "undecided"

    @property
    def mde_text(self) -> str:
        """``MDE -3.9/+4.1 % after 55 rounds``: the smallest slowdown and speedup these rounds
        could have seen (empty without rounds)."""
        if self.mde is None or self.rounds is None:
            return ""
        down = 100 * (1 - 1 / (1 + self.mde))
        return f"MDE -{down:.1f}/+{100 * self.mde:.1f} % after {self.rounds} rounds"

    @property
    def leaning(self) -> str:
        """Which way an undecided change leans, with its interval in per cent: ``leaning
        slower, -4.8 % [-7.9, -1.6]`` (empty when it leans nowhere)."""
        if self.relation != "~" or self.outcome != "undecided" or self.ratio == 1.0:
            return ""
        way = "slower" if self.ratio < 1.0 else "faster"
        interval = f"[{100 * (self.low - 1):+.1f}, {100 * (self.high - 1):+.1f}]"
        return f"leaning {way}, {self.change_pct:+.1f} % {interval}"

    def explain(self) -> str:
        """One line: ``lm-none.pp2048 / mmap.pp2048 = 2.06 [2.01, 2.11] >= 2.00: holds``."""
        label = f"{self.label} = " if self.label else ""
        head = f"{label}{self.ratio:.2f} [{self.low:.2f}, {self.high:.2f}]"
        if self.relation == "~":
            head += f" ({self.change_pct:+.1f} %) vs 1 ± {self.margin or 0:.2f}"
        elif self.relation == "<":
            head += f" < 1 (reopened at >= {1 - (self.margin or 0):.2f})"
        else:
            head += f" {self.relation} {self.threshold:.2f}"
        line = f"{head}: {self.outcome}"
        if self.interim:
            line += f" so far ({self.rounds} rounds; measuring more)"
        elif self.outcome == "undecided" and self.mde_text:
            leaning = f"{self.leaning}; " if self.leaning else ""
            line += (
                f" ({leaning}budget spent; {self.mde_text}: a smaller change cannot be seen here)"
            )
        elif self.outcome == "undecided" and self.more_repetitions:
            line += f" (about {self.more_repetitions} more repetitions per side would decide)"
        elif self.rounds is not None:
            line += f" ({self.rounds} rounds)"
        return line

    def to_dict(self) -> dict[str, Any]:
        """The verdict as the results file, the gate's and bisect's JSON store it: every
        field, and its line."""
        return {**asdict(self), "explain": self.explain()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verdict:
        """A verdict from :meth:`to_dict`; ``ValueError`` or ``TypeError`` when malformed."""
        outcome = str(d["outcome"])
        if outcome not in DECISIONS:
            raise ValueError(f"outcome {outcome!r} is not one of {', '.join(DECISIONS)}")
        return cls(
            outcome=outcome,  # type: ignore[arg-type]
            ratio=float(d["ratio"]),
            low=float(d["low"]),
            high=float(d["high"]),
            threshold=float(d.get("threshold", 1.0)),
            label=str(d.get("label", "")),
            relation=str(d.get("relation", ">=")),
            margin=optional(float)(d.get("margin")),
            confidence=float(d.get("confidence", CONFIDENCE)),
            method=str(d.get("method", "")),
            rounds=optional(int)(d.get("rounds")),
            mde=optional(float)(d.get("mde")),
            reason=optional(str)(d.get("reason")),
        )


def unpaired_interval(
    a: Values, b: Values, *, confidence: float, min_rel_spread: float, seed: int
) -> tuple[RatioInterval, int | None]:
    """The ratio interval of *a* / *b*, and the repetitions per side behind it (``None`` when
    both are stored figures)."""
    if isinstance(a, Figure) or isinstance(b, Figure):

        def fig(v: Values) -> Figure:
            if isinstance(v, Figure):
                return v
            rel = relative_uncertainty(v, min_rel_spread=min_rel_spread)
            return Figure(statistics.median(v), rel)

        iv = ratio_interval_from_summary(*fig(a), *fig(b), confidence=confidence)
        sampled = [len(v) for v in (a, b) if not isinstance(v, Figure)]
        return iv, min(sampled, default=None)
    iv = ratio_interval(a, b, confidence=confidence, seed=seed, min_rel_spread=min_rel_spread)
    return iv, min(len(a), len(b))


def more_to_decide(iv: RatioInterval, thresholds: Sequence[float], n: int | None) -> int | None:
    """About how many more repetitions per side would decide *iv* against every threshold
    (``None``: unknown, or none would)."""
    if n is None:
        return None
    counts = [repetitions_to_decide(iv, t, n) for t in thresholds]
    return None if None in counts else max(c for c in counts if c is not None)


def _bound(rule: Rule) -> dict[str, Any]:
    """The verdict's fields that say what *rule* holds the ratio to: a claim's threshold, or
    a margin around 1 (``~`` for a change, ``<`` for a dead end)."""
    if rule.kind == "claim":
        return {"threshold": rule.threshold, "relation": rule.relation, "margin": None}
    relation = "~" if rule.kind == "change" else "<"
    return {"threshold": 1.0, "relation": relation, "margin": rule.margin}


def judge_unpaired(rule: Rule, a: Values, b: Values, *, label: str, seed: int = 0) -> Verdict:
    """``a / b`` judged once by *rule* on its unpaired interval, for sides that cannot be paired
    in rounds: stored figures (a decision record's table cells) or fewer than two samples. An
    undecided verdict says about how many more repetitions would decide it against each of the
    rule's edges."""
    iv, n = unpaired_interval(a, b, confidence=CONFIDENCE, min_rel_spread=MIN_REL_SPREAD, seed=seed)
    outcome = rule.outcome(iv.ratio, iv.low, iv.high, final=True)
    assert outcome is not None
    low_edge, high_edge = 1.0 - rule.margin, 1.0 + rule.margin
    if rule.kind == "claim":
        edges = [rule.threshold]
    elif rule.kind == "dead_end":
        edges = [1.0, low_edge]
    else:
        edges = [low_edge, high_edge] if low_edge < iv.ratio < high_edge else [1.0]
    return Verdict(
        outcome=outcome,
        ratio=iv.ratio,
        low=iv.low,
        high=iv.high,
        more_repetitions=more_to_decide(iv, edges, n) if outcome == "undecided" else None,
        label=label,
        method=iv.method,
        **_bound(rule),
    )


def judge_rounds(
    rule: Rule,
    a: Sequence[float],
    b: Sequence[float],
    plan: Plan,
    *,
    spent: bool = False,
    label: str = "",
    blocks: Sequence[int] | None = None,
    taken: str = "paired rounds",
) -> tuple[Verdict, int]:
    """The verdict of paired rounds (``a[i]``, ``b[i]`` back to back; the ratio is
    ``b / a``) under *rule* at this look, and how many more rounds to take before the next
    look (0: final). *spent*: the budget is over, so the verdict must be final now. *blocks*:
    each round's process block (the process term over them widens the interval); *taken* says how
    the rounds were taken, for the verdict's method."""
    st = look(rule, a, b, plan, spent=spent, blocks=blocks)
    iv = st.interval
    design = iv.design_effect
    dependence = f" (dependence: error variance x{design:.2f})" if design > 1.005 else ""
    reason = None if iv.estimable or not st.final else ONE_PAIR
    verdict = Verdict(
        outcome=st.decision,
        ratio=iv.ratio,
        low=min(iv.low, iv.ratio),
        high=max(iv.high, iv.ratio),
        label=f"{label} ({reason})" if reason else label,
        **_bound(rule),
        confidence=1 - plan.alpha,
        method=f"{taken}{dependence}, trimmed t, corrected for looks",
        rounds=iv.rounds,
        mde=iv.mde() if iv.estimable else None,
        interim=not st.final,
        reason=reason,
    )
    return verdict, st.more


ONE_PAIR = (
    "one process pair: its process term cannot be estimated from one block on a host whose "
    "term is not calibrated (run moeperf calibrate, or give the budget room for two process "
    "blocks: a longer budget or a smaller process_block)"
)
"""Why a verdict whose rounds lie in one process block, on a host not calibrated, decides
nothing."""


def busy_reason(measurements: Sequence[Measurement], busy_limit: float = BUSY_LIMIT) -> str | None:
    """Why these measurements must not decide a verdict: the host was busy with other work on
    the servers' CPUs for more than *busy_limit* of the measured time; else ``None``. Paired
    verdicts need nothing more: a wide spread only widens their interval."""
    busy = max((m.conditions.host_busy for m in measurements), default=0.0)
    return f"host {100 * busy:.0f} % busy with other work" if busy > busy_limit else None
