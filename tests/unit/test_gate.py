"""Gate results: pass/fail and the table, from hand-made measurements."""

from __future__ import annotations

from dataclasses import replace

from _judges import judge_change

from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.report.gate import gate_text
from pytest_moeperf.store.stored import gate_json
from pytest_moeperf.verdicts.baseline_check import overridden
from pytest_moeperf.verdicts.gate import GateResult, GateRow
from pytest_moeperf.verdicts.judge import busy_reason, judge_rounds
from pytest_moeperf.verdicts.sequential import Plan, Rule

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
    assert "FAIL: 1 metric(s) slower" in gate_text(r)
    assert "slower *" in gate_text(r)


def test_noise_is_undecided_not_slower():
    """Rounds too noisy to decide within the budget: the row is undecided with its MDE, the
    gate exits 3 (0 or 1 as --undecided says), never "slower"."""
    base = [600, 420, 700, 510, 650, 480, 620, 560]
    cand = [560, 380, 690, 450, 640, 530, 700, 470]
    v, more = judge_rounds(
        Rule("change", margin=0.05),
        base,
        cand,
        Plan(first_look=6, block=1),
        spent=True,
        label="x",
        blocks=range(8),  # a fresh pair each round
    )
    assert v.outcome == "undecided" and more == 0 and v.mde is not None
    b, c = _m("baseline", base), _m("candidate", cand)
    r = GateResult("b1", "b2", 0.05, [GateRow("mmap", W, b, c, v)], 0.0, (0.0, 0.0, 0.0), [])
    assert r.undecided and r.exit_code() == 3
    assert not r.passed and r.outcome == "undecided"  # what the exit code says: not a pass
    assert r.exit_code("pass") == 0 and r.exit_code("fail") == 1
    assert f"/+{100 * v.mde:.1f} %)" in gate_text(r) and "undecided, leaning" in gate_text(r)
    assert "UNDECIDED: 1 metric(s) undecided (budget spent)" in gate_text(r)
    data = gate_json(r)
    assert data["exit_code"] == 3 and data["rows"][0]["verdict"]["mde"] == v.mde
    assert data["passed"] is False and data["outcome"] == "undecided"
    passing = replace(r, undecided_policy="pass")  # --undecided pass: exit 0, and says so
    assert passing.passed and gate_json(passing)["passed"] is True
    assert gate_json(passing)["outcome"] == "undecided" and "--undecided pass" in passing.summary()


def test_a_configuration_not_measured_is_never_a_pass():
    """A configuration a build or this host cannot run is a skipped row: every other row
    unchanged, the gate still exits 3 (1 under --undecided fail), and --undecided pass does
    not make it a pass; a gate that measured no row at all is no pass either."""
    r = replace(_result([600, 605, 598, 602, 601], [601, 603, 599, 600, 604]),
                skipped=[("moe-cache", "build b11434 has no --moe-cache-mib")])  # fmt: skip
    assert r.rows[0].verdict.outcome == "unchanged"
    assert r.exit_code() == 3 and r.exit_code("pass") == 3 and r.exit_code("fail") == 1
    assert not r.passed and r.outcome == "undecided"
    assert "1 configuration(s) not measured (moe-cache;" in r.summary()
    assert r.summary().startswith("UNDECIDED")
    data = gate_json(r)
    assert data["passed"] is False and data["exit_code"] == 3 and data["outcome"] == "undecided"
    empty = GateResult("b1", "b2", 0.05, [], 0.0, (0.0, 0.0, 0.0), [])
    assert empty.exit_code() == 3 and not empty.passed and "no row measured" in empty.summary()


def test_a_small_real_change_passes_and_says_its_size():
    """A real 3 % slowdown in 40 paired rounds of 8 process pairs: surely slower, surely
    within the margin. The same rounds of one process pair cannot say so: that pair's own
    offset could be the 3 %, and on a host not calibrated one block cannot say how big it is."""
    base = [600.0 + 5 * ((i * 7) % 5) for i in range(40)]
    cand = [0.97 * v * (1 + 0.002 * ((i * 3) % 5 - 2)) for i, v in enumerate(base)]
    one_pair, _ = judge_rounds(Rule("change"), base, cand, Plan(), spent=True, label="x")
    assert one_pair.outcome == "undecided"
    blocks = [i // 5 for i in range(40)]
    v, _ = judge_rounds(Rule("change"), base, cand, Plan(), spent=True, label="x", blocks=blocks)
    b, c = _m("baseline", base), _m("candidate", cand)
    r = GateResult("b1", "b2", 0.05, [GateRow("mmap", W, b, c, v)], 0.0, (0.0, 0.0, 0.0), [])
    assert v.outcome == "small-slower" and r.passed and r.exit_code() == 0
    assert "-3.0 %" in v.explain()


def test_creep_against_the_oldest_accepted_baseline_shows():
    """Three accepted gates of about -3 % each: each passes alone (small-slower), their chained
    sum is a regression beyond the margin, and the gate says so in its table and JSON."""
    from dataclasses import replace

    from pytest_moeperf.verdicts.creep import PairedChange, judge_chain

    r = _result([600, 605, 598, 602, 601], [601, 603, 599, 600, 604])
    links = [
        ("b11100", PairedChange("b11000", -0.03, 0.004, 60)),
        ("b11200", PairedChange("b11100", -0.035, 0.004, 60)),
    ]
    today = PairedChange("b11200", -0.03, 0.005, 40)
    # a host whose repeated links measured 1 % a link between sessions
    chained = judge_chain(links, today, margin=0.05, label="mmap.pp512", link_term=0.01)
    r.rows[0] = replace(r.rows[0], oldest=chained, change=today)
    assert r.crept == r.rows and r.passed  # passes today's gate, but the chain is a regression
    text = gate_text(r)
    assert (
        "-9.1 % [-12.4, -5.6] since b11000 (3 gates): slower" in text
    )  # 1 % a link between sessions
    assert "mmap.pp512 since b11000 (3 paired gates) = 0.909" in text
    assert "the accepted chain adds up to a regression" in text
    row = gate_json(r)["rows"][0]
    assert row["vs_oldest"]["outcome"] == "slower" and row["vs_oldest"]["since"] == "b11000"
    assert row["change"] == {"against": "b11200", "log_ratio": -0.03, "se": 0.005, "rounds": 40}


def test_equal_builds_are_unchanged():
    r = _result([600, 605, 598, 602, 601], [601, 603, 599, 600, 604])
    assert r.rows[0].verdict.outcome == "unchanged" and r.passed
    assert gate_json(r)["rows"][0]["verdict"]["outcome"] == "unchanged"


def test_a_busy_host_never_makes_a_verdict():
    """A clear 2x slowdown measured while the host was busy with other work (a compile) is
    undecided, not slower: the gate must not fail on noise."""
    b, c = _m("baseline", [600, 605, 598, 602, 601]), _m("candidate", [300, 305, 298, 302, 301])
    c = replace(c, conditions=Conditions(measured_s=10.0, busy_s=6.0))
    v = overridden(judge_change(c.values, b.values), busy_reason([b, c]))
    assert v.outcome == "undecided" and "host 60 % busy" in v.label
    assert busy_reason([b]) is None  # a quiet host decides


def test_different_output_fails_the_gate_and_says_where_it_parts():
    from pytest_moeperf.measure.output import OutputCheck

    same = OutputCheck("mmap", (5, 6, 7), (5, 6, 7))
    parted = OutputCheck("lm-none", (5, 6, 7), (5, 9, 7))
    assert same.same and same.first_difference is None
    assert parted.first_difference == 1
    assert "part at position 1 of 3 (b1 token 6, b2 token 9; the first 1 agree)" in (
        parted.describe("b1", "b2")
    )
    assert OutputCheck("x", (1, 2), (1,)).first_difference == 1
    measured = _result([600, 605, 598, 602, 601], [601, 603, 599, 600, 604])
    ok = replace(measured, outputs=[same])
    assert ok.exit_code() == 0 and ok.summary() == "passed" and ok.outcome == "passed"
    bad = replace(measured, outputs=[same, parted])
    assert bad.exit_code() == 1 and "output differs on 1 configuration(s)" in bad.summary()
    assert not bad.passed and gate_json(bad)["outcome"] == "different-output"
    assert "output: lm-none: DIFFERENT output" in gate_text(bad)
    assert gate_json(bad)["outputs"][1]["first_difference"] == 1
    allowed = replace(measured, outputs=[parted], allow_different=True)
    assert allowed.exit_code() == 0 and allowed.passed


def test_token_ids_from_streamed_events():
    from pytest_moeperf.measure.output import guard_body, tokens_of_event

    assert tokens_of_event({"content": "a", "tokens": [17]}) == [17]
    assert tokens_of_event({"completion_probabilities": [{"id": 4, "prob": 1.0}]}) == [4]
    assert tokens_of_event({"content": ""}) == []
    body = guard_body(1000, ban_tokens=[3])
    assert body == guard_body(1000, ban_tokens=[3])  # fixed prompt
    assert body["temperature"] == 0.0 and body["top_k"] == 1 and body["logit_bias"] == [[3, False]]
