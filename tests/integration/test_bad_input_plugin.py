"""Bad input to the plugin, in inner pytest sessions: options, markers, replay files that
cannot grow, report paths, and accept after a failure. Each gives a non-zero exit with one line
naming what is wrong, no traceback from the plugin, nothing written, no server left."""

from __future__ import annotations

import json
import re

import pytest
from _profiles import TINY_PROFILE

INI = "[pytest]\nmoeperf_profile = embedded-tiny\n"

BAD_MARKERS = """
import pytest

@pytest.mark.moeperf(configurations="default")
def test_a_string_is_not_a_list(moeperf):
    moeperf.measure("default", "pp64")

@pytest.mark.moeperf(configurations=["defualt"])
def test_unknown_configuration(moeperf):
    moeperf.measure("defualt", "pp64")

@pytest.mark.moeperf(configuration=["default"])
def test_misspelt_keyword(moeperf):
    pass

@pytest.mark.dead_end(config="cpu0", slower_then="default", metric="tg16")
def test_misspelt_dead_end():
    pass

@pytest.mark.dead_end(config="cpu0", slower_than="default", metric="tg16", margin=1.5)
def test_dead_end_margin():
    pass
"""


@pytest.fixture
def inner(pytester):
    pytester.makeini(INI)
    return pytester


def _no_plugin_traceback(out: str) -> None:
    """No traceback, and no line of the plugin's own code (a skip's location in the fixture
    is pytest's report, not a traceback)."""
    assert "Traceback" not in out, out
    assert not re.search(r"pytest_moeperf/(?!fixture\.py:)\S+\.py:\d+", out), out


def test_bad_options_are_usage_errors(inner):
    inner.makepyfile("def test_x():\n    pass\n")
    for args, line in (
        (["--moeperf-max-repetitions", "-5"], "--moeperf-max-rounds -5 must be >= 2"),
        (["--moeperf-max-rounds", "1"], "--moeperf-max-rounds 1 must be >= 2"),
        (["--moeperf-budget", "0"], "--moeperf-budget 0.0: give the seconds a verdict may"),
        (["--moeperf-probe-tolerance", "2"], "--moeperf-probe-tolerance 2.0 must be a share"),
        (["--moeperf-reprobe-seconds", "-1"], "--moeperf-reprobe-seconds -1.0 must be >= 0"),
        (["--moeperf-report", str(inner.path)], "is a directory; refusing to replace it"),
        (["--moeperf-report", str(inner.path / "no" / "r.md")], "does not exist; create it"),
    ):
        result = inner.runpytest_subprocess(*args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, (args, result.stderr.str())
        err = result.stderr.str()
        assert line in err, err
        _no_plugin_traceback(err)
    assert not list(inner.path.glob("*.png")) and not (inner.path / "no").exists()


def test_bad_markers_fail_their_own_tests_with_one_line(inner):
    inner.makepyfile(BAD_MARKERS)
    result = inner.runpytest_subprocess("-m", "perf", "-rE")
    result.assert_outcomes(errors=5)  # at setup: the test cannot run as written
    out = result.stdout.str()
    for test, line in (
        (
            "test_a_string_is_not_a_list",
            "moeperf marker: configurations='default' must be a list "
            'of names, e.g. configurations=["default"]',
        ),
        (
            "test_unknown_configuration",
            "moeperf marker: configuration 'defualt' is not in "
            "profile 'embedded-tiny' (pytest_moeperf/embedded.toml); known: default, cpu0, traffic",
        ),
        ("test_misspelt_keyword", "moeperf marker: unknown keyword 'configuration'"),
        ("test_misspelt_dead_end", "dead_end marker: unknown keyword 'slower_then'"),
        ("test_dead_end_margin", "dead_end marker: margin 1.5 must be a share in [0, 1)"),
    ):
        assert any(f"::{test}: {line}" in shown for shown in result.outlines), (test, out)
    out = result.stdout.str()
    assert "moeperf: started" not in out  # no server for a test that cannot run
    _no_plugin_traceback(out)


CLAIM = """
import pytest

@pytest.mark.moeperf(configurations=["default", "cpu0"])
def test_claim(moeperf):
    moeperf.check("cpu0.pp64 >= 1.0 * default.pp64")
"""


def _measurement(config: str, values: list[float]) -> dict:
    return {
        "configuration": config,
        "build": "b11434",
        "workload": "pp64",
        "samples": [{"tokens": 64, "ms": 64_000 / v} for v in values],
        "extra": {"profile": "embedded-tiny"},
    }


def test_replay_never_waits_for_samples_that_cannot_come(inner):
    """An undecided claim on a replayed file with fewer samples than the repetition limit
    ends undecided at once (it used to loop forever)."""
    inner.makepyfile(CLAIM)
    results = inner.path / "results-x.json"
    results.write_text(
        json.dumps(
            {
                "moeperf_results": 1,
                "measurements": [
                    _measurement("default", [1000.0, 1300.0, 800.0]),
                    _measurement("cpu0", [950.0, 1250.0, 850.0]),
                ],
            }
        )
    )
    result = inner.runpytest_subprocess(
        "-m", "perf", "-rs", "--moeperf-replay", str(results),
        "--moeperf-max-repetitions", "20", "--timeout", "120",
    )  # fmt: skip
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*undecided: cpu0.pp64 / default.pp64*"])


FAILING = """
import pytest

@pytest.mark.moeperf(configurations=["default"], profile="tiny")
def test_measures(moeperf):
    moeperf.measure("default", "pp64")

def test_fails():
    assert False, "a failing test"
"""

CONFIG = TINY_PROFILE


def test_accept_is_refused_after_a_failure(perf_project):
    inner = perf_project(config=CONFIG, tests=FAILING)
    result = inner.runpytest_subprocess("-m", "perf or not perf", "--moeperf-accept")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(
        ["moeperf: error: --moeperf-accept refused, nothing written: 1 test(s) failed*"]
    )
    assert not (inner.path / "baselines").exists()
    assert list((inner.path / ".moeperf").glob("results-*.json"))  # the run is still recorded
