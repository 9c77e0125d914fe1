"""The gate and bisect, run through the real decision loop on a fake source: each build runs at
a known speed, each round costs 2.5 s of a fake clock and carries seeded noise, and every 10
rounds the process pair restarts with an offset of its own. Nothing of the gate is replaced:
its up-front check, its skipped rows, the loop's looks and budget, Holm, the correctness guard,
and bisect's steps, premise and state file all run as ``moeperf gate`` and ``moeperf bisect``
run them (the live host's servers are what the fake stands in for)."""

from __future__ import annotations

import dataclasses
import json

from _fake_host import PACE, FakeSource, FakeStage, builds, fake_session

from pytest_moeperf.commands import main
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.report.bisect import bisect_text
from pytest_moeperf.report.gate import gate_markdown, gate_rows, gate_text
from pytest_moeperf.report.tables import text_table
from pytest_moeperf.run.bisect import run_bisect
from pytest_moeperf.run.gate import BuildUnderTest, StoredStage, run_gate
from pytest_moeperf.run.replayed import StoredHost
from pytest_moeperf.run.session import PerfSession
from pytest_moeperf.store.stored import bisect_json, gate_json_text, read_gate


def _gate(tmp_path, clock, speeds, stage=None, configurations=("mmap",), **kw):
    source = FakeSource(builds(speeds, **kw.pop("host", {})), clock)
    session, profile = fake_session(tmp_path, source, configurations, stage=stage)
    result = run_gate(session, profile, BuildUnderTest(0), BuildUnderTest(1), **kw)
    return result, source


def test_a_slower_candidate_fails_the_gate_through_the_loop(tmp_path, clock):
    result, _ = _gate(tmp_path, clock, {0: 100.0, 1: 85.0})
    (row,) = result.rows
    assert row.verdict.outcome == "slower" and result.exit_code() == 1
    assert 0.80 < row.verdict.ratio < 0.90 and row.verdict.high < 0.95
    assert row.seconds <= 180.0 + PACE and row.p_slower is not None and row.p_slower < 0.05
    assert any(n.startswith("family: 1 row(s)") for n in result.notes)


def test_the_same_build_on_both_sides_is_unchanged_across_restarts(tmp_path, clock):
    result, source = _gate(tmp_path, clock, {0: 100.0, 1: 100.0})
    (row,) = result.rows
    assert row.verdict.outcome == "unchanged" and result.passed
    assert len(set(row.blocks)) >= 2  # the error carried the process blocks it was given
    assert source.pairs == [(0, 1)]


def test_noise_past_the_budget_ends_undecided_within_it(tmp_path, clock):
    result, _ = _gate(
        tmp_path, clock, {0: 100.0, 1: 97.0}, budget=30.0, host={"sd": 0.3, "process": 0.0}
    )
    (row,) = result.rows
    assert row.verdict.outcome == "undecided" and result.exit_code() == 3
    assert row.verdict.rounds <= 30.0 / PACE + 1 and row.verdict.mde is not None
    assert result.exit_code("pass") == 0 and result.exit_code("fail") == 1


def test_skipped_configurations_are_never_a_pass_and_holm_sees_the_family(tmp_path, clock):
    stage = FakeStage(unavailable=["gone"], lacks=["gpu"])
    result, _ = _gate(
        tmp_path,
        clock,
        {0: 100.0, 1: 100.0},
        stage=stage,
        configurations=("mmap", "gone", "gpu", "lm-none"),
    )
    assert [r.configuration for r in result.rows] == ["mmap", "lm-none"]
    assert [name for name, _ in result.skipped] == ["gpu", "gone"]
    assert "build b0 cannot run gone" in dict(result.skipped)["gone"]  # named by its build
    assert ("gpu", "baseline") not in stage.started  # refused before any server started
    assert result.outcome == "undecided" and result.exit_code() == 3
    assert any(n.startswith("family: 3 row(s)") for n in result.notes)  # checked ones count
    assert all(r.verdict.outcome == "unchanged" for r in result.rows)


def test_an_undecided_rows_lean_the_family_saw_is_in_the_report(tmp_path, clock):
    """docs/guide/writing-tests.md promises the lean Holm's step-down saw in an undecided row
    (``verdicts.gate.holm`` writes it); the report printed none."""
    result, _ = _gate(tmp_path, clock, {0: 100.0, 1: 100.0})
    lean = "leans slower: Holm across 2 rows would reject at p 0.0052 <= 0.0056"
    result.rows[0] = dataclasses.replace(result.rows[0], family=lean)
    row = f"{result.rows[0].configuration}.{result.rows[0].workload.name}"
    assert f"note: {row}: {lean}" in gate_text(result)
    assert f"- note: {row}: {lean}" in gate_markdown(result)


def test_a_different_output_fails_the_gate_unless_allowed(tmp_path, clock):
    stage = FakeStage(tokens={0: (5, 6, 7), 1: (5, 9, 7)})
    result, _ = _gate(tmp_path, clock, {0: 100.0, 1: 100.0}, stage=stage)
    assert result.outcome == "different-output" and result.exit_code() == 1
    assert result.different[0].first_difference == 1
    allowed, _ = _gate(tmp_path, clock, {0: 100.0, 1: 100.0}, stage=stage, allow_different=True)
    assert allowed.passed


def _bisect(tmp_path, clock, speeds, state_dir=None):
    source = FakeSource(builds(dict(enumerate(speeds))), clock)
    session, profile = fake_session(tmp_path, source)
    said: list[str] = []
    result = run_bisect(
        session,
        profile,
        [BuildUnderTest(i) for i in range(len(speeds))],
        configurations=["mmap"],
        metric=Workload.parse("pp512"),
        state_dir=state_dir or tmp_path / "state",
        say=said.append,
    )
    return result, source, said


def test_bisect_finds_the_first_bad_build_through_the_gate(tmp_path, clock):
    speeds = [100.0, 100.0, 101.0, 99.0, 100.0, 80.0, 80.0, 81.0, 80.0]  # b5 is the first bad
    result, source, _ = _bisect(tmp_path, clock, speeds)
    assert result.outcome == "found" and result.boundaries == [("b4", "b5")]
    assert source.pairs[0] == (0, 8)  # the premise first
    assert len(result.steps) == 3  # of 7 builds between: log2, each against good and bad
    assert len(source.pairs) == 1 + 2 * 3


def test_bisect_resumes_without_measuring_again(tmp_path, clock):
    speeds = [100.0, 100.0, 100.0, 80.0, 80.0, 80.0]
    first, _, _ = _bisect(tmp_path, clock, speeds)
    again, source, said = _bisect(tmp_path, clock, speeds)
    assert source.pairs == [] and again.boundaries == first.boundaries == [("b2", "b3")]
    assert any("measured before" in line for line in said)


def test_bisect_stops_when_the_bad_build_is_not_slower(tmp_path, clock):
    result, source, _ = _bisect(tmp_path, clock, [100.0, 90.0, 100.0])
    assert result.outcome == "no-slowdown" and result.exit_code == 1
    assert source.pairs == [(0, 2)] and not result.steps


def test_a_stored_gate_replays_to_the_same_rows_and_verdicts(tmp_path, clock, capsys):
    """``moeperf gate --replay``: the gate's --json keeps its run record, and judging its
    stored rounds again through the same loop gives every row's verdict, interval, rounds and
    Holm p-values as the gate measured them, and the same exit status."""
    source = FakeSource(builds({0: 100.0, 1: 91.0}), clock)
    session, profile = fake_session(
        tmp_path, source, ("mmap", "gone", "lm-none"), stage=FakeStage(unavailable=["gone"])
    )
    measured = run_gate(session, profile, BuildUnderTest(0), BuildUnderTest(1))
    path = tmp_path / "gate.json"
    path.write_text(gate_json_text(measured, session.journal.freeze()))
    stored = read_gate(path)
    assert stored.rows == (("mmap", "pp512"), ("lm-none", "pp512"))
    source = StoredHost(stored.record, session.profiles, path=path, option="--replay")
    stage = StoredStage(stored.busy, stored.loadavg, stored.skipped)
    replayed = PerfSession(session.options, source=source, stage=stage)
    again = run_gate(
        replayed,
        replayed.profile("p"),
        BuildUnderTest(stored.baseline),
        BuildUnderTest(stored.candidate),
        configurations=["mmap", "lm-none", "gone"],
        margin=stored.margin,
        check_output=False,
    )
    assert replayed.servers is None  # nothing started
    assert [r.verdict.to_dict() for r in again.rows] == [r.verdict.to_dict() for r in measured.rows]
    assert [(r.p_slower, r.p_faster, r.blocks) for r in again.rows] == [
        (r.p_slower, r.p_faster, r.blocks) for r in measured.rows
    ]
    assert {r.verdict.outcome for r in measured.rows} >= {"slower"}
    assert again.skipped == measured.skipped and again.exit_code() == measured.exit_code()
    # the command: the same table's rows from the file alone
    toml = tmp_path / "moeperf.toml"
    code = main(["gate", "--replay", str(path), "--config", str(toml), "--profile", "p"])
    out = capsys.readouterr().out
    assert code == measured.exit_code()
    assert text_table(*gate_rows(measured)) in out  # every row and column as measured
    other = tmp_path / "other.toml"
    other.write_text('[profiles.q]\nmodel = "m.gguf"\n[profiles.q.configurations.mmap]\n')
    assert main(["gate", "--replay", str(path), "--config", str(other), "--profile", "q"]) == 2
    assert f"--replay {path}: mmap pp512" in capsys.readouterr().err  # the option it was named by


def test_a_replay_refuses_what_only_a_measuring_gate_uses(tmp_path, capsys):
    path = tmp_path / "gate.json"
    path.write_text('{"rows": [], "outcome": "passed"}')
    assert main(["gate", "--replay", str(path), "--baseline", "1", "--margin", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "--replay: --baseline, --margin shape a gate that measures" in err
    assert main(["gate", "--replay", str(path)]) == 2
    assert "of before gates kept their run record" in capsys.readouterr().err
    assert main(["gate", "--baseline", "1"]) == 2
    assert "--candidate: give both builds to gate (or --replay GATE.json)" in (
        capsys.readouterr().err
    )


def test_a_stored_bisect_replays_to_the_same_steps_and_boundaries(
    tmp_path, clock, capsys, monkeypatch
):
    """``moeperf bisect --replay``: the bisect's --json keeps each gate's run record, and its
    gates judged again from their stored rounds give the same premise, steps and boundaries,
    with no build or server, and nothing written under the bisect's state folder."""
    speeds = [100.0, 100.0, 101.0, 99.0, 100.0, 80.0, 80.0, 81.0, 80.0]  # b5 is the first bad
    measured, _, _ = _bisect(tmp_path, clock, speeds)
    path = tmp_path / "bisect.json"
    path.write_text(json.dumps(bisect_json(measured)))
    assert len(measured.records) == 1 + 2 * len(measured.steps)  # the premise and each step's
    monkeypatch.chdir(tmp_path)
    toml = tmp_path / "moeperf.toml"
    again = tmp_path / "again.json"
    args = ["bisect", "--replay", str(path), "--config", str(toml), "--profile", "p"]
    assert main([*args, "--json", str(again)]) == measured.exit_code == 0
    assert bisect_text(measured) in capsys.readouterr().out  # premise, steps, time, answer
    stored, replayed = json.loads(path.read_text()), json.loads(again.read_text())
    for key in ("premise", "steps", "boundaries", "outcome", "records"):
        assert replayed[key] == stored[key], key  # every Verdict.to_dict as measured
    assert not (tmp_path / ".moeperf").exists()


def test_a_bisect_replay_refuses_what_only_a_measuring_bisect_uses(tmp_path, capsys):
    path = tmp_path / "bisect.json"
    path.write_text('{"builds": ["b1", "b2"], "premise": [], "boundaries": []}')
    assert main(["bisect", "--replay", str(path), "--good", "1", "--metric", "tg64"]) == 2
    assert "--replay: --good, --metric shape a bisect that measures" in capsys.readouterr().err
    assert main(["bisect", "--replay", str(path)]) == 2
    assert "of before bisects kept their gates' run records" in capsys.readouterr().err
