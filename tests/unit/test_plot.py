"""The PNG report: throughput panels per workload, the history row, baselines of this host
(with the median's change) and references (another host's numbers, without one)."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.stats import Figure
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.report.plot import (
    DPI,
    PANEL_HEIGHT,
    PlotMark,
    plot_marks,
    plot_report,
    report_figure,
)
from pytest_moeperf.store.baselines import BaselineEntry, BaselineFile
from pytest_moeperf.store.history import read_results, write_history
from pytest_moeperf.store.hosts import BaselineHost
from pytest_moeperf.store.record import RESULTS_VERSION, RunRecord

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FINGERPRINT = {
    "hostname": "bench-01",
    "cpu_model": "Intel(R) Xeon(R) Silver 4210 CPU @ 2.20GHz",
    "cpus": 40,
    "gpus": ["NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090"],
}
# configuration -> workload -> samples (tok/s), 3 to 5 each
THIS_RUN = {
    "mmap": {"pp512": [189.0, 186.2, 191.4], "tg64": [15.9, 16.1, 15.7, 16.0]},
    "lm-none": {"pp512": [391.4, 388.0, 395.1, 390.2, 379.9], "tg64": [16.2, 16.0, 16.3]},
}


def results(build: str, date: str, runs: dict[str, dict[str, list[float]]]) -> RunRecord:
    """A run record as a session writes it."""
    ms = []
    for config, by_workload in runs.items():
        for wname, values in by_workload.items():
            wl = Workload.parse(wname)
            samples = tuple(Sample(wl.tokens, wl.tokens * 1000.0 / v) for v in values)
            told = Conditions(profile="prod", flags=("-t", "10"), pinning="node 1")
            ms.append(Measurement(config, build, wl, samples, told).to_dict())
    return RunRecord.from_dict(
        {
            "moeperf_results": RESULTS_VERSION,
            "plugin_version": "0.1.0",
            "date": date,
            "fingerprint": FINGERPRINT,
            "fingerprints": {"prod": FINGERPRINT},
            "measurements": ms,
            "verdicts": [],
            "baseline_checks": [],
        }
    )


def scaled(factor: float) -> dict[str, dict[str, list[float]]]:
    return {c: {w: [v * factor for v in vs] for w, vs in ws.items()} for c, ws in THIS_RUN.items()}


@pytest.fixture
def current() -> RunRecord:
    return results("b11713", "2026-10-17T09:30:00+0200", THIS_RUN)


@pytest.fixture
def earlier() -> list[RunRecord]:
    """Two earlier runs on build b11053, then one on b11713 (the history before this run)."""
    return [
        results("b11053", "2026-10-10T09:30:00+0200", scaled(0.70)),
        results("b11053", "2026-10-12T09:30:00+0200", scaled(0.72)),
        results("b11713", "2026-10-15T09:30:00+0200", scaled(0.98)),
    ]


BASELINES = {
    ("mmap", "b11713", "pp512"): PlotMark(189.0),
    ("lm-none", "b11713", "pp512"): PlotMark(391.4),
    ("lm-none", "b11713", "tg64"): PlotMark(17.5),
}


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_plot_with_history_and_baselines(
    tmp_path: Path, current: RunRecord, earlier: list[RunRecord]
) -> None:
    out = plot_report(current, [*earlier, current], tmp_path / "report.png", baselines=BASELINES)
    assert out == tmp_path / "report.png"
    width, height = png_size(out)
    assert out.stat().st_size > 20_000
    # two workloads side by side, two rows (throughput, run over run)
    assert width >= 2 * 4.5 * DPI
    assert height == pytest.approx((2 * PANEL_HEIGHT + 1.3) * DPI, abs=2)
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*"))


def test_plot_without_history_or_baselines(tmp_path: Path, current: RunRecord) -> None:
    out = plot_report(current, [], tmp_path / "plain.png")
    width, height = png_size(out)
    assert height == pytest.approx((PANEL_HEIGHT + 1.3) * DPI, abs=2)
    assert width >= 2 * 4.5 * DPI


def test_history_of_only_this_run_draws_one_row(tmp_path: Path, current: RunRecord) -> None:
    _, alone = png_size(plot_report(current, [current], tmp_path / "alone.png"))
    _, plain = png_size(plot_report(current, [], tmp_path / "plain.png"))
    assert alone == plain


def test_this_run_read_back_from_its_file_is_not_an_earlier_run(
    tmp_path: Path, current: RunRecord
) -> None:
    written = write_history(current, tmp_path / "h", stamp="s")
    runs = [read_results(written[0])[0]]
    later = replace(current, date="2026-10-17T09:30:01+0200")  # the record asked again
    _, height = png_size(plot_report(later, runs, tmp_path / "r.png"))
    assert height == pytest.approx((PANEL_HEIGHT + 1.3) * DPI, abs=2)
    assert json.loads(written[0].read_text()) == current.to_dict()


def test_history_of_other_configurations_draws_one_row(tmp_path: Path, current: RunRecord) -> None:
    other = results("b11053", "2026-10-10T09:30:00+0200", {"node0": THIS_RUN["mmap"]})
    _, height = png_size(plot_report(current, [other], tmp_path / "r.png"))
    assert height == pytest.approx((PANEL_HEIGHT + 1.3) * DPI, abs=2)


def test_build_gate_run_stored_figures_and_missing_cells(
    tmp_path: Path, current: RunRecord, earlier: list[RunRecord]
) -> None:
    gate = results("b11053", current.date, scaled(0.7))
    current.measurements += gate.measurements
    stored = Measurement(
        "one-core",
        "b11713",
        Workload.parse("pp512"),
        (),
        Conditions(profile="prod"),
        Figure(150.0, 0.02),
    )
    current.measurements.append(stored)
    width, height = png_size(
        plot_report(current, earlier, tmp_path / "gate.png", baselines=BASELINES)
    )
    assert height == pytest.approx((2 * PANEL_HEIGHT + 1.3) * DPI, abs=2)
    assert width > 2 * (1.15 * 5 + 2.0) * DPI - 2  # five (configuration, build) columns


def test_no_measurements_still_writes_a_png(tmp_path: Path) -> None:
    empty = results("b11713", "2026-10-17T09:30:00+0200", {})
    assert png_size(plot_report(empty, [], tmp_path / "empty.png"))[0] > 0


def test_replaces_an_existing_file(tmp_path: Path, current: RunRecord) -> None:
    path = tmp_path / "report.png"
    path.write_bytes(b"old")
    plot_report(current, [], path)
    assert path.read_bytes()[:8] == PNG_MAGIC


def _measured(config: str, build: str, workload: str, value: float) -> Measurement:
    wl = Workload.parse(workload)
    return Measurement(config, build, wl, (Sample.of_value(wl, value),), Conditions(profile="prod"))


def test_marks_are_baselines_only_on_this_host() -> None:
    entry = BaselineEntry("b11713", "lm-none", "tg128 @ d8192", 16.3, "2026-10-17", "ADR-0042")
    traffic = BaselineEntry(
        "b11713", "lm-none", "prefill-median", 219.0, "2026-10-17", "logs", kind="traffic"
    )
    bf = BaselineFile(
        "prod", hosts=(BaselineHost("host-1", dict(FINGERPRINT)),), entries=(entry, traffic)
    )
    ms = [_measured("lm-none", "b11713", "tg128 @ d8192", 16.0)]
    key = ("lm-none", "b11713", "tg128 @ d8192")
    here = plot_marks(ms, {"prod": bf, "other": None}, {"prod": FINGERPRINT})
    assert here == {key: PlotMark(16.3)}
    elsewhere = {**FINGERPRINT, "cpu_model": "AMD EPYC 7763", "cpus": 128}
    assert plot_marks(ms, {"prod": bf}, {"prod": elsewhere}) == {
        key: PlotMark(16.3, "reference (host host-1)")
    }


def test_traffic_gets_a_latency_panel_and_the_sweep_a_plot(
    tmp_path: Path, current: RunRecord
) -> None:
    from pytest_moeperf.report.sweep_plot import plot_sweep

    figures = {f"{w}_p{q}": 10.0 * q for w in ("ttft", "itl", "e2e") for q in (50, 90, 99)}
    current.traffic = {"traffic (b11434)": {"overall": figures, "passes": []}}
    width, _ = png_size(plot_report(current, [], tmp_path / "t.png"))
    width0, _ = png_size(plot_report(replace(current, traffic={}), [], tmp_path / "n.png"))
    assert width > width0  # one more panel
    points = [
        {"np": n, "medians": {"throughput": 10.0 * n, "decode": 10.0 - n}, "overall": figures}
        for n in (1, 2, 4)
    ]
    assert png_size(plot_sweep(points, "sweep", tmp_path / "s.png"))[0] > 0


def _tick_labels(fig: Any) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.get_xticklabels()]


def test_a_reference_is_labelled_with_its_host_and_never_a_change(
    current: RunRecord,
) -> None:
    """Another host's number is drawn as a reference (dotted, its host named, no change);
    only this host's baseline gets the median's change."""
    marks = {
        ("mmap", "b11713", "pp512"): PlotMark(100.0, "reference (host adr-0042)"),
        ("lm-none", "b11713", "pp512"): PlotMark(391.4),
    }
    labels = _tick_labels(report_figure(current, [], baselines=marks))
    assert "mmap\nreference (host adr-0042)\n100.0" in labels
    assert "lm-none\nbaseline 391.4\n(-0.3 %)" in labels
    assert not any("%" in label for label in labels if "reference" in label)
