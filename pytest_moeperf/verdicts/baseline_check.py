"""Baseline checks: a measurement judged against its stored baseline."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar, get_args

from ..defaults import CONFIDENCE, MIN_REL_SPREAD
from ..measure.measurement import optional
from ..measure.stats import Figure, with_session_term
from .creep import SessionTerm
from .judge import Values, Verdict, more_to_decide, unpaired_interval
from .outcomes import CheckOutcome

if TYPE_CHECKING:
    from ..measure.measurement import Measurement


_BEFORE = {"pass": "passed", "fail": "failed"}
"""The words records stored before every outcome came from :mod:`.outcomes`."""


@dataclass(frozen=True)
class BaselineCheck:
    """An absolute check of a measurement against a stored baseline, on the interval of
    ``measured / baseline`` (medians): ``passed`` when the whole interval is no worse than the
    tolerance allows, ``failed`` when the whole interval is worse, ``undecided`` when it
    straddles the limit (the numbers cannot tell; more repetitions may)."""

    outcome: CheckOutcome
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
    def change_pct(self) -> float:
        """``measured / baseline - 1``, in per cent (5.0 = 5 % above the baseline)."""
        return (self.measured / self.baseline - 1.0) * 100.0

    @property
    def interval_pct(self) -> str:
        """The interval of the change, in per cent: ``[-4.1, +9.8]`` (empty without one)."""
        if self.low is None or self.high is None:
            return ""
        return f"[{100 * (self.low - 1):+.1f}, {100 * (self.high - 1):+.1f}]"

    def to_dict(self) -> dict[str, Any]:
        """The check as the run record stores it: every field, and its line."""
        return {**asdict(self), "explain": self.explain()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BaselineCheck:
        """A check from :meth:`to_dict`, or from a record of before the interval was kept
        (outcome, medians and tolerance only); ``ValueError`` or ``TypeError`` when
        malformed."""
        outcome = _BEFORE.get(str(d["outcome"]), str(d["outcome"]))
        if outcome not in get_args(CheckOutcome):
            raise ValueError(
                f"baseline check outcome {d['outcome']!r} is not passed, failed or undecided"
            )
        return cls(
            outcome,  # type: ignore[arg-type]
            float(d["measured"]),
            float(d["baseline"]),
            float(d["tolerance"]),
            bool(d.get("higher_is_better", True)),
            str(d.get("label", "")),
            optional(float)(d.get("low")),
            optional(float)(d.get("high")),
            optional(int)(d.get("more_repetitions")),
            float(d.get("confidence", CONFIDENCE)),
            optional(str)(d.get("reason")),
            str(d.get("between", "")),
        )

    def explain(self) -> str:
        """One line: ``mmap.pp2048 = 185.2 vs baseline 189.0 (-2.0 % [-3.1, -0.9], limit
        179.6): passed``."""
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
                "cannot decide; more sessions of this host, or a paired gate against the "
                "baseline's build, can)"
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
    session: SessionTerm | None = None,
) -> BaselineCheck:
    """Judge *measured* against a stored baseline on the interval of ``median(measured) /
    baseline`` (*baseline*: its samples or stored figure; a bare *baseline_value* counts as a
    figure with no spread of its own). Higher is better: ``pass`` when the whole interval
    lies at or above ``1 - tolerance``, ``fail`` when it lies wholly below, ``undecided``
    otherwise; lower is better: the mirror image around ``1 + tolerance``. A noisy host gives
    a wide interval, and a wide interval never fails. The baseline was measured in another
    session: *session* (the host's between-session term, measured from its own sessions)
    widens the interval by the difference of two sessions' levels, a t on the sessions' degrees
    of freedom (or a normal quantile at its prior bound while not measured), which no number of
    repetitions removes."""
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
    iv, n = unpaired_interval(
        list(measured), stored, confidence=confidence, min_rel_spread=min_rel_spread, seed=0
    )
    widening = session.widening() if session is not None else None
    if widening is not None:
        iv = with_session_term(iv, *widening)
    outcome: CheckOutcome
    if higher_is_better:
        t = 1 - tolerance
        outcome = "passed" if iv.low >= t else "failed" if iv.high < t else "undecided"
    else:
        t = 1 + tolerance
        outcome = "passed" if iv.high <= t else "failed" if iv.low > t else "undecided"
    return BaselineCheck(
        outcome=outcome,
        measured=med,
        baseline=baseline_value,
        tolerance=tolerance,
        higher_is_better=higher_is_better,
        label=label,
        low=iv.low,
        high=iv.high,
        more_repetitions=more_to_decide(iv, [t], n) if outcome == "undecided" else None,
        confidence=confidence,
        between=session.describe() if session is not None else "",
    )


R = TypeVar("R", Verdict, BaselineCheck)


def overridden(result: R, reason: str | None) -> R:
    """*result* (a verdict or a baseline check), made undecided when *reason* says its numbers
    cannot decide (a busy host, a host that changed under them): it gets the reason (a verdict's
    label too), and no promise that more repetitions would decide."""
    if reason is None:
        return result
    why = reason if result.reason is None else f"{result.reason}; {reason}"
    if isinstance(result, Verdict):
        result = replace(result, mde=None, label=f"{result.label} ({reason})")
    return replace(result, outcome="undecided", more_repetitions=None, reason=why)
