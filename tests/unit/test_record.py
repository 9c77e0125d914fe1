"""The run record round-trips every kind it holds: measurements, verdicts with their rounds,
bench rounds, baseline checks and llama-bench entries, written and read in ``store/record.py``
only; records of before a field was kept read as what they held."""

from __future__ import annotations

import json

import pytest

from pytest_moeperf.llama.bench import BenchResult
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.round import Round
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.store.record import (
    BenchRound,
    CheckRecord,
    RunRecord,
    VerdictRecord,
    VerdictSide,
    bench_entry,
)
from pytest_moeperf.verdicts.baseline_check import BaselineCheck
from pytest_moeperf.verdicts.creep import ChainedChange
from pytest_moeperf.verdicts.judge import Verdict

W = Workload.parse("pp512")


def _verdict(outcome: str = "holds", relation: str = ">=") -> Verdict:
    return Verdict(
        outcome,  # type: ignore[arg-type]
        2.1,
        1.9,
        2.3,
        2.0,
        label="lm-none.pp512 / mmap.pp512",
        relation=relation,
        rounds=12,
        mde=0.04,
        reason=None,
    )


def _record() -> RunRecord:
    samples = (Sample(512, 1000.0), Sample(512, 990.0))
    m = Measurement("mmap", "b1", W, samples, Conditions(profile="p"))
    check = BaselineCheck("undecided", 995.0, 1000.0, 0.05, low=0.9, high=1.1, reason="host busy")
    sides = (VerdictSide("p", "mmap", "b1", "pp512"), VerdictSide("p", "lm", "b1", "pp512"))
    return RunRecord(
        fingerprint={"cpu_model": "x", "cpus": 2},
        fingerprints={"p": {"cpu_model": "x", "cpus": 2, "model": "m.gguf"}},
        probes={"0-1": {"bandwidth_gbs": 10.0}},
        host_changes=["probe moved"],
        server_starts={"p-mmap-b1": [1.5]},
        measurements=[m],
        verdicts=[
            VerdictRecord(
                test="t::a",
                verdict=_verdict(),
                sides=sides,
                asked="lm.pp512 / mmap.pp512",
                rounds=(
                    Round((1000.0, 990.0), ((0,), (0,)), block=0, seconds=2.0, busy=0.1),
                    Round((990.0, 980.0), ((1,), (1,)), block=0, first="b", aside="busy"),
                ),
                moved=(),
                plan={"first_look": 6.0},
                coin={"seed": 3, "order": ["ab", "ba"]},
                taken="paired rounds",
            )
        ],
        bench_rounds=[BenchRound("t::a", "mmap.pp512 (b1)", _verdict("unchanged", "~"))],
        bench=[
            bench_entry(
                ("p", "mmap", "b1", "pp512"),
                BenchResult(W, (500.0, 510.0), 505.0, 5.0, command=("llama-bench",)),
            )
        ],
        baseline_checks=[
            CheckRecord("t::b", m.key, check),
        ],
        date="2026-12-02T08:00:00+0000",
        plugin_version="9.9",
    )


def test_every_kind_round_trips_through_the_file():
    record = _record()
    back = RunRecord.from_dict(json.loads(record.json_text()))
    assert back == record


def test_a_check_keeps_its_interval_and_reason():
    (check,) = RunRecord.from_dict(json.loads(_record().json_text())).baseline_checks
    assert (check.check.low, check.check.high, check.check.reason) == (0.9, 1.1, "host busy")


def test_records_of_before_a_field_was_kept_read_as_they_were():
    old = json.loads(_record().json_text())
    old["bench_rounds"] = [
        {"test": "t", "side": "s", "server_over_bench": 0.9, "low": 0.8, "high": 1.0, "rounds": 6}
    ]
    old["baseline_checks"] = [
        {"test": "t", "key": ["p", "mmap", "b1", "pp512"], "outcome": "pass", "measured": 1.0,
         "baseline": 1.0, "tolerance": 0.05}
    ]  # fmt: skip
    back = RunRecord.from_dict(old)
    (bench,) = back.bench_rounds
    assert (bench.verdict.ratio, bench.verdict.low, bench.verdict.rounds) == (0.9, 0.8, 6)
    assert bench.verdict.outcome == "undecided"  # the old record kept no outcome
    (check,) = back.baseline_checks
    assert check.check.outcome == "passed" and check.check.low is None and not check.check.reason
    old["baseline_checks"][0]["key"][-1] = "traffic.ttft_p99"  # a latency: lower is better
    (latency,) = RunRecord.from_dict(old).baseline_checks
    assert latency.check.higher_is_better is False


def test_format_1_keys_read_as_they_did():
    """Format 1 named a measurement's conditions ``extra`` and a verdict's label ``claim``."""
    record = _record()
    old = json.loads(record.json_text())
    old["moeperf_results"] = 1
    (m,) = old["measurements"]
    m["extra"] = m.pop("conditions")
    label = "lm.pp512 / mmap.pp512"
    old["verdicts"] = [
        {"test": "t::a", "claim": label, "outcome": "holds", "ratio": 2.1, "low": 1.9,
         "high": 2.3, "threshold": 2.0, "rounds": 12, "mde": 0.04, "method": "bootstrap"}
    ]  # fmt: skip
    back = RunRecord.from_dict(old)
    assert back.measurements == record.measurements
    assert back.measurements[0].conditions == record.measurements[0].conditions
    (verdict,) = back.verdicts
    assert verdict.verdict.label == verdict.asked == label
    assert (verdict.verdict.outcome, verdict.verdict.rounds, verdict.sides) == ("holds", 12, None)
    m["conditions"] = {"profile": "q"}  # the current key wins where both are
    assert RunRecord.from_dict(old).measurements[0].conditions.profile == "q"


def test_an_unreadable_kind_names_itself():
    bad = json.loads(_record().json_text())
    bad["verdicts"][0]["outcome"] = "maybe"
    with pytest.raises(ValueError, match="outcome 'maybe'"):
        RunRecord.from_dict(bad)


def test_every_verdict_is_one_family_with_one_stored_form_and_line():
    chain = ChainedChange("b1", ("b2", "b3"), 0.97, 0.94, 1.0, "undecided", label="mmap.pp512")
    check = BaselineCheck("passed", 101.0, 100.0, 0.05, label="mmap.pp512", low=0.99, high=1.03)
    for judged in (_verdict(), check, chain):
        stored = judged.to_dict()
        assert stored["outcome"] == judged.outcome and stored["explain"] == judged.explain()
    assert BaselineCheck.from_dict(check.to_dict()) == check
