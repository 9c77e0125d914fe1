"""What a perf session's exit status says, in inner pytest sessions: a session that decided no
verdict is not green (exit 5, one line counting why), a configuration that cannot run is a skip
on another host and an error on the profile's own, and a profile named by hand must exist and
be used. The host facts are this host's, read for real (its NUMA nodes, its hostname); the
servers, where a test needs them, are real llama-servers on the tiny model."""

from __future__ import annotations

import platform

import pytest
from _profiles import TINY_PROFILE

INI = "[pytest]\nmoeperf_config = moeperf.toml\n{settings}"

ELSEWHERE = """
[profiles.mine]
build = 11434
model = "synthetic:tiny"
{keys}
[profiles.mine.configurations.far]
numa_node = 4093
"""
"""A profile whose one configuration asks for a NUMA node no host here has."""

TWO_TESTS = """
import pytest

@pytest.mark.moeperf(configurations=["far"], profile="mine")
def test_far_prefill(moeperf):
    moeperf.measure("far", "pp64")

@pytest.mark.moeperf(configurations=["far"], profile="mine")
def test_far_decode(moeperf):
    moeperf.measure("far", "tg16")
"""

NOTHING_JUDGED = (
    "*moeperf: nothing judged, exit 5: 2 perf tests: 0 verdicts decided; 2 tests skipped "
    "(2 x NUMA node 4093 does not exist on this host (nodes: *)) (--moeperf-allow-empty to exit 0)"
)


@pytest.fixture
def inner(pytester):
    def make(keys: str = "", settings: str = "", tests: str = TWO_TESTS):
        pytester.makefile(".toml", moeperf=ELSEWHERE.format(keys=keys))
        pytester.makeini(INI.format(settings=settings))
        pytester.makepyfile(tests)
        return pytester

    return make


def test_a_session_that_judged_nothing_exits_5_and_says_why(inner):
    p = inner()
    for args in ((), ("-n", "2")):  # the count is the controller's under xdist
        result = p.runpytest_subprocess("-m", "perf", *args)
        assert result.ret == 5, result.stdout.str()
        result.stdout.fnmatch_lines([NOTHING_JUDGED])
        result.assert_outcomes(skipped=2)
    result = p.runpytest_subprocess("-m", "perf", "--moeperf-allow-empty")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*moeperf: nothing judged (--moeperf-allow-empty): 2 perf tests*"])


def test_the_ini_key_allows_an_empty_session_too(inner):
    p = inner(settings="moeperf_allow_empty = true\n")
    assert p.runpytest_subprocess("-m", "perf").ret == 0


def test_plain_pytest_deselecting_perf_tests_is_not_an_empty_perf_session(inner):
    p = inner(tests=TWO_TESTS + "\ndef test_unit():\n    pass\n")
    result = p.runpytest_subprocess()
    assert result.ret == 0
    result.assert_outcomes(passed=1, deselected=2)
    assert "nothing judged" not in result.stdout.str()


@pytest.mark.parametrize(
    "keys, owner",
    [
        (f'host = {{hostname = "{platform.node()}"}}', "is written for this host (its host table)"),
        ("required = true", "has required = true"),
    ],
    ids=["host-table", "required"],
)
def test_on_the_profiles_own_host_what_cannot_run_is_an_error_naming_the_key(inner, keys, owner):
    p = inner(keys=keys)
    result = p.runpytest_subprocess("-m", "perf")
    assert result.ret == 1
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            f"numa_node: NUMA node 4093 does not exist on this host (nodes: *) (*moeperf.toml: "
            f"profile 'mine' {owner}, so this is an error, not a skip: fix numa_node or the host)"
        ]
    )
    out = result.stdout.str()
    assert "Traceback" not in out and "During handling" not in out, out


def test_another_hosts_profile_skips_naming_what_is_missing(inner):
    p = inner(keys='host = {hostname = "prod-01-of-another-project"}')
    result = p.runpytest_subprocess("-m", "perf", "-rs")
    assert result.ret == 5
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*NUMA node 4093 does not exist on this host*"])


def test_an_unknown_or_unused_profile_named_by_hand_is_an_error(inner):
    p = inner()
    result = p.runpytest_subprocess("-m", "perf", "--moeperf-profile", "nope")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--moeperf-profile 'nope': no such profile; known: *mine*"])
    unused = (
        "*--moeperf-profile 'embedded': no collected test uses that profile (the tests name "
        "mine); select tests that do, or drop the option"
    )
    result = p.runpytest_subprocess("-m", "perf", "--moeperf-profile", "embedded")
    assert result.ret == 4
    result.stderr.fnmatch_lines([unused])
    result = p.runpytest_subprocess("-m", "perf", "--moeperf-profile", "embedded", "-n", "2")
    assert result.ret == 1  # under xdist: each test errs with the line, never a crash
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([unused])
    assert p.runpytest_subprocess("-m", "perf", "--moeperf-profile", "mine").ret == 5


UNDECIDED_TEST = """
import pytest

@pytest.mark.moeperf(configurations=["default", "twin"], profile="tiny")
def test_a_claim_on_its_own_edge(moeperf):
    moeperf.check("twin.tg16 >= 1.0 * default.tg16")
"""


def _undecided_or_skip(result: pytest.RunResult) -> None:
    """The premise: the claim ended undecided. Two configurations of one server, a threshold
    at their true ratio (1) and a budget spent after the 2 rounds a verdict always takes: its
    interval straddles 1 but at the interval's error rate, and then the test says so. The
    session's own count line says which it was."""
    if ": 0 verdicts decided" not in result.stdout.str():
        pytest.skip("premise unmet: the claim on its own edge was decided in its 2 rounds")


def test_a_session_whose_verdicts_are_all_undecided_is_not_green(perf_project):
    """Real servers, a claim on its own edge and a spent budget: the claim is undecided
    (skipped), and the session exits 5 naming the reason; --moeperf-undecided fail makes it a
    failure."""
    twin = TINY_PROFILE + "[profiles.tiny.configurations.twin]\n"
    p = perf_project(config=twin, tests=UNDECIDED_TEST)
    result = p.runpytest_subprocess("-m", "perf", "-rs", "--moeperf-budget", "0.001")
    _undecided_or_skip(result)
    assert result.ret == 5, result.stdout.str()
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["*moeperf: nothing judged, exit 5: 1 perf test: 0 verdicts decided; 1 undecided (1 x *)*"]
    )
    result = p.runpytest_subprocess(
        "-m", "perf", "--moeperf-budget", "0.001", "--moeperf-undecided", "fail"
    )
    _undecided_or_skip(result)
    assert result.ret == 1
