"""The build gate on real servers (tiny model): both sides measured interleaved, a verdict per
configuration and workload, and the table, markdown and JSON reports."""

from __future__ import annotations

import json

from pytest_moeperf.cli import main


def test_gate_same_binary_twice_writes_table_markdown_and_json(
    llama_build, tiny_model, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    server = str(llama_build.server)
    rc = main(
        [
            "gate",
            "--profile",
            "embedded-tiny",
            "--baseline",
            server,
            "--candidate",
            server,
            "-c",
            "default",
            "-w",
            "tg16",
            "-r",
            "3",
            "--max-repetitions",
            "3",
            "--json",
            "gate.json",
            "--markdown",
            "gate.md",
        ]
    )
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "gate.json").read_text())
    assert rc == (0 if data["passed"] else 1)
    assert "configuration  metric  baseline llama-server tok/s" in out
    [row] = data["rows"]
    assert row["configuration"] == "default" and row["workload"] == "tg16"
    assert row["verdict"] in ("faster", "slower", "unchanged", "inconclusive")
    assert len(row["baseline"]["samples"]) == len(row["candidate"]["samples"]) == 3
    assert row["low"] <= row["ratio"] <= row["high"]
    assert "| default | tg16 |" in (tmp_path / "gate.md").read_text()


def test_gate_rejects_an_unknown_configuration_before_building(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["gate", "--baseline", "11053", "--candidate", "11434", "-c", "nope"])
    assert rc == 2
    assert "has no configuration 'nope'" in capsys.readouterr().err


GATE_CONFIG = """
[profiles.tiny]
build = 11434
model = "synthetic:tiny"
flags = ["-c", "1024", "-t", "2", "-np", "1"]
workloads = ["pp64"]
[profiles.tiny.configurations.default]
[profiles.tiny.configurations.moe-cache]
flags = ["--moe-cache-mib", "64"]
"""


def test_a_configuration_a_build_cannot_run_is_a_skipped_row(
    llama_build, tiny_model, tmp_path, capsys, monkeypatch
):
    """b11434 has no --moe-cache-mib: that configuration is a skipped row, naming the build
    and the flag; the other configuration is still gated, and the gate passes."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "moeperf.toml").write_text(GATE_CONFIG)
    server = str(llama_build.server)
    rc = main(
        [
            "gate", "--profile", "tiny", "--baseline", server, "--candidate", server,
            "-c", "moe-cache", "-c", "default", "-r", "2", "--max-repetitions", "2",
            "--json", "gate.json",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "gate.json").read_text())
    assert rc == (0 if data["passed"] else 1)
    assert data["skipped"] == [
        {"configuration": "moe-cache", "reason": "build llama-server has no --moe-cache-mib"}
    ]
    assert [r["configuration"] for r in data["rows"]] == ["default"]
    assert "skipped (build llama-server has no --moe-cache-mib)" in out
