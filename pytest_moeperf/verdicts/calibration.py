"""A host's own noise, measured: what ``moeperf calibrate`` makes of A/A gates (the same build on
both sides), and the figures a baseline file keeps with its ``[[host]]``.

Per metric: how many A/A gates said what (a false alarm is a slower or faster row; undecided is
the budget spent), the spread of one round's log-ratio, the lag-1 autocorrelation of
consecutive rounds' log-ratios within a process block (drift the coin does not break), the
process term (how far process pairs' offsets spread, from the blocks of every gate), and the
smallest change the budget can see (the MDE at the rounds a gate reached). The process term
and the lag-1 are the host's :class:`~pytest_moeperf.measure.dependence.Dependence`
(:func:`host_dependence`): every verdict on this host carries them in its error.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..defaults import PROCESS_TERM
from ..measure.dependence import Dependence, ProcessEvidence, centred_ratio

FALSE_ALARMS = ("slower", "faster")
"""A/A outcomes that are false alarms: beyond the margin, where nothing changed."""
SPURIOUS = ("small-slower", "small-faster")
"""A/A outcomes that name a change within the margin where there is none."""


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
    """Lag-1 autocorrelation of consecutive rounds' log-ratios (within each process block of
    each gate, pooled, read past the blocks' own means: :func:`centred_lag1`)."""
    mde: float
    """The median MDE the gates reached within their budget (0.05 = 5 %; ``inf``: none
    reached one, each gate's rounds too few process blocks to estimate their term)."""
    budget: float
    """Seconds each gate's row could measure."""
    false_alarms: int = 0
    undecided: int = 0
    spurious: int = 0
    process: float | None = None
    """Log standard deviation of a process pair's offset, from the gates' blocks (``None``:
    not measured: each verdict's own blocks estimate it)."""
    process_df: float | None = None
    """Degrees of freedom of :attr:`process`: the gates' blocks less one a gate (``None``: not
    recorded, a figure of before it was; one a gate is taken)."""
    pace: float | None = None
    """Seconds a round took (median over the gates; ``None``: not recorded)."""

    def describe(self) -> str:
        """``round spread 6.1 %, lag-1 +0.04, process term 1.2 %, MDE 4.2 % at 180 s (8 A/A
        gates, 0 false alarms, 1 undecided; b11434, 2026-12-01)``."""
        term = "" if self.process is None else f", process term {100 * self.process:.1f} %"
        if self.process is not None and self.process_df is not None:
            term += f" ({self.process_df:g} df)"
        return (
            f"round spread {100 * self.round_spread:.1f} %, lag-1 {self.lag1:+.2f}{term}, MDE "
            f"{self.mde_text} at {self.budget:g} s ({self.gates} A/A gate(s), "
            f"{self.false_alarms} false alarm(s), {self.undecided} undecided; {self.build}, "
            f"{self.date})"
        )

    @property
    def mde_text(self) -> str:
        """``4.2 %``, or ``not reached`` where no gate reached an MDE."""
        return f"{100 * self.mde:.1f} %" if math.isfinite(self.mde) else "not reached"

    @property
    def sample_spread(self) -> float:
        """The relative spread of one sample it implies: a round's log-ratio is the
        difference of two samples."""
        return math.expm1(self.round_spread / math.sqrt(2.0))

    def to_dict(self) -> dict[str, Any]:
        """Every field; ``process`` only when measured (TOML has no null), ``mde`` only when
        reached (JSON has no infinity)."""
        return {
            k: v
            for k, v in asdict(self).items()
            if v is not None and not (k == "mde" and not math.isfinite(v))
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NoiseFigure:
        """From :meth:`to_dict`; ``ValueError`` naming the field when malformed."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ValueError(f"unknown field {unknown[0]!r} (known: {', '.join(known)})")
        missing = [n for n in ("build", "date", "round_spread", "budget") if n not in d]
        if missing:
            raise ValueError(f"missing field {missing[0]!r}")
        values: dict[str, Any] = {"gates": 0, "rounds": 0, "lag1": 0.0, "mde": math.inf}
        values.update((n, _checked(n, d[n])) for n in known if n in d)
        return cls(**values)


def _checked(name: str, v: Any) -> Any:
    """Field *name*'s value *v* as :meth:`NoiseFigure.from_dict` reads it; ``ValueError``
    naming the field when malformed."""
    if name in ("build", "date"):
        if not isinstance(v, str) or not v:
            raise ValueError(f"{name} {v!r} must be a non-empty string")
        return v
    if name in ("process", "process_df") and v is None:
        return v
    if name in ("gates", "rounds", "false_alarms", "undecided", "spurious"):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} {v!r} must be a whole number >= 0")
        return v
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{name} {v!r} must be a finite number")
    if name != "lag1" and v < 0:
        raise ValueError(f"{name} {v!r} must be >= 0")
    return float(v)


def noise_figure(
    outcomes: Sequence[str],
    round_log_ratios: Sequence[Sequence[float]],
    mdes: Sequence[float],
    *,
    build: str,
    date: str,
    budget: float,
    blocks: Sequence[Sequence[int]] = (),
    seconds: Sequence[float] = (),
) -> NoiseFigure:
    """The noise figure of one metric from its A/A gates: each gate's outcome, its rounds'
    log-ratios in order, the MDE it reached, its rounds' process *blocks* (none: one pair
    a gate) and the *seconds* its rounds took. The spread pools each block's rounds around
    the block's own mean (so that a process pair's offset is not counted as round noise); the
    lag-1 autocorrelation pools the products of consecutive rounds of one block the same way
    (:func:`centred_lag1` takes out what the blocks' means take away);
    the process term pools each gate's variance between its blocks beyond what their rounds
    explain, weighted by its blocks' degrees of freedom and cut at zero only once pooled (each
    gate's cut at zero would read a host with no term as one with some)."""
    if not outcomes:
        raise ValueError("a noise figure needs at least one A/A gate")
    pooled = ProcessEvidence()
    for i, d in enumerate(round_log_ratios):
        gate_blocks = list(blocks[i]) if i < len(blocks) and blocks[i] else None
        pooled += ProcessEvidence.of(d, gate_blocks)
    return NoiseFigure(
        build=build,
        date=date,
        gates=len(outcomes),
        rounds=sum(len(d) for d in round_log_ratios),
        round_spread=pooled.round_spread,
        lag1=evidence_lag1(pooled),
        mde=statistics.median(mdes) if mdes else math.inf,
        budget=budget,
        false_alarms=sum(o in FALSE_ALARMS for o in outcomes),
        undecided=sum(o == "undecided" for o in outcomes),
        spurious=sum(o in SPURIOUS for o in outcomes),
        process=pooled.process,
        process_df=float(pooled.between_df) if pooled.between_df else None,
        pace=_pace(seconds, round_log_ratios),
    )


def evidence_lag1(evidence: ProcessEvidence) -> float:
    """The lag-1 the pooled rounds of *evidence* show, read past their blocks' own means
    (:func:`centred_lag1`); 0 where no block of two rounds was pooled."""
    if not evidence.squares:
        return 0.0
    return centred_lag1(evidence.cross / evidence.squares, dict(evidence.sizes))


HISTORY_MIN_DF = 6
"""The process blocks' degrees of freedom (blocks less one a verdict) a host's stored verdicts
must hold before their pooled terms stand for the host's, as a calibration's do."""


def history_dependence(evidence: ProcessEvidence) -> Dependence | None:
    """The dependence a host's own verdicts (stored, and this run's earlier ones) show, pooled
    as a calibration pools its A/A gates: its process term with the blocks' degrees of freedom,
    its round spread and lag-1; ``None`` while their blocks hold fewer than
    :data:`HISTORY_MIN_DF` degrees of freedom or show no host's term
    (:attr:`~pytest_moeperf.measure.dependence.ProcessEvidence.process`): each verdict's own
    blocks then estimate it."""
    process = evidence.process
    if process is None or evidence.between_df < HISTORY_MIN_DF:
        return None
    return Dependence(
        process=process,
        lag1=min(0.9, max(0.0, evidence_lag1(evidence))),
        process_df=float(evidence.between_df),
        round_spread=evidence.round_spread,
        origin="this host's verdicts",
    )


def centred_lag1(ratio: float, sizes: Mapping[int, int]) -> float:
    """The lag-1 of rounds whose consecutive products over their squares, read around each
    block's own mean, came to *ratio*: the block's mean takes part of every round with it, so
    independent rounds in blocks of 10 read about -0.1, in blocks of 4 about -0.25, and rounds of
    lag-1 0.3 in blocks of 10 read 0.13. The lag-1 (within [-0.99, 0.99]) whose expected ratio
    (:func:`~pytest_moeperf.measure.dependence.centred_ratio`) is the one read."""
    low, high = -0.99, 0.99
    floor, ceiling = centred_ratio(low, sizes), centred_ratio(high, sizes)
    if ceiling - floor < 1e-9:
        return 0.0  # blocks of two rounds read -1/2 whatever the lag-1: nothing to tell
    if not floor < ratio < ceiling:
        return low if ratio <= floor else high
    for _ in range(40):  # the expected ratio rises with the lag-1: halve the bracket
        mid = (low + high) / 2
        low, high = (mid, high) if centred_ratio(mid, sizes) < ratio else (low, mid)
    return (low + high) / 2


def _pace(seconds: Sequence[float], rounds: Sequence[Sequence[float]]) -> float | None:
    paces = [s / len(d) for s, d in zip(seconds, rounds, strict=False) if s > 0 and d]
    return statistics.median(paces) if paces else None


BLOCK_GUESS = 10
"""Rounds a process pair is taken to serve when a verdict's resolution is stated before it
runs (its real blocks are set by the servers' start time, known only once they start)."""


@dataclass(frozen=True)
class Resolution:
    """What a verdict on a calibrated host can resolve, stated before it measures: from the
    host's round spread and dependence, the rounds a margin needs at the verdict's per-look
    level with 80 % power, and the change its budget reaches."""

    figure: NoiseFigure
    dependence: Dependence
    per_look_alpha: float
    power: float = 0.8

    def _units(self) -> float:
        """The variance of one round's share of the mean: the round spread scaled for drift,
        and the process term (the calibrated one, else :data:`PROCESS_TERM`) over a block of
        :data:`BLOCK_GUESS` rounds."""
        d = self.dependence
        process = d.process if d.calibrated else PROCESS_TERM
        return self.figure.round_spread**2 * d.ar_factor + process**2 * BLOCK_GUESS

    def _z(self) -> float:
        normal = statistics.NormalDist()
        return normal.inv_cdf(1 - self.per_look_alpha / 2) + normal.inv_cdf(self.power)

    def rounds_for(self, margin: float) -> int:
        """Rounds until a change of *margin* (0.05: 5 %) is resolved (at least 2)."""
        if not 0 < margin < 1:
            raise ValueError(f"margin {margin!r} must be in (0, 1)")
        return max(2, math.ceil(self._z() ** 2 * self._units() / math.log1p(margin) ** 2))

    def mde(self, rounds: int) -> float:
        """The smallest change *rounds* rounds resolve (0.05: 5 %)."""
        return math.expm1(self._z() * math.sqrt(self._units() / max(rounds, 1)))

    def describe(self, label: str, margin: float, budget: float | None) -> str:
        """``mmap.pp512: this host's noise (...) resolves 5 % in about 40 rounds (about
        100 s at 2.5 s a round); the budget of 180 s reaches about 72 rounds: MDE 3.7 %``."""
        needed = self.rounds_for(margin)
        head = (
            f"{label}: this host's calibrated noise ({self.figure.describe()}) resolves "
            f"{100 * margin:g} % in about {needed} rounds"
        )
        pace = self.figure.pace
        if pace is None:
            return head + " (no pace recorded: recalibrate to have the budget sized from it)"
        head += f" (about {needed * pace:.0f} s at {pace:.1f} s a round)"
        if budget is None:
            return head + ": the automatic budget buys them"
        reach = max(2, math.floor(budget / pace))
        mde = self.mde(reach)
        seconds = math.ceil(needed * pace / 10) * 10
        verdict = (
            ""
            if mde <= margin
            else f", wider than the margin: expect undecided (a budget of {seconds} s reaches it)"
        )
        return (
            f"{head}; the budget of {budget:g} s reaches about {reach}: MDE about "
            f"{100 * mde:.1f} %{verdict}"
        )


def host_dependence(figures: Sequence[NoiseFigure]) -> Dependence:
    """The dependence every verdict on a host with these noise *figures* carries: the largest
    process term they measured, with the fewest degrees of freedom any of them had (one a
    gate for a figure that did not record them) and the largest round spread (so the term's
    share of a round, which the per-look level is simulated at, is not overstated); the
    largest lag-1 (0 with no figures): one host, its noisiest metric's terms. A host none of
    whose figures measured a process term is not calibrated for it: each verdict's own blocks
    estimate it."""
    lag1 = min(0.9, max([0.0, *(f.lag1 for f in figures)]))
    measured = [f for f in figures if f.process is not None]
    if not measured:
        return Dependence(lag1=lag1)
    return Dependence(
        process=max(f.process or 0.0 for f in measured),
        lag1=lag1,
        process_df=max(
            1.0, min(f.gates if f.process_df is None else f.process_df for f in measured)
        ),
        round_spread=max(f.round_spread for f in measured),
    )
