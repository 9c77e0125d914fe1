"""A recorded reference beside this host's numbers: the figures of a decision record (a
baseline file a profile names as its ``reference``) next to each claim and dead end, and a
production log's real-traffic rows against a file's ``kind = "traffic"`` entries.

A reference is never a baseline: its numbers were taken on another host, another day, often
another build, so they are shown beside this host's, and never turned into a change. The one
place they are judged is :func:`judge_traffic`, where a server's own log is held against the
traffic figures recorded for the same server.

Pure functions over numbers: the entries come in as anything with the fields of a baseline
entry (:class:`StoredFigure`), so this module reads no file.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol, TypeVar

import numpy as np

from ..defaults import CONFIDENCE
from ..llama.logs import RequestTiming
from ..measure.measurement import Measurement
from ..measure.stats import bounded_exp, log_sigma
from .judge import Verdict
from .outcomes import Decision

DEFAULT_LABEL = "reference"
"""What a reference is called where its profile gives no ``reference_label``."""
RESAMPLES = 2000
"""Bootstrap resamples of a log's requests (:func:`judge_traffic`)."""
_CHUNK = 4_000_000
"""Most request indices one bootstrap batch draws at once (bounded memory on long logs)."""


class StoredFigure(Protocol):
    """The fields of a stored figure this module reads (a baseline file's entry)."""

    @property
    def kind(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def build(self) -> str: ...
    @property
    def configuration(self) -> str: ...
    @property
    def workload(self) -> str: ...
    @property
    def value(self) -> float: ...
    @property
    def date(self) -> str: ...


@dataclass(frozen=True)
class ReferenceFigure:
    """The reference's number for one measured (configuration, build, workload), and which
    entry it is: the one of the measured build, else the newest by date."""

    value: float
    build: str
    date: str
    host: str
    measured_build: str
    """The build this host measured; :attr:`matched` when the reference has that build."""

    @property
    def matched(self) -> bool:
        return self.build == self.measured_build

    @property
    def note(self) -> str:
        """Empty when the builds match, else which entry stands in: ``b11713 of 2026-10-17,
        the newest (measured b11900)``."""
        if self.matched:
            return ""
        return f"{self.build} of {self.date}, the newest (measured {self.measured_build})"


E = TypeVar("E", bound=StoredFigure)


def pick_entry(
    entries: Iterable[E], configuration: str, workload: str, build: str, *, kind: str = "bench"
) -> E | None:
    """The entry of *configuration* and *workload* (a canonical name, as
    :attr:`Workload.name` writes it) whose build is *build*, else the newest by date (the
    last in file order among equal dates); ``None`` when there is none."""
    found = [
        e
        for e in entries
        if e.kind == kind and e.configuration == configuration and e.workload == workload
    ]
    pool = [e for e in found if e.build == build] or found
    if not pool:
        return None
    return pool[max(range(len(pool)), key=lambda i: (pool[i].date, i))]


_AGGREGATE = re.compile(r"^(prefill|decode)-aggregate(?:>=(\d+))?$")


def stand_in(entries: Iterable[E], configuration: str, workload: str, build: str) -> E | None:
    """The record's traffic row that stands for a profile's traffic metric (``traffic.prefill``
    or ``traffic.decode``) of *configuration*: its aggregate row of that rate (the sum of tokens
    over the sum of time, what a pass's metric computes), of the lowest request threshold where
    the record gives several (``prefill-aggregate>=256`` before ``>=4000``: the most requests),
    of *build* else the newest (:func:`pick_entry`). ``None`` for other workloads or when the
    record has no such row."""
    rate = workload.removeprefix("traffic.")
    long = re.fullmatch(r"prefill_(\d+)", rate)
    if long:  # traffic.prefill_4000: the row of exactly that threshold
        rate = "prefill"
    if rate == workload or rate not in ("prefill", "decode"):
        return None
    rows: list[tuple[int, E]] = []
    for e in entries:
        m = _AGGREGATE.match(e.workload)
        if e.kind == "traffic" and e.configuration == configuration and m and m[1] == rate:
            rows.append((int(m[2] or 0), e))
    if long:
        rows = [(t, e) for t, e in rows if t == int(long[1])]
    if not rows:
        return None
    lowest = min(t for t, _ in rows)
    chosen = [e for t, e in rows if t == lowest]
    return pick_entry(chosen, configuration, chosen[0].workload, build, kind="traffic")


def pick_figure(
    entries: Iterable[StoredFigure], configuration: str, workload: str, build: str
) -> ReferenceFigure | None:
    """:func:`pick_entry`'s number, and which entry it is, for a measurement on *build*; for a
    traffic metric, the record's row that stands for it (:func:`stand_in`)."""
    e = stand_in(entries, configuration, workload, build) or pick_entry(
        entries, configuration, workload, build
    )
    return None if e is None else ReferenceFigure(e.value, e.build, e.date, e.host, build)


@dataclass(frozen=True)
class Reference:
    """A profile's recorded reference: its label, the file it came from, and that file's
    entries."""

    label: str
    path: str
    entries: tuple[StoredFigure, ...]
    hosts: tuple[str, ...] = ()
    """The file's hosts, by id: the hosts whose numbers these are."""
    profile: str = ""
    """The profile that names this reference."""

    def figure(self, m: Measurement) -> ReferenceFigure | None:
        """The reference's number for measurement *m* (``None``: the file has none)."""
        return pick_figure(self.entries, m.configuration, m.workload.name, m.build)

    def row(
        self, nodeid: str, verdict: Verdict, left: Measurement, right: Measurement
    ) -> ReferenceRow:
        """The reference row of a claim or dead end judged as ``left / right``."""
        return ReferenceRow(
            nodeid=nodeid,
            reference=self.label,
            profile=self.profile,
            verdict=verdict,
            left=left,
            right=right,
            reference_left=self.figure(left),
            reference_right=self.figure(right),
        )


@dataclass(frozen=True)
class ReferenceRow:
    """A claim or dead end beside its reference: the reference's numbers for both operands
    and their ratio, this host's medians, the verdict's ratio, interval, bound and outcome."""

    nodeid: str
    reference: str
    """The reference's label (``ADR-0042``)."""
    profile: str
    verdict: Verdict
    left: Measurement
    right: Measurement
    reference_left: ReferenceFigure | None
    reference_right: ReferenceFigure | None

    @property
    def reference_ratio(self) -> float | None:
        """The reference's ``left / right`` (``None`` when it lacks either number)."""
        if self.reference_left is None or self.reference_right is None:
            return None
        return self.reference_left.value / self.reference_right.value


# --------------------------------------------------------------------------------------------
# A production log against a file's traffic entries


Metric = Literal["prefill", "decode", "all"]
Statistic = Literal["aggregate", "median"]


def log_requests(
    timings: Iterable[RequestTiming], metric: Metric, min_tokens: int
) -> list[tuple[int, float]]:
    """``(tokens, ms)`` of each complete request of a log with at least *min_tokens* newly
    prefilled (``prefill``) or generated (``decode``) tokens, as
    :func:`~pytest_moeperf.llama.logs.traffic_stats` selects them; ``all``: both, summed."""
    out = []
    for t in timings:
        if not t.complete:
            continue
        if metric == "prefill":
            tokens, ms = t.prompt_tokens, t.prompt_ms
        elif metric == "decode":
            tokens, ms = t.gen_tokens, t.gen_ms
        else:
            tokens = (t.prompt_tokens or 0) + (t.gen_tokens or 0)
            ms = (t.prompt_ms or 0.0) + (t.gen_ms or 0.0)
        if tokens is not None and ms is not None and tokens >= min_tokens and ms > 0:
            out.append((tokens, ms))
    return out


def _statistic(tokens: np.ndarray, ms: np.ndarray, statistic: Statistic) -> np.ndarray:
    """Per row of index-resampled *tokens*/*ms* (2-D): sum(tokens) / sum(time) in tok/s, or
    the median of the per-request rates."""
    if statistic == "aggregate":
        return np.asarray(tokens.sum(axis=-1) * 1000.0 / ms.sum(axis=-1))
    return np.asarray(np.median(tokens * 1000.0 / ms, axis=-1))


def statistic_of(requests: Sequence[tuple[int, float]], statistic: Statistic) -> float:
    """The statistic of *requests* (``aggregate``: sum of tokens over sum of time, as
    ADR-0042's real-traffic table; ``median``: of the per-request rates), tok/s."""
    tokens = np.array([t for t, _ in requests], dtype=float)
    ms = np.array([m for _, m in requests], dtype=float)
    return float(_statistic(tokens[None, :], ms[None, :], statistic)[0])


def bootstrap_draws(
    requests: Sequence[tuple[int, float]], statistic: Statistic, *, seed: int = 0
) -> tuple[float, np.ndarray]:
    """The statistic of *requests* (:func:`statistic_of`) and its :data:`RESAMPLES` bootstrap
    draws over requests, seeded."""
    if not requests:
        raise ValueError("no requests")
    tokens = np.array([t for t, _ in requests], dtype=float)
    ms = np.array([m for _, m in requests], dtype=float)
    value = statistic_of(requests, statistic)
    rng = np.random.default_rng(seed)
    n = len(requests)
    per = max(1, _CHUNK // n)
    stats: list[np.ndarray] = []
    for start in range(0, RESAMPLES, per):
        idx = rng.integers(0, n, size=(min(per, RESAMPLES - start), n))
        stats.append(_statistic(tokens[idx], ms[idx], statistic))
    return value, np.concatenate(stats)


@dataclass(frozen=True)
class TrafficCheck:
    """One real-traffic row of a log against its stored figure: the log's statistic with its
    interval over requests, as a ratio to the stored value widened by the stored figure's own
    spread; ``fails`` when the whole interval lies below ``1 - tolerance``, ``holds`` when it
    lies wholly at or above, ``undecided`` otherwise (or without requests)."""

    label: str
    """The row, as ``moeperf logstats`` names it."""
    workload: str
    """The stored entry's traffic metric (``prefill-aggregate>=256``)."""
    outcome: Decision
    n: int
    """Requests behind the log's statistic."""
    stored: float
    rel_spread: float
    tolerance: float
    value: float | None = None
    """The log's statistic, tok/s (``None``: no requests)."""
    low: float | None = None
    """Lower end of the interval of the log's statistic over the stored value."""
    high: float | None = None
    confidence: float = CONFIDENCE
    request_width: float = 0.0
    """Half the log-width of the interval the log's requests alone give (the bootstrap's)."""

    @property
    def dominant(self) -> str:
        """Which term sets most of the width: ``the record's spread`` (more requests will not
        narrow it) or ``the log's requests``."""
        stored = statistics.NormalDist().inv_cdf(0.5 + self.confidence / 2) * log_sigma(
            self.rel_spread
        )
        return "the record's spread" if stored > self.request_width else "the log's requests"

    @property
    def limit(self) -> float:
        """The lowest level that still holds: stored x (1 - tolerance)."""
        return self.stored * (1 - self.tolerance)

    def explain(self) -> str:
        """One line: ``prefill, ... aggregate: 109.3 tok/s, 0.50 [0.44, 0.56] of 218.5 (limit
        207.6): fails``."""
        stored, limit = rate_text(self.stored), rate_text(self.limit)
        if self.value is None or self.low is None or self.high is None:
            return f"{self.label}: no requests in the log (stored {stored} tok/s): {self.outcome}"
        return (
            f"{self.label}: {rate_text(self.value)} tok/s (n={self.n:,}), "
            f"{self.value / self.stored:.2f} [{self.low:.2f}, {self.high:.2f}] of {stored} "
            f"(limit {limit}): {self.outcome}"
        )


def rate_text(value: float) -> str:
    """tok/s as the record's tables write them: ``218.5``, ``14.60``."""
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.2f}"


def judge_traffic(
    requests: Sequence[tuple[int, float]],
    statistic: Statistic,
    stored: float,
    *,
    label: str,
    workload: str,
    tolerance: float,
    rel_spread: float = 0.0,
    seed: int = 0,
) -> TrafficCheck:
    """Judge a log's *requests* against a *stored* real-traffic figure. The interval of
    ``log / stored`` is the log's percentile bootstrap interval over requests
    (:func:`bootstrap_draws`, seeded) with the stored figure's relative standard uncertainty
    *rel_spread* added in quadrature on the log scale (the stored level is itself an estimate,
    of another log)."""
    if not (math.isfinite(stored) and stored > 0):
        raise ValueError(f"stored value {stored!r} must be positive and finite")
    if not (math.isfinite(tolerance) and 0 <= tolerance < 1):
        raise ValueError(f"tolerance {tolerance!r} must be in [0, 1)")
    check = TrafficCheck(label, workload, "undecided", len(requests), stored, rel_spread, tolerance)
    if not requests:
        return check
    value, drawn = bootstrap_draws(requests, statistic, seed=seed)
    tail = (1 - CONFIDENCE) / 2
    low, high = (float(q) for q in np.quantile(drawn, [tail, 1 - tail]))
    low, high = min(low, value), max(high, value)
    z = statistics.NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)
    spread = z * log_sigma(rel_spread)
    down = math.hypot(math.log(value / low), spread) if low > 0 else math.inf
    up = math.hypot(math.log(high / value), spread)
    ratio = value / stored
    lo, hi = ratio * bounded_exp(-down), ratio * bounded_exp(up)
    limit = 1 - tolerance
    outcome: Decision = "holds" if lo >= limit else "fails" if hi < limit else "undecided"
    return replace(
        check,
        outcome=outcome,
        value=value,
        low=lo,
        high=hi,
        request_width=math.log(high / low) / 2 if low > 0 else math.inf,
    )


def traffic_outcome(checks: Iterable[TrafficCheck]) -> Decision:
    """``fails`` when a row fails, else ``undecided`` when one is, else ``holds``."""
    outcomes = {c.outcome for c in checks}
    if "fails" in outcomes:
        return "fails"
    return "undecided" if "undecided" in outcomes else "holds"
