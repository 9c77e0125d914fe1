"""The moeperf command: bad input gives one clear line and exit status 2."""

from __future__ import annotations

import hashlib
import os

import pytest

from pytest_moeperf.commands import main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["build", "0"], "build"),
        (["make-model", "--preset", "huge"], "huge"),
        (["make-model", "--set", "n_layer"], "--set 'n_layer': write FIELD=NUMBER"),
        (["make-model", "--set", "n_layer=x"], "'x' is not a whole number"),
        (["make-model", "--set", "n_wings=4"], "n_wings"),
        (["make-model", "--set", "n_head_kv=3"], "n_head_kv"),
        (["sweep", "-c", "traffic", "--np", "1,x"], "--np '1,x': give slot counts"),
        (["sweep", "-c", "traffic", "--np", "0,2"], "give slot counts >= 1"),
        (["sweep", "--np", "1,2"], "name the one configuration to sweep with -c"),
        (["sweep", "-c", "traffic", "-r", "0"], "give at least 1 pass"),
        (
            ["gate", "--baseline", "1", "--candidate", "2", "-w", "traffic.ttft_p99"],
            "traffic.ttft_p99 is a latency",
        ),
    ],
)
def test_bad_input_is_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"moeperf {argv[0]}: error: ")
    assert message in err
    assert len(err.splitlines()) == 1


def test_not_a_number_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["build", "eleven"])
    assert exit_.value.code == 2
    assert "invalid int value: 'eleven'" in capsys.readouterr().err


def test_make_model_prints_the_path_and_is_deterministic(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["make-model", "--preset", "tiny", "-o", str(tmp_path / "a.gguf")]) == 0
    assert main(["make-model", "--preset", "tiny", "-o", str(tmp_path / "b.gguf")]) == 0
    out = capsys.readouterr().out.split()
    assert out == [str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")]
    digest = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("a.gguf", "b.gguf")]
    assert digest[0] == digest[1]
    assert main(["make-model", "--preset", "tiny", "--seed", "3"]) == 0
    cached = capsys.readouterr().out.strip()
    assert cached.startswith(str(tmp_path / "cache" / "models"))


def test_baselines_lists_the_hosts_a_file_holds(capsys, tmp_path):
    from pytest_moeperf.measure.measurement import Measurement, Sample
    from pytest_moeperf.measure.workload import Workload
    from pytest_moeperf.store.accept import accept_measurements as accept

    def probe(bw: float) -> dict:
        return {
            "0-1": {
                "cpus": "0-1",
                "bandwidth_gbs": bw,
                "bandwidth_cv": 0.01,
                "compute_gops": 30.0,
                "compute_cv": 0.01,
                "samples": 7,
                "seconds": 2.0,
            }
        }

    w = Workload.parse("pp512")
    m = Measurement("mmap", "b11434", w, (Sample(512, 500.0),))
    path = tmp_path / "e.toml"
    for bw, day in ((19.4, "2026-11-29"), (7.1, "2026-11-30")):
        fp = {"cpu_model": "AMD EPYC", "cpus": 2, "memory_gib": 23.5, "probes": probe(bw)}
        accept(path, "embedded", [m], fp, date=day, source="test")
    assert main(["baselines", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{path}: profile embedded, 2 host(s)"
    assert out[1].startswith("  host-1: AMD EPYC, 2 CPUs, 23.5 GiB, probe: 19.4 GB/s, 30.0 Gop/s")
    assert out[1].endswith("; 1 entries, recorded 2026-11-29")
    assert "host-2" in out[2] and "7.1 GB/s" in out[2]
    assert main(["baselines", str(tmp_path / "missing.toml")]) == 2
    assert "no such baseline file" in capsys.readouterr().err


def test_a_reader_that_stops_reading_gets_no_traceback():
    """``moeperf baselines FILE | head -1``: the pipe closed before the command wrote, and
    the command ends quietly (141, as a shell reports SIGPIPE) instead of a traceback."""
    import subprocess
    import sys
    from pathlib import Path

    adr = Path(__file__).resolve().parents[2] / "baselines" / "adr-0042.toml"
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    done = subprocess.run(
        [sys.executable, "-m", "pytest_moeperf.commands", "baselines", str(adr)],
        stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
    )  # fmt: skip
    os.close(write)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
