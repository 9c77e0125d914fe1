"""The dashboard in a real browser (Debian's Chromium, headless, driven by Playwright) over a
real store of each backend: every
page loads from disk with no console error and no request off the machine, every chart draws
the points the store holds, a change point's bisect command is on its page, and the filter
narrows the series."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "store"))
from _records import run_record

from pytest_moeperf.commands import main as moeperf
from pytest_moeperf.store.runstore import open_store

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
RUNS, PER_BUILD = 40, 4


def _fill(store, host: str, slowed: bool) -> None:
    for i in range(RUNS):
        build = f"b{10423 + i // PER_BUILD}"
        speed = 0.7 if slowed and int(build[1:]) >= 10429 else 1.0
        store.add_run(run_record(host=host, build=build, day=1 + i // 2, seed=i, speed=speed))


@pytest.fixture
def browser():
    sync = pytest.importorskip(
        "playwright.sync_api", reason="no playwright (pip install playwright)"
    )
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no {CHROMIUM} (Debian's chromium; CI installs it)")
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield b
        finally:
            b.close()


def test_every_page_draws_the_store_offline_with_its_change_points(browser, store_at, tmp_path):
    store = open_store(store_at)
    _fill(store, "gpu-01", slowed=True)
    _fill(store, "gpu-02", slowed=False)
    store.add_document("gate", "x", {})  # another host's record: on no page of these
    store.close()
    site = tmp_path / "site"
    url = store_at.render_as_string(hide_password=False)
    assert moeperf(["dashboard", "--output", str(site), "--store", url]) == 0
    pages = sorted(site.glob("*.html"))
    assert [p.name for p in pages][-1] == "index.html" and len(pages) == 3
    for path in pages:
        assert "http://" not in path.read_text() and "https://" not in path.read_text()

    page = browser.new_page()
    errors: list[str] = []
    off_machine: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: None if r.url.startswith("file://") else off_machine.append(r.url))
    drawn = {}
    for path in pages:
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        drawn[path.name] = page.locator("circle.point").count()
        ms = page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
        print(f"{path.name}: {drawn[path.name]} points drawn, loaded in {ms:.0f} ms")
    assert errors == [] and off_machine == []
    # every point the store holds: 2 hosts x 4 series x 40 runs, on each host's page and the index
    host_pages = [n for n in drawn if n.startswith("host-")]
    assert [drawn[n] for n in host_pages] == [4 * RUNS, 4 * RUNS]
    assert drawn["index.html"] == 2 * 4 * RUNS

    slowed = next(p for p in pages if p.name.startswith("host-gpu-01"))
    page.goto(slowed.as_uri())
    bisects = page.locator("pre.bisect").all_inner_texts()
    assert (
        "moeperf bisect --profile embedded -c mmap --metric tg64 --good 10428 --bad 10429 "
        "--margin 0.05"
    ) in bisects
    assert page.locator("line.changepoint").count() == 4  # each of its 4 series stepped
    # the filter narrows the series, and a build range greys the points outside it
    assert page.locator("section.series:not(.hidden)").count() == 4
    page.fill("#text", "tg64")
    assert page.locator("section.series:not(.hidden)").count() == 2
    page.fill("#text", "mmap tg64")
    assert page.locator("section.series:not(.hidden)").count() == 1
    page.fill("#from", "b10429")
    assert page.locator("circle.point.out").count() == 4 * 6 * PER_BUILD  # b10423..b10428
    page.screenshot(path=str(tmp_path / "host.png"))
    # a stable link to a series
    page.goto(slowed.as_uri() + "#embedded-mmap-tg64")
    assert page.locator("#embedded-mmap-tg64 h3").inner_text().endswith("embedded mmap tg64")
