"""llama-server's startup warnings become pytest warnings of the configuration (or failures
with --moeperf-strict-warnings): -ot exps=CPU with the default load mode prints the
mmap/tensor-override hint that ADR-0042 found a month late; -lm none does not."""

from __future__ import annotations

import pytest

CONFIG = """
[profiles.ot]
build = 11434
model = "synthetic:tiny"
flags = ["-c", "512", "-t", "2", "-np", "1", "-ot", "exps=CPU"]
[profiles.ot.configurations.mmap]
[profiles.ot.configurations.lm-none]
flags = ["-lm", "none"]
"""

TEST = """
import pytest

@pytest.mark.moeperf(configurations=["mmap"], profile="ot")
def test_mmap(moeperf):
    moeperf.measure("mmap", "tg4", repetitions=1)

@pytest.mark.moeperf(configurations=["lm-none"], profile="ot")
def test_lm_none(moeperf):
    moeperf.measure("lm-none", "tg4", repetitions=1)
"""


@pytest.fixture
def ot(perf_project):
    return perf_project(config=CONFIG, tests=TEST)


def test_tensor_override_with_mmap_warns_and_lm_none_does_not(ot):
    result = ot.runpytest_subprocess("-m", "perf", "--moeperf-report", "report.md")
    result.assert_outcomes(passed=2, warnings=1)
    out = result.stdout.str()
    assert (
        "StartupWarning: mmap (b11434): llama-server warned at start [mmap-tensor-overrides]" in out
    )
    assert "tensor overrides to CPU are used with mmap enabled" in out
    assert "llama-server startup warnings:\n  mmap (b11434): [mmap-tensor-overrides]" in out
    assert "lm-none (b11434): [mmap-tensor-overrides]" not in out
    report = (ot.path / "report.md").read_text()
    assert "mmap (b11434): [mmap-tensor-overrides]" in report
    assert "![throughput per configuration and workload](report.png)" in report
    assert (ot.path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    history = ot.path / ".moeperf"
    assert list(history.glob("results-*.json")) and list(history.glob("benchmarks/*/0001_*.json"))
    assert list(history.glob("llama-bench/*.jsonl"))


def test_strict_warnings_fail_the_test(ot):
    result = ot.runpytest_subprocess("-m", "perf", "--moeperf-strict-warnings")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*_ test_mmap _*", "*tensor overrides to CPU are used with mmap*"])
