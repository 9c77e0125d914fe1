"""Gate results: pass/fail and the table, from hand-made measurements."""

from __future__ import annotations

from pytest_moeperf.gate import GateResult, GateRow
from pytest_moeperf.measure.measurement import Measurement, Sample
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.verdicts.judge import judge_change

W = Workload.parse("pp512")


def _m(build: str, values: list[float]) -> Measurement:
    return Measurement("mmap", build, W, tuple(Sample(512, 512_000 / v) for v in values))


def _result(base: list[float], cand: list[float]) -> GateResult:
    b, c = _m("baseline", base), _m("candidate", cand)
    v = judge_change(c.values, b.values, margin=0.05)
    return GateResult(
        "b11053", "b11434", 0.05, [GateRow("mmap", W, b, c, v)], 0.0, (0.0, 0.0, 0.0), []
    )


def test_slower_candidate_fails_the_gate():
    r = _result([600, 605, 598, 602, 601], [300, 305, 298, 302, 301])
    assert r.rows[0].verdict.outcome == "slower" and not r.passed
    assert "FAIL: 1 metric(s) slower" in r.text()
    assert "slower *" in r.text()


def test_noise_is_inconclusive_not_slower():
    r = _result([600, 420, 700, 510, 650], [560, 380, 690, 450, 640])
    assert r.rows[0].verdict.outcome == "inconclusive" and r.passed
    assert "spread too wide" in r.text()


def test_equal_builds_are_unchanged():
    r = _result([600, 605, 598, 602, 601], [601, 603, 599, 600, 604])
    assert r.rows[0].verdict.outcome == "unchanged" and r.passed
    assert r.to_json()["rows"][0]["verdict"] == "unchanged"


def test_a_busy_host_never_makes_a_verdict():
    """A clear 2x slowdown measured while the host was busy with other work (a compile) is
    inconclusive, not slower: the gate must not fail on noise."""
    from pytest_moeperf.verdicts.judge import too_noisy, undecided

    b, c = _m("baseline", [600, 605, 598, 602, 601]), _m("candidate", [300, 305, 298, 302, 301])
    c.extra["host_busy"] = 0.6
    v = undecided(judge_change(c.values, b.values), too_noisy([b, c]))
    assert v.outcome == "inconclusive" and "host 60 % busy" in v.label


def test_a_wide_spread_never_makes_a_verdict():
    from pytest_moeperf.verdicts.judge import too_noisy

    b = _m("baseline", [600, 420, 700, 510, 650])
    assert too_noisy([b]) is not None and "spread too wide" in str(too_noisy([b]))
    assert too_noisy([_m("x", [600, 605, 598, 602, 601])]) is None
