"""The dashboard: static pages of every host's series over builds, drawn from the store's rows
(SVG written here, no script from anywhere else: the pages open from disk, with no server and
no network).

- ``index.html``: the hosts, and every (profile, configuration, workload) with each host's
  series side by side, so that one host's drift and every host's regression look different;
- ``host-<name>.html``: one host's series, each point a run (its median and 95 % interval),
  its change points marked between the two builds with the change, its interval, the hosts
  that show it and the ``moeperf bisect`` that names the first bad build; the commands' records
  (gates, bisects, tunes, sweeps, calibrations, accepts) listed with a link to each.

A filter narrows the series by text (host, profile, configuration, workload) and by build
range; every series has a stable anchor (``host-gpu-01-3fa2c1d04b.html#embedded-mmap-tg64``).
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..fs import atomic_write_text
from ..store.series import Found, Series

WIDTH, HEIGHT, PAD = 640, 200, 36
Z = 1.959964
MOST_POINTS = 300
"""Runs a host page's chart draws one by one; a longer series is drawn a build a point."""
MOST_COMPACT = 60
"""The same for the side-by-side charts of the index."""


@dataclass
class Site:
    """What the pages are made of: the store's series, their change points, and each host's
    records (kind, document)."""

    store: str
    series: list[Series]
    found: list[Found]
    records: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def host_page(host: str) -> str:
    return f"host-{slug(host)}.html"


def record_link(host: str, index: int, kind: str) -> str:
    return f"records/{slug(host)}-{index}-{kind}.json"


def series_anchor(s: Series) -> str:
    return slug(f"{s.profile}-{s.configuration}-{s.workload}")


def build_number(build: str) -> int | None:
    m = re.fullmatch(r"b(\d+)", build)
    return int(m[1]) if m else None


def write_site(site: Site, out: Path) -> list[Path]:
    """Every page and asset of *site* into *out*; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("dashboard.css", "dashboard.js"):
        text = resources.files("pytest_moeperf.report").joinpath(name).read_text()
        written.append(_write(out / name, text))
    hosts = sorted({s.host for s in site.series})
    written.append(_write(out / "index.html", _index(site, hosts)))
    for host in hosts:
        mine = [s for s in site.series if s.host == host]
        records = site.records.get(host, [])
        for i, (kind, body) in enumerate(records):
            written.append(
                _write(
                    out / "records" / f"{slug(host)}-{i}-{kind}.json", json.dumps(body, indent=1)
                )
            )
        written.append(_write(out / host_page(host), _host(site, host, mine, records)))
    return written


def _write(path: Path, text: str) -> Path:
    atomic_write_text(path, text)
    return path


def _page(title: str, body: str) -> str:
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title>"
        '<link rel=stylesheet href="dashboard.css"></head><body>\n'
        f"<h1>{html.escape(title)}</h1>\n"
        '<form id=filter><label>filter <input id=text type=search placeholder="host, '
        'configuration, workload"></label> <label>builds <input id=from size=8 '
        'placeholder="b10423"> to <input id=to size=8 placeholder="b10435"></label></form>\n'
        f"{body}\n<script src=dashboard.js></script></body></html>\n"
    )


def _index(site: Site, hosts: Sequence[str]) -> str:
    parts = [f"<p>store {html.escape(site.store)}: {len(site.series)} series of "
             f"{len(hosts)} host(s), {len(site.found)} change point(s)</p><ul>"]  # fmt: skip
    for host in hosts:
        n = sum(1 for s in site.series if s.host == host)
        parts.append(f'<li><a href="{host_page(host)}">{html.escape(host)}</a>: {n} series</li>')
    parts.append("</ul><h2>Across hosts</h2>")
    keys = sorted({s.key for s in site.series})
    for key in keys:
        side = [s for s in site.series if s.key == key]
        charts = "".join(
            f'<figure><figcaption><a href="{host_page(s.host)}#{series_anchor(s)}">'
            f"{html.escape(s.host)}</a></figcaption>{_chart(s, _changes(site, s), compact=True)}"
            "</figure>"
            for s in side
        )
        parts.append(
            f'<section class="series across" data-name="{html.escape(" ".join(key))} '
            f'{html.escape(" ".join(s.host for s in side))}"><h3>{html.escape(" ".join(key))}'
            f"</h3><div class=row>{charts}</div></section>"
        )
    return _page("pytest-moeperf: every host's series", "\n".join(parts))


def _changes(site: Site, s: Series) -> list[Found]:
    return [f for f in site.found if f.series is s]


def _host(
    site: Site, host: str, mine: Sequence[Series], records: Sequence[tuple[str, dict[str, Any]]]
) -> str:
    parts = ['<p><a href="index.html">all hosts</a></p>']
    for s in mine:
        found = _changes(site, s)
        items = "".join(_change_item(f) for f in found) or "<li>no change point</li>"
        parts.append(
            f'<section class=series id="{series_anchor(s)}" data-name="{html.escape(s.name)}">'
            f'<h3><a href="#{series_anchor(s)}">{html.escape(s.name)}</a></h3>'
            f"{_chart(s, found)}<ul class=changes>{items}</ul></section>"
        )
    if records:
        parts.append("<h2>Records</h2><ul class=records>")
        for i, (kind, body) in enumerate(records):
            link = f"records/{slug(host)}-{i}-{kind}.json"
            parts.append(
                f'<li><a href="{link}">{kind} {i + 1}</a> {html.escape(_about(body))}</li>'
            )
        parts.append("</ul>")
    return _page(f"pytest-moeperf: {host}", "\n".join(parts))


def _about(body: dict[str, Any]) -> str:
    for key in ("profile", "baseline", "first_bad", "date"):
        if key in body:
            return f"{key} {body[key]}"
    return ""


def _change_item(f: Found) -> str:
    text = html.escape(f.change.describe())
    if f.also:
        text += " &mdash; also on " + html.escape(", ".join(f.also))
    bisect = f"<pre class=bisect>{html.escape(f.bisect)}</pre>" if f.bisect else ""
    return f"<li class=change>{text}{bisect}</li>"


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


def drawn_points(s: Series, most: int) -> list[Drawn]:
    """The points a chart of *s* draws: each run while there are at most *most*; else each
    build's runs as one point (their median, the range of their medians), the newest *most*."""
    rows = s.rows
    if len(rows) <= most:
        return [
            Drawn(
                r.build,
                f"{r.build} {r.date}",
                r.median,
                r.median * math.exp(-Z * (r.log_se or 0.0)),
                r.median * math.exp(Z * (r.log_se or 0.0)),
                i,
                i,
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


def _chart(s: Series, found: Sequence[Found], *, compact: bool = False) -> str:
    """An SVG of the series: each run a point with its 95 % interval (each build one point in
    a long series: :func:`drawn_points`), the builds along the bottom, each change point a line
    between the points it lies between."""
    w, h = (WIDTH // 2, HEIGHT // 2) if compact else (WIDTH, HEIGHT)
    points = drawn_points(s, MOST_COMPACT if compact else MOST_POINTS)
    top = max(p.high for p in points)
    bottom = min(p.low for p in points)
    span = (top - bottom) or top or 1.0

    def x(i: int) -> float:
        return PAD + (w - 2 * PAD) * (i + 0.5) / len(points)

    def y(v: float) -> float:
        return h - PAD / 2 - (h - PAD) * (v - bottom) / span

    marks = []
    for i, p in enumerate(points):
        num = build_number(p.build)
        number = "" if num is None else str(num)
        marks.append(
            f'<line class=interval x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(p.low):.1f}" '
            f'y2="{y(p.high):.1f}"/><circle class=point cx="{x(i):.1f}" cy="{y(p.median):.1f}" '
            f'r=2.5 data-build="{html.escape(p.build)}" data-number="{number}">'
            f"<title>{html.escape(p.label)}: {p.median:.4g} tok/s</title></circle>"
        )
    for f in found:
        after = next((i for i, p in enumerate(points) if p.first >= f.change.index), None)
        if not after:  # before the points drawn (or at the first)
            continue
        cx = (x(after - 1) + x(after)) / 2
        marks.append(
            f'<line class="changepoint{" host" if f.change.host else ""}" x1="{cx:.1f}" '
            f'x2="{cx:.1f}" y1="4" y2="{h - PAD / 2:.1f}"><title>'
            f"{html.escape(f.change.describe())}</title></line>"
        )
    first, last = points[0].build, points[-1].build
    return (
        f'<svg class=chart width="{w}" height="{h}" viewBox="0 0 {w} {h}" role=img>'
        f'<text x=2 y=12 class=axis>{top:.4g}</text><text x=2 y="{h - 4}" class=axis>'
        f"{bottom:.4g}</text>{''.join(marks)}"
        f'<text x="{PAD}" y="{h - 2}" class=axis>{html.escape(first)}</text>'
        f'<text x="{w - PAD}" y="{h - 2}" class=axis text-anchor=end>{html.escape(last)}</text>'
        "</svg>"
    )
