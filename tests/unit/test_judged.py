"""What a perf session judged, counted from reports as pytest (or an xdist worker) makes them:
verdicts decided and undecided, skips and their reasons, and when nothing was judged."""

from __future__ import annotations

import pytest

from pytest_moeperf.plugin.judged import BUDGET_SPENT, Judged, verdict_property

PERF = {"perf": 1, "test_x": 1}


def _report(when: str, outcome: str, *, verdicts=None, skip: str = "", keywords=PERF, **extra):
    longrepr = ("test_x.py", 3, f"Skipped: {skip}") if outcome == "skipped" else None
    props = [verdict_property(verdicts)] if verdicts is not None else []
    report = pytest.TestReport(
        "test_x.py::test_x", ("test_x.py", 3, "test_x"), keywords, outcome, longrepr, when,
        user_properties=props,
    )  # fmt: skip
    for k, v in extra.items():
        setattr(report, k, v)
    return report


def _count(*reports: pytest.TestReport) -> Judged:
    judged = Judged()
    for r in reports:
        judged.add(r)
    return judged


def test_skipped_and_undecided_tests_judge_nothing_and_say_why():
    judged = _count(
        _report("setup", "passed"),
        _report("call", "skipped", skip="NUMA node 1 does not exist on this host (nodes: 0)"),
        _report("teardown", "passed"),
        _report("call", "skipped", skip="NUMA node 1 does not exist on this host (nodes: 0)"),
        _report(
            "call",
            "skipped",
            verdicts=[("undecided", "host 43 % busy with other work")],
            skip="undecided: ...",
        ),
        _report(
            "call",
            "skipped",
            verdicts=[("undecided", "host 61.5 % busy with other work")],
            skip="undecided: ...",
        ),
        _report("call", "passed", verdicts=[]),  # measured, asserted, judged no verdict
    )
    assert judged.tests == 5 and judged.decided == 0 and judged.nothing_judged
    assert judged.skipped == {"NUMA node 1 does not exist on this host (nodes: 0)": 2}
    assert judged.undecided == {"host N % busy with other work": 2}  # one kind, two figures
    assert judged.unjudged == 1
    assert judged.line() == (
        "5 perf tests: 0 verdicts decided; 2 undecided (2 x host N % busy with other work); "
        "2 tests skipped (2 x NUMA node 1 does not exist on this host (nodes: 0)); "
        "1 passed without a verdict"
    )


def test_one_decided_verdict_is_a_judged_session():
    judged = _count(
        _report("call", "skipped", verdicts=[("undecided", None)], skip="undecided: ..."),
        _report("call", "passed", verdicts=[("holds", None), ("passed", None)]),
    )
    assert judged.decided == 2 and not judged.nothing_judged
    assert judged.undecided == {BUDGET_SPENT: 1}


def test_a_dead_end_that_holds_is_decided_not_skipped():
    """An expected failure is a skipped report with ``wasxfail``: a decided dead end."""
    judged = _count(
        _report("call", "skipped", verdicts=[("holds", None)], wasxfail="dead end holds")
    )
    assert judged.decided == 1 and not judged.skipped and not judged.nothing_judged


def test_setup_skips_and_errors_count_once_and_other_tests_not_at_all():
    judged = _count(
        _report("setup", "skipped", skip="no GPU"),
        _report("setup", "failed"),
        _report("call", "passed", keywords={"test_unit": 1}),  # not a perf test
        _report("call", "failed", verdicts=[("fails", None)]),
    )
    assert judged.tests == 3 and judged.failed == 2 and judged.skipped == {"no GPU": 1}
    assert judged.decided == 1  # a claim that fails was judged


def test_no_perf_test_is_not_nothing_judged():
    assert not _count(_report("call", "passed", keywords={"test_unit": 1})).nothing_judged


def test_long_reasons_are_cut_and_the_rest_counted():
    judged = _count(*(_report("call", "skipped", skip=f"reason {c} " + "x" * 200) for c in "abcd"))
    line = judged.line()
    assert line.endswith(", 1 more)") and line.count("...") == 3


def test_the_line_says_which_host_the_verdicts_are_of():
    """Under xdist's remote gateways one session's tests measure on several hosts: the count
    says how many verdicts each host's are (a test without verdicts names none)."""

    def on(host: str, verdicts: list) -> pytest.TestReport:
        report = _report("call", "passed")
        report.user_properties = [verdict_property(verdicts, host)]
        return report

    judged = _count(
        on("gpu-01/aa", [("holds", None), ("undecided", None)]),
        on("gpu-02/bb", [("holds", None)]),
        on("gpu-02/bb", []),
    )
    assert judged.hosts == {"gpu-01/aa": 2, "gpu-02/bb": 1}
    assert judged.line().endswith("; of gpu-01/aa (2), gpu-02/bb (1)")
