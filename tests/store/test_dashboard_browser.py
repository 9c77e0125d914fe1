"""The dashboard in a real browser (Debian's Chromium, headless, driven by Playwright) over a
real store of each backend: every
page loads from disk with no console error and no request off the machine, every chart draws
the points the store holds, a change point's bisect command is on its page, and the filter
narrows the series."""

from __future__ import annotations

import json
import math
import shlex
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "store"))
from _records import run_record

from pytest_moeperf.commands import main as moeperf
from pytest_moeperf.report.charts import PAD, WIDTH
from pytest_moeperf.store.hosts import host_key
from pytest_moeperf.store.record import VerdictRecord
from pytest_moeperf.store.runstore import open_store, run_key
from pytest_moeperf.verdicts.judge import Verdict

RUNS, PER_BUILD = 40, 4


def _fill(store, host: str, slowed: bool) -> None:
    for i in range(RUNS):
        build = f"b{10423 + i // PER_BUILD}"
        speed = 0.7 if slowed and int(build[1:]) >= 10429 else 1.0
        store.add_run(run_record(host=host, build=build, day=1 + i // 2, seed=i, speed=speed))


def test_every_page_draws_the_store_offline_with_its_change_points(
    browser, store_at, tmp_path, capsys
):
    store = open_store(store_at)
    _fill(store, "gpu-01", slowed=True)
    _fill(store, "gpu-02", slowed=False)
    store.add_document("gate", "x", {})  # another host's record: on no page of these
    a = host_key(run_record(host="gpu-01").fingerprint)
    accepted = run_record(host="gpu-01", build="b10424", day=3, seed=5)  # run 5 of gpu-01
    mmap_tg64 = next(m for m in accepted.measurements if m.key == ("mmap", "b10424", "tg64"))
    store.add_document("accept", a, {
        "profile": "embedded", "date": "2026-11-03", "run": run_key(accepted),
        "accepted": [{"measurement": list(mmap_tg64.key), "median": mmap_tg64.summary.median,
                      "tolerance": 0.05}],
    })  # fmt: skip
    store.add_document("gate", a, {"baseline": "b10428", "candidate": "b10429"})
    claimed = []  # the runs of one claim: it holds, is undecided, then fails
    for i, (outcome, low) in enumerate([("holds", 2.1), ("undecided", 1.8), ("fails", 1.2)]):
        claim = Verdict(outcome, low + 0.2, low, low + 0.4, 2.0, label="lm-none / mmap")
        record = replace(
            run_record(host="gpu-01", build="b10433", day=27, seed=50 + i, speed=0.7),
            verdicts=[VerdictRecord(test="test_x.py::test_lm_none_doubles_prefill", verdict=claim)],
        )
        store.add_run(record)
        claimed.append(run_key(record))
    rows = store.series_rows(host=a)
    store.close()
    site = tmp_path / "site"
    url = store_at.render_as_string(hide_password=False)
    assert moeperf(["dashboard", "--output", str(site), "--store", url]) == 0
    pages = sorted(site.glob("*.html"))
    names = [p.name for p in pages]
    assert names[0] == "changes.html" and names[-1] == "index.html" and len(pages) == 6
    assert sum(n.startswith("compare-") for n in names) == 2  # one a host
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
    assert drawn["changes.html"] == 0  # the lists and tables draw no chart
    assert [drawn[n] for n in drawn if n.startswith("compare-")] == [0, 0]
    host_pages = [n for n in drawn if n.startswith("host-")]
    assert len(host_pages) == 2
    assert [drawn[n] for n in host_pages] == [4 * (RUNS + 3), 4 * RUNS]
    assert drawn["index.html"] == 2 * (2 * 4 * RUNS + 4 * 3)  # its two views of every host
    # the index: every host's chart of a series on one scale, or each as % of its own median
    index = next(p for p in pages if p.name == "index.html")
    page.goto(index.as_uri())
    across = page.locator("section.across", has_text="embedded mmap tg64")
    shared = across.locator(".row.absolute svg.chart")
    scales = shared.evaluate_all(
        "cs => cs.map(c => [...c.querySelectorAll('text.axis')].slice(1, -2)"
        ".map(t => t.textContent).join(' '))"
    )
    assert len(scales) == 2 and scales[0] == scales[1]  # the same scale on both hosts
    newest = shared.evaluate_all(
        "cs => cs.map(c => +[...c.querySelectorAll('circle.point')].pop().getAttribute('cy'))"
    )
    assert newest[0] > newest[1] + 20  # the slowed host's newest run sits well below the other's
    assert across.locator(".row.relative").is_hidden()
    page.check("#relative")
    assert (
        across.locator(".row.relative").is_visible() and across.locator(".row.absolute").is_hidden()
    )
    units = across.locator(".row.relative text.unit").all_text_contents()
    assert units == ["% of its median"] * 2

    slowed = next(p for p in pages if p.name.startswith("host-gpu-01"))
    page.goto(slowed.as_uri())
    bisects = page.locator("pre.bisect").all_inner_texts()
    assert (
        "moeperf bisect --profile embedded -c mmap --metric tg64 --good 10428 --bad 10429 "
        "--margin 0.05"
    ) in bisects
    assert page.locator("line.changepoint").count() == 4  # each of its 4 series stepped
    # the accepted baseline a step in its own series only; the gate a mark on each that opens it
    assert page.locator("#embedded-mmap-tg64 line.baseline").count() == 1
    assert page.locator("line.baseline").count() == 1
    limit = page.locator("#embedded-mmap-tg64 line.limit")  # and its checks' limit, 5 % below
    assert limit.count() == 1 and limit.evaluate("l => +l.getAttribute('y1')") > page.locator(
        "line.baseline"
    ).evaluate("l => +l.getAttribute('y1')")
    links = page.locator("a.record").evaluate_all("marks => marks.map(m => m.getAttribute('href'))")
    assert len(links) == 4 and all((site / link).is_file() for link in links)
    # the claim's ratio over its runs against its bound, the undecided one drawn as undecided
    claim = page.locator("section.claim")
    assert claim.locator("circle.verdict").count() == 3
    assert claim.locator("circle.verdict.undecided").count() == 1
    assert claim.locator("line.bound").count() == 1
    # the filter narrows the series, and a build range greys the points outside it
    assert page.locator("section.series:not(.hidden)").count() == 5  # 4 series and the claim
    page.fill("#text", "tg64")
    assert page.locator("section.series:not(.hidden)").count() == 2
    page.fill("#text", "mmap tg64")
    assert page.locator("section.series:not(.hidden)").count() == 1
    # a build range zooms: the runs outside it left out, those in it spread over the width
    chart = page.locator("#embedded-mmap-tg64 svg.chart")
    before = chart.locator("circle.point").evaluate_all("ps => ps.map(p => +p.getAttribute('cx'))")
    page.fill("#from", "b10429")
    assert page.locator("circle.point.zoomed-out").count() == 4 * 6 * PER_BUILD  # b10423..b10428
    kept = chart.locator("circle.point:not(.zoomed-out)")
    after = kept.evaluate_all("ps => ps.map(p => +p.getAttribute('cx'))")
    assert len(after) == RUNS - 6 * PER_BUILD + 3  # b10429 on, and the claim's 3 runs
    step = (WIDTH - 2 * PAD) / len(after)  # the chart's width, shared by fewer runs
    assert after == pytest.approx([PAD + step * (k + 0.5) for k in range(len(after))], abs=0.05)
    assert step > 2 * (before[1] - before[0])
    assert chart.locator("text.first").text_content() == "b10429"
    assert chart.locator("line.changepoint.zoomed-out").count() == 1  # its step is outside
    page.fill("#from", "")  # and back
    assert page.locator("circle.point.zoomed-out").count() == 0
    again = chart.locator("circle.point").evaluate_all("ps => ps.map(p => +p.getAttribute('cx'))")
    assert again == pytest.approx(before, abs=0.05)
    # pointed at, a point says its value, interval, build, date, host and run as stored
    mmap_tg64 = [r for r in rows if (r.configuration, r.workload) == ("mmap", "tg64")]
    newest = mmap_tg64[-1]
    kept.last.hover()
    said = page.locator("#tip").inner_text()
    low = newest.median * math.exp(-1.959964 * newest.log_se)
    high = newest.median * math.exp(1.959964 * newest.log_se)
    assert said.startswith(f"{newest.median:.4g} tok/s [{low:.4g}, {high:.4g}] · {newest.build}")
    assert newest.run[:12] in said and page.locator("#tip").is_visible()
    page.screenshot(path=str(tmp_path / "host.png"))
    # clicked, the tip stays, with a link that opens the run's record as the store holds it
    kept.last.click()
    opens = page.locator("#tip a")
    assert opens.inner_text() == "open its run's record" and newest.run[:12] in said
    page.mouse.move(5, 5)  # pointing elsewhere leaves a pinned tip as it is
    assert page.locator("#tip").inner_text() == f"{said} · open its run's record"
    opens.click()
    page.wait_for_load_state("load")
    assert page.url.endswith(f"/runs/{newest.run[:12]}.json")
    opened = json.loads(page.locator("body").inner_text())
    (m,) = [
        m for m in opened["measurements"] if (m["configuration"], m["workload"]) == ("mmap", "tg64")
    ]
    assert m["median"] == newest.median and m["build"] == newest.build
    page.go_back()
    page.wait_for_load_state("load")
    # two runs compared, picked from the chart's link: the ratios moeperf computes for them
    page.locator("#embedded-mmap-tg64 a.compare").click()
    page.wait_for_load_state("load")
    first, last = mmap_tg64[0].run, newest.run
    assert "/compare-gpu-01-" in page.url and page.url.endswith(f"?a={first[:12]}&b={last[:12]}")
    shown = page.locator("#compare tbody tr").evaluate_all(
        "rs => rs.map(r => [r.dataset.series, +r.dataset.ratio, +r.dataset.low, +r.dataset.high])"
    )
    capsys.readouterr()
    assert moeperf(["changes", "--compare", first[:8], last[:8], "--json", "--store", url]) == 0
    computed = json.loads(capsys.readouterr().out)
    assert len(shown) == len(computed) == 4  # the run's 4 series
    expected = {
        f"{c['host']} {c['profile']} {c['configuration']} {c['workload']}": c for c in computed
    }
    for name, ratio, low, high in shown:
        c = expected[name]
        assert (ratio, low, high) == pytest.approx((c["ratio"], c["low"], c["high"]), rel=1e-9)
    gate = page.locator("#gate").inner_text()  # each word as Python's shlex quoted it
    assert (
        gate == "moeperf gate --profile embedded --baseline 10423 --candidate 10433 -c lm-none,mmap"
    )

    def decisions():
        return page.locator("#decisions tbody tr").evaluate_all(
            "rs => rs.map(r => [...r.cells].map(c => c.textContent))"
        )

    # their decisions side by side, as an upgrade check's table: the first run judged none
    assert decisions() == [
        ["test_lm_none_doubles_prefill: lm-none / mmap", "-", "fails 1.400 [1.200, 1.600]",
         "worse (not judged on the pinned build)"]
    ]  # fmt: skip
    page.select_option("#run-a", claimed[0])  # the run where it held
    assert decisions() == [
        ["test_lm_none_doubles_prefill: lm-none / mmap", "holds 2.300 [2.100, 2.500]",
         "fails 1.400 [1.200, 1.600]", "worse"]
    ]  # fmt: skip
    page.select_option("#run-b", claimed[1])
    assert decisions()[0][3] == "undecided on the candidate"
    page.select_option("#run-b", last)
    page.select_option("#run-a", last)  # the same run on both sides: every ratio 1
    assert (
        page.locator("#compare tbody tr").evaluate_all("rs => rs.map(r => +r.dataset.ratio)")
        == [1.0] * 4
    )
    assert "one build (b10433)" in page.locator("#gate").inner_text()
    page.screenshot(path=str(tmp_path / "compare.png"))
    assert errors == [] and off_machine == []
    # a stable link to a series
    page.goto(slowed.as_uri() + "#embedded-mmap-tg64")
    assert page.locator("#embedded-mmap-tg64 h3").inner_text().endswith("embedded mmap tg64")


HOSTILE = '<script>alert("x")</script>&\''


def test_every_stored_string_is_text_on_the_pages_and_runs_nothing(
    browser, store_at, tmp_path, capsys
):
    """A configuration, a host and a triage note named like markup render as text in the
    pages, the SVG titles and the attributes alike, and Chromium runs none of them: no dialog,
    no console error; the note shows under its change point after the site is rebuilt."""
    store = open_store(store_at)
    for i in range(RUNS):
        build = f"b{10423 + i // PER_BUILD}"
        speed = 0.7 if i >= 24 else 1.0  # a step at b10429: a change point to triage
        record = run_record(host="gpu-01", build=build, day=1 + i // 2, seed=i, speed=speed)
        data = record.to_dict()
        data["fingerprint"]["hostname"] = f"gpu{HOSTILE}"
        for m in data["measurements"]:
            m["configuration"] = m["configuration"].replace("mmap", f"mmap{HOSTILE}")
        store.add_run(type(record).from_dict(data))
    store.close()
    url = store_at.render_as_string(hide_password=False)
    site = tmp_path / "site"
    assert moeperf(["dashboard", "--output", str(site), "--store", url]) == 0
    capsys.readouterr()
    assert moeperf(["changes", "--json", "--store", url]) == 1  # the step, not triaged
    found = json.loads(capsys.readouterr().out)
    marked = next(
        c for c in found if (c["configuration"], c["workload"]) == (f"mmap{HOSTILE}", "tg64")
    )
    assert moeperf(["changes", "ack", marked["id"], "--note", HOSTILE, "--store", url]) == 0
    assert moeperf(["dashboard", "--output", str(site), "--store", url]) == 0  # rebuilt
    text = "".join(p.read_text() for p in site.rglob("*") if p.suffix in (".html", ".svg"))
    assert "<script>alert" not in text and "</script>&" not in text  # as text only
    # as MarkupSafe escapes it
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&#39;" in text

    page = browser.new_page()
    dialogs: list[str] = []
    errors: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    for path in sorted(site.glob("*.html")):
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        if page.locator("circle.point").count():
            page.locator("circle.point").first.hover()  # its tooltip: text as well
    assert dialogs == [] and errors == []
    host = next(p for p in site.glob("host-*.html"))
    page.goto(host.as_uri())
    section = page.locator("section.series", has_text=f"mmap{HOSTILE} tg64")
    assert section.locator("h3").inner_text().endswith(f"mmap{HOSTILE} tg64")  # the name, as text
    assert f"acknowledged: {HOSTILE}" in section.locator("ul.changes").inner_text()


def test_the_compare_pages_gate_is_one_word_a_name_for_the_shell(browser, tmp_path):
    """A configuration named with a space and a quote, and a build that is a binary's path:
    the gate command the page shows is the one Python's shlex would write, word for word."""
    from pytest_moeperf.report.dashboard import Site, write_site
    from pytest_moeperf.verdicts.series import Series, SeriesRow

    s = Series("h/1", "embedded", "cache 6'gib", "tg64")
    for i, build in enumerate(["b10423", "/opt/llama cpp/llama-server"]):
        s.rows.append(
            SeriesRow("h/1", "embedded", s.configuration, "tg64", build, 100.0 + i, 0.01, None,
                      float(i), f"2026-11-0{i + 1}", f"k{i}")
        )  # fmt: skip
    write_site(Site("test", [s], []), tmp_path)
    (page_file,) = tmp_path.glob("compare-*.html")
    page = browser.new_page()
    page.goto(page_file.as_uri() + "?a=k0&b=k1")
    page.wait_for_load_state("load")
    words = ["moeperf", "gate", "--profile", "embedded", "--baseline", "10423", "--candidate"]
    words += ["/opt/llama cpp/llama-server", "-c", "cache 6'gib"]
    assert page.locator("#gate").inner_text() == shlex.join(words)
