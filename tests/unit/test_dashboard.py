"""The dashboard's charts over long series: each run a point while they are few, each build
one point (its runs' median and range) beyond, the newest builds in a compact chart, and a
change point's line between the builds it lies between."""

from __future__ import annotations

import re

import pytest

from pytest_moeperf.report.charts import MOST_COMPACT, drawn_points, nice_ticks, series_chart
from pytest_moeperf.report.dashboard import Site, host_page, write_site
from pytest_moeperf.store.runstore import SeriesRow
from pytest_moeperf.store.series import Series, find_changes


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
