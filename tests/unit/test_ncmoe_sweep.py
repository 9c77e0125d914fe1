"""``moeperf sweep --ncmoe``: its values, the flags of each point (``-ncmoe N`` in place of the
configuration's own expert placement), the command's bad input, and the table, JSON and plot
of a sweep's points."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from pytest_moeperf.commands import main
from pytest_moeperf.config.profiles import builtin_profiles
from pytest_moeperf.errors import ConfigError
from pytest_moeperf.host.gpu_telemetry import GpuTelemetry, parse_dmon
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.report.sweep import NcmoeSweepResult, SweepResult
from pytest_moeperf.report.sweep_plot import plot_ncmoe_sweep
from pytest_moeperf.run.sweep import (
    at_ncmoe,
    ncmoe_all,
    parse_ncmoe,
    without_expert_placement,
)
from pytest_moeperf.store.record import RunRecord
from pytest_moeperf.store.sweeps import NcmoePoint, SweepPoint


def test_ncmoe_values_in_the_order_given_or_all():
    assert parse_ncmoe("0,4,8") == (0, 4, 8)
    assert parse_ncmoe(" 8, 0 ,8,") == (8, 0)  # a repeat is measured once
    assert parse_ncmoe("all") is None
    assert parse_ncmoe(" ALL ") is None


@pytest.mark.parametrize("text", ["", ",", "4,x", "-1", "2.5", "all,4"])
def test_ncmoe_values_that_are_no_layer_counts(text):
    with pytest.raises(ConfigError, match="give layer counts >= 0"):
        parse_ncmoe(text)


def test_all_is_every_layer_count_or_even_steps_with_the_last_layer():
    assert ncmoe_all(8) == (0, 1, 2, 3, 4, 5, 6, 7, 8)  # bench: 9 points
    assert ncmoe_all(16) == (0, 2, 4, 6, 8, 10, 12, 14, 16)  # large
    assert ncmoe_all(48) == (0, 6, 12, 18, 24, 30, 36, 42, 48)
    assert ncmoe_all(10) == (0, 2, 4, 6, 8, 10)
    assert ncmoe_all(1) == (0, 1)
    with pytest.raises(ConfigError, match="layer count is unknown"):
        ncmoe_all(0)


def test_each_point_replaces_the_configurations_own_expert_placement():
    flags = ["-c", "4096", "-cmoe", "-ncmoe", "99", "--n-cpu-moe", "3", "--n-cpu-moe=5"]
    flags += ["--cpu-moe", "-ot", "blk\\.0\\.ffn_up_exps=CPU", "-lm", "none"]
    assert without_expert_placement(flags) == [
        "-c", "4096", "-ot", "blk\\.0\\.ffn_up_exps=CPU", "-lm", "none",
    ]  # fmt: skip


def test_a_point_of_the_embedded_cuda_split():
    profile = builtin_profiles()["embedded-cuda"]
    base = profile.configuration("experts-on-cpu-lm-none")
    cfg = at_ncmoe(base, 4)
    assert cfg.name == "experts-on-cpu-lm-none-ncmoe4"
    assert cfg.flags == (
        "-c", "4096", "-t", "2", "-np", "1", "-ngl", "999", "-lm", "none", "-ncmoe", "4",
    )  # fmt: skip
    assert at_ncmoe(profile.configuration("gpu"), 0).flags[-2:] == ("-ncmoe", "0")
    assert cfg.requires_gpus == base.requires_gpus and cfg.pinning == base.pinning


def test_a_configuration_without_layers_on_a_gpu_has_nothing_to_sweep():
    cpu = builtin_profiles()["embedded-cuda"].configuration("cpu")  # -ngl 999 then -ngl 0
    with pytest.raises(ConfigError, match="-ngl 0 keeps every layer in system RAM"):
        at_ncmoe(cpu, 4)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sweep", "-c", "gpu", "--ncmoe", "0,x"], "--ncmoe '0,x': give layer counts"),
        (["sweep", "-c", "gpu", "--np", "1", "--ncmoe", "0"], "give one of them"),
        (["sweep", "--profile", "embedded-cuda", "--ncmoe", "all"], "-c experts-on-cpu"),
    ],
)
def test_bad_ncmoe_input_is_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("moeperf sweep: error: ")
    assert message in err
    assert len(err.splitlines()) == 1


DMON = """\
# gpu    sm   mem   enc   dec     fb   bar1  rxpci  txpci
# Idx     %     %     %     %     MB     MB   MB/s   MB/s
    0    90    40     0     0   2048      5  20000    100
    0    80    30     0     0   2560      5  10000    100
"""


def _m(workload: str, tok_s: float, telemetry: GpuTelemetry | None) -> Measurement:
    w = Workload.parse(workload)
    samples = tuple(Sample(w.tokens, w.tokens * 1000 / (tok_s * f)) for f in (0.99, 1, 1.01))
    return Measurement("gpu-ncmoe4", "b11434", w, samples, Conditions(gpu_telemetry=telemetry))


def test_a_point_keeps_medians_gpu_memory_and_prefill_pcie_traffic():
    t = GpuTelemetry.of(parse_dmon(DMON))
    p = NcmoePoint.of(4, "gpu-ncmoe4", [_m("pp512", 3000, t), _m("tg64", 150, t)])
    assert p.medians == pytest.approx({"pp512": 3000, "tg64": 150})
    assert p.samples == {"pp512": 3, "tg64": 3}
    assert p.gpu_memory_mib == 2560
    assert p.prefill_rx_mbs == 15000  # the median over the prefill's samples
    cpu = NcmoePoint.of(0, "x", [_m("pp512", 100, None)])
    assert cpu.gpu_memory_mib is None and cpu.prefill_rx_mbs is None


def test_the_table_json_and_plot_of_a_sweep(tmp_path: Path):
    t = GpuTelemetry.of(parse_dmon(DMON))
    points = [
        NcmoePoint.of(n, f"gpu-ncmoe{n}", [_m("pp512", 3000 - 200 * n, t), _m("tg64", 150 - n, t)])
        for n in (0, 4, 8)
    ]
    result = NcmoeSweepResult("gpu", "bench-0123.gguf", 8, points)
    text = result.text()
    assert "-ncmoe sweep of gpu on bench-0123.gguf, 8 layers" in text
    assert result.headers() == [
        "-ncmoe", "pp512 tok/s", "tg64 tok/s", "spread", "GPU memory GiB",
        "PCIe rx GB/s (prefill)",
    ]  # fmt: skip
    assert result.rows()[1][:3] == ["4", "2200.0", "146.0"]
    assert result.rows()[1][-2:] == ["2.50", "15.0"]
    assert "| -ncmoe |" in result.markdown()
    doc = json.loads(result.json_text())
    assert [p["ncmoe"] for p in doc["points"]] == [0, 4, 8]
    png = plot_ncmoe_sweep(doc["points"], "sweep", tmp_path / "n.png")
    width, height = struct.unpack(">II", png.read_bytes()[16:24])
    assert width > 0 and height > 0


def test_a_sweep_json_reads_back_with_its_run_record(tmp_path: Path):
    t = GpuTelemetry.of(parse_dmon(DMON))
    ms = [_m("pp512", 3000, t), _m("tg64", 150, t)]
    ncmoe = NcmoeSweepResult("gpu", "m.gguf", 8, [NcmoePoint.of(4, "gpu-ncmoe4", ms)])
    overall = {"ttft_p50": 120.0, "e2e_p99": None, "errors": 1}
    medians = {"throughput": 41.5, "decode": 20.25, "prefill": 900.0, "requests": 0.5}
    slots = SweepResult("traffic", "2 sizes", [SweepPoint(2, "traffic-np2", medians, overall, 3)])
    record = RunRecord(fingerprint={"host": "h"}, measurements=ms)
    for result, head in (
        (ncmoe, {"model": "m.gguf", "n_layer": 8}),
        (slots, {"traffic": "2 sizes"}),
    ):
        path = tmp_path / "sweep.json"
        path.write_text(result.json_text(record))
        stored = json.loads(path.read_text())
        assert stored.pop("points") == [p.to_dict() for p in result.points]
        assert RunRecord.from_dict(stored.pop("record")).to_dict() == record.to_dict()
        assert stored == {"configuration": result.configuration, **head}
        path.write_text(result.json_text())  # written without one: none stored
        assert "record" not in json.loads(path.read_text())
