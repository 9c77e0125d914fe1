"""The dashboard: static pages of every host's series over builds, drawn from the store's rows
(page shells from the Jinja2 templates of ``report/templates``, every value escaped; each chart's
data written into its page as JSON, drawn as SVG by the page's own script, ``dashboard.js``: the
pages open from disk, with no server and no network).

- ``index.html``: the hosts, and every (profile, configuration, workload) with each host's
  series side by side, so that one host's drift and every host's regression look different;
- ``host-<name>.html``: one host's series, each point a run (its median and 95 % interval),
  its change points marked between the two builds with the change, its interval, the hosts
  that show it and the ``moeperf bisect`` that names the first bad build, its accepted
  baselines as steps (with the limit their checks pass down to) and the commands' records
  (gates, bisects, tunes, sweeps, calibrations) as marks that open them; its claims' ratios
  over runs against their bounds, undecided verdicts drawn as undecided;
- ``runs/<key>.json``: the stored record of each run a host page draws as a point of its own,
  which a click on the point opens (a point that stands for one build's runs opens the compare
  page of its first and last run);

A filter narrows the series by text (host, profile, configuration, workload) and greys the
points outside a build range; every series has a stable anchor
(``host-gpu-01-3fa2c1d04b.html#embedded-mmap-tg64``).
"""

from __future__ import annotations

import bisect
import csv
import datetime as dt
import hashlib
import io
import json
import re
import shlex
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from ..fs import atomic_write_text
from ..llama.build import label_number
from ..measure.workload import Workload
from ..store.record import parse_date
from ..verdicts.changes import Z
from ..verdicts.judge import Verdict
from ..verdicts.series import Found, Series, median_interval, run_log_se
from ..verdicts.upgrade import (
    CHANGED_BY_STANDING,
    SIDES,
    base_test,
    standing,
    verdict_decision,
)
from .charts import (
    MOST_COMPACT,
    MOST_POINTS,
    Drawn,
    Mark,
    Step,
    chart_range,
    claim_chart,
    drawn_points,
    series_chart,
)

Record = tuple[str, float, dict[str, Any]]
"""A command's record: its kind, when it was kept, its document."""
VerdictRow = tuple[str, float, str, dict[str, Any]]
"""A verdict of a run: its test, the run's time and date, the verdict's document."""


@dataclass(frozen=True)
class Table:
    """A table of the record's layout: its title, headers and rows."""

    title: str
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Site:
    """What the pages are made of: the store's series, their change points, and each host's
    records and verdicts."""

    store: str
    series: list[Series]
    found: list[Found]
    records: dict[str, list[Record]] = field(default_factory=dict)
    verdicts: dict[str, list[VerdictRow]] = field(default_factory=dict)
    references: dict[str, list[Table]] = field(default_factory=dict)
    """Per host, the recorded references of its profiles beside its numbers."""
    runs: dict[str, str] = field(default_factory=dict)
    """The stored record (its results file's text) of each run key in :func:`drawn_runs`."""


def drawn_runs(series: Sequence[Series]) -> set[str]:
    """The runs the host pages draw as points of their own: whose records the site holds."""
    return {p.run for s in series for p in drawn_points(s, MOST_POINTS) if p.run}


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def host_page(host: str) -> str:
    return f"host-{slug(host)}.html"


def compare_page(host: str) -> str:
    return f"compare-{slug(host)}.html"


def compare_link(host: str, first: str, last: str) -> str:
    """The compare page of *host* with runs *first* and *last* picked."""
    return f"{compare_page(host)}?a={first[:12]}&b={last[:12]}"


def record_link(host: str, index: int, kind: str) -> str:
    return f"records/{slug(host)}-{index}-{kind}.json"


def run_link(key: str) -> str:
    return f"runs/{key[:12]}.json"


def series_anchor(s: Series) -> str:
    return slug(f"{s.profile}-{s.configuration}-{s.workload}")


def series_data(s: Series) -> str:
    """The file name (without suffix) of a series' downloads, under ``data/``."""
    return f"data/{slug(s.host)}-{series_anchor(s)}"


DATA_FIELDS = ("run", "date", "build", "median", "low", "high", "log_se", "probe", "unit")
"""A series' downloads, one row a run: its median with its 95 % interval (as the chart draws
it), the median's log SE (:func:`~pytest_moeperf.verdicts.series.run_log_se`: a run of one
sample has the fallback's), the host's probe figure, and the metric's unit."""


def download_rows(s: Series) -> list[dict[str, Any]]:
    """*s* as its downloads hold it (:data:`DATA_FIELDS`), oldest run first."""
    unit = Workload.parse(s.workload).unit
    rows = []
    for r in s.rows:
        low, high = median_interval(r)
        values = (r.run, r.date, r.build, r.median, low, high, run_log_se(r), r.probe, unit)
        rows.append(dict(zip(DATA_FIELDS, values, strict=True)))
    return rows


def _series_csv(s: Series) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, DATA_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(download_rows(s))
    return buffer.getvalue()


def _series_json(s: Series) -> str:
    head = {"host": s.host, "profile": s.profile, "configuration": s.configuration}
    return json.dumps({**head, "workload": s.workload, "runs": download_rows(s)}, indent=1) + "\n"


def write_site(site: Site, out: Path) -> list[Path]:
    """Every page and asset of *site* into *out*; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("dashboard.css", "dashboard.js"):
        text = resources.files("pytest_moeperf.report").joinpath(name).read_text()
        written.append(_write(out / name, text))
    hosts = sorted({s.host for s in site.series})
    written.append(_write(out / "index.html", _index(site, hosts)))
    told = sorted((f for f in site.found if f.untriaged), key=_when, reverse=True)
    written.append(_write(out / "changes.html", _told_page(site, told)))
    written.append(_write(out / "changes.json", json.dumps([f.to_dict() for f in told], indent=1)))
    written.append(_write(out / "changes.atom", _atom(site, told)))
    for host in hosts:
        written.append(_write(out / compare_page(host), _compare_page(site, host)))
    for s in site.series:
        written.append(_write(out / f"{series_data(s)}.csv", _series_csv(s)))
        written.append(_write(out / f"{series_data(s)}.json", _series_json(s)))
    for key, text in site.runs.items():
        written.append(_write(out / run_link(key), text))
    for host in hosts:
        for i, (kind, _, body) in enumerate(site.records.get(host, [])):
            written.append(_write(out / record_link(host, i, kind), json.dumps(body, indent=1)))
        written.append(_write(out / host_page(host), _host(site, host)))
    return written


def _write(path: Path, text: str) -> Path:
    atomic_write_text(path, text)
    return path


_PAGES = jinja2.Environment(
    loader=jinja2.PackageLoader("pytest_moeperf.report", "templates"),
    autoescape=True,  # every stored string a page shows is text, escaped where it is written
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
"""The page shells (``report/templates``): HTML and the Atom feed, every value escaped."""


def _render(template: str, title: str, drawn: Sequence[Series], **context: Any) -> str:
    """The page *template* titled *title*, its build filter hinting at the builds of *drawn*."""
    return _PAGES.get_template(template).render(title=title, builds=_build_range(drawn), **context)


def _build_range(series: Sequence[Series]) -> tuple[str, str]:
    """The oldest and newest published build the *series* hold (the build filter's hints),
    ``("", "")`` when none is numbered."""
    numbers = [n for s in series for r in s.rows if (n := label_number(r.build)) is not None]
    return (f"b{min(numbers)}", f"b{max(numbers)}") if numbers else ("", "")


def _compare_page(site: Site, host: str) -> str:
    """``compare-<host>.html``: two of *host*'s runs picked (from a chart's link, the address
    ``?a=KEY&b=KEY``, or the lists), every series both hold as a ratio with its 95 % interval
    (as ``moeperf changes --compare`` computes it, in the page's script), the verdicts each
    run carries, and the gate of their two builds. The runs' figures are in the page as JSON,
    each series named once."""
    mine = [s for s in site.series if s.host == host]
    runs: dict[str, dict[str, Any]] = {}
    for i, s in enumerate(mine):
        for r in s.rows:
            run = runs.setdefault(r.run, {"date": r.date, "build": r.build, "host": r.host})
            run.setdefault("values", []).append([i, r.median, run_log_se(r)])
    by_date = {r["date"]: key for key, r in runs.items()}
    for test, _, date, doc in site.verdicts.get(host, []):
        if (key := by_date.get(date)) is not None:
            runs[key].setdefault("decisions", []).append(_decision(test, doc))
    for run in runs.values():  # each test's decisions in the order judged (pinned first)
        run.get("decisions", []).sort(key=lambda d: d[6])
    series = [[s.profile, s.configuration, s.workload] for s in mine]
    words = {w for s in mine for w in (s.profile, s.configuration)} | {
        w for run in runs.values() for w in (run["build"], str(label_number(run["build"]) or ""))
    }
    quoted = {w: shlex.quote(w) for w in sorted(words - {""})}  # the gate's words, as a shell
    payload = {  # reads them: the page joins them, it never quotes (one rule, Python's)
        "z": Z, "series": series, "runs": runs, "changed": CHANGED_BY_STANDING, "quoted": quoted,
    }  # fmt: skip
    title = f"pytest-moeperf: two runs of {host} compared"
    return _render(
        "compare.html", title, mine, host=host, host_page=host_page(host), payload=payload
    )


def _decision(test: str, doc: dict[str, Any]) -> list[Any]:
    """A stored verdict as the compare page pairs it: [test without its side, what it judged,
    kind, outcome, figure, standing, order]: the values of the upgrade check's
    :class:`~pytest_moeperf.verdicts.upgrade.Decision`."""
    v = Verdict.from_dict(doc)
    d = verdict_decision(base_test(test), str(doc.get("asked") or v.label), v)
    order = 1 if test != base_test(test, SIDES[0]) else 0  # a candidate's after the pinned's
    return [d.test, d.asked, d.kind, d.outcome, d.figure, standing(d.kind, d.outcome), order]


def _when(f: Found) -> dt.datetime:
    return parse_date(f.change.date) or dt.datetime.min.replace(tzinfo=dt.UTC)


def _series_href(s: Series) -> str:
    return f"{host_page(s.host)}#{series_anchor(s)}"


def _told_page(site: Site, told: Sequence[Found]) -> str:
    """``changes.html``: the untriaged change points of every host, newest first."""
    items = [{"found": f, "href": _series_href(f.series)} for f in told]
    title = "pytest-moeperf: untriaged change points"
    return _render("changes.html", title, site.series, told=items)


def _atom(site: Site, told: Sequence[Found]) -> str:
    """``changes.atom``: the untriaged change points as an Atom feed, newest first."""
    stamp = (_when(told[0]) if told else dt.datetime.now(dt.UTC)).isoformat()
    entries = [
        {
            "id": f.id,
            "title": f"{f.series.name}: {f.change.describe()}",
            "updated": _when(f).isoformat(),
            "href": _series_href(f.series),
            "content": f.bisect or "no bisect: within one build",
        }
        for f in told
    ]
    store = hashlib.sha256(site.store.encode()).hexdigest()[:16]
    return _PAGES.get_template("changes.atom").render(store=store, updated=stamp, entries=entries)


def _index(site: Site, hosts: Sequence[str]) -> str:
    sections = []
    for key in sorted({s.key for s in site.series}):
        side = [s for s in site.series if s.key == key]
        views = [(view, _side_by_side(site, side, relative=view == "relative"))
                 for view in ("absolute", "relative")]  # fmt: skip
        sections.append(
            {"name": " ".join(key), "hosts": " ".join(s.host for s in side), "views": views}
        )
    listed = [
        {"name": h, "page": host_page(h), "series": sum(1 for s in site.series if s.host == h)}
        for h in hosts
    ]
    return _render(
        "index.html",
        "pytest-moeperf: every host's series",
        site.series,
        store=site.store,
        series_count=len(site.series),
        hosts=listed,
        found_count=len(site.found),
        told=sum(1 for f in site.found if f.untriaged),
        sections=sections,
    )


def _side_by_side(site: Site, side: Sequence[Series], *, relative: bool) -> list[dict[str, Any]]:
    """The hosts' charts of one series on one scale: their values, or each a per cent of its
    own median."""
    spans = [chart_range(drawn_points(s, MOST_COMPACT, relative=relative)) for s in side]
    scale = (min(b for b, _ in spans), max(t for _, t in spans))
    return [
        {
            "host": s.host,
            "href": _series_href(s),
            "chart": series_chart(
                s, _changes(site, s), compact=True, scale=scale, relative=relative
            ),
        }
        for s in side
    ]


def _opens(site: Site, s: Series) -> Callable[[Drawn], str]:
    """What a click on a point of *s* opens: its run's record where the site holds it, else the
    compare page of the first and last run the point stands for."""

    def link(p: Drawn) -> str:
        if p.run in site.runs:
            return run_link(p.run)
        return compare_link(s.host, s.rows[p.first].run, s.rows[p.last].run)

    return link


def _changes(site: Site, s: Series) -> list[Found]:
    return [f for f in site.found if f.series is s]


def _host(site: Site, host: str) -> str:
    records = site.records.get(host, [])
    mine = [s for s in site.series if s.host == host]
    sections = []
    for s in mine:
        found = _changes(site, s)
        steps, marks, opens = _steps(s, records), _marks(s, host, records), _opens(site, s)
        sections.append(
            {
                "anchor": series_anchor(s),
                "name": s.name,
                "chart": series_chart(s, found, steps=steps, marks=marks, link=opens),
                "data": series_data(s),
                "compare": compare_link(s.host, s.rows[0].run, s.rows[-1].run),
                "found": found,
            }
        )
    listed = [
        {"link": record_link(host, i, kind), "kind": kind, "about": _about(body)}
        for i, (kind, _, body) in enumerate(records)
    ]
    return _render(
        "host.html",
        f"pytest-moeperf: {host}",
        mine,
        series=sections,
        claims=_claims(site.verdicts.get(host, [])),
        references=site.references.get(host, []),
        records=listed,
    )


def _steps(s: Series, records: Sequence[Record]) -> list[Step]:
    """The series' accepted baselines: each accept of its profile that holds its configuration
    and workload, from the run it was accepted from (or the first run after it was kept), with
    the limit its checks pass down to where the accept kept its tolerance."""
    better = Workload.parse(s.workload).higher_is_better
    runs = {r.run: i for i, r in enumerate(s.rows)}
    times = [r.written for r in s.rows]
    out = []
    for kind, at, body in records:
        if kind != "accept" or body.get("profile") != s.profile:
            continue
        for a in body.get("accepted", []):
            config, _, workload = [*a.get("measurement", []), "", "", ""][:3]
            if (config, workload) == (s.configuration, s.workload):
                first = runs.get(str(body.get("run")), bisect.bisect_left(times, at))
                value, tolerance = float(a["median"]), a.get("tolerance")
                limit = None
                if isinstance(tolerance, int | float):
                    limit = value * (1 - tolerance if better else 1 + tolerance)
                out.append(Step(first, value, f"accepted {body.get('date', '')}", limit))
    return sorted(out, key=lambda st: st.first)


def _marks(s: Series, host: str, records: Sequence[Record]) -> list[Mark]:
    times = [r.written for r in s.rows]
    return [
        Mark(bisect.bisect_left(times, at), kind, record_link(host, i, kind))
        for i, (kind, at, _) in enumerate(records)
        if kind in ("gate", "bisect", "tune", "sweep", "calibration")
    ]


def _claims(rows: Sequence[VerdictRow]) -> list[dict[str, Any]]:
    """Each claim's section: its verdicts' ratios over runs against the bound."""
    by_test: dict[str, list[tuple[str, Verdict]]] = {}
    for test, _, date, d in rows:
        try:
            by_test.setdefault(test, []).append((date, Verdict.from_dict(d)))
        except (KeyError, TypeError, ValueError):
            continue  # a verdict stored without a ratio: nothing to draw
    return [
        {
            "test": test,
            "anchor": slug(test),
            "chart": claim_chart(judged),
            "counts": ", ".join(
                f"{n} {o}" for o, n in sorted(Counter(v.outcome for _, v in judged).items())
            ),
        }
        for test, judged in by_test.items()
    ]


def _about(body: dict[str, Any]) -> str:
    for key in ("profile", "baseline", "first_bad", "date"):
        if key in body:
            return f"{key} {body[key]}"
    return ""
