"""The dashboard's charts, as SVG text: a series over its runs (each run a point with its
median's 95 % interval; each build a point in a long series), with its change points, its
accepted baselines as steps with the limit their checks pass down to, and the commands' records
as marks that open them; and a claim's ratio over runs against its bound, undecided verdicts
drawn as undecided. A range of :data:`LOG_RANGE` times or more is drawn on a log scale."""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..llama.build import label_number
from ..measure.workload import Workload
from ..verdicts.judge import Verdict
from ..verdicts.series import Found, Series, median_interval

WIDTH, HEIGHT, PAD = 640, 200, 36
MOST_POINTS = 300
"""Runs a host page's chart draws one by one; a longer series is drawn a build a point."""
MOST_COMPACT = 60
"""The same for the side-by-side charts of the index."""
HEADROOM = 0.05
"""The share of a chart's height left free above its highest whisker and below its lowest, so
that every interval ends inside the frame where it can be seen to end (a flat series whose
intervals are wider than its medians' range drew every whisker from frame edge to frame edge,
as if clipped)."""
LOG_RANGE = 10.0
"""A chart whose top is this many times its bottom (or more) is drawn on a log scale: a series
that fell from 600 to 15 tok/s still shows its noise at either end."""


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


def nice_ticks(bottom: float, top: float, most: int = 5) -> list[float]:
    """At most *most* round values (1, 2 or 5 times a power of ten apart) within
    [*bottom*, *top*]: where a chart's gridlines and scale labels go."""
    span = top - bottom
    if not span > 0 or not math.isfinite(span):
        return [bottom] if math.isfinite(bottom) else []
    raw = span / max(most - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(bottom / step) * step
    return [round(first + k * step, 12) for k in range(int((top - first) / step + 1e-9) + 1)]


def log_ticks(bottom: float, top: float, most: int = 7) -> list[float]:
    """The values 1, 2 and 5 times a power of ten within [*bottom*, *top*] (both above 0), or
    only the powers of ten where those would be more than *most*: a log scale's gridlines."""
    low, high = math.floor(math.log10(bottom)), math.ceil(math.log10(top))
    ticks: list[float] = []
    for mantissas in ((1, 2, 5), (1,)):
        every = (float(f"{m}e{e}") for e in range(low, high + 1) for m in mantissas)
        ticks = [v for v in every if bottom <= v <= top]
        if len(ticks) <= most:
            break
    return ticks


@dataclass(frozen=True)
class Scale:
    """A chart's y-scale from *bottom* to *top*: linear, or logarithmic where the range is
    :data:`LOG_RANGE` times or more."""

    bottom: float
    top: float

    @property
    def log(self) -> bool:
        return self.bottom > 0 and self.top >= LOG_RANGE * self.bottom

    def share(self, v: float) -> float:
        """Where *v* stands, from 0 at the frame's bottom to 1 at its top: *bottom* and *top*
        :data:`HEADROOM` inside it."""
        if self.log:
            raw = math.log(v / self.bottom) / math.log(self.top / self.bottom)
        else:
            raw = (v - self.bottom) / ((self.top - self.bottom) or self.top or 1.0)
        return HEADROOM + (1 - 2 * HEADROOM) * raw

    def ticks(self) -> list[float]:
        return log_ticks(self.bottom, self.top) if self.log else nice_ticks(self.bottom, self.top)


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
    """The (bottom, top) a chart of *points* (and accepted baselines) spans."""
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
            Drawn(
                r.build,
                f"{r.build} {r.date}",
                r.median,
                *median_interval(r),
                i,
                i,
                r.run,
            )
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
        out.append(
            Drawn(
                rows[g[0]].build,
                f"{rows[g[0]].build}: {len(g)} runs",
                medians[len(medians) // 2],
                medians[0],
                medians[-1],
                g[0],
                g[-1],
            )
        )
    return out


def _frame(
    w: int, h: int, scale: Scale, n: int
) -> tuple[Callable[[int], float], Callable[[float], float]]:
    def x(i: int) -> float:
        return PAD + (w - 2 * PAD) * (i + 0.5) / n

    def y(v: float) -> float:
        return h - PAD / 2 - (h - PAD) * scale.share(v)

    return x, y


def _svg(
    w: int,
    h: int,
    scale: Scale,
    marks: Sequence[str],
    first: str,
    last: str,
    unit: str = "",
) -> str:
    """The chart's frame: gridlines at round values with their labels and the *unit* above
    them ("log scale" beside it where it is one), then *marks*, and the first and last build
    along the bottom (a tick where each build begins is a mark)."""
    _, y = _frame(w, h, scale, 1)
    said = f"{unit}, log scale" if scale.log else unit
    grid = [f'<text x=2 y=9 class="axis unit">{html.escape(said)}</text>'] if said else []
    for v in scale.ticks():
        grid.append(
            f'<line class=grid x1="{PAD}" x2="{w - 4}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>'
            f'<text x="{PAD - 3}" y="{y(v) + 3:.1f}" class=axis text-anchor=end>{v:.6g}</text>'
        )
    return (
        f'<svg class="chart{" log" if scale.log else ""}" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role=img data-pad="{PAD}">'
        f"{''.join(grid)}{''.join(marks)}"
        f'<text x="{PAD}" y="{h - 2}" class="axis first">{html.escape(first)}</text>'
        f'<text x="{w - PAD}" y="{h - 2}" class="axis last" text-anchor=end>'
        f"{html.escape(last)}</text>"
        "</svg>"
    )


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
) -> str:
    """An SVG of the series *s*: its points (:func:`drawn_points`), each change point a line
    between the points it lies between, each accepted baseline a step from its run on, each
    record a mark above the run after it that links to it. On the *scale* (bottom, top) given
    (one shared by several hosts' charts), else its own; *relative*: each value as a per cent
    of the series' median (:func:`chart_range` gives either's range). *link* names what a
    point opens when it is clicked (its run's record), in its ``data-record``."""
    w, h = (WIDTH // 2, HEIGHT // 2) if compact else (WIDTH, HEIGHT)
    points = drawn_points(s, MOST_COMPACT if compact else MOST_POINTS, relative=relative)
    steps = () if relative else steps  # a baseline is a value, not a share of the median
    frame = Scale(*(scale or chart_range(points, steps)))
    x, y = _frame(w, h, frame, len(points))
    unit = "% of its median" if relative else Workload.parse(s.workload).unit
    out = _point_marks(points, x, y, h, (unit, s.host), link)
    out += _change_lines(points, found, x, h)
    out += _baseline_lines(points, steps, x, y, unit)
    out += _record_marks(points, marks, x, w)
    return _svg(w, h, frame, out, points[0].build, points[-1].build, unit)


Axis = Callable[[int], float]
Level = Callable[[float], float]


def _point_marks(
    points: Sequence[Drawn],
    x: Axis,
    y: Level,
    h: int,
    told: tuple[str, str],
    link: Callable[[Drawn], str] | None,
) -> list[str]:
    """Each point with its interval and its tip (*told*: its unit and host), and a tick where
    each build begins."""
    unit, host = told
    out = []
    for i, p in enumerate(points):
        num = label_number(p.build)
        number = "" if num is None else str(num)
        tip = f"{p.median:.4g} {unit} [{p.low:.4g}, {p.high:.4g}] · {p.label} · {host}" + (
            f" · run {p.run[:12]}" if p.run else ""
        )
        slotted = f'data-slot="{i}" data-number="{number}"'
        opens = f' data-record="{html.escape(link(p))}"' if link else ""
        if i == 0 or points[i - 1].build != p.build:  # a tick where a build begins
            out.append(
                f'<line class=tick {slotted} x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{h - 16}" '
                f'y2="{h - 11}"/>'
            )
        out.append(
            f'<line class=interval {slotted} x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(p.low):.1f}" '
            f'y2="{y(p.high):.1f}"/><circle class=point {slotted} cx="{x(i):.1f}" '
            f'cy="{y(p.median):.1f}" r=2.5 data-build="{html.escape(p.build)}" '
            f'data-tip="{html.escape(tip)}"{opens}><title>{html.escape(tip)}</title></circle>'
        )
    return out


def _change_lines(points: Sequence[Drawn], found: Sequence[Found], x: Axis, h: int) -> list[str]:
    """Each change point, a line between the points it lies between."""
    out = []
    for f in found:
        after = _slot(points, f.change.index)
        if not after:  # at or before the first point drawn
            continue
        cx = (x(after - 1) + x(after)) / 2
        out.append(
            f'<line class="changepoint{" host" if f.change.host else ""}" '
            f'data-from="{after - 1}" data-to="{after}" x1="{cx:.1f}" x2="{cx:.1f}" y1="4" '
            f'y2="{h - PAD / 2:.1f}"><title>'
            f"{html.escape(f.change.describe())}</title></line>"
        )
    return out


def _baseline_lines(
    points: Sequence[Drawn], steps: Sequence[Step], x: Axis, y: Level, unit: str
) -> list[str]:
    """Each accepted baseline (and the limit its checks pass down to), a step from its run on
    to the next one's."""
    out = []
    for k, st in enumerate(steps):
        start = _slot(points, st.first)
        if start is None:
            continue
        nxt = _slot(points, steps[k + 1].first) if k + 1 < len(steps) else None
        end = len(points) - 1 if nxt is None else max(nxt - 1, start)
        lines = [("baseline", st.value, st.label)]
        if st.limit is not None:
            lines.append(("limit", st.limit, f"limit {st.limit:.4g} {unit} ({st.label})"))
        for kind, value, said in lines:
            out.append(
                f'<line class={kind} data-from="{start}" data-to="{end}" '
                f'x1="{x(start) - 3:.1f}" x2="{x(end) + 3:.1f}" '
                f'y1="{y(value):.1f}" y2="{y(value):.1f}"><title>{html.escape(said)}'
                "</title></line>"
            )
    return out


def _record_marks(points: Sequence[Drawn], marks: Sequence[Mark], x: Axis, w: int) -> list[str]:
    """Each record, a mark above the run after it that links to it."""
    out = []
    for m in marks:
        at = _slot(points, m.first)
        cx = x(at) if at is not None else w - PAD / 2
        slot = len(points) if at is None else at
        out.append(
            f'<a class=record href="{html.escape(m.link)}" data-slot="{slot}">'
            f'<path d="M{cx - 4:.1f},2 '
            f'L{cx + 4:.1f},2 L{cx:.1f},9 Z"><title>{html.escape(m.kind)}</title></path></a>'
        )
    return out


def claim_chart(verdicts: Sequence[tuple[str, Verdict]]) -> str:
    """A claim's ratio over runs (each verdict with its run's date): each verdict its ratio and
    interval (hollow when undecided, red when it failed), the bound a dashed line."""
    w, h = WIDTH, HEIGHT // 2 + 40
    frame = Scale(
        min(min(v.low, v.threshold) for _, v in verdicts),
        max(max(v.high, v.threshold) for _, v in verdicts),
    )
    x, y = _frame(w, h, frame, len(verdicts))
    out = []
    last = verdicts[-1][1]
    bound = last.threshold
    out.append(
        f'<line class=bound x1="{PAD}" x2="{w - PAD}" y1="{y(bound):.1f}" y2="{y(bound):.1f}">'
        f"<title>bound {last.relation} {bound:g}</title></line>"
    )
    for i, (date, v) in enumerate(verdicts):
        out.append(
            f'<line class=interval x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(v.low):.1f}" '
            f'y2="{y(v.high):.1f}"/><circle class="verdict {html.escape(v.outcome)}" '
            f'cx="{x(i):.1f}" cy="{y(v.ratio):.1f}" r=3><title>{html.escape(date)}: '
            f"{html.escape(v.outcome)} {v.ratio:.3g} [{v.low:.3g}, {v.high:.3g}]</title></circle>"
        )
    return _svg(w, h, frame, out, verdicts[0][0][:10], verdicts[-1][0][:10], "ratio")
