"""A series and what is judged of it: one (host, profile, configuration, workload) over its
runs, oldest first, each run a point with its median's own interval and the host's probe
figure at that run; its change points as found (with the bisect that names the build, whether
they lie after the host's last accept, which other hosts step at the same build), how one is
triaged, and two runs' ratios. The store reads series and keeps marks
(:mod:`pytest_moeperf.store.series`); what they say is judged here."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import StoreError
from .changes import ChangePoint, Point, Z, bisect_command, change_points


@dataclass(frozen=True)
class SeriesRow:
    """One run's point of a series, as the store keeps it."""

    host: str
    profile: str
    configuration: str
    workload: str
    build: str
    median: float
    log_se: float | None
    probe: float | None
    written: float
    date: str
    run: str


FALLBACK_LOG_SE = 0.05
"""A run's median's log SE where it kept fewer than two samples (it cannot say its own): the
one rule for such a run wherever its median is judged or drawn (:func:`run_log_se`)."""
MARK_STATES = {"ack": "acknowledged", "invalid": "invalid", "fixed": "fixed"}
"""How a change point may be triaged (the command's word: the state it is kept as)."""


@dataclass(frozen=True)
class Mark:
    """A change point triaged: acknowledged (explained, e.g. filed as an issue), invalid (not
    a real change), or fixed; with its note and when it was marked."""

    state: str
    note: str = ""
    date: str = ""

    def describe(self) -> str:
        return f"{self.state}{f': {self.note}' if self.note else ''} ({self.date})"


@dataclass
class Series:
    host: str
    profile: str
    configuration: str
    workload: str
    rows: list[SeriesRow] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.host} {self.profile} {self.configuration} {self.workload}"

    @property
    def key(self) -> tuple[str, str, str]:
        """The series' (profile, configuration, workload): the same on every host."""
        return (self.profile, self.configuration, self.workload)

    def points(self) -> list[Point]:
        return [Point(r.median, run_log_se(r), r.build, r.date, r.probe, r.run) for r in self.rows]


def run_log_se(r: SeriesRow) -> float:
    """The log SE of a run's median: its own, or :data:`FALLBACK_LOG_SE` where it kept fewer
    than two samples; what its change points, its ratio to another run, its chart's interval
    and its downloads all read."""
    return r.log_se if r.log_se is not None else FALLBACK_LOG_SE


def median_interval(r: SeriesRow) -> tuple[float, float]:
    """The 95 % interval of a run's median (:func:`run_log_se`), as the dashboard draws it
    and its downloads hold it."""
    half = Z * run_log_se(r)
    return r.median * math.exp(-half), r.median * math.exp(half)


def series_of(rows: Iterable[SeriesRow]) -> list[Series]:
    """*rows* (ordered by host, profile, configuration, workload, then time) as series."""
    out: dict[tuple[str, str, str, str], Series] = {}
    for r in rows:
        key = (r.host, r.profile, r.configuration, r.workload)
        if key not in out:
            out[key] = Series(*key)
        out[key].rows.append(r)
    return list(out.values())


@dataclass
class Found:
    """A change point of one series, and what is said of it."""

    series: Series
    change: ChangePoint
    bisect: str | None
    after_accept: bool
    """It lies after the last accepted baseline of its host and profile."""
    also: list[str] = field(default_factory=list)
    """Other hosts whose same series steps at the same build."""
    mark: Mark | None = None
    """How it was triaged (``None``: not yet)."""

    @property
    def run(self) -> str:
        """The key of the first run after the step."""
        return self.series.rows[self.change.index].run

    @property
    def id(self) -> str:
        """Its name for triage: the series and the first run after the step, hashed (the same
        each time the change point is found there, on either backend, after an export)."""
        s = self.series
        text = "\0".join((s.host, s.profile, s.configuration, s.workload, self.run))
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    @property
    def alarms(self) -> bool:
        """It lies after the last accept and is not the host's: a regression to look at."""
        return self.after_accept and not self.change.host

    @property
    def untriaged(self) -> bool:
        """A nightly job fails on it: it alarms and no one has marked it."""
        return self.alarms and self.mark is None

    def to_dict(self) -> dict[str, object]:
        """The change point as ``moeperf changes --json`` prints it."""
        c = self.change
        return {
            "id": self.id,
            "host": self.series.host,
            "profile": self.series.profile,
            "configuration": self.series.configuration,
            "workload": self.series.workload,
            "run": self.run,
            "date": c.date,
            "before": c.before,
            "after": c.after,
            "ratio": c.ratio,
            "low": c.low,
            "high": c.high,
            "hosts_change": c.host,
            "also_on": list(self.also),
            "after_accept": self.after_accept,
            "untriaged": self.untriaged,
            "mark": None if self.mark is None else vars(self.mark),
            "bisect": self.bisect,
        }


def find_changes(
    all_series: Sequence[Series], accepted: Mapping[str, Mapping[str, float]], margin: float
) -> list[Found]:
    """The change points of every series, each with its bisect command, whether it lies after
    the last accept of its host and profile (*accepted*: host -> profile -> time), and which
    other hosts' same series step at the same build."""
    found: list[Found] = []
    for s in all_series:
        profile, configuration, workload = s.key
        for c in change_points(s.points(), margin):
            command = bisect_command(
                c, profile=profile, configuration=configuration, workload=workload, margin=margin
            )
            since = accepted.get(s.host, {}).get(profile, 0.0)
            found.append(Found(s, c, command, after_accept=s.rows[c.index].written > since))
    for f in found:
        f.also = sorted(
            {
                g.series.host
                for g in found
                if g.series.key == f.series.key
                and g.series.host != f.series.host
                and g.change.after == f.change.after
            }
        )
    return found


@dataclass(frozen=True)
class RunRatio:
    """One series that two runs both hold: run *b*'s median over run *a*'s, with the 95 %
    interval of two independent medians (each its own log SE)."""

    host: str
    profile: str
    configuration: str
    workload: str
    a: float
    b: float
    ratio: float
    low: float
    high: float

    def to_dict(self) -> dict[str, object]:
        return dict(vars(self))


def run_ratios(rows: Iterable[SeriesRow], a: str, b: str) -> list[RunRatio]:
    """Every series that the runs *a* and *b* (their keys, or the first digits of them) both
    hold, by series; one :class:`StoreError` line when a key names no run or several."""
    rows = list(rows)
    first, second = _run(rows, a), _run(rows, b)
    by_series: dict[tuple[str, str, str, str], dict[str, SeriesRow]] = {}
    for r in rows:
        if r.run in (first, second):
            by_series.setdefault((r.host, r.profile, r.configuration, r.workload), {})[r.run] = r
    out = []
    for key, pair in sorted(by_series.items()):
        if first not in pair or second not in pair:
            continue
        ra, rb = pair[first], pair[second]
        se = math.hypot(run_log_se(ra), run_log_se(rb))
        ratio = rb.median / ra.median
        low, high = ratio * math.exp(-Z * se), ratio * math.exp(Z * se)
        out.append(RunRatio(*key, ra.median, rb.median, ratio, low, high))
    return out


def _run(rows: Sequence[SeriesRow], prefix: str) -> str:
    keys = sorted({r.run for r in rows if prefix and r.run.startswith(prefix)})
    if len(keys) != 1:
        what = "no run" if not keys else f"{len(keys)} runs"
        raise StoreError(
            f"--compare {prefix}: {what} of the store has that key; moeperf store list shows "
            "each run's key"
        )
    return keys[0]
