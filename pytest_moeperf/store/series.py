"""A store's series: one (host, profile, configuration, workload) over its runs, oldest first,
each run a point with its median's own interval and the host's probe figure at that run."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..verdicts.changes import ChangePoint, Point, bisect_command, change_points
from .runstore import RunStore, SeriesRow

FALLBACK_LOG_SE = 0.05
"""A run's median's log SE where it kept fewer than two samples (it cannot say its own)."""


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
        return [
            Point(
                r.median,
                r.log_se if r.log_se is not None else FALLBACK_LOG_SE,
                r.build,
                r.date,
                r.probe,
                r.run,
            )
            for r in self.rows
        ]


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

    @property
    def alarms(self) -> bool:
        """A nightly job fails on it: it lies after the last accept and is not the host's."""
        return self.after_accept and not self.change.host


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


def store_changes(store: RunStore, margin: float, **where: str) -> tuple[list[Series], list[Found]]:
    """The series of *store* (narrowed by *where*: ``host=``, ``profile=``, ...) and their
    change points, each knowing whether it lies after its host's last accept."""
    all_series = series_of(store.series_rows(**where))
    accepted = {h: store.accepted_at(h) for h in {s.host for s in all_series}}
    return all_series, find_changes(all_series, accepted, margin)
