"""The dashboard's charts as data: what each chart draws (a series over its runs, each run a
point with its median's 95 % interval, each build a point in a long series; its change points,
its accepted baselines as steps with the limit their checks pass down to, and the commands'
records as marks that open them; a claim's ratio over runs against its bound), the span its
y-scale must hold, and every text it shows. The page's script (``dashboard.js``) is the one
place that lays them out: the scale and its ticks, where each point stands, and the zoom to a
build range, which lays the kept points out again. A chart goes to the page as JSON (the
``chart`` macro of ``report/templates/macros.html``)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..llama.build import label_number
from ..measure.workload import Workload
from ..verdicts.judge import Verdict
from ..verdicts.series import Found, Series, median_interval

WIDTH, HEIGHT, PAD = 640, 200, 36
"""A host page's chart in CSS pixels, and the padding the script keeps around its frame (a
compact chart is half as wide and high)."""
MOST_POINTS = 300
"""Runs a host page's chart draws one by one; a longer series is drawn a build a point."""
MOST_COMPACT = 60
"""The same for the side-by-side charts of the index."""

Chart = dict[str, Any]
"""A chart as the page's script reads it (see ``dashboard.js``, ``draw``)."""


@dataclass(frozen=True)
class Drawn:
    """One point of a chart: a run, or (in a long series) the runs of one build; *first* and
    *last* are the runs it stands for."""

    build: str
    label: str
    median: float
    low: float
    high: float
    first: int
    last: int
    run: str = ""
    """The run's key (a point of one run)."""


@dataclass(frozen=True)
class Step:
    """An accepted baseline: its value, from the run it was accepted from (index) on, and the
    limit its checks pass down to (``None``: its tolerance was not kept)."""

    first: int
    value: float
    label: str
    limit: float | None = None


@dataclass(frozen=True)
class Mark:
    """A command's record (a gate, a bisect, a tune...) kept before run *first*: a mark that
    links to the record."""

    first: int
    kind: str
    link: str


def chart_range(points: Sequence[Drawn], steps: Sequence[Step] = ()) -> tuple[float, float]:
    """The (bottom, top) a chart of *points* (and accepted baselines) spans: every interval,
    baseline and limit."""
    values = [p.low for p in points] + [p.high for p in points] + [st.value for st in steps]
    values += [st.limit for st in steps if st.limit is not None]
    return min(values), max(values)


def drawn_points(s: Series, most: int, *, relative: bool = False) -> list[Drawn]:
    """The points a chart of *s* draws: each run while there are at most *most*; else each
    build's runs as one point (their median, the range of their medians), the newest *most*;
    *relative*: each value a per cent of the median of every run's median."""
    if relative:
        centre = statistics.median(r.median for r in s.rows) / 100.0
        return [
            replace(p, median=p.median / centre, low=p.low / centre, high=p.high / centre)
            for p in drawn_points(s, most)
        ]
    rows = s.rows
    if len(rows) <= most:
        return [
            Drawn(r.build, f"{r.build} {r.date}", r.median, *median_interval(r), i, i, r.run)
            for i, r in enumerate(rows)
        ]
    groups: list[list[int]] = []
    for i, r in enumerate(rows):
        if groups and rows[groups[-1][0]].build == r.build:
            groups[-1].append(i)
        else:
            groups.append([i])
    out = []
    for g in groups[-most:]:
        medians = sorted(rows[i].median for i in g)
        label = f"{rows[g[0]].build}: {len(g)} runs"
        middle = medians[len(medians) // 2]
        out.append(Drawn(rows[g[0]].build, label, middle, medians[0], medians[-1], g[0], g[-1]))
    return out


def _slot(points: Sequence[Drawn], run: int) -> int | None:
    """The index of the first point drawn at or after *run* (``None``: after the last)."""
    return next((i for i, p in enumerate(points) if p.last >= run), None)


def series_chart(
    s: Series,
    found: Sequence[Found],
    *,
    steps: Sequence[Step] = (),
    marks: Sequence[Mark] = (),
    compact: bool = False,
    scale: tuple[float, float] | None = None,
    relative: bool = False,
    link: Callable[[Drawn], str] | None = None,
) -> Chart:
    """The chart of the series *s*: its points (:func:`drawn_points`), each change point
    between the points it lies between, each accepted baseline a step from its run on, each
    record a mark above the run after it that links to it. Its span is the *scale* (bottom,
    top) given (one shared by several hosts' charts), else its own; *relative*: each value as
    a per cent of the series' median (:func:`chart_range` gives either's range). *link* names
    what a point opens when it is clicked (its run's record)."""
    points = drawn_points(s, MOST_COMPACT if compact else MOST_POINTS, relative=relative)
    steps = () if relative else steps  # a baseline is a value, not a share of the median
    unit = "% of its median" if relative else Workload.parse(s.workload).unit
    return {
        "kind": "series",
        "width": WIDTH // 2 if compact else WIDTH,
        "height": HEIGHT // 2 if compact else HEIGHT,
        "span": list(scale or chart_range(points, steps)),
        "unit": unit,
        "points": [_point(p, unit, s.host, link) for p in points],
        "changes": _changes(points, found),
        "steps": _steps(points, steps, unit),
        "marks": _marks(points, marks),
    }


def _point(p: Drawn, unit: str, host: str, link: Callable[[Drawn], str] | None) -> dict[str, Any]:
    tip = f"{p.median:.4g} {unit} [{p.low:.4g}, {p.high:.4g}] · {p.label} · {host}"
    point = {
        "build": p.build,
        "number": label_number(p.build),
        "median": p.median,
        "low": p.low,
        "high": p.high,
        "tip": tip + (f" · run {p.run[:12]}" if p.run else ""),
    }
    return {**point, "record": link(p)} if link else point


def _changes(points: Sequence[Drawn], found: Sequence[Found]) -> list[dict[str, Any]]:
    """Each change point between the two points it lies between (none at or before the first
    point drawn)."""
    out = []
    for f in found:
        after = _slot(points, f.change.index)
        if after:
            out.append(
                {"from": after - 1, "to": after, "host": f.change.host,
                 "title": f.change.describe()}
            )  # fmt: skip
    return out


def _steps(points: Sequence[Drawn], steps: Sequence[Step], unit: str) -> list[dict[str, Any]]:
    """Each accepted baseline (and the limit its checks pass down to), from the point of its
    run to the point before the next one's."""
    out = []
    for k, st in enumerate(steps):
        start = _slot(points, st.first)
        if start is None:
            continue
        nxt = _slot(points, steps[k + 1].first) if k + 1 < len(steps) else None
        end = len(points) - 1 if nxt is None else max(nxt - 1, start)
        out.append({"kind": "baseline", "from": start, "to": end, "value": st.value,
                    "title": st.label})  # fmt: skip
        if st.limit is not None:
            said = f"limit {st.limit:.4g} {unit} ({st.label})"
            out.append(
                {"kind": "limit", "from": start, "to": end, "value": st.limit, "title": said}
            )
    return out


def _marks(points: Sequence[Drawn], marks: Sequence[Mark]) -> list[dict[str, Any]]:
    """Each record above the point of the run after it (*slot* past the last: after them all)."""
    out = []
    for m in marks:
        at = _slot(points, m.first)
        out.append({"slot": len(points) if at is None else at, "kind": m.kind, "link": m.link})
    return out


def claim_chart(verdicts: Sequence[tuple[str, Verdict]]) -> Chart:
    """A claim's ratio over runs (each verdict with its run's date): each verdict its ratio
    and interval (hollow when undecided, red when it failed), the bound a dashed line."""
    last = verdicts[-1][1]
    return {
        "kind": "claim",
        "width": WIDTH,
        "height": HEIGHT // 2 + 40,
        "span": [
            min(min(v.low, v.threshold) for _, v in verdicts),
            max(max(v.high, v.threshold) for _, v in verdicts),
        ],
        "unit": "ratio",
        "bound": {"value": last.threshold, "title": f"bound {last.relation} {last.threshold:g}"},
        "first": verdicts[0][0][:10],
        "last": verdicts[-1][0][:10],
        "verdicts": [_verdict(date, v) for date, v in verdicts],
    }


def _verdict(date: str, v: Verdict) -> dict[str, Any]:
    title = f"{date}: {v.outcome} {v.ratio:.3g} [{v.low:.3g}, {v.high:.3g}]"
    return {"outcome": v.outcome, "ratio": v.ratio, "low": v.low, "high": v.high, "title": title}
