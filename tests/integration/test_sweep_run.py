"""The slots sweep on real servers (b11434, tiny model): one fresh server a ``-np`` point, its
table, and a ``--json`` that reads back with the run record of every point's measurements."""

from __future__ import annotations

import json

import pytest

from pytest_moeperf.commands import main
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.store.record import RunRecord


def test_slots_sweep_json_keeps_every_points_measurements(
    llama_build, tiny_model, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    args = ["sweep", "--profile", "embedded-tiny", "-c", "traffic", "--np", "1,2", "-r", "1"]
    assert main([*args, "--json", "sweep.json"]) == 0
    out = capsys.readouterr().out
    assert "slots sweep of traffic:" in out
    stored = json.loads((tmp_path / "sweep.json").read_text())
    assert [p["np"] for p in stored["points"]] == [1, 2]
    assert stored["configuration"] == "traffic"
    record = RunRecord.from_dict(stored["record"])
    kept = {(m.configuration, m.workload.name): m for m in record.measurements}
    for point in stored["points"]:
        assert point["configuration"] == f"traffic-np{point['np']}"
        assert point["passes"] == 1 and point["overall"].get("errors", 0) == 0
        for metric, median in point["medians"].items():
            # the table's figure is the median of the measurement the record keeps
            m = kept[(point["configuration"], Workload.traffic(metric).name)]
            assert m.summary.median == pytest.approx(median, rel=1e-12)
