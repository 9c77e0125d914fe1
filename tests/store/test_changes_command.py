"""``moeperf changes`` over a real store (both backends): the change point of each series with
its builds, interval, the hosts that show it and its bisect; exit 1 when one lies after the
last accepted baseline."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from xml.etree import ElementTree

import httpx
import pytest
from _records import run_record

from pytest_moeperf.commands import main as moeperf
from pytest_moeperf.host.process import hear_ctrl_c
from pytest_moeperf.store.hosts import host_key
from pytest_moeperf.store.runstore import open_store

RUNS, PER_BUILD, STEP_BUILD = 40, 4, 10429


def _build(i: int) -> str:
    return f"b{10423 + i // PER_BUILD}"


def _fill(store, host: str, slowed: bool) -> None:
    for i in range(RUNS):
        build = _build(i)
        speed = 0.7 if slowed and int(build[1:]) >= STEP_BUILD else 1.0
        store.add_run(run_record(host=host, build=build, day=1 + i // 2, seed=i, speed=speed))


def test_changes_names_the_builds_the_hosts_and_the_bisect(store_at, capsys):
    store = open_store(store_at)
    _fill(store, "gpu-01", slowed=True)
    _fill(store, "gpu-02", slowed=False)
    url = store_at.render_as_string(hide_password=False)
    code = moeperf(["changes", "--store", url, "-c", "mmap", "-w", "tg64"])
    out = capsys.readouterr().out
    assert code == 1, out  # nothing accepted: a change after it
    lines = out.splitlines()
    assert lines[0].endswith("2 series of 2 host(s), 1 change point(s)")
    a = host_key(run_record(host="gpu-01").fingerprint)
    change_id, name = lines[1].split(" ", 1)
    assert name.startswith(f"{a} embedded mmap tg64: -30.")
    assert "between b10428 and b10429" in lines[1]
    assert lines[2] == "  on this host only"
    assert lines[3] == (
        "  after the last accepted baseline, not triaged (moeperf changes ack|invalid|fixed "
        f"{change_id} --note ...)"
    )
    assert lines[4] == (
        "  bisect: moeperf bisect --profile embedded -c mmap --metric tg64 --good 10428 "
        "--bad 10429 --margin 0.05"
    )
    # accepted since: the change is known, the nightly job passes
    time.sleep(0.01)
    store.add_document("accept", a, {"profile": "embedded"})
    store.close()
    assert moeperf(["changes", "--store", url, "-c", "mmap", "-w", "tg64"]) == 0
    assert "after the last accepted baseline" not in capsys.readouterr().out


def test_a_change_point_triaged_from_the_command_line_stops_failing_the_job(
    store_at, tmp_path, capsys
):
    """ack / invalid / fixed ID --note: kept in the store, shown by changes and the dashboard,
    kept through an export and import into a new store; changes exits 1 only on one no one
    has triaged, and --json and --since list them for a job that posts them."""
    store = open_store(store_at)
    _fill(store, "gpu-01", slowed=True)
    store.close()
    url = store_at.render_as_string(hide_password=False)
    only = ["--store", url, "-c", "mmap", "-w", "tg64"]
    assert moeperf(["changes", "--json", *only]) == 1
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["untriaged"] and listed["mark"] is None and listed["after"] == "b10429"
    assert moeperf(["changes", "--since", "2099-01-01", "--json", *only]) == 0  # none since
    assert json.loads(capsys.readouterr().out) == []
    assert moeperf(["changes", "ack", listed["id"][:6], "--note", "issue 61", *only]) == 0
    assert "acknowledged: issue 61" in capsys.readouterr().out
    assert moeperf(["changes", *only]) == 0  # triaged: the nightly job passes
    assert "  acknowledged: issue 61 (" in capsys.readouterr().out
    assert moeperf(["changes", "--json", "--store", url]) == 1  # another series' step is not
    capsys.readouterr()
    site = tmp_path / "site"
    assert moeperf(["dashboard", "--output", str(site), "--store", url]) == 0
    pages = "".join(p.read_text() for p in site.rglob("*.html"))
    assert "acknowledged: issue 61" in pages and listed["id"] in pages
    # the feed: exactly the untriaged ones, newest first, as JSON and Atom
    assert moeperf(["changes", "--json", "--store", url]) == 1
    untriaged = [c["id"] for c in json.loads(capsys.readouterr().out) if c["untriaged"]]
    fed = json.loads((site / "changes.json").read_text())
    assert [c["id"] for c in fed] == untriaged and listed["id"] not in untriaged
    atom = ElementTree.parse(site / "changes.atom").getroot()
    ns = {"a": "http://www.w3.org/2005/Atom"}
    ids = [e.findtext("a:id", namespaces=ns) for e in atom.findall("a:entry", ns)]
    assert ids == [f"urn:pytest-moeperf:change:{i}" for i in untriaged]
    dates = [c["date"] for c in fed]
    assert dates == sorted(dates, reverse=True)
    assert f"{len(untriaged)} not triaged" in (site / "index.html").read_text()
    assert moeperf(["store", "export", str(tmp_path / "out"), "--store", url]) == 0
    again = f"sqlite:///{tmp_path / 'again.sqlite'}"
    assert moeperf(["store", "import", str(tmp_path / "out"), "--store", again]) == 0
    capsys.readouterr()
    assert moeperf(["changes", "--store", again, "-c", "mmap", "-w", "tg64"]) == 0
    assert "acknowledged: issue 61" in capsys.readouterr().out
    assert moeperf(["changes", "fixed", "ffffffffff", *only]) == 2  # no such id: one line
    assert "no change point of the store has that id" in capsys.readouterr().err


def test_every_hosts_change_is_said_so(store_at, capsys):
    store = open_store(store_at)
    _fill(store, "gpu-01", slowed=True)
    _fill(store, "gpu-02", slowed=True)
    store.close()
    url = store_at.render_as_string(hide_password=False)
    moeperf(["changes", "--store", url, "-c", "lm-none", "-w", "pp512"])
    out = capsys.readouterr().out
    assert out.count("between b10428 and b10429") == 2
    assert out.count("every host's change, not one host's") == 2


def test_a_store_with_no_change_exits_0(store_at, capsys):
    store = open_store(store_at)
    _fill(store, "gpu-01", slowed=False)
    store.close()
    url = store_at.render_as_string(hide_password=False)
    assert moeperf(["changes", "--store", url]) == 0
    assert capsys.readouterr().out.strip().endswith("4 series of 1 host(s), 0 change point(s)")


def test_the_dashboard_is_served_on_loopback_only(store_at, tmp_path):
    store = open_store(store_at)
    _fill(store, "gpu-01", slowed=True)
    store.close()
    url = store_at.render_as_string(hide_password=False)
    serving = subprocess.Popen(
        [sys.executable, "-m", "pytest_moeperf.commands", "dashboard", "--output",
         str(tmp_path / "site"), "--store", url, "--serve", "--port", "0"],
        stderr=subprocess.PIPE, text=True, preexec_fn=hear_ctrl_c,  # pytest in the background
    )  # fmt: skip
    try:
        assert serving.stderr is not None
        for line in serving.stderr:  # the event: it says where it serves
            if "serving http://" in line:
                break
        else:
            pytest.fail(f"dashboard --serve exited {serving.wait()} before serving")
        address = line.split("serving ")[1].split()[0]
        assert address.startswith("http://127.0.0.1:")
        page = httpx.get(address + "index.html", timeout=30)
        assert page.status_code == 200 and "every host&#39;s series" in page.text
    finally:
        serving.send_signal(signal.SIGINT)
        assert serving.wait(timeout=30) == 0


def test_the_dashboard_shows_a_profiles_reference_beside_the_hosts_newest_run(
    store_at, tmp_path, monkeypatch
):
    """The repository's moeperf.toml names ADR-0042's tables as the adr-0042 profile's
    reference: a host that ran that profile sees them beside its own numbers, in the record's
    layout."""
    run = run_record(host="prod-01", build="b11713")
    record = replace(  # the same run, as the adr-0042 profile's
        run,
        measurements=[
            replace(m, conditions=replace(m.conditions, profile="adr-0042"))
            for m in run.measurements
        ],
        fingerprints={"adr-0042": run.fingerprints["embedded"]},
    )
    store = open_store(store_at)
    store.add_run(record)
    store.close()
    monkeypatch.chdir(Path(__file__).parents[2])  # the repository: its moeperf.toml
    url = store_at.render_as_string(hide_password=False)
    assert moeperf(["dashboard", "--output", str(tmp_path / "site"), "--store", url]) == 0
    page = next((tmp_path / "site").glob("host-prod-01-*.html")).read_text()
    assert "<h2 class=reference>" in page and "ADR-0042" in page
    assert "<th>pp2048 ADR-0042</th><th>pp2048 here</th>" in page
    mmap = re.search(r"<tr><td>mmap</td>(.*?)</tr>", page)
    assert mmap is not None and "<td>b11713</td>" in mmap[1]


def test_each_series_downloads_as_csv_and_json_with_the_stored_points(store_at, tmp_path):
    store = open_store(store_at)
    _fill(store, "gpu-01", slowed=True)
    rows = store.series_rows(configuration="mmap", workload="tg64")
    store.close()
    url = store_at.render_as_string(hide_password=False)
    site = tmp_path / "site"
    assert moeperf(["dashboard", "--output", str(site), "--store", url]) == 0
    page = next(site.glob("host-*.html")).read_text()
    (link,) = re.findall(r'href="(data/[^"]*-embedded-mmap-tg64\.csv)" download', page)
    with (site / link).open(newline="") as f:
        table = list(csv.DictReader(f))
    assert [(t["run"], t["build"]) for t in table] == [(r.run, r.build) for r in rows]
    assert [float(t["median"]) for t in table] == [r.median for r in rows]
    assert all(float(t["low"]) < float(t["median"]) < float(t["high"]) for t in table)
    assert {t["unit"] for t in table} == {"tok/s"}
    doc = json.loads((site / link.replace(".csv", ".json")).read_text())
    assert (doc["configuration"], doc["workload"]) == ("mmap", "tg64")
    assert [d["median"] for d in doc["runs"]] == [r.median for r in rows]
