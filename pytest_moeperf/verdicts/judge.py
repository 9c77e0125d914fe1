"""Judging: claims between two measurements, absolute baseline checks and build-change gates.

Every verdict comes from an interval, never from two point values, so noise alone makes a
result *undecided* rather than a pass or a failure.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, get_args, runtime_checkable

from ..defaults import BUSY_LIMIT, CONFIDENCE, MARGIN, MIN_REL_SPREAD
from ..errors import MoeperfError
from ..measure.stats import (
    Figure,
    RatioInterval,
    ratio_interval,
    ratio_interval_from_summary,
    relative_uncertainty,
    repetitions_to_decide,
    with_session_term,
)
from ..measure.workload import Workload
from .creep import SessionSpread
from .sequential import Decision, Plan, Rule, look

if TYPE_CHECKING:
    from ..measure.measurement import Measurement

Outcome = Decision
"""holds / fails for claims and dead ends; faster / slower / small-faster / small-slower /
unchanged for a change; undecided for either."""
OUTCOMES: tuple[str, ...] = get_args(Decision)
Relation = Literal[">=", "<="]
Values = Sequence[float] | Figure
"""Raw throughput samples (tok/s), or a stored :class:`~pytest_moeperf.stats.Figure`."""

CONFIGURATION_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_-])?$")
"""Configuration names: letters, digits, ``-``, ``_`` and ``.``, not ending in ``.``."""
BUILD_NAME = re.compile(r"^[A-Za-z0-9_./+:-]+$")

_OPERAND = re.compile(
    r"^(?P<configuration>[^\[\]\s]+?)"
    r"(?:\[(?P<build>[^\[\]\s]*)\])?"
    r"\.(?P<workload>(?:pp|tg)\d+(?:@d\d+)?|traffic\.\w+)$"
)
_FACTOR = re.compile(
    r"^(?P<factor>[+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?:\*|\u00d7|x(?=\s))\s*(?P<rest>.*)$"
)
_EXAMPLE = "write e.g. 'lm-none.pp2048 >= 2.0 * mmap.pp2048'"


class ClaimError(MoeperfError, ValueError):
    """A claim's text cannot be parsed."""


@dataclass(frozen=True)
class Operand:
    """One side of a claim: a configuration's workload, optionally on a named build."""

    configuration: str
    workload: Workload
    build: str | None = None

    @property
    def key(self) -> tuple[str | None, str, str]:
        """``(build, configuration, workload name)``, the key baseline files use."""
        return (self.build, self.configuration, self.workload.name)

    @property
    def id(self) -> str:
        build = f":{self.build}" if self.build else ""
        return _id_safe(f"{self.configuration}{build}.{self.workload.compact.replace('@', '-')}")

    def __str__(self) -> str:
        build = f"[{self.build}]" if self.build else ""
        return f"{self.configuration}{build}.{self.workload.compact}"


def _id_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:+-]", "_", text)


def _parse_operand(text: str, claim_text: str) -> Operand:
    m = _OPERAND.fullmatch(text)
    if not m:
        raise ClaimError(
            f"claim {claim_text!r}: {text!r} is not CONFIGURATION[BUILD].WORKLOAD "
            f"(workload ppN, tgN, tgN@dD or traffic.METRIC); {_EXAMPLE}"
        )
    configuration, build = m.group("configuration"), m.group("build")
    if not CONFIGURATION_NAME.fullmatch(configuration):
        raise ClaimError(
            f"claim {claim_text!r}: configuration {configuration!r} may hold only letters, "
            "digits, '-', '_' and '.' (not last)"
        )
    if build is not None and not BUILD_NAME.fullmatch(build):
        raise ClaimError(f"claim {claim_text!r}: build {build!r} in [...] is empty or malformed")
    try:
        workload = Workload.parse(m.group("workload").replace("@", " @ "))
    except MoeperfError as e:
        raise ClaimError(f"claim {claim_text!r}: {e}") from None
    return Operand(configuration, workload, build)


@dataclass(frozen=True)
class Claim:
    """``left <relation> factor * right`` between two measurements' medians, e.g.
    ``lm-none.pp2048 >= 2.0 * mmap.pp2048`` (prefill at least doubles) or
    ``cache-6gib.tg128 <= 0.70 * mmap.tg128`` (a dead end: stays at least 30 % slower)."""

    left: Operand
    relation: Relation
    factor: float
    right: Operand

    def __post_init__(self) -> None:
        if self.relation not in (">=", "<="):
            raise ClaimError(f"claim relation {self.relation!r}: use '>=' or '<='")
        if not (math.isfinite(self.factor) and self.factor > 0):
            raise ClaimError(f"claim factor {self.factor!r} must be a positive finite number")

    @classmethod
    def parse(cls, text: str) -> Claim:
        """Parse ``"A.pp2048 >= 2.0 * B.pp2048"``: the factor (written with ``*``, ``x`` or the
        multiplication sign) defaults to 1, a build may follow the configuration in brackets
        (``mmap[b11713].tg128``), and a depth the workload (``tg128@d8192``)."""
        if not isinstance(text, str) or not text.strip():
            raise ClaimError(f"claim {text!r} is empty; {_EXAMPLE}")
        compact = re.sub(r"\s*@\s*", "@", text.strip())
        relations = re.findall(r"[<>=!]=?", compact)
        if relations not in ([">="], ["<="]):
            raise ClaimError(
                f"claim {text!r}: needs exactly one relation, '>=' or '<='; {_EXAMPLE}"
            )
        relation: Relation = ">=" if relations[0] == ">=" else "<="
        left_text, right_text = (s.strip() for s in compact.split(relation))
        factor = 1.0
        m = _FACTOR.fullmatch(right_text)
        if m:
            factor = float(m.group("factor"))
            right_text = m.group("rest").strip()
            if not (math.isfinite(factor) and factor > 0):
                raise ClaimError(f"claim {text!r}: factor {factor!r} must be positive and finite")
        return cls(
            _parse_operand(left_text, text), relation, factor, _parse_operand(right_text, text)
        )

    @property
    def threshold(self) -> float:
        """The bound on ``left / right``: the claim's factor."""
        return self.factor

    @property
    def rule(self) -> Rule:
        """How an interval of ``left / right`` decides this claim."""
        return Rule("claim", threshold=self.factor, relation=self.relation)

    @property
    def id(self) -> str:
        """A pytest-id-safe name: ``lm-none.pp2048-ge-2.0-mmap.pp2048``."""
        rel = "ge" if self.relation == ">=" else "le"
        factor = "" if self.factor == 1.0 else f"{self.factor!r}-"
        return f"{self.left.id}-{rel}-{_id_safe(factor)}{self.right.id}"

    def __str__(self) -> str:
        factor = "" if self.factor == 1.0 else f"{self.factor!r} * "
        return f"{self.left} {self.relation} {factor}{self.right}"


@runtime_checkable
class Judgement(Protocol):
    """What every verdict of this package is: a claim's or a gate row's :class:`Verdict`, a
    :class:`BaselineCheck`, a creep chain's :class:`~pytest_moeperf.verdicts.creep.ChainedChange`.
    Each has an outcome, one line that explains it, and one stored form (every field, and the
    line) that the run record, the gate's and bisect's JSON keep."""

    @property
    def outcome(self) -> str: ...

    def explain(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Verdict:
    """The judgement of one ratio against a threshold (claims) or a margin around 1 (gates)."""

    outcome: Outcome
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
        """A verdict from :meth:`to_dict` (or from a results file of format 1, which named the
        label ``claim``); ``ValueError`` or ``TypeError`` when malformed."""

        def number(name: str) -> float | None:
            value = d.get(name)
            return None if value is None else float(value)

        outcome = str(d["outcome"])
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
        rounds = d.get("rounds")
        return cls(
            outcome=outcome,  # type: ignore[arg-type]
            ratio=float(d["ratio"]),
            low=float(d["low"]),
            high=float(d["high"]),
            threshold=float(d.get("threshold", 1.0)),
            label=str(d.get("label", d.get("claim", ""))),
            relation=str(d.get("relation", ">=")),
            margin=number("margin"),
            confidence=float(d.get("confidence", CONFIDENCE)),
            method=str(d.get("method", "")),
            rounds=None if rounds is None else int(rounds),
            mde=number("mde"),
            reason=None if d.get("reason") is None else str(d["reason"]),
        )


def _interval(
    a: Values, b: Values, *, confidence: float, min_rel_spread: float, seed: int
) -> tuple[RatioInterval, int | None]:
    """The ratio interval of *a* / *b*, and the repetitions per side behind it (``None`` when
    both are stored figures)."""
    if isinstance(a, Figure) and isinstance(b, Figure):
        iv = ratio_interval_from_summary(*a, *b, confidence=confidence)
        return iv, None
    if isinstance(a, Figure) or isinstance(b, Figure):

        def fig(v: Values) -> Figure:
            if isinstance(v, Figure):
                return v
            rel = relative_uncertainty(v, min_rel_spread=min_rel_spread)
            return Figure(statistics.median(v), rel)

        iv = ratio_interval_from_summary(*fig(a), *fig(b), confidence=confidence)
        sampled = [len(v) for v in (a, b) if not isinstance(v, Figure)]
        return iv, min(sampled)
    iv = ratio_interval(a, b, confidence=confidence, seed=seed, min_rel_spread=min_rel_spread)
    return iv, min(len(a), len(b))


def _more(iv: RatioInterval, thresholds: Sequence[float], n: int | None) -> int | None:
    if n is None:
        return None
    counts = [repetitions_to_decide(iv, t, n) for t in thresholds]
    if any(c is None for c in counts):
        return None
    return max(c for c in counts if c is not None)


def judge_claim(
    claim: Claim,
    left: Values,
    right: Values,
    *,
    confidence: float = CONFIDENCE,
    min_rel_spread: float = MIN_REL_SPREAD,
    seed: int = 0,
) -> Verdict:
    """Judge *claim* on the left and right measurements (samples or stored figures).

    ``holds`` when the whole interval of ``left / right`` lies on the claim's side of its
    factor, ``fails`` when it lies wholly on the other side, ``undecided`` otherwise."""
    label = f"{claim.left} / {claim.right}"
    return _judge_bound(claim.rule, left, right, label, confidence, min_rel_spread, seed)


def _judge_bound(
    rule: Rule,
    left: Values,
    right: Values,
    label: str,
    confidence: float = CONFIDENCE,
    min_rel_spread: float = MIN_REL_SPREAD,
    seed: int = 0,
) -> Verdict:
    """A claim's *rule* (a bound on ``left / right``) judged once on an unpaired interval."""
    iv, n = _interval(left, right, confidence=confidence, min_rel_spread=min_rel_spread, seed=seed)
    t = rule.threshold
    outcome = rule.outcome(iv.ratio, iv.low, iv.high, final=True)
    assert outcome is not None
    more = _more(iv, [t], n) if outcome == "undecided" else None
    return Verdict(
        outcome=outcome,
        ratio=iv.ratio,
        low=iv.low,
        high=iv.high,
        threshold=t,
        more_repetitions=more,
        label=label,
        relation=rule.relation,
        confidence=confidence,
        method=iv.method,
    )


def judge_unpaired(rule: Rule, a: Values, b: Values, *, label: str) -> Verdict:
    """``a / b`` judged once by *rule*, for sides that cannot be paired in rounds: stored
    figures (a decision record's table cells) or fewer than two samples."""
    if rule.kind == "change":
        return judge_change(a, b, margin=rule.margin, label=label)
    if rule.kind == "dead_end":
        return judge_dead_end(a, b, margin=rule.margin, label=label)
    return _judge_bound(rule, a, b, label)


def _margin_interval(
    a: Values, b: Values, margin: float, confidence: float, min_rel_spread: float, seed: int
) -> tuple[RatioInterval, int | None]:
    """:func:`_interval` of ``a / b`` for a rule with a *margin* around 1 (checked)."""
    if not (math.isfinite(margin) and 0 <= margin < 1):
        raise ValueError(f"margin {margin!r} must be in [0, 1)")
    return _interval(a, b, confidence=confidence, min_rel_spread=min_rel_spread, seed=seed)


def _around_one(
    outcome: Outcome,
    iv: RatioInterval,
    more: int | None,
    label: str,
    relation: str,
    margin: float,
) -> Verdict:
    """The verdict of a rule judged against 1 with a margin (gates, dead ends)."""
    return Verdict(
        outcome=outcome,
        ratio=iv.ratio,
        low=iv.low,
        high=iv.high,
        threshold=1.0,
        more_repetitions=more,
        label=label,
        relation=relation,
        margin=margin,
        confidence=iv.confidence,
        method=iv.method,
    )


def judge_change(
    candidate: Values,
    baseline: Values,
    *,
    margin: float = MARGIN,
    confidence: float = CONFIDENCE,
    min_rel_spread: float = MIN_REL_SPREAD,
    seed: int = 0,
    label: str = "candidate / baseline",
) -> Verdict:
    """Gate verdict on ``candidate / baseline`` (e.g. a new build against the old one on the
    same flags), with *margin* the smallest change that matters (0.05 = 5 %).

    Unpaired samples (or stored figures), judged once on a bootstrap interval by the rule of
    :class:`~pytest_moeperf.verdicts.sequential.Rule` ``change``: slower / faster beyond the
    margin, small-slower / small-faster (a real change within it), unchanged, or undecided.
    Gates and ``moeperf.compare`` judge paired rounds instead (:func:`judge_rounds`)."""
    iv, n = _margin_interval(candidate, baseline, margin, confidence, min_rel_spread, seed)
    outcome = Rule("change", margin=margin).outcome(iv.ratio, iv.low, iv.high, final=True)
    assert outcome is not None
    more = None
    if outcome == "undecided":
        inside = 1.0 - margin < iv.ratio < 1.0 + margin
        more = _more(iv, [1.0 - margin, 1.0 + margin] if inside else [1.0], n)
    return _around_one(outcome, iv, more, label, "~", margin)


@dataclass(frozen=True)
class BaselineCheck:
    """An absolute check of a measurement against a stored baseline, on the interval of
    ``measured / baseline`` (medians): ``pass`` when the whole interval is no worse than the
    tolerance allows, ``fail`` when the whole interval is worse, ``undecided`` when it
    straddles the limit (the numbers cannot tell; more repetitions may)."""

    outcome: Literal["pass", "fail", "undecided"]
    measured: float
    """Median of the measured samples, tok/s."""
    baseline: float
    tolerance: float
    higher_is_better: bool = True
    label: str = ""
    low: float | None = None
    """Lower end of the interval of ``measured / baseline`` (``None``: a point check)."""
    high: float | None = None
    more_repetitions: int | None = None
    """When undecided: about how many more repetitions could decide it."""
    confidence: float = CONFIDENCE
    reason: str | None = None
    """Why the numbers could not decide (host busy, host changed), when that made the check
    undecided."""
    between: str = ""
    """The between-session term the interval holds (``between sessions 10.5 % (from 1
    session ...)``), empty when it holds none."""

    @property
    def limit(self) -> float:
        """The worst median that still passes."""
        sign = -1 if self.higher_is_better else 1
        return self.baseline * (1 + sign * self.tolerance)

    @property
    def change(self) -> float:
        """``measured / baseline - 1`` (0.05 = 5 % above the baseline)."""
        return self.measured / self.baseline - 1.0

    @property
    def change_pct(self) -> float:
        return self.change * 100.0

    @property
    def interval_pct(self) -> str:
        """The interval of the change, in per cent: ``[-4.1, +9.8]`` (empty without one)."""
        if self.low is None or self.high is None:
            return ""
        return f"[{100 * (self.low - 1):+.1f}, {100 * (self.high - 1):+.1f}]"

    @property
    def verdict(self) -> str:
        """The outcome, for tables."""
        return self.outcome

    def to_dict(self) -> dict[str, Any]:
        """The check as the run record stores it: every field, and its line."""
        return {**asdict(self), "explain": self.explain()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BaselineCheck:
        """A check from :meth:`to_dict`, or from a record of before the interval was kept
        (outcome, medians and tolerance only); ``ValueError`` or ``TypeError`` when
        malformed."""
        outcome = str(d["outcome"])
        if outcome not in ("pass", "fail", "undecided"):
            raise ValueError(f"baseline check outcome {outcome!r} is not pass, fail or undecided")

        def number(name: str) -> float | None:
            return None if d.get(name) is None else float(d[name])

        more = d.get("more_repetitions")
        return cls(
            outcome,  # type: ignore[arg-type]
            float(d["measured"]),
            float(d["baseline"]),
            float(d["tolerance"]),
            bool(d.get("higher_is_better", True)),
            str(d.get("label", "")),
            number("low"),
            number("high"),
            None if more is None else int(more),
            float(d.get("confidence", CONFIDENCE)),
            None if d.get("reason") is None else str(d["reason"]),
            str(d.get("between", "")),
        )

    def explain(self) -> str:
        """One line: ``mmap.pp2048 = 185.2 vs baseline 189.0 (-2.0 % [-3.1, -0.9], limit
        179.6): pass``."""
        label = f"{self.label} = " if self.label else ""
        interval = f" {self.interval_pct}" if self.interval_pct else ""
        line = (
            f"{label}{self.measured:.4g} vs baseline {self.baseline:.4g} "
            f"({self.change_pct:+.1f} %{interval}, limit {self.limit:.4g}): {self.outcome}"
        )
        if self.between:
            line += f"; {self.between}"
        if self.reason:
            line += f" ({self.reason})"
        elif self.outcome == "undecided" and self.more_repetitions:
            line += f" (about {self.more_repetitions} more repetitions would decide)"
        elif self.outcome == "undecided" and self.between:
            line += (
                " (the between-session term alone reaches the limit: more repetitions "
                "cannot decide; a paired gate against the baseline's build can)"
            )
        return line


@dataclass(frozen=True)
class BaselineRow:
    """One measured row checked against its stored baseline, for reports."""

    nodeid: str
    measurement: Measurement
    check: BaselineCheck


def judge_baseline(
    measured: Sequence[float],
    baseline_value: float,
    tolerance: float,
    higher_is_better: bool = True,
    *,
    label: str = "",
    baseline: Values | None = None,
    confidence: float = CONFIDENCE,
    min_rel_spread: float = MIN_REL_SPREAD,
    seed: int = 0,
    session: SessionSpread | None = None,
) -> BaselineCheck:
    """Judge *measured* against a stored baseline on the interval of ``median(measured) /
    baseline`` (*baseline*: its samples or stored figure; a bare *baseline_value* counts as a
    figure with no spread of its own). Higher is better: ``pass`` when the whole interval
    lies at or above ``1 - tolerance``, ``fail`` when it lies wholly below, ``undecided``
    otherwise; lower is better: the mirror image around ``1 + tolerance``. A noisy host gives
    a wide interval, and a wide interval never fails. The baseline was measured in another
    session: *session* (the host's between-session spread) widens the interval by the
    difference of two sessions' levels, which no number of repetitions removes."""
    if not measured:
        raise ValueError("no measured samples")
    if not (math.isfinite(baseline_value) and baseline_value > 0):
        raise ValueError(f"baseline value {baseline_value!r} must be positive and finite")
    if not (math.isfinite(tolerance) and 0 <= tolerance < 1):
        raise ValueError(f"tolerance {tolerance!r} must be in [0, 1)")
    med = statistics.median(measured)
    if not math.isfinite(med):
        raise ValueError(f"non-finite sample in {list(measured)!r}")
    stored = baseline if baseline is not None else Figure(baseline_value, 0.0)
    iv, n = _interval(
        list(measured), stored, confidence=confidence, min_rel_spread=min_rel_spread, seed=seed
    )
    if session is not None:
        iv = with_session_term(iv, session.difference_sd)
    outcome: Literal["pass", "fail", "undecided"]
    if higher_is_better:
        t = 1 - tolerance
        outcome = "pass" if iv.low >= t else "fail" if iv.high < t else "undecided"
    else:
        t = 1 + tolerance
        outcome = "pass" if iv.high <= t else "fail" if iv.low > t else "undecided"
    return BaselineCheck(
        outcome=outcome,
        measured=med,
        baseline=baseline_value,
        tolerance=tolerance,
        higher_is_better=higher_is_better,
        label=label,
        low=iv.low,
        high=iv.high,
        more_repetitions=_more(iv, [t], n) if outcome == "undecided" else None,
        confidence=confidence,
        between=session.describe() if session is not None else "",
    )


def judge_dead_end(
    config: Values,
    other: Values,
    *,
    margin: float = MARGIN,
    confidence: float = CONFIDENCE,
    min_rel_spread: float = MIN_REL_SPREAD,
    seed: int = 0,
    label: str = "dead end / other",
) -> Verdict:
    """Is a dead end still slower? On the interval of ``config / other``:

    - ``holds``: ``high < 1``, the configuration is surely slower: the dead end stands;
    - ``fails``: ``low >= 1 - margin``, it is as fast (within *margin*) or faster: the dead
      end may have reopened;
    - ``undecided`` otherwise."""
    iv, n = _margin_interval(config, other, margin, confidence, min_rel_spread, seed)
    outcome = Rule("dead_end", margin=margin).outcome(iv.ratio, iv.low, iv.high, final=True)
    assert outcome is not None
    more = _more(iv, [1.0, 1.0 - margin], n) if outcome == "undecided" else None
    return _around_one(outcome, iv, more, label, "<", margin)


def judge_rounds(
    rule: Rule,
    a: Sequence[float],
    b: Sequence[float],
    plan: Plan,
    *,
    spent: bool = False,
    label: str = "",
    min_rel_spread: float = MIN_REL_SPREAD,
    blocks: Sequence[int] | None = None,
    taken: str = "paired rounds",
) -> tuple[Verdict, int]:
    """The verdict of paired rounds (``a[i]``, ``b[i]`` back to back; the ratio is
    ``b / a``) under *rule* at this look, and how many more rounds to take before the next
    look (0: final). *spent*: the budget is over, so the verdict must be final now. *blocks*:
    each round's process block (the process term over them widens the interval); *taken* says how
    the rounds were taken, for the verdict's method."""
    st = look(rule, a, b, plan, spent=spent, min_rel_spread=min_rel_spread, blocks=blocks)
    iv = st.interval
    relation = {"change": "~", "dead_end": "<", "claim": rule.relation}[rule.kind]
    verdict = Verdict(
        outcome=st.decision,
        ratio=iv.ratio,
        low=min(iv.low, iv.ratio),
        high=max(iv.high, iv.ratio),
        threshold=rule.threshold if rule.kind == "claim" else 1.0,
        label=label,
        relation=relation,
        margin=None if rule.kind == "claim" else rule.margin,
        confidence=1 - plan.alpha,
        method=f"{taken}{_design(iv.design_effect)}, trimmed t, corrected for looks",
        rounds=iv.rounds,
        mde=iv.mde(),
        interim=not st.final,
    )
    return verdict, st.more


def _design(effect: float) -> str:
    return f" (dependence: error variance x{effect:.2f})" if effect > 1.005 else ""


def busy_reason(measurements: Sequence[Measurement], busy_limit: float = BUSY_LIMIT) -> str | None:
    """Why these measurements must not decide a verdict: the host was busy with other work on
    the servers' CPUs for more than *busy_limit* of the measured time; else ``None``. Paired
    verdicts need nothing more: a wide spread only widens their interval."""
    busy = max((m.conditions.host_busy for m in measurements), default=0.0)
    return f"host {100 * busy:.0f} % busy with other work" if busy > busy_limit else None


def undecided(verdict: Verdict, reason: str | None) -> Verdict:
    """*verdict*, made undecided when *reason* says the numbers cannot decide (too noisy, or
    taken on a host that changed); an undecided verdict gets the reason too, and no promise
    that more repetitions would decide."""
    if reason is None:
        return verdict
    return replace(
        verdict,
        outcome="undecided",
        more_repetitions=None,
        mde=None,
        label=f"{verdict.label} ({reason})",
        reason=reason if verdict.reason is None else f"{verdict.reason}; {reason}",
    )


R = TypeVar("R", "Verdict", "BaselineCheck")


def overridden(result: R, reason: str | None) -> R:
    """*result* (a verdict or a baseline check), made undecided when *reason* says its numbers
    cannot decide: a busy host, a host that changed under them."""
    if reason is None:
        return result
    if isinstance(result, Verdict):
        return undecided(result, reason)
    why = reason if result.reason is None else f"{result.reason}; {reason}"
    return replace(result, outcome="undecided", more_repetitions=None, reason=why)
