"""A host's own noise, measured: what ``moeperf calibrate`` makes of A/A gates (the same build on
both sides), and the figures a baseline file keeps with its ``[[host]]``.

Per metric: how many A/A gates said what (a false alarm is a slower or faster row; undecided is
the budget spent), the spread of one round's log-ratio, the lag-1 autocorrelation of
consecutive rounds' log-ratios (the paired design assumes rounds independent given their
block; a correlation the coin does not break would show here), and the smallest change the
budget can see (the MDE at the rounds a gate reached).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

FALSE_ALARMS = ("slower", "faster")
"""A/A outcomes that are false alarms: beyond the margin, where nothing changed."""
SPURIOUS = ("small-slower", "small-faster")
"""A/A outcomes that name a change within the margin where there is none."""


def lag1(values: Sequence[float]) -> float:
    """The lag-1 autocorrelation of *values* in their order (0 with fewer than 3, or none
    spread)."""
    n = len(values)
    if n < 3:
        return 0.0
    mean = statistics.fmean(values)
    dev = [v - mean for v in values]
    denominator = sum(d * d for d in dev)
    if denominator == 0:
        return 0.0
    return sum(a * b for a, b in itertools.pairwise(dev)) / denominator


@dataclass(frozen=True)
class NoiseFigure:
    """One metric's noise on one host, from ``moeperf calibrate``."""

    build: str
    date: str
    gates: int
    """A/A gates it rests on."""
    rounds: int
    """Paired rounds over all of them."""
    round_spread: float
    """Standard deviation of one round's ``log(b / a)`` (0.05: about 5 %)."""
    lag1: float
    """Lag-1 autocorrelation of consecutive rounds' log-ratios (within each gate, pooled)."""
    mde: float
    """The median MDE the gates reached within their budget (0.05 = 5 %)."""
    budget: float
    """Seconds each gate's row could measure."""
    false_alarms: int = 0
    undecided: int = 0
    spurious: int = 0

    def describe(self) -> str:
        """``round spread 6.1 %, lag-1 +0.04, MDE 4.2 % at 180 s (8 A/A gates, 0 false
        alarms, 1 undecided; b11434, 2026-12-01)``."""
        return (
            f"round spread {100 * self.round_spread:.1f} %, lag-1 {self.lag1:+.2f}, MDE "
            f"{100 * self.mde:.1f} % at {self.budget:g} s ({self.gates} A/A gate(s), "
            f"{self.false_alarms} false alarm(s), {self.undecided} undecided; {self.build}, "
            f"{self.date})"
        )

    @property
    def sample_spread(self) -> float:
        """The relative spread of one sample it implies: a round's log-ratio is the
        difference of two samples."""
        return math.expm1(self.round_spread / math.sqrt(2.0))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NoiseFigure:
        """From :meth:`to_dict`; ``ValueError`` naming the field when malformed."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ValueError(f"unknown field {unknown[0]!r} (known: {', '.join(known)})")
        missing = [n for n in ("build", "date", "round_spread", "mde", "budget") if n not in d]
        if missing:
            raise ValueError(f"missing field {missing[0]!r}")
        values: dict[str, Any] = {}
        for name in known:
            if name not in d:
                continue
            v = d[name]
            if name in ("build", "date"):
                if not isinstance(v, str) or not v:
                    raise ValueError(f"{name} {v!r} must be a non-empty string")
            elif name in ("gates", "rounds", "false_alarms", "undecided", "spurious"):
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"{name} {v!r} must be a whole number >= 0")
            else:
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                    raise ValueError(f"{name} {v!r} must be a finite number")
                if name != "lag1" and v < 0:
                    raise ValueError(f"{name} {v!r} must be >= 0")
                v = float(v)
            values[name] = v
        values.setdefault("gates", 0)
        values.setdefault("rounds", 0)
        values.setdefault("lag1", 0.0)
        return cls(**values)


def noise_figure(
    outcomes: Sequence[str],
    round_log_ratios: Sequence[Sequence[float]],
    mdes: Sequence[float],
    *,
    build: str,
    date: str,
    budget: float,
) -> NoiseFigure:
    """The noise figure of one metric from its A/A gates: each gate's outcome, its rounds'
    log-ratios in order, and the MDE it reached. The spread pools each gate's rounds around
    its own mean (so that a process pair's offset is not counted as round noise); the lag-1
    autocorrelation pools the gates' products the same way."""
    if not outcomes:
        raise ValueError("a noise figure needs at least one A/A gate")
    squares = 0.0
    df = 0
    cross = 0.0
    for d in round_log_ratios:
        if len(d) < 2:
            continue
        mean = statistics.fmean(d)
        dev = [x - mean for x in d]
        squares += sum(x * x for x in dev)
        cross += sum(a * b for a, b in itertools.pairwise(dev))
        df += len(d) - 1
    spread = math.sqrt(squares / df) if df else 0.0
    return NoiseFigure(
        build=build,
        date=date,
        gates=len(outcomes),
        rounds=sum(len(d) for d in round_log_ratios),
        round_spread=spread,
        lag1=cross / squares if squares else 0.0,
        mde=statistics.median(mdes) if mdes else 0.0,
        budget=budget,
        false_alarms=sum(o in FALSE_ALARMS for o in outcomes),
        undecided=sum(o == "undecided" for o in outcomes),
        spurious=sum(o in SPURIOUS for o in outcomes),
    )
