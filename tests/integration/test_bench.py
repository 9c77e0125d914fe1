"""The real llama-bench on the synthetic tiny model, through run_bench."""

from __future__ import annotations

import os

import pytest

from pytest_moeperf.llama.bench import BenchError, bench_args, run_bench
from pytest_moeperf.measure.workload import Workload

FLAGS = ["-c", "1024", "-t", "2", "-np", "1"]


@pytest.fixture(scope="module")
def bench(llama_build):
    if llama_build.bench is None:
        pytest.skip(f"no llama-bench next to {llama_build.server}")
    return llama_build.bench


def test_pp_and_tg_are_measured_and_nothing_else(bench, tiny_model):
    workloads = [Workload.parse("pp32"), Workload.parse("tg8")]
    results = run_bench(bench, tiny_model, FLAGS, workloads, repetitions=2)
    assert list(results) == ["pp32", "tg8"]
    for name, r in results.items():
        assert r.name == name
        assert len(r.values) == 2 and all(v > 0 for v in r.values)
        assert r.avg > 0 and r.stddev >= 0
        assert r.raw["n_threads"] == 2
        assert r.command[0] == str(bench) and "-c" not in r.command
    assert results["pp32"].workload == Workload("pp", 32)
    assert results["tg8"].workload == Workload("tg", 8)


def test_depth_runs_separately_and_pinning_holds(bench, tiny_model):
    cpu = min(os.sched_getaffinity(0))
    workloads = [Workload.parse("tg8 @ d16"), Workload.parse("pp32")]
    results = run_bench(
        bench, tiny_model, [*FLAGS, "-t", "1"], workloads, repetitions=1, cpus=frozenset({cpu})
    )
    assert list(results) == ["tg8 @ d16", "pp32"]
    assert results["tg8 @ d16"].raw["n_depth"] == 16
    assert results["pp32"].raw["n_threads"] == 1


def test_translated_flags_are_accepted(bench, tiny_model):
    """Every translated flag in one configuration: llama-bench accepts them all and runs one
    test per workload."""
    flags = [
        *FLAGS,
        "-lm",
        "none",
        "-fa",
        "1",
        "-ub",
        "256",
        "-b",
        "1024",
        "--numa",
        "distribute",
        "-ctk",
        "f16",
        "-ctv",
        "f16",
        "--no-repack",
        "-sm",
        "none",
        "-mg",
        "0",
        "-ngl",
        "all",
        "-cmoe",
        "-ncmoe",
        "1",
        "-ot",
        "token_embd=CPU",
        "--jinja",
        "--metrics",
        "--no-warmup",
    ]
    plan = bench_args(flags, [Workload.parse("pp16")], 1)
    assert plan.unknown == []
    results = run_bench(bench, tiny_model, flags, [Workload.parse("pp16")], repetitions=1)
    raw = results["pp16"].raw
    assert raw["load_mode"] == "none" and raw["flash_attn"] == 1 and raw["n_ubatch"] == 256
    assert raw["repack"] is False and raw["n_cpu_moe"] == 1
    assert raw["tensor_buft_overrides"].endswith("token_embd=CPU")


def test_a_failing_run_shows_llama_bench_error(bench, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_text("not a gguf\n")
    with pytest.raises(BenchError, match=r"(?s)exited with code 1.*failed to load model"):
        run_bench(bench, bad, FLAGS, [Workload.parse("pp16")], repetitions=1)
