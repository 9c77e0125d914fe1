"""GPU telemetry beside a measurement: ``nvidia-smi dmon`` output read by its header, the
per-GPU summary and its stored form, and the sampler process started and stopped around a
block (a fake ``nvidia-smi`` on PATH stands in for the driver's)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from pytest_moeperf.host.gpu_telemetry import (
    DmonSample,
    GpuSampler,
    GpuSummary,
    GpuTelemetry,
    dmon_command,
    parse_dmon,
)
from pytest_moeperf.host.process import running
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.report.tables import gpu_telemetry_lines, markdown_report
from pytest_moeperf.store.record import RESULTS_VERSION, RunRecord

# `nvidia-smi dmon -s umt -d 1 -i 0,1` of a 535-or-later driver: the u group has jpg and ofa,
# the m group ccpm; dmon repeats the two header lines every screenful; "-" is a figure the GPU
# does not report
DMON_NEW = """\
# gpu    sm   mem   enc   dec   jpg   ofa     fb   bar1   ccpm  rxpci  txpci
# Idx     %     %     %     %     %     %     MB     MB     MB   MB/s   MB/s
    0     3     1     0     0     0     0   4210      5      0    120     15
    1     0     0     0     0     0     0    512      2      0      0      0
    0    97    41     0     0     0     0  61012      5      0  24110    210
    1     0     0     0     0     0     0    512      2      0      -      -
# gpu    sm   mem   enc   dec   jpg   ofa     fb   bar1   ccpm  rxpci  txpci
# Idx     %     %     %     %     %     %     MB     MB     MB   MB/s   MB/s
    0    88    35     0     0     0     0  61020      5      0  11800    190
    1     0     0     0     0     0     0    512      2      0      0      0
"""

# an older driver (470): no jpg, ofa or ccpm column, and a GPU without PCIe counters
DMON_OLD = """\
# gpu    sm   mem   enc   dec    fb  bar1  rxpci  txpci
# Idx     %     %     %     %    MB    MB   MB/s   MB/s
    0    50    20     0     0  10240     3      -      -
"""


def test_dmon_lines_are_read_by_their_header_and_repeated_headers_skipped():
    samples = parse_dmon(DMON_NEW)
    assert [s.gpu for s in samples] == [0, 1, 0, 1, 0, 1]
    assert samples[2] == DmonSample(
        gpu=0, sm_pct=97, mem_pct=41, fb_mib=61012, rx_mbs=24110, tx_mbs=210
    )


def test_a_dash_is_a_figure_the_gpu_does_not_report():
    samples = parse_dmon(DMON_NEW)
    assert samples[3].rx_mbs is None and samples[3].tx_mbs is None
    assert samples[3].fb_mib == 512


def test_an_older_drivers_columns_read_by_name():
    (s,) = parse_dmon(DMON_OLD)
    assert (s.sm_pct, s.mem_pct, s.fb_mib, s.rx_mbs, s.tx_mbs) == (50, 20, 10240, None, None)


def test_lines_before_a_header_of_another_width_or_a_warning_are_skipped():
    text = (
        "    0    10    10     0     0   100      1     0     0\n"  # no header yet
        + DMON_OLD
        + "    0    10\n"  # cut short
        + "Failed to process command line.\n"
        + "\n"
    )
    assert len(parse_dmon(text)) == 1
    assert parse_dmon("# Idx  %  %\n  0  1  2\n") == []  # a units line is no header


def test_dmon_command_samples_the_servers_gpus_once_a_second():
    assert dmon_command("/usr/bin/nvidia-smi", [1, 0, 1]) == [
        "/usr/bin/nvidia-smi", "dmon", "-s", "umt", "-d", "1", "-i", "0,1",
    ]  # fmt: skip
    # line-buffered through a pipe where stdbuf exists; dmon takes four GPUs at most
    assert dmon_command("smi", range(8), stdbuf="/usr/bin/stdbuf") == [
        "/usr/bin/stdbuf", "-oL", "smi", "dmon", "-s", "umt", "-d", "1", "-i", "0,1,2,3",
    ]  # fmt: skip


def test_summary_per_gpu_max_memory_median_utilisation_and_pcie():
    t = GpuTelemetry.of(parse_dmon(DMON_NEW))
    g0, g1 = t.gpus
    assert g0 == GpuSummary(
        gpu=0,
        samples=3,
        max_memory_mib=61020,
        median_sm_pct=88,
        median_mem_pct=35,
        median_rx_mbs=11800,
        max_rx_mbs=24110,
        median_tx_mbs=190,
        max_tx_mbs=210,
    )
    assert g1.samples == 3 and g1.median_rx_mbs == 0 and g1.max_rx_mbs == 0
    assert sum(g.samples for g in t.gpus) == 6


def test_a_gpu_without_samples_has_a_row_of_none():
    t = GpuTelemetry.of(parse_dmon(DMON_OLD), gpus=[0, 2])
    assert [g.gpu for g in t.gpus] == [0, 2]
    assert t.gpus[1] == GpuSummary(gpu=2, samples=0)
    assert t.gpus[0].median_rx_mbs is None  # no PCIe counters on that GPU
    assert t.describe() == "GPU0, sm 50 %, 10.0 GiB, 1 sample; GPU2, 0 samples"


def test_describe_names_utilisation_memory_and_pcie_in_gb_per_s():
    (g0, _g1) = GpuTelemetry.of(parse_dmon(DMON_NEW)).gpus
    assert g0.describe() == (
        "GPU0, sm 88 %, 59.6 GiB, PCIe rx 11.8 GB/s (max 24.1), tx 0.2 GB/s (max 0.2), 3 samples"
    )


def test_stored_form_round_trips_and_leaves_out_missing_figures():
    t = GpuTelemetry.of(parse_dmon(DMON_NEW + DMON_OLD), gpus=[3])
    d = t.to_dict()
    assert "median_rx_mbs" not in d["gpus"][-1]
    assert GpuTelemetry.from_dict(d) == t


def _fake_smi(tmp_path: Path, body: str) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + body)
    smi.chmod(0o755)


def test_sampler_reads_dmon_while_the_block_runs_and_stops_it(tmp_path, monkeypatch):
    script = 'echo "$@" > "$(dirname "$0")/args"\n' + "cat <<'EOF'\n" + DMON_OLD + "EOF\n"
    _fake_smi(tmp_path, script + "exec sleep 600\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with GpuSampler.start([0]) as sampler:
        assert sampler is not None
        deadline = time.monotonic() + 10
        while not sampler.lines and time.monotonic() < deadline:
            time.sleep(0.02)
        pid = sampler._process.pid if sampler._process else 0
    assert not running(pid)
    assert (tmp_path / "args").read_text().split() == "dmon -s umt -d 1 -i 0".split()
    assert GpuTelemetry.of(sampler.samples).gpus[0].max_memory_mib == 10240


def test_sampler_stops_dmon_with_ctrl_c_first_and_keeps_what_it_flushed(tmp_path, monkeypatch):
    # as dmon does: block-buffered into a pipe, the lines written out on Ctrl-C
    handler = 'trap \'cat "$(dirname "$0")/out"; exit 0\' INT\n'
    (tmp_path / "out").write_text(DMON_OLD)
    ready = 'touch "$(dirname "$0")/ready"\n'
    _fake_smi(tmp_path, handler + ready + "while :; do sleep 0.05; done\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with GpuSampler.start([0]) as sampler:
        assert sampler is not None
        deadline = time.monotonic() + 10
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.02)  # until the trap is set
    assert len(sampler.samples) == 1


def test_sampler_stops_dmon_with_ctrl_c_when_pytest_itself_ignores_ctrl_c(tmp_path, monkeypatch):
    """pytest started in the background of a shell (``pytest &``, nohup, a CI runner) ignores
    SIGINT, and its children inherit that: dmon must still hear the Ctrl-C that flushes it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        test_sampler_stops_dmon_with_ctrl_c_first_and_keeps_what_it_flushed(tmp_path, monkeypatch)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sampler_is_stopped_when_the_block_fails(tmp_path, monkeypatch):
    _fake_smi(tmp_path, "exec sleep 600\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    pid = 0
    with pytest.raises(RuntimeError), GpuSampler.start([0, 1]) as sampler:
        assert sampler is not None and sampler._process is not None
        pid = sampler._process.pid
        raise RuntimeError("the measurement failed")
    assert pid and not running(pid)
    assert sampler.samples == []


def test_no_sampler_without_gpus_or_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi there
    with GpuSampler.start([0]) as sampler:
        assert sampler is None
    _fake_smi(tmp_path, "exit 0\n")
    with GpuSampler.start([]) as sampler:
        assert sampler is None


def _record(conditions: Conditions) -> RunRecord:
    m = Measurement("gpu", "b11434", Workload.parse("pp512"), (Sample(512, 100.0),), conditions)
    return RunRecord(fingerprint={}, measurements=[m])


def test_the_run_record_keeps_the_telemetry_in_the_measurements_conditions():
    t = GpuTelemetry.of(parse_dmon(DMON_NEW))
    doc = json.loads(_record(Conditions(profile="embedded-cuda", gpu_telemetry=t)).json_text())
    assert doc["measurements"][0]["conditions"]["gpu_telemetry"]["gpus"][0]["max_rx_mbs"] == 24110
    (m,) = RunRecord.from_dict(doc).measurements
    assert m.conditions.gpu_telemetry == t


def test_a_results_file_without_telemetry_still_reads_and_a_cpu_run_writes_none():
    doc = _record(Conditions(profile="embedded")).to_dict()
    assert "gpu_telemetry" not in doc["measurements"][0]["conditions"]
    assert doc["moeperf_results"] == RESULTS_VERSION  # an optional field: no new version
    (m,) = RunRecord.from_dict(doc).measurements
    assert m.conditions.gpu_telemetry is None


def test_malformed_telemetry_names_the_field():
    doc = _record(Conditions()).to_dict()
    doc["measurements"][0]["conditions"]["gpu_telemetry"] = {"gpus": [{"gpu": 0}]}
    with pytest.raises(ValueError, match="gpu_telemetry"):
        RunRecord.from_dict(doc)


def test_the_summary_shows_a_line_per_measurement_that_sampled_its_gpus():
    t = GpuTelemetry.of(parse_dmon(DMON_OLD))
    on_gpu = _record(Conditions(gpu_telemetry=t)).measurements[0]
    on_cpu = _record(Conditions()).measurements[0]
    assert gpu_telemetry_lines([on_cpu, on_gpu]) == [
        "gpu pp512 (b11434): GPU0, sm 50 %, 10.0 GiB, 1 sample"
    ]
    report = markdown_report([on_cpu, on_gpu], [], [], {})
    assert "## GPUs while measuring" in report
    assert "- gpu pp512 (b11434): GPU0, sm 50 %" in report
    assert "GPUs while measuring" not in markdown_report([on_cpu], [], [], {})
