"""The build gate on real servers (tiny model): both sides measured interleaved, a verdict per
configuration and workload, and the table, markdown and JSON reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest
from _premise import slower_or_skip
from _procs import capped_cgroup, throttled_server

from pytest_moeperf.commands import main
from pytest_moeperf.verdicts.outcomes import ChangeOutcome


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
            "--max-rounds",
            "3",
            "--json",
            "gate.json",
            "--markdown",
            "gate.md",
        ]
    )
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "gate.json").read_text())
    assert rc == data["exit_code"] and rc in (0, 1, 3)
    # a binary is named by the build its --version prints, never by its file name
    assert "configuration  metric  baseline b11434 tok/s" in out
    [row] = data["rows"]
    assert row["configuration"] == "default" and row["workload"] == "tg16"
    verdict = row["verdict"]
    assert verdict["outcome"] in get_args(ChangeOutcome)
    assert verdict["rounds"] == 3  # the round cap: the first look is the last
    # one sample each to start both servers, then 3 paired rounds and those set aside (a
    # round the host's watch marked busy: at most as many as the cap) measured again
    [judged] = [v for v in data["record"]["verdicts"] if v["test"] == "gate default.tg16"]
    aside = sum(1 for r in judged["rounds_taken"] if "aside" in r)
    assert aside <= 3
    assert len(row["baseline"]["samples"]) == len(row["candidate"]["samples"]) == 4 + aside
    assert verdict["low"] <= verdict["ratio"] <= verdict["high"]
    assert "| default | tg16 |" in (tmp_path / "gate.md").read_text()
    # the correctness guard: one build twice says the same thing
    [check] = data["outputs"]
    assert check["same"] and len(check["baseline"]) == 32, check
    assert "output: default: the same 32 greedy tokens on b11434 and b11434" in out
    # the stored gate judged again from its rounds alone: the same row and exit status
    assert main(["gate", "--profile", "embedded-tiny", "--replay", "gate.json"]) == rc
    table = out.split("\n\n")[1].split("\noutput:")[0].split("\nnote:")[0]
    assert table in capsys.readouterr().out  # every row and column as measured


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
    assert rc == data["exit_code"]
    assert data["skipped"] == [
        {"configuration": "moe-cache", "reason": "build b11434 has no --moe-cache-mib"}
    ]
    assert [r["configuration"] for r in data["rows"]] == ["default"]
    assert "skipped (build b11434 has no --moe-cache-mib)" in out


def test_a_throttled_candidate_is_slower_and_exits_1(
    llama_build, tiny_model, tmp_path, capsys, monkeypatch
):
    """A real slowdown: the candidate's llama-server runs in a cgroup capped to a fifth of a
    CPU. The row is never a pass of any kind; where the rounds decide it (the premise: a host
    that can, else the test skips saying so), it says slower with its interval and the gate
    exits 1; undecided, the gate exits 3 and its JSON says not passed."""
    monkeypatch.chdir(tmp_path)
    server = str(llama_build.server)
    with capped_cgroup("moeperf-gate-test") as group:
        rc = main(
            [
                "gate", "--profile", "embedded-tiny", "--baseline", server,
                "--candidate", throttled_server(group, server, tmp_path), "-c", "default",
                "-w", "pp64", "--budget", "60", "--busy-limit", "1", "--json", "gate.json",
            ]
        )  # fmt: skip
    data = json.loads((tmp_path / "gate.json").read_text())
    [row] = data["rows"]
    assert rc == data["exit_code"] and data["passed"] is False, data
    if row["verdict"]["outcome"] == "undecided":
        assert rc == 3 and data["outcome"] == "undecided", data
    # the stored gate judged again from its rounds alone: the same verdict and exit status
    replay = ["gate", "--profile", "embedded-tiny", "--replay", "gate.json", "--busy-limit", "1"]
    assert main([*replay, "--json", "again.json"]) == rc
    again = json.loads((tmp_path / "again.json").read_text())
    assert [r["verdict"] for r in again["rows"]] == [row["verdict"]]
    slower_or_skip(row["verdict"], "a candidate capped to a fifth of a CPU, in 60 s")
    assert row["verdict"]["high"] < 0.95, row
    assert rc == 1 and data["outcome"] == "slower"
    assert "FAIL: 1 metric(s) slower" in capsys.readouterr().out


def test_a_slowed_server_with_an_untouched_bench_is_a_server_layer_change(
    llama_build, tiny_model, tmp_path, capsys, monkeypatch
):
    """The candidate's llama-server runs capped to a fifth of a CPU; its llama-bench (the same
    binary as the baseline's) does not. With --attribute each round also runs both builds'
    llama-bench: the row is slower, the bench is not, and the row says the server layer (the
    premise: a host that decides the row, else the test skips saying so)."""
    if llama_build.bench is None:
        pytest.skip("this build has no llama-bench")
    monkeypatch.chdir(tmp_path)
    server = str(llama_build.server)
    slowed = tmp_path / "slowed"
    slowed.mkdir()
    with capped_cgroup("moeperf-attr-test") as group:
        Path(throttled_server(group, server, tmp_path)).rename(slowed / "llama-server")
        (slowed / "llama-bench").symlink_to(llama_build.bench)
        rc = main(
            [
                "gate", "--profile", "embedded-tiny", "--baseline", server,
                "--candidate", str(slowed / "llama-server"), "-c", "default", "-w", "pp512",
                # pp512 and 12 rounds before the first look: on the tiny model a short request
                # is mostly HTTP, and the server/bench ratios need the rounds; a fresh pair
                # every 2 rounds, so that the rounds a slow host reaches hold 3 process blocks
                # (a host not calibrated judges whole blocks from the third)
                "-r", "12", "--max-rounds", "12", "--budget", "120", "--busy-limit", "1",
                "--process-block", "2",
                "--attribute", "--json", "gate.json",
            ]
        )  # fmt: skip
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "gate.json").read_text())
    [row] = data["rows"]
    assert rc == data["exit_code"] != 0 and data["passed"] is False
    slower_or_skip(row["verdict"], "a server capped to a fifth of a CPU, 12 rounds of pp512")
    attribution = row["attribution"]
    assert attribution["bench"]["outcome"] != "slower", attribution
    slower_or_skip(attribution["layer"], "the slowed server over its untouched llama-bench")
    sb, untouched = attribution["server_bench"], attribution["baseline_server_bench"]
    assert sb["low"] <= sb["ratio"] <= sb["high"], sb
    assert sb["ratio"] < untouched["ratio"], attribution  # the slowed server, below the other
    assert row["where"].startswith("server layer: llama-bench"), row["where"]
    assert "server/bench [interval]" in out and "server layer" in out
    assert rc == 1


def test_calibrate_runs_aa_gates_and_stores_the_hosts_noise(
    llama_build, tmp_path, capsys, monkeypatch
):
    """``moeperf calibrate`` on real servers: A/A gates of one build against itself, their
    table, JSON and plot, and the noise figures stored with this host in the baseline file,
    where ``moeperf baselines`` lists them."""
    from _profiles import TINY_PROFILE

    monkeypatch.chdir(tmp_path)
    (tmp_path / "moeperf.toml").write_text(TINY_PROFILE)
    rc = main(
        [
            "calibrate",
            "--profile",
            "tiny",
            "-c",
            "default",
            "-w",
            "tg16",
            "--gates",
            "2",
            "--budget",
            "5",
            "--process-block",
            "0",
            "--json",
            "cal.json",
            "--plot",
            "cal.png",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "calibration: A/A gates of b11434 against itself" in out
    assert "default.tg16" in out and "round spread" in out and "MDE at budget" in out
    assert "stored: the figures of default.tg16 with [[host]] host-1 in" in out
    figure = json.loads((tmp_path / "cal.json").read_text())["default.tg16"]["figure"]
    # each gate takes rounds until it decides or its 5 s are spent, and at least 2 (an
    # interval needs 2): how many more is the host's pace, not the code's
    assert figure["gates"] == 2 and figure["rounds"] >= 2 * 2 and figure["budget"] == 5
    assert -1 <= figure["lag1"] <= 1 and figure["round_spread"] > 0
    assert (tmp_path / "cal.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stored = (tmp_path / "baselines" / "tiny.toml").read_text()
    assert '[host.noise."default.tg16"]' in stored and "gates = 2" in stored
    assert main(["baselines", "baselines/tiny.toml"]) == 0
    assert "noise of default.tg16: round spread" in capsys.readouterr().out
