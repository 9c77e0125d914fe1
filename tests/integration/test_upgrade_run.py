"""The upgrade check on real servers (tiny model): every perf test of the inner project judged
on the pinned build and on a candidate that is really slower (its llama-server capped to a
fifth of a CPU), a gate item per configuration, one table of every decision on both builds,
and the exit status of the one outcome table."""

from __future__ import annotations

import json

import pytest
from _premise import slower_or_skip
from _procs import capped_cgroup, throttled_server
from _profiles import TINY_PROFILE

CONFIG = TINY_PROFILE.replace('baseline = "baselines/tiny.toml"', 'workloads = ["tg16"]')

TESTS = """
import pytest

pytestmark = pytest.mark.moeperf(profile="tiny")


@pytest.mark.moeperf(configurations=["default"])
def test_decode_after_a_context_is_no_faster(moeperf):
    moeperf.check("default.tg16@d64 <= 1.3 * default.tg16")
"""


def test_a_slower_candidate_is_a_finding_and_exits_1(perf_project, llama_build, tmp_path):
    project = perf_project(config=CONFIG, tests=TESTS)
    with capped_cgroup("moeperf-upgrade-test") as group:
        candidate = throttled_server(group, str(llama_build.server), tmp_path)
        result = project.runpytest_subprocess(
            "-m", "perf", "-p", "no:randomly", "-v",
            f"--moeperf-candidate={candidate}", "--moeperf-candidate-label", "throttled",
            "--moeperf-budget", "40", "--moeperf-busy-limit", "1",
            "--moeperf-upgrade-report", "upgrade.md",
        )  # fmt: skip
    out = result.stdout.str()
    check = json.loads((project.path / "upgrade.json").read_text())
    assert result.ret == check["exit_status"], out
    assert check["pinned"] == "b11434" and check["candidate"] == "throttled"
    # both sides of the test, in the order they ran, then the gate item with its output guard
    out.index("test_decode_after_a_context_is_no_faster[pinned]")
    assert out.index("[pinned] ") < out.index("[candidate] ") < out.index("gate[tiny.default.tg16]")
    rows = {(r["kind"], r["asked"]): r for r in check["rows"]}
    claim = rows[("claim", "default.tg16@d64 <= 1.3 * default.tg16")]
    assert claim["pinned"] and claim["candidate"], claim  # judged on both builds
    assert rows[("output", "default greedy output")]["candidate"]["outcome"] == "same-output"
    gate = rows[("gate", "default.tg16")]
    assert gate["pinned"] is None and "throttled" not in gate["candidate"]["figure"]
    [results] = (project.path / ".moeperf").glob("results-*.json")
    [row] = [
        v for v in json.loads(results.read_text())["verdicts"] if v["test"] == "gate default.tg16"
    ]
    assert check["outcome"] != "holds" and result.ret != 0  # a slowed build never passes
    slower_or_skip(row, "a candidate capped to a fifth of a CPU, in 40 s")
    assert gate["changed"] == "worse" and gate["finding"]
    assert result.ret == 1 and check["outcome"] == "worse"
    assert (
        "finding: gate[tiny]: default.tg16: worse; measure again: moeperf gate --profile tiny "
        f"--baseline 11434 --candidate {candidate} --candidate-label throttled -c default -w tg16"
    ) in out
    assert (
        "| decision | pinned b11434 | candidate throttled | record | changed |"
        in (project.path / "upgrade.md").read_text()
    )
    assert out.splitlines()[-3].startswith("upgrade b11434 -> throttled: worse:") or any(
        line.startswith("upgrade b11434 -> throttled: worse:") for line in out.splitlines()
    )


def test_a_candidate_that_is_the_pinned_build_is_a_usage_error(perf_project):
    project = perf_project(config=CONFIG, tests=TESTS)
    result = project.runpytest_subprocess("-m", "perf", "--moeperf-candidate", "11434")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--moeperf-candidate: b11434 is profile*own, pinned build*"])


def test_a_binary_path_taken_for_a_test_path_is_told_in_one_line(
    perf_project, llama_build, tmp_path
):
    """pytest looks for its rootdir before the plugin's options are known: a binary beside the
    project given as a separate word would move the rootdir away from the project's ini (and
    its profiles) without a word; it is a usage error naming the one-word form instead."""
    project = perf_project(config=CONFIG, tests=TESTS)
    wrapper = tmp_path / "wrapped-server"
    wrapper.write_text(f'#!/bin/sh\nexec {llama_build.server} "$@"\n')
    wrapper.chmod(0o755)
    assert project.path not in wrapper.parents
    result = project.runpytest_subprocess(
        "-m", "perf", "--moeperf-candidate", str(wrapper), "--moeperf-candidate-label=w"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*took the path for a test path*write --moeperf-candidate={wrapper}"]
    )


def test_a_stand_in_of_another_build_stops_the_run_in_one_line(perf_project, tmp_path):
    """``--llama-server`` stands in for the profile's own build: one that prints another
    build in ``--version`` is one usage error before any test runs (it was one failure a test,
    each repeating the line)."""
    project = perf_project(config=CONFIG, tests=TESTS)
    other = tmp_path / "b10429-server"
    other.write_text('#!/bin/sh\necho "version: 10429 (cd77506ab)" >&2\n')
    other.chmod(0o755)
    result = project.runpytest_subprocess("-m", "perf", f"--llama-server={other}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if "prints build" in line]
    assert len(errors) == 1 and "--moeperf-candidate=" in errors[0], result.stderr.str()
    assert "not b11434" in errors[0]


def test_a_test_of_an_unknown_profile_fails_at_its_setup_not_the_collection(perf_project):
    """The gate items are planned from the tests' profiles: one that names no profile of the
    project fails at its setup with its own line (it was an INTERNALERROR of the collection)."""
    project = perf_project(config=CONFIG, tests=TESTS.replace('profile="tiny"', 'profile="prod"'))
    result = project.runpytest_subprocess("-m", "perf", "--moeperf-candidate=10999")  # never built
    out = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in out, out
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*no profile 'prod'*"])
