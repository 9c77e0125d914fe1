"""Where the page's script (``dashboard.js``, the charts' one renderer) lays a chart's data out,
in a real browser (Debian's Chromium, headless, driven by Playwright): the scale's round ticks,
linear or logarithmic, every whisker inside the frame, a change point between its builds, a
baseline's limit below it, and a point's tip. The data each chart holds is tested without a
browser (tests/unit/test_dashboard.py); the whole site over a real store in
test_dashboard_browser.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_moeperf.report.charts import PAD
from pytest_moeperf.report.dashboard import Site, host_page, write_site
from pytest_moeperf.verdicts.series import Series, SeriesRow, find_changes


def _series(medians: list[float], *, per_build: int = 1, log_se: float = 0.001) -> Series:
    s = Series("h/1", "embedded", "mmap", "tg64")
    for i, v in enumerate(medians):
        s.rows.append(
            SeriesRow("h/1", "embedded", "mmap", "tg64", f"b{10423 + i // per_build}", v, log_se,
                      None, float(i), f"day {i}", f"k{i}")
        )  # fmt: skip
    return s


def _open(browser, tmp_path: Path, site: Site):
    write_site(site, tmp_path)
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((tmp_path / host_page("h/1")).as_uri())
    page.wait_for_load_state("load")
    assert errors == []
    return page


@pytest.mark.parametrize(
    "ticks, want",
    [("niceTicks(27.3, 41.2)", [30, 35, 40]), ("niceTicks(0, 1)", [0, 0.5, 1.0]),
     ("niceTicks(412, 1187)", [600, 800, 1000]), ("niceTicks(5, 5)", [5.0]),
     ("logTicks(3.2, 41)", [5, 10, 20]), ("logTicks(0.8, 12000)", [1, 10, 100, 1000, 10000]),
     ("logTicks(15, 620)", [20, 50, 100, 200, 500])],
)  # fmt: skip
def test_a_scale_is_round_values_within_its_range(browser, tmp_path, ticks, want):
    page = _open(browser, tmp_path, Site("test", [_series([1.0, 2.0])], []))
    assert page.evaluate(f"moeperfCharts.{ticks}") == pytest.approx(want)


def test_a_scale_labels_its_values_as_python_writes_them(browser, tmp_path):
    page = _open(browser, tmp_path, Site("test", [_series([1.0, 2.0])], []))
    values = [0.5, 30.0, 1e-05, 123456.0, 1234567.0, 0.000123, -2.5]
    said = page.evaluate(f"{values}.map(moeperfCharts.g6)")
    assert said == [format(v, ".6g") for v in values]


def _cy(page) -> list[float]:
    return page.locator("circle.point").evaluate_all("ps => ps.map(p => +p.getAttribute('cy'))")


def test_a_wide_range_is_drawn_on_a_log_scale_a_narrow_one_linear(browser, tmp_path):
    page = _open(browser, tmp_path, Site("test", [_series([10.0, 100.0, 1000.0])], []))
    assert page.locator("svg.chart.log").count() == 1
    assert page.locator("text.unit").text_content() == "tok/s, log scale"
    low, mid, high = _cy(page)
    assert mid == pytest.approx((low + high) / 2, abs=0.2)  # 100 halfway from 10 to 1000
    labels = page.locator("text.axis[text-anchor=end]:not(.last)").all_text_contents()
    assert labels == ["10", "20", "50", "100", "200", "500", "1000"]
    page = _open(browser, tmp_path / "narrow", Site("test", [_series([100.0, 500.0, 900.0])], []))
    assert page.locator("svg.chart.log").count() == 0  # 9x: still linear
    assert page.locator("text.unit").text_content() == "tok/s"
    low, mid, high = _cy(page)
    assert mid == pytest.approx((low + high) / 2, abs=0.2)


def test_every_whisker_ends_inside_the_frame(browser, tmp_path):
    """A flat series whose intervals are wider than its medians' range: the scale holds each
    interval with room beyond it, so no whisker runs from frame edge to frame edge (seen in
    Chromium on a flat 30-run series before the scale kept its headroom)."""
    medians = [100.0 * (1 + 0.01 * ((i * 7) % 3 - 1)) for i in range(30)]
    page = _open(browser, tmp_path, Site("test", [_series(medians, log_se=0.03)], []))
    ends = page.locator("line.interval").evaluate_all(
        "ls => ls.flatMap(l => [+l.getAttribute('y1'), +l.getAttribute('y2')])"
    )
    height = float(page.locator("svg.chart").get_attribute("height") or 0)
    top, bottom = PAD / 2, height - PAD / 2  # the frame inside its padding
    assert len(ends) == 60
    assert top + 3 < min(ends) and max(ends) < bottom - 3


def test_a_change_point_is_drawn_between_its_builds_in_a_long_series(browser, tmp_path):
    wobble = [1 + 0.01 * ((i * 7) % 3 - 1) for i in range(1000)]
    medians = [100.0 * (0.7 if i >= 885 else 1.0) * w for i, w in enumerate(wobble)]
    s = _series(medians, per_build=5, log_se=0.01)  # 200 builds, a step at b10600
    (found,) = find_changes([s], {}, 0.05)
    page = _open(browser, tmp_path, Site("test", [s], [found]))
    circles = page.locator("circle.point").evaluate_all("ps => ps.map(p => +p.getAttribute('cx'))")
    line = float(page.locator("line.changepoint").get_attribute("x1") or 0)
    assert len(circles) == 200 and circles[176] < line < circles[177]  # b10599: the 177th build
    builds = page.locator("circle.point").evaluate_all("ps => ps.map(p => p.dataset.build)")
    assert builds[176:178] == ["b10599", "b10600"]


def test_a_baseline_s_limit_is_drawn_below_it_where_higher_is_better(browser, tmp_path):
    s = _series([100.0 + (i % 3) for i in range(12)])
    accept = {
        "profile": "embedded", "date": "2026-11-03", "run": "k4",
        "accepted": [{"measurement": ["mmap", "b10427", "tg64"], "median": 100.0,
                      "tolerance": 0.05}],
    }  # fmt: skip
    site = Site("test", [s], [], records={"h/1": [("accept", 4.0, accept)]})
    page = _open(browser, tmp_path, site)
    baseline, limit = (page.locator(f"line.{k}") for k in ("baseline", "limit"))
    assert float(limit.get_attribute("y1") or 0) > float(baseline.get_attribute("y1") or 0)
    x = [float(baseline.get_attribute(a) or 0) for a in ("x1", "x2")]
    cx = _cx(page)
    assert x == pytest.approx([cx[4] - 3, cx[-1] + 3], abs=0.05)  # from its run to the newest
    assert limit.locator("title").text_content() == "limit 95 tok/s (accepted 2026-11-03)"


def _cx(page) -> list[float]:
    return page.locator("circle.point").evaluate_all("ps => ps.map(p => +p.getAttribute('cx'))")


def test_a_point_tells_its_value_as_the_page_holds_it(browser, tmp_path):
    s = _series([100.0, 123.456])
    s.configuration = "mmap </script><b>"  # a name the page's JSON holds, not its parser
    s.rows[:] = [replace(r, configuration=s.configuration) for r in s.rows]
    page = _open(browser, tmp_path, Site("test", [s], []))
    page.locator("circle.point").last.hover()
    assert page.locator("#tip").inner_text().startswith("123.5 tok/s [123.2, 123.7] · b10424 day 1")
