"""A store's series: one (host, profile, configuration, workload) over its runs, oldest first,
each run a point with its median's own interval and the host's probe figure at that run."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..verdicts.changes import Point
from .runstore import SeriesRow

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
