"""The history folder: results files, pytest-benchmark saved runs, llama-bench JSONL rows,
atomic writes, and corrupt or foreign files skipped with a report."""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_moeperf import fs
from pytest_moeperf.llama.flags import bench_fields
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.stats import Figure
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.store import history
from pytest_moeperf.store.exports import SETTING_FIELDS, benchmark_json, llama_bench_rows
from pytest_moeperf.store.history import RESULTS_GLOB, read_results, write_history
from pytest_moeperf.store.record import RESULTS_VERSION, RunRecord

BASE_FLAGS = ["-c", "4096", "-t", "2", "-np", "1"]
CONFIGS = {
    # name: (extra flags, pinning, speed factor)
    "mmap": ([], "unpinned", 1.0),
    "lm-none": (["-lm", "none"], "cpus 0-1", 2.05),
}
WORKLOADS = {"pp512": 300.0, "tg64": 40.0}

LLAMA_BENCH_FIELDS = (
    "build_commit",
    "build_number",
    "cpu_info",
    "gpu_info",
    "backends",
    "model_filename",
    "model_type",
    "model_size",
    "model_n_params",
    *SETTING_FIELDS,
    "n_prompt",
    "n_gen",
    "n_depth",
    "test_time",
    "avg_ns",
    "stddev_ns",
    "avg_ts",
    "stddev_ts",
    "samples_ns",
    "samples_ts",
)
"""The fields of one ``llama-bench -o jsonl`` row, in llama-bench b11434's order
(``test::get_fields()`` then ``samples_ns``, ``samples_ts``)."""

LLAMA_BENCH_EXTRA_FIELDS = (
    "use_mmap",
    "moeperf_profile",
    "moeperf_configuration",
    "moeperf_workload",
    "moeperf_flags",
    "moeperf_pinning",
)
"""Fields the rows add after llama-bench's: ``use_mmap`` and what identifies the row in
pytest-moeperf."""


# per-repetition deviations from the nominal throughput: 3 to 5 samples each
def read_back(folder: Path) -> tuple[list[RunRecord], list[str]]:
    """Every results file in *folder* by name, read as an import reads it, and one line per
    file that cannot be read."""
    runs: list[RunRecord] = []
    problems: list[str] = []
    for path in sorted(folder.glob(RESULTS_GLOB)):
        if path.is_file():
            record, problem = read_results(path)
            if record is None:
                problems.append(f"{path}: {problem}")
            else:
                runs.append(record)
    return runs, problems


WOBBLE = [(1.0, 0.98, 1.03), (1.01, 0.97, 1.0, 1.02), (0.99, 1.0, 1.04, 0.96, 1.01)]
FINGERPRINT = {
    "hostname": "bench-01",
    "cpu_model": "Intel(R) Xeon(R) Silver 4210 CPU @ 2.20GHz",
    "cpus": 40,
    "numa_nodes": {"0": "0-9,20-29", "1": "10-19,30-39"},
    "memory_gib": 251.5,
    "gpus": [],
    "gpu_memory": [],
    "gpu_driver": "",
    "numa_balancing": "0",
    "kernel": "6.1.0-18-amd64",
}


def sample_results(
    build: str = "b11434", date: str = "2026-10-17T09:30:00+0200", scale: float = 1.0
) -> RunRecord:
    """A run record as a session writes it: profile 'embedded', two
    configurations, two workloads, 3-5 samples each, one build."""
    measurements = []
    k = 0
    for config, (flags, pinning, factor) in CONFIGS.items():
        for wname, nominal in WORKLOADS.items():
            wl = Workload.parse(wname)
            samples = tuple(
                Sample(wl.tokens, wl.tokens * 1000.0 / (nominal * factor * scale * w))
                for w in WOBBLE[k % len(WOBBLE)]
            )
            k += 1
            conditions = Conditions(
                profile="embedded",
                spans=((1792222200.0 + k, 1792222230.5 + k),),
                flags=(*BASE_FLAGS, *flags),
                pinning=pinning,
                model="/root/.cache/pytest-moeperf/models/bench-3f2a9c1d0e4b5a67.gguf",
                log=f"/work/.moeperf/logs/20261017-093000/embedded-{config}-{build}.log",
                server_ready_s=1.9,
                measured_s=30.5,
                busy_s=0.61,
            )
            measurements.append(Measurement(config, build, wl, samples, conditions).to_dict())
    return RunRecord.from_dict(
        {
            "moeperf_results": RESULTS_VERSION,
            "plugin_version": "0.1.0",
            "date": date,
            "fingerprint": FINGERPRINT,
            "fingerprints": {
                "embedded": {
                    **FINGERPRINT,
                    "llama_server": "version: 0.6.0-dev (build 11434, commit unknown)",
                    "model": "bench-3f2a9c1d0e4b5a67.gguf",
                    "model_bytes": 459_341_824,
                    "model_sha256_16mib": "ab" * 32,
                }
            },
            "measurements": measurements,
            "verdicts": [],
            "baseline_checks": [],
        }
    )


def two_runs(folder: Path) -> tuple[RunRecord, RunRecord, list[Path], list[Path]]:
    old = sample_results("b11053", "2026-10-16T09:30:00+0200", scale=0.8)
    new = sample_results("b11434", "2026-10-17T09:30:00+0200")
    return old, new, write_history(old, folder, stamp="a1"), write_history(new, folder, stamp="a2")


# --- round trip -----------------------------------------------------------------------------


def test_round_trip_and_layout(tmp_path: Path) -> None:
    old, new, first, second = two_runs(tmp_path)
    machine = history.get_machine_id()
    assert [p.relative_to(tmp_path).as_posix() for p in first] == [
        "results-a1.json",
        f"benchmarks/{machine}/0001_a1.json",
        "llama-bench/a1.jsonl",
        "llama-bench.jsonl",
    ]
    assert second[1].name == "0002_a2.json"
    assert all(p.is_file() for p in first + second)
    runs, problems = read_back(tmp_path)
    assert problems == []
    assert runs == [old, new]
    # what a replay reads back: the same measurements
    back = runs[1].measurements
    assert [m.key for m in back] == [
        ("mmap", "b11434", "pp512"),
        ("mmap", "b11434", "tg64"),
        ("lm-none", "b11434", "pp512"),
        ("lm-none", "b11434", "tg64"),
    ]
    assert not list(tmp_path.rglob("*.tmp"))


def test_default_stamp_and_bad_stamp(tmp_path: Path) -> None:
    paths = write_history(sample_results(), tmp_path)
    assert paths[0].name.startswith("results-") and paths[0].name.endswith(f"-{os.getpid()}.json")
    with pytest.raises(ValueError, match="stamp"):
        write_history(sample_results(), tmp_path, stamp="../evil")


def test_numbering_follows_existing_saved_runs(tmp_path: Path) -> None:
    machine = tmp_path / "benchmarks" / history.get_machine_id()
    machine.mkdir(parents=True)
    (machine / "0007_from-pytest-benchmark.json").write_text("{}")
    paths = write_history(sample_results(), tmp_path, stamp="s")
    assert paths[1].name == "0008_s.json"


def test_measurements_without_samples_only_in_the_results_file(tmp_path: Path) -> None:
    results = sample_results()
    stored = Measurement(
        "adr", "b11713", Workload.parse("pp2048"), (), Conditions(), Figure(391.4, 0.01)
    )
    results.measurements = [stored]
    assert [p.name for p in write_history(results, tmp_path, stamp="s")] == ["results-s.json"]
    assert read_back(tmp_path) == ([results], [])


# --- pytest-benchmark's layout ---------------------------------------------------------------


def test_benchmark_json_stats_are_seconds_per_request(tmp_path: Path) -> None:
    results = sample_results()
    doc = benchmark_json(results)
    assert set(doc) >= {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    assert doc["datetime"] == "2026-10-17T07:30:00+00:00"
    assert doc["commit_info"]["id"] == "b11434"
    assert doc["machine_info"]["node"] == "bench-01"
    assert doc["machine_info"]["cpu"]["brand_raw"] == FINGERPRINT["cpu_model"]
    assert len(doc["benchmarks"]) == 4
    bench = doc["benchmarks"][2]
    m = results.measurements[2]
    assert bench["name"] == "lm-none[b11434]-pp512"
    assert bench["fullname"] == "embedded::lm-none-pp512"
    assert bench["group"] == "embedded pp512"
    assert bench["param"] == "b11434"
    assert bench["params"] == {
        "profile": "embedded",
        "configuration": "lm-none",
        "build": "b11434",
        "workload": "pp512",
    }
    stats = bench["stats"]
    seconds = [s.ms / 1000 for s in m.samples]
    assert stats["data"] == seconds
    assert stats["rounds"] == len(seconds) and stats["iterations"] == 1
    assert stats["min"] == min(seconds) and stats["max"] == max(seconds)
    assert stats["median"] == pytest.approx(statistics.median(seconds))
    assert stats["mean"] == pytest.approx(statistics.mean(seconds))
    assert stats["ops"] == pytest.approx(len(seconds) / sum(seconds))
    for key in ("stddev", "iqr", "q1", "q3", "iqr_outliers", "stddev_outliers", "outliers"):
        assert key in stats
    for key in ("ld15iqr", "hd15iqr", "total"):
        assert key in stats
    info = bench["extra_info"]
    assert info["unit"] == "tok/s"
    assert info["tok_per_s_median"] == pytest.approx(m.summary.median)
    assert info["tok_per_s_min"] == pytest.approx(m.summary.min)
    assert info["tok_per_s_max"] == pytest.approx(m.summary.max)
    assert info["tokens"] == [512] * len(m.samples)
    assert info["flags"] == [*BASE_FLAGS, "-lm", "none"]
    assert (info["configuration"], info["build"], info["workload"]) == m.key
    json.dumps(doc)  # plain JSON


def benchmark_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "py.test-benchmark"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_benchmark"]
    return subprocess.run(
        [*cmd, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_pytest_benchmark_cli_lists_and_compares(tmp_path: Path) -> None:
    folder = tmp_path / ".moeperf"
    _, _, first, second = two_runs(folder)
    storage = f"file://{folder / 'benchmarks'}"

    listed = benchmark_cli("--storage", storage, "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == [str(first[1]), str(second[1])]

    compared = benchmark_cli("--storage", storage, "compare", cwd=tmp_path)
    out = compared.stdout + compared.stderr
    assert compared.returncode == 0, out
    assert "Failed to load" not in out
    assert "benchmark 'embedded pp512': 4 tests" in out
    assert "benchmark 'embedded tg64': 4 tests" in out
    for name in ("mmap[b11434]-pp512", "lm-none[b11053]-tg64"):
        assert name in out

    # build over build, one row per configuration, with the change
    between = benchmark_cli(
        "--storage", storage, "compare", "--between", "median,ops", cwd=tmp_path
    )
    out = between.stdout + between.stderr
    assert between.returncode == 0, out
    assert "2 tests, 2 sources" in out
    assert "ΔOPS" in out and "+25.0%" in out  # 0.8x -> 1.0x throughput

    one = benchmark_cli(
        "--storage", storage, "compare", "0002", "--columns", "median", "-k", "mmap", cwd=tmp_path
    )
    assert one.returncode == 0, one.stderr
    assert "mmap[b11434]-pp512" in one.stdout and "b11053" not in one.stdout


# --- llama-bench rows -------------------------------------------------------------------------

BOOL_FIELDS = ("cpu_strict", "no_kv_offload", "embeddings", "no_host", "repack", "use_mmap")
INT_FIELDS = (
    "build_number",
    "model_size",
    "model_n_params",
    "n_batch",
    "n_ubatch",
    "n_threads",
    "poll",
    "n_gpu_layers",
    "n_cpu_moe",
    "main_gpu",
    "flash_attn",
    "no_op_offload",
    "fit_target",
    "fit_min_ctx",
    "n_prompt",
    "n_gen",
    "n_depth",
    "avg_ns",
    "stddev_ns",
)


def test_llama_bench_jsonl_rows(tmp_path: Path) -> None:
    results = sample_results()
    paths = write_history(results, tmp_path, stamp="s")
    lines = paths[2].read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 4
    for row in rows:
        assert tuple(row) == LLAMA_BENCH_FIELDS + LLAMA_BENCH_EXTRA_FIELDS
        for f in BOOL_FIELDS:
            assert isinstance(row[f], bool), f
        for f in INT_FIELDS:
            assert isinstance(row[f], int) and not isinstance(row[f], bool), f
        assert all(isinstance(x, int) for x in row["samples_ns"])
    by = {(r["moeperf_configuration"], r["moeperf_workload"]): r for r in rows}
    pp = by[("lm-none", "pp512")]
    m = results.measurements[2]
    assert (pp["build_commit"], pp["build_number"]) == ("b11434", 11434)
    assert (pp["n_prompt"], pp["n_gen"], pp["n_depth"]) == (512, 0, 0)
    assert pp["samples_ts"] == pytest.approx(m.values)
    assert pp["avg_ts"] == pytest.approx(statistics.fmean(m.values))
    assert pp["stddev_ts"] == pytest.approx(statistics.stdev(m.values))
    assert pp["samples_ns"] == [round(s.ms * 1e6) for s in m.samples]
    assert pp["avg_ns"] == sum(pp["samples_ns"]) // len(m.samples)
    assert pp["load_mode"] == "none" and pp["use_mmap"] is False
    assert pp["n_threads"] == 2
    assert pp["cpu_mask"] == "0x3"  # pinned to CPUs 0-1
    assert pp["cpu_info"] == FINGERPRINT["cpu_model"]
    assert (pp["gpu_info"], pp["backends"]) == ("", "CPU")
    assert pp["model_type"] == "bench-3f2a9c1d0e4b5a67.gguf [lm-none]"
    assert pp["model_size"] == 459_341_824
    assert pp["test_time"] == "2026-10-17T07:30:33Z"  # end of the last span, UTC
    tg = by[("mmap", "tg64")]
    assert (tg["n_prompt"], tg["n_gen"], tg["n_depth"]) == (0, 64, 0)
    assert tg["load_mode"] == "auto" and tg["use_mmap"] is True
    assert tg["cpu_mask"] == "0x0"
    assert tg["flash_attn"] == -1 and tg["n_gpu_layers"] == -1


def test_llama_bench_depth_node_and_gpu(tmp_path: Path) -> None:
    results = sample_results()
    m = results.measurements[1]
    deep = Measurement(
        "node1",
        "b11713",
        Workload.parse("tg128 @ d8192"),
        m.samples,
        replace(m.conditions, pinning="node 1, --numa isolate", flags=("-ngl", "999", "-fa", "on")),
    )
    results.measurements = [deep]
    results.fingerprints["embedded"]["gpus"] = ["NVIDIA GeForce RTX 4090"] * 2
    (row,) = llama_bench_rows(results)
    assert (row["n_prompt"], row["n_gen"], row["n_depth"]) == (0, 128, 8192)
    assert row["n_threads"] == 20  # the node's CPUs
    assert row["cpu_mask"] == hex(sum(1 << c for c in [*range(10, 20), *range(30, 40)]))
    assert (row["n_gpu_layers"], row["flash_attn"]) == (999, 1)
    assert row["gpu_info"] == "NVIDIA GeForce RTX 4090, NVIDIA GeForce RTX 4090"
    assert row["backends"] == "CUDA"
    assert row["build_number"] == 11713


def test_bench_fields() -> None:
    adr = [
        "-ngl", "999", "-ncmoe", "48", "-ot", "per_layer_token_embd=CPU", "-t", "10",
        "-fa", "1", "-ub", "2048", "-c", "16384", "-np", "1", "-lm", "none",
    ]  # fmt: skip
    assert bench_fields(adr) == {
        "n_gpu_layers": 999,
        "n_cpu_moe": 48,
        "tensor_buft_overrides": "per_layer_token_embd=CPU",
        "n_threads": 10,
        "flash_attn": 1,
        "n_ubatch": 2048,
        "load_mode": "none",
    }
    # llama-server's --no-op-offload / --op-offload take no value: the -t after one is read
    assert bench_fields(["--no-op-offload", "-t", "4"]) == {"no_op_offload": 1, "n_threads": 4}
    assert bench_fields(["--no-op-offload", "--op-offload"]) == {"no_op_offload": 0}
    assert bench_fields(["--threads=4", "--no-mmap", "-ctk", "q8_0", "-nkvo"]) == {
        "n_threads": 4,
        "load_mode": "none",
        "type_k": "q8_0",
        "no_kv_offload": True,
    }
    assert bench_fields(["--mlock", "-fa", "auto", "-ngl", "all", "-ts", "3,1", "-t"]) == {
        "load_mode": "mmap+mlock",
        "flash_attn": -1,
        "n_gpu_layers": -2,
        "tensor_split": "3.00/1.00",
    }
    assert bench_fields(["-ot", "a=CPU,b=CUDA0", "-ot", "c=CPU", "-C", "ff"]) == {
        "tensor_buft_overrides": "a=CPU;b=CUDA0;c=CPU",
        "cpu_mask": "0xff",
    }
    assert bench_fields(["-t", "2", "-t", "8"]) == {"n_threads": 8}  # the last one wins


# The fields and key properties of llama.cpp b11434's scripts/compare-llama-bench.py (copied):
# its JSONL reader keeps these fields, requires the key properties plus build_commit,
# test_time and avg_ts, and joins two builds' rows on equal key properties.
COMPARE_DB_FIELDS = [
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename",
    "model_type", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads",
    "cpu_mask", "cpu_strict", "poll", "type_k", "type_v", "n_gpu_layers",
    "split_mode", "main_gpu", "no_kv_offload", "flash_attn", "tensor_split",
    "tensor_buft_overrides", "load_mode", "embeddings", "no_op_offload", "n_prompt", "n_gen",
    "n_depth", "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "n_cpu_moe",
    "fit_target", "fit_min_ctx",
]  # fmt: skip
COMPARE_KEY_PROPERTIES = [
    "cpu_info", "gpu_info", "backends", "n_gpu_layers", "n_cpu_moe", "tensor_buft_overrides",
    "model_filename", "model_type", "n_batch", "n_ubatch", "embeddings", "cpu_mask",
    "cpu_strict", "poll", "n_threads", "type_k", "type_v", "load_mode", "no_kv_offload",
    "split_mode", "main_gpu", "tensor_split", "flash_attn", "n_prompt", "n_gen", "n_depth",
    "fit_target", "fit_min_ctx",
]  # fmt: skip


def test_cumulative_jsonl_joins_build_over_build_like_compare_llama_bench(
    tmp_path: Path,
) -> None:
    two_runs(tmp_path)
    lines = (tmp_path / "llama-bench.jsonl").read_text().splitlines()
    assert len(lines) == 8
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE TABLE llama_bench({', '.join(COMPARE_DB_FIELDS)})")
    required = set(COMPARE_KEY_PROPERTIES) | {"build_commit", "test_time", "avg_ts"}
    for line in lines:
        row = {k: v for k, v in json.loads(line).items() if k in COMPARE_DB_FIELDS}
        assert required <= set(row)
        db.execute(
            f"INSERT INTO llama_bench({', '.join(row)}) VALUES({', '.join('?' * len(row))})",
            tuple(row.values()),
        )
    on = " AND ".join(f"tb.{p} = tc.{p}" for p in COMPARE_KEY_PROPERTIES)
    joined = db.execute(
        f"SELECT tb.model_type, tb.n_prompt, tb.n_gen, AVG(tb.avg_ts), AVG(tc.avg_ts) "
        f"FROM llama_bench tb JOIN llama_bench tc ON {on} "
        "AND tb.build_commit = 'b11053' AND tc.build_commit = 'b11434' "
        "GROUP BY tb.model_type, tb.n_prompt, tb.n_gen ORDER BY tb.model_type, tb.n_prompt"
    ).fetchall()
    assert [(r[0].split(" ")[-1], r[1], r[2]) for r in joined] == [
        ("[lm-none]", 0, 64),
        ("[lm-none]", 512, 0),
        ("[mmap]", 0, 64),
        ("[mmap]", 512, 0),
    ]
    for *_, base, new in joined:
        assert new / base == pytest.approx(1.25, rel=0.05)


@pytest.mark.skipif(
    not os.environ.get("MOEPERF_COMPARE_LLAMA_BENCH"),
    reason="set MOEPERF_COMPARE_LLAMA_BENCH=/path/to/llama.cpp/scripts/compare-llama-bench.py "
    "(and MOEPERF_COMPARE_PYTHON to a Python with GitPython and tabulate) to run llama.cpp's "
    "own compare script on the rows",
)
def test_compare_llama_bench_script_reads_the_rows(tmp_path: Path) -> None:
    two_runs(tmp_path)
    python = os.environ.get("MOEPERF_COMPARE_PYTHON", sys.executable)
    script = os.environ["MOEPERF_COMPARE_LLAMA_BENCH"]
    args = ["-t", "llama-bench", "-i", "llama-bench.jsonl", "-b", "b11053", "-c", "b11434"]
    done = subprocess.run(
        [python, script, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "t/s b11053" in done.stdout and "t/s b11434" in done.stdout
    assert done.stdout.count("[lm-none]") == 2 and done.stdout.count("[mmap]") == 2


# --- atomic writes, corrupt and foreign files ---------------------------------------------------


class Crash(Exception):
    """A write killed half-way."""


def crash_on(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """Make the *call*-th file write die after its bytes hit the disk, before the rename."""
    real = os.replace
    count = {"n": 0}

    def replace(src: str, dst: str) -> None:
        count["n"] += 1
        if count["n"] == call:
            raise Crash(f"killed while writing {dst}")
        real(src, dst)

    monkeypatch.setattr(fs.os, "replace", replace)


def test_crash_mid_write_leaves_no_partial_results_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_on(monkeypatch, 1)
    with pytest.raises(Crash):
        write_history(sample_results(), tmp_path, stamp="s")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [history.LOCK_NAME]
    assert read_back(tmp_path) == ([], [])


def test_crash_mid_write_keeps_earlier_files_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = sample_results("b11053", "2026-10-16T09:30:00+0200")
    write_history(first, tmp_path, stamp="a1")
    before = (tmp_path / "llama-bench.jsonl").read_bytes()
    crash_on(monkeypatch, 4)  # results, benchmark, this run's JSONL, then the cumulative one
    with pytest.raises(Crash):
        write_history(sample_results(), tmp_path, stamp="a2")
    assert (tmp_path / "llama-bench.jsonl").read_bytes() == before
    assert not list(tmp_path.rglob("*.tmp"))
    runs, problems = read_back(tmp_path)
    assert problems == [] and len(runs) == 2  # the results file was already whole
    for path in tmp_path.rglob("*.json"):
        json.loads(path.read_text())


def test_corrupt_and_foreign_files_are_reported_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = sample_results()
    good = record.to_dict()
    write_history(record, tmp_path, stamp="good")
    (tmp_path / "results-truncated.json").write_text('{\n "moeperf_results": 1,\n "date": ')
    (tmp_path / "results-binary.json").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "results-foreign.json").write_text(json.dumps({"benchmarks": []}))
    (tmp_path / "results-list.json").write_text("[1, 2]")
    (tmp_path / "results-future.json").write_text(
        json.dumps({**good, "moeperf_results": 99, "date": "2030-01-01T00:00:00+0000"})
    )
    bad = {**good, "measurements": [{"configuration": "mmap", "build": "b1"}]}
    (tmp_path / "results-badmeasurement.json").write_text(json.dumps(bad))
    bad_workload = {**good, "measurements": [{**good["measurements"][0], "workload": "zz9"}]}
    (tmp_path / "results-badworkload.json").write_text(json.dumps(bad_workload))
    (tmp_path / "results-denied.json").write_text(json.dumps(good))
    (tmp_path / "results-adir.json").mkdir()
    (tmp_path / "notes.json").write_text("not a results file name, not read")

    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "results-denied.json":
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    runs, problems = read_back(tmp_path)
    assert runs == [record]
    by_file = {p.split(": ", 1)[0]: p.split(": ", 1)[1] for p in problems}
    assert set(by_file) == {
        str(tmp_path / f"results-{n}.json")
        for n in (
            "truncated",
            "binary",
            "foreign",
            "list",
            "future",
            "badmeasurement",
            "badworkload",
            "denied",
        )
    }
    name = lambda n: str(tmp_path / f"results-{n}.json")  # noqa: E731
    assert by_file[name("truncated")] == "not JSON (line 3: Expecting value)"
    assert by_file[name("binary")] == "not UTF-8 text (byte 0)"
    assert "not a pytest-moeperf results file" in by_file[name("foreign")]
    assert "not a pytest-moeperf results file" in by_file[name("list")]
    assert "format 99 is newer" in by_file[name("future")]
    assert by_file[name("badmeasurement")] == (
        "measurement 1 unreadable (measurement 'mmap' None on 'b1': workload None must be a "
        "non-empty string)"
    )
    assert "measurement 1 unreadable" in by_file[name("badworkload")]
    assert "zz9" in by_file[name("badworkload")]
    assert by_file[name("denied")].startswith("unreadable (PermissionError")
