"""The plugin end to end, in an inner pytest session on the embedded-tiny profile with real
servers: selection by -m perf, one server per configuration, the summary table, skips."""

from __future__ import annotations

import json

import pytest

PERF_TESTS = """
import pytest

uses_default = pytest.mark.moeperf(configurations=["default"], profile="embedded-tiny")

@uses_default
def test_prefill(moeperf):
    m = moeperf.measure("default", "pp64")
    assert [s.tokens for s in m.samples] == [64, 64, 64]

@uses_default
def test_decode(moeperf):
    m = moeperf.measure("default", "tg16")
    assert m.summary.median > 0
    assert moeperf.server("default").is_running()

def test_plain():
    pass
"""


@pytest.fixture
def inner(perf_project):
    """An inner pytest project whose perf tests run on the tiny model (build warm in cache)."""
    return perf_project(profile="embedded-tiny")


def test_plain_pytest_deselects_perf_tests(inner):
    inner.makepyfile(test_perf=PERF_TESTS)
    result = inner.runpytest_subprocess()
    result.assert_outcomes(passed=1, deselected=2)


def test_perf_run_starts_each_server_once_and_prints_the_table(inner):
    inner.makepyfile(test_perf=PERF_TESTS)
    result = inner.runpytest_subprocess("-m", "perf", "-v")
    result.assert_outcomes(passed=2, deselected=1)
    started = [line for line in result.outlines if line.startswith("moeperf: started default")]
    assert len(started) == 1, result.outlines
    assert "ready in" in started[0]
    result.stdout.fnmatch_lines(
        [
            "*moeperf: throughput*",
            "configuration*pp64 tok/s*tg16 tok/s*spread (cv)*build*",
            "default *b11434*",
        ]
    )
    results = list((inner.path / ".moeperf").glob("results-*.json"))
    assert len(results) == 1
    data = json.loads(results[0].read_text())
    assert {m["workload"] for m in data["measurements"]} == {"pp64", "tg16"}
    assert data["fingerprint"]["cpus"] >= 1
    logs = list((inner.path / ".moeperf" / "logs").rglob("*.log"))
    assert len(logs) == 1 and "print_timing" in logs[0].read_text()


def test_missing_numa_node_skips_with_the_reason(inner):
    inner.makefile(
        ".toml",
        moeperf="""
[profiles.far]
build = 11434
model = "synthetic:tiny"
flags = ["-c", "512"]
[profiles.far.configurations.node7]
numa_node = 7
""",
    )
    inner.makepyfile(
        test_far="""
import pytest

@pytest.mark.moeperf(configurations=["node7"], profile="far")
def test_node7(moeperf):
    moeperf.measure("node7", "pp16")
"""
    )
    result = inner.runpytest_subprocess("-m", "perf", "-rs", "--moeperf-config", "moeperf.toml")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*NUMA node 7 does not exist on this host*"])


def test_unknown_flag_of_the_build_skips_naming_build_and_flag(inner):
    inner.makefile(
        ".toml",
        moeperf="""
[profiles.cache]
build = 11434
model = "synthetic:tiny"
[profiles.cache.configurations.cache-2gib]
flags = ["--moe-cache-mib", "2048"]
""",
    )
    inner.makepyfile(
        test_cache="""
import pytest

@pytest.mark.moeperf(configurations=["cache-2gib"], profile="cache")
def test_cache(moeperf):
    moeperf.measure("cache-2gib", "tg16")
"""
    )
    result = inner.runpytest_subprocess("-m", "perf", "-rs", "--moeperf-config", "moeperf.toml")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*has no --moe-cache-mib*"])


def test_bad_config_is_one_clear_line(inner):
    inner.makefile(
        ".toml",
        moeperf="""
[profiles.bad]
build = 11434
model = "synthetic:tiny"
[profiles.bad.configurations.x]
flagz = ["-t", "1"]
""",
    )
    inner.makepyfile(
        test_bad="""
import pytest

@pytest.mark.moeperf(configurations=["x"], profile="bad")
def test_x(moeperf):
    moeperf.measure("x", "pp16")
"""
    )
    result = inner.runpytest_subprocess("-m", "perf", "--moeperf-config", "moeperf.toml")
    result.assert_outcomes(errors=1)  # at setup, when its marker's profile is read
    result.stdout.fnmatch_lines(
        ["*moeperf.toml: profile 'bad', configuration 'x': unknown key(s) flagz*"]
    )
    assert "Traceback" not in result.stdout.str()


def test_bench_cross_check_shows_both_numbers(inner):
    inner.makepyfile(test_perf=PERF_TESTS)
    result = inner.runpytest_subprocess("-m", "perf", "--moeperf-bench", "--moeperf-report", "r.md")
    result.assert_outcomes(passed=2, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "llama-bench cross-check (same model, flags, pinning):",
            "configuration*workload*server tok/s*bench tok/s*gap (%)*build*",
            "default*pp64*b11434",
            "default*tg16*b11434",
        ]
    )
    assert "## llama-bench cross-check" in (inner.path / "r.md").read_text()


def test_configuration_time_budget_names_the_phase(inner):
    inner.makepyfile(test_perf=PERF_TESTS)
    result = inner.runpytest_subprocess(
        "-m", "perf", "--moeperf-configuration-timeout", "0.000001", "-k", "prefill"
    )
    result.assert_outcomes(failed=1, deselected=2)
    result.stdout.fnmatch_lines(
        ["*pp64: the configuration's time budget ran out after 0 of 3*(configuration timeout)*"]
    )


def test_configuration_needing_more_gpus_than_the_host_skips(perf_project):
    project = perf_project(
        config="""
[profiles.gpu]
build = 11434
model = "synthetic:tiny"
requires_gpus = 64
[profiles.gpu.configurations.split]
""",
        tests="""
import pytest

@pytest.mark.moeperf(configurations=["split"], profile="gpu")
def test_split(moeperf):
    moeperf.measure("split", "pp16")
""",
    )
    result = project.runpytest_subprocess("-m", "perf", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["*configuration 'split': requires_gpus = 64; this host has * GPU(s)*"]
    )


def test_bench_runs_in_the_claims_rounds_with_an_interval(inner):
    """With --moeperf-bench a claim's rounds also run llama-bench of both sides: each side's
    server/bench ratio gets an interval over the same rounds (the cross-check after the run
    stays)."""
    inner.makepyfile(
        test_claim="""
import pytest

@pytest.mark.moeperf(configurations=["default", "cpu0"])
def test_claim(moeperf):
    moeperf.judge("cpu0.pp64 >= 0.1 * default.pp64")
"""
    )
    # at most 6 rounds in process blocks of 2 (a tenfold margin may decide on its first look)
    result = inner.runpytest_subprocess(
        "-m", "perf", "--moeperf-bench", "--moeperf-max-rounds", "6",
        "--moeperf-process-block", "2", "--moeperf-results", "r.json",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "llama-bench in the same rounds as the servers (same build, model, flags, pinning):",
            "side*server / llama-bench ?interval?*rounds*test*",
            "default.pp64 (b11434)*?*, *?*test_claim*",
            "cpu0.pp64 (b11434)*?*, *?*test_claim*",
        ]
    )
    data = json.loads((inner.path / "r.json").read_text())
    rows = data["bench_rounds"]
    assert len(rows) == 2 and all(r["low"] <= r["server_over_bench"] <= r["high"] for r in rows)
    (claim,) = data["verdicts"]
    assert all(r["rounds"] == claim["rounds"] for r in rows), (rows, claim)  # the same rounds


def test_the_projects_default_profile_is_the_one_a_test_without_a_profile_measures(
    perf_project,
):
    """A profiles file's default_profile names the profile of a test whose marker names none
    (the ini moeperf_profile, unset here, would come first; embedded is the last resort)."""
    from _profiles import TINY_PROFILE

    project = perf_project(
        config='default_profile = "tiny"\n' + TINY_PROFILE,
        tests="""
import pytest

@pytest.mark.moeperf(configurations=["default"])
def test_uses_the_default(moeperf):
    assert moeperf.profile.name == "tiny"
    assert moeperf.measure("default", "tg4", repetitions=1).values
""",
    )
    result = project.runpytest_subprocess("-m", "perf")
    result.assert_outcomes(passed=1)
