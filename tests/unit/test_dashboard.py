"""The dashboard's charts over long series: each run a point while they are few, each build
one point (its runs' median and range) beyond, the newest builds in a compact chart, and a
change point's line between the builds it lies between."""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import replace

import pytest

from pytest_moeperf.report.charts import (
    MOST_COMPACT,
    drawn_points,
    log_ticks,
    nice_ticks,
    series_chart,
)
from pytest_moeperf.report.dashboard import Site, download_rows, drawn_runs, host_page, write_site
from pytest_moeperf.verdicts.changes import Z
from pytest_moeperf.verdicts.series import (
    FALLBACK_LOG_SE,
    Series,
    SeriesRow,
    find_changes,
    median_interval,
    run_ratios,
)


def _series(runs: int, per_build: int, step_build: int = 10_000_000) -> Series:
    s = Series("h/1", "embedded", "mmap", "tg64")
    for i in range(runs):
        build = 10423 + i // per_build
        median = 100.0 * (0.7 if build >= step_build else 1.0) * (1 + 0.01 * ((i * 7) % 3 - 1))
        s.rows.append(
            SeriesRow("h/1", "embedded", "mmap", "tg64", f"b{build}", median, 0.01, None,
                      float(i), f"day {i}", f"k{i}")
        )  # fmt: skip
    return s


def test_few_runs_are_drawn_one_by_one():
    points = drawn_points(_series(40, 4), 300)
    assert len(points) == 40 and [p.first for p in points] == list(range(40))


def test_a_long_series_is_drawn_a_build_a_point_the_newest_first_kept():
    s = _series(1000, 5)  # 200 builds
    full = drawn_points(s, 300)
    assert len(full) == 200 and full[0].build == "b10423" and full[0].last == 4
    assert full[0].low <= full[0].median <= full[0].high
    compact = drawn_points(s, MOST_COMPACT)
    assert len(compact) == MOST_COMPACT and compact[-1].build == "b10622"


def test_a_change_point_is_drawn_between_its_builds_in_a_long_series():
    s = _series(1000, 5, step_build=10600)
    (found,) = find_changes([s], {}, 0.05)
    assert (found.change.before, found.change.after) == ("b10599", "b10600")
    svg = series_chart(s, [found])
    circles = [float(x) for x in re.findall(r'circle class=point [^>]*?cx="([0-9.]+)"', svg)]
    (line,) = [float(x) for x in re.findall(r'class="changepoint" [^>]*?x1="([0-9.]+)"', svg)]
    assert circles[176] < line < circles[177]  # b10599 is the 177th build drawn
    assert svg.count("<circle") == 200


def test_the_build_filter_hints_at_the_builds_the_store_holds(tmp_path):
    unnumbered = Series("h/2", "embedded", "mmap", "tg64")
    unnumbered.rows.append(
        SeriesRow("h/2", "embedded", "mmap", "tg64", "/opt/llama-server", 100.0, 0.01, None,
                  0.0, "day 0", "k0")
    )  # fmt: skip
    write_site(Site("test", [_series(12, 4), unnumbered], []), tmp_path)

    def hints(page: str) -> list[str]:
        return re.findall(r'id=(?:from|to) size=8 placeholder="([^"]*)"', page)

    assert hints((tmp_path / "index.html").read_text()) == ["b10423", "b10425"]
    assert hints((tmp_path / host_page("h/1")).read_text()) == ["b10423", "b10425"]
    assert hints((tmp_path / host_page("h/2")).read_text()) == ["", ""]


@pytest.mark.parametrize(
    "bottom, top, ticks",
    [(27.3, 41.2, [30, 35, 40]), (0.0, 1.0, [0, 0.5, 1.0]),
     (412.0, 1187.0, [600, 800, 1000]), (5.0, 5.0, [5.0])],
)  # fmt: skip
def test_a_chart_scale_is_round_values_within_its_range(bottom, top, ticks):
    got = nice_ticks(bottom, top)
    assert got == pytest.approx(ticks) and all(bottom <= v <= top for v in got)


def _spanning(values: list[float]) -> Series:
    s = Series("h/1", "embedded", "mmap", "tg64")
    for i, v in enumerate(values):
        s.rows.append(
            SeriesRow("h/1", "embedded", "mmap", "tg64", f"b{10423 + i}", v, 0.001, None,
                      float(i), f"day {i}", f"k{i}")
        )  # fmt: skip
    return s


def _cy(svg: str) -> list[float]:
    return [float(y) for y in re.findall(r'circle class=point [^>]*?cy="([0-9.]+)"', svg)]


def test_a_wide_range_is_drawn_on_a_log_scale_a_narrow_one_linear():
    wide = series_chart(_spanning([10.0, 100.0, 1000.0]), [])
    assert '<svg class="chart log"' in wide and "tok/s, log scale" in wide
    low, mid, high = _cy(wide)
    assert mid == pytest.approx((low + high) / 2, abs=0.2)  # 100 halfway from 10 to 1000
    labels = re.findall(r"text-anchor=end>([0-9.e+]+)</text>", wide)
    assert labels == ["10", "20", "50", "100", "200", "500", "1000"]
    narrow = series_chart(_spanning([100.0, 500.0, 900.0]), [])  # 9x: still linear
    assert '<svg class="chart"' in narrow and "log scale" not in narrow
    low, mid, high = _cy(narrow)
    assert mid == pytest.approx((low + high) / 2, abs=0.2)


@pytest.mark.parametrize(
    "bottom, top, ticks",
    [(3.2, 41.0, [5, 10, 20]), (0.8, 12000.0, [1, 10, 100, 1000, 10000]), (15.0, 620.0,
     [20, 50, 100, 200, 500])],
)  # fmt: skip
def test_a_log_scale_is_round_values_within_its_range(bottom, top, ticks):
    assert log_ticks(bottom, top) == pytest.approx(ticks)


def _accepted(tolerance: object, workload: str = "tg64") -> Site:
    s = _series(12, 4)
    s.rows[:] = [replace(r, workload=workload) for r in s.rows]
    s.workload = workload
    accept = {
        "profile": "embedded", "date": "2026-11-03", "run": "k4",
        "accepted": [{"measurement": ["mmap", "b10424", workload], "median": 100.0,
                      "tolerance": tolerance}],
    }  # fmt: skip
    return Site("test", [s], [], records={"h/1": [("accept", 4.0, accept)]})


@pytest.mark.parametrize(
    "workload, tolerance, limit",
    [("tg64", 0.05, 95.0), ("tg64", 0.2, 80.0), ("traffic.ttft_p99", 0.1, 110.0)],
)
def test_an_accepted_baseline_is_drawn_with_the_limit_its_checks_pass_down_to(
    tmp_path, workload, tolerance, limit
):
    write_site(_accepted(tolerance, workload), tmp_path)
    page = (tmp_path / host_page("h/1")).read_text()
    (title,) = re.findall(r"<line class=limit [^>]*><title>([^<]*)</title>", page)
    assert title.startswith(f"limit {limit:g} ") and "accepted 2026-11-03" in title
    ys = dict(re.findall(r"<line class=(baseline|limit) [^>]*?y1=\"([0-9.]+)\"", page))
    assert (float(ys["limit"]) > float(ys["baseline"])) == (limit < 100.0)  # below: slower
    write_site(_accepted(None, workload), tmp_path)  # an accept kept without its tolerance
    page = (tmp_path / host_page("h/1")).read_text()
    assert "<line class=baseline " in page and "<line class=limit " not in page


def test_a_point_opens_its_runs_record_where_the_site_holds_it_else_its_runs_compared(tmp_path):
    few, long = _series(12, 4), _series(1000, 5)
    long.host = "h/2"
    long.rows[:] = [replace(r, host="h/2", run=f"long{i}") for i, r in enumerate(long.rows)]
    site = Site("test", [few, long], [])
    assert drawn_runs(site.series) == {f"k{i}" for i in range(12)}  # the long one: builds
    site.runs = {key: f'{{"key": "{key}"}}' for key in drawn_runs(site.series)}
    write_site(site, tmp_path)
    opens = re.findall(r'data-record="([^"]*)"', (tmp_path / host_page("h/1")).read_text())
    assert opens == [f"runs/k{i}.json" for i in range(12)]
    assert (tmp_path / "runs" / "k3.json").read_text() == '{"key": "k3"}'
    opens = re.findall(r'data-record="([^"]*)"', (tmp_path / host_page("h/2")).read_text())
    assert len(opens) == 200 and opens[0] == "compare-h-2.html?a=long0&amp;b=long4"


def test_a_run_of_one_sample_has_one_interval_everywhere():
    """A run that kept one sample cannot say its median's spread: its chart's whisker, its
    downloads, its ratio to another run and the change points all read the same fallback
    (the chart once drew it as a point without an interval, the rest as 5 %)."""
    s = _series(2, 1)
    s.rows[1] = replace(s.rows[1], log_se=None)
    one = drawn_points(s, 300)[1]
    low, high = median_interval(s.rows[1])
    assert (one.low, one.high) == (low, high) and high / low == pytest.approx(
        math.exp(2 * Z * FALLBACK_LOG_SE)
    )
    assert download_rows(s)[1]["log_se"] == FALLBACK_LOG_SE == s.points()[1].log_se
    (ratio,) = run_ratios(s.rows, "k0", "k1")
    se = math.hypot(0.01, FALLBACK_LOG_SE)
    assert ratio.high / ratio.low == pytest.approx(math.exp(2 * Z * se))


def test_every_whisker_ends_inside_the_frame():
    """A flat series whose intervals are wider than its medians' range: the scale holds each
    interval with room beyond it, so no whisker runs from frame edge to frame edge."""
    s = _series(30, 3)
    s.rows[:] = [replace(r, log_se=0.03) for r in s.rows]
    svg = series_chart(s, [])
    ends = [
        float(v)
        for line in re.findall(r"<line class=interval [^>]*>", svg)
        for v in re.findall(r'y[12]="([\d.]+)"', line)
    ]
    height = float(re.search(r'height="(\d+)"', svg).group(1))  # type: ignore[union-attr]
    top, bottom = 36 / 2, height - 36 / 2  # the frame inside its padding
    assert len(ends) == 60
    assert top + 3 < min(ends) and max(ends) < bottom - 3


def test_the_compare_pages_gate_words_are_quoted_as_a_shell_reads_them(tmp_path):
    """The page joins the gate command from words Python's shlex quoted into it: a
    configuration named with a space and a quote, or a build that is a binary's path, is one
    word to the shell (the page's script once joined them bare)."""
    s = _series(4, 2)
    s.configuration = "cache 6'gib"
    s.rows[:] = [replace(r, configuration=s.configuration) for r in s.rows]
    s.rows[-1] = replace(s.rows[-1], build="/opt/llama cpp/llama-server")
    write_site(Site("test", [s], []), tmp_path)
    (page,) = tmp_path.glob("compare-*.html")
    text = page.read_text()
    data = json.loads(text.split("id=compare-data>", 1)[1].split("</script>", 1)[0])
    assert data["quoted"]["cache 6'gib"] == shlex.quote("cache 6'gib") == "'cache 6'\"'\"'gib'"
    assert data["quoted"]["/opt/llama cpp/llama-server"] == "'/opt/llama cpp/llama-server'"
    assert data["quoted"]["10423"] == "10423" and data["quoted"]["embedded"] == "embedded"
