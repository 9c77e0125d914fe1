"""The dashboard's charts as data, over long series: each run a point while they are few, each
build one point (its runs' median and range) beyond, the newest builds in a compact chart, a
change point between the builds it lies between, a baseline's step with its limit, what a point
opens. Where the page's script lays them out is tested in a real browser
(tests/integration/test_charts_browser.py)."""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import replace

import pytest

from pytest_moeperf.report.charts import MOST_COMPACT, drawn_points, series_chart
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
    chart = series_chart(s, [found])
    (change,) = chart["changes"]
    assert (change["from"], change["to"]) == (176, 177)  # b10599 is the 177th build drawn
    assert [chart["points"][i]["build"] for i in (176, 177)] == ["b10599", "b10600"]
    assert len(chart["points"]) == 200 and "between b10599 and b10600" in change["title"]


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


def charts_of(page: str) -> list[dict]:
    """The charts a page holds, as its script reads them."""
    found = re.findall(r"<script type=application/json class=chart-data>(.*?)</script>", page)
    return [json.loads(text) for text in found]


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
    (chart,) = charts_of((tmp_path / host_page("h/1")).read_text())
    baseline, limit_step = chart["steps"]
    assert (baseline["kind"], baseline["value"], limit_step["kind"]) == ("baseline", 100.0, "limit")
    assert limit_step["value"] == pytest.approx(limit)  # below the baseline where higher is better
    assert limit_step["title"].startswith(f"limit {limit:g} ")
    assert "accepted 2026-11-03" in limit_step["title"]
    assert (baseline["from"], baseline["to"]) == (limit_step["from"], limit_step["to"]) == (4, 11)
    assert chart["span"][0] <= min(limit, 100.0) and chart["span"][1] >= max(limit, 100.0)
    write_site(_accepted(None, workload), tmp_path)  # an accept kept without its tolerance
    (chart,) = charts_of((tmp_path / host_page("h/1")).read_text())
    assert [st["kind"] for st in chart["steps"]] == ["baseline"]


def test_a_point_opens_its_runs_record_where_the_site_holds_it_else_its_runs_compared(tmp_path):
    few, long = _series(12, 4), _series(1000, 5)
    long.host = "h/2"
    long.rows[:] = [replace(r, host="h/2", run=f"long{i}") for i, r in enumerate(long.rows)]
    site = Site("test", [few, long], [])
    assert drawn_runs(site.series) == {f"k{i}" for i in range(12)}  # the long one: builds
    site.runs = {key: f'{{"key": "{key}"}}' for key in drawn_runs(site.series)}
    write_site(site, tmp_path)
    (chart,) = charts_of((tmp_path / host_page("h/1")).read_text())
    assert [p["record"] for p in chart["points"]] == [f"runs/k{i}.json" for i in range(12)]
    assert (tmp_path / "runs" / "k3.json").read_text() == '{"key": "k3"}'
    (chart,) = charts_of((tmp_path / host_page("h/2")).read_text())
    opens = [p["record"] for p in chart["points"]]
    assert len(opens) == 200 and opens[0] == "compare-h-2.html?a=long0&b=long4"


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


def test_a_chart_s_data_holds_any_name_as_text_of_its_json(tmp_path):
    """A stored name with markup in it reaches the page inside a chart's JSON, escaped so that
    no parser of HTML ends the script early, and comes back whole to the page's script."""
    host = "h/1 </script><b>&"
    s = _series(3, 1)
    s.host = host
    s.rows[:] = [replace(r, host=host) for r in s.rows]
    write_site(Site("test", [s], []), tmp_path)
    page = (tmp_path / host_page(host)).read_text()
    assert "</script><b>" not in page
    (chart,) = charts_of(page)
    assert [p["tip"].endswith(f" · {host} · run k{i}") for i, p in enumerate(chart["points"])] == [
        True
    ] * 3
