"""``moeperf tune``'s race through the real decision loop on a fake host whose speed is a
function of the configuration's flags (threads, -ub): a clear winner, a leader overtaken, a tie
within the margin, a bad candidate dropped within its first three looks, a candidate that
cannot start skipped with why, an interrupted race resumed from its state file, and the
finding written as a profile that parses back and a test file whose claims the measured
intervals would decide."""

from __future__ import annotations

import tomllib

import pytest
from _fake_host import FakeSource, FakeStage, Host, fake_session

from pytest_moeperf.config.profiles import load_profiles
from pytest_moeperf.errors import ConfigError
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.run.source import Side
from pytest_moeperf.run.tune import (
    Knob,
    Race,
    RaceState,
    run_race,
    tuned_tests,
    write_finding,
)
from pytest_moeperf.verdicts.claims import Claim

THREADS = {None: 1.0, "1": 0.5, "3": 1.01, "4": 1.3, "8": 0.6}
UB = {None: 1.0, "64": 0.8, "512": 1.15}


def _flag(flags: tuple[str, ...], name: str) -> str | None:
    value = None
    for i, f in enumerate(flags[:-1]):
        if f == name:
            value = flags[i + 1]
    return value


def _speed(profile, side: Side) -> float:
    flags = side.configuration.flags
    return 100.0 * THREADS[_flag(flags, "-t")] * UB[_flag(flags, "-ub")]


def _race(tmp_path, clock, knobs, stage=None, say=None, seed=1, **toml):
    host = Host(_speed, lambda p, s: s.configuration.name, sd=0.03, process=0.005)
    source = FakeSource(host, clock, seed=seed)
    session, profile = fake_session(tmp_path, source, stage=stage, **toml)
    parsed = tuple(Knob.parse(k) for k in knobs)
    lines: list[str] = []
    race = Race(
        session,
        profile,
        profile.configuration("mmap"),
        parsed,
        Workload.parse("pp512"),
        0.05,
        180.0,
        RaceState(tmp_path / "state", {"knobs": list(knobs)}),
        say or lines.append,
    )
    return race, source, lines


def test_a_clear_winner_overtakes_the_leader_and_is_confirmed(tmp_path, clock):
    race, source, _ = _race(tmp_path, clock, ["-t=1,4", "-ub=64,512"])
    result = run_race(race)
    assert [(d.challenger, d.outcome) for d in result.duels] == [
        ("t1", "slower"),
        ("t4", "faster"),
        ("t4-ub64", "slower"),
        ("t4-ub512", "faster"),
    ]
    assert result.leader == "t4-ub512" and result.outcome == "winner"
    assert [d.leader for d in result.duels] == ["base", "base", "t4", "t4"]  # overtaken
    c = result.confirmation
    assert c is not None and (c.leader, c.challenger, c.outcome) == ("base", "t4-ub512", "faster")
    assert c.verdict.low <= 1.3 * 1.15 <= c.verdict.high
    # t1 lost by more than twice the margin (a dead end); t4-ub64's -20 % is one where its
    # interval lies wholly below 0.90, else a claim that it stays slower
    dead = [d.challenger for d in result.duels if d.dead_end(result.margin)]
    assert dead[0] == "t1" and set(dead) <= {"t1", "t4-ub64"}
    assert source.pairs[-1] == ("base", "t4-ub512")
    text = tuned_tests(result, "p-tuned", date="2026-12-02")
    assert 'config="t1",\n    slower_than="base"' in text
    if "t4-ub64" in dead:
        assert 'config="t4-ub64"' in text
    else:
        assert 'moeperf.check("t4-ub64.pp512 <= ' in text


def test_a_challenger_within_the_margin_is_a_tie_never_a_winner(tmp_path, clock):
    race, _, _ = _race(tmp_path, clock, ["-t=3"])
    result = run_race(race)
    (duel,) = result.duels
    assert duel.outcome not in ("faster", "slower")
    assert result.outcome == "tie" and result.leader == "base" and result.confirmation is None
    assert result.answer().startswith("tie: base leads, t3 not decided apart from it")


def test_an_oversubscribed_candidate_is_dropped_within_three_looks(tmp_path, clock):
    race, _, lines = _race(tmp_path, clock, ["-t=8"])
    (duel,) = run_race(race).duels
    rounds = [line for line in lines if ": round " in line]
    assert len(rounds) == duel.verdict.rounds  # a progress line a round
    assert rounds[0].startswith("  t8.pp512 / base.pp512: round 1 (")
    # the host is not calibrated: an early look at 4 rounds and each process block's
    # end (5, 10) hold the term at its prior bound; then whole blocks from the third
    looked = [line for line in lines if ": look at " in line]
    assert looked and ": look at 4 rounds" in looked[0]
    assert duel.outcome == "slower" and duel.dead_end(0.05)
    assert duel.verdict.rounds is not None and duel.verdict.rounds <= 25  # looks at 15, 20, 25


def test_a_candidate_that_cannot_start_is_skipped_with_why(tmp_path, clock):
    stage = FakeStage(unavailable=["t4"])
    race, _, _ = _race(tmp_path, clock, ["-t=4,1"], stage=stage)
    result = run_race(race)
    assert result.skipped == {"t4": "build None cannot run t4"}
    assert [d.challenger for d in result.duels] == ["t1"]


class Interrupt(Exception):
    pass


def test_an_interrupted_race_goes_on_where_it_stopped(tmp_path, clock):
    knobs = ["-t=1,4", "-ub=64,512"]

    def stop_after_two(line: str) -> None:
        if line.startswith("t4 / base"):
            raise Interrupt

    race, _, _ = _race(tmp_path, clock, knobs, say=stop_after_two)
    with pytest.raises(Interrupt):
        run_race(race)
    race, source, lines = _race(tmp_path, clock, knobs)
    result = run_race(race)
    assert result.leader == "t4-ub512"
    assert [line.split(":")[0] for line in lines[:2]] == ["t1 / base", "t4 / base"]
    assert all("from" in line for line in lines[:2])  # read back, not measured again
    assert ("base", "t1") not in source.pairs and ("base", "t4") not in source.pairs


def test_the_finding_is_a_profile_that_reads_back_as_raced_and_tests_it_can_decide(tmp_path, clock):
    race, _, _ = _race(
        tmp_path,
        clock,
        ["-t=1,4", "-ub=64,512"],
        keys='flags = ["-t", "8", "-c", "512"]\nenv = {A = "1"}',
        configuration_keys='flags = ["-lm", "none"]\nnuma = "isolate"',
    )
    result = run_race(race)
    output, tests = tmp_path / "out" / "moeperf.toml", tmp_path / "test_p_tuned.py"
    output.parent.mkdir()
    write_finding(race, result, "p-tuned", output, tests, date="2026-12-02")
    profile = load_profiles(output)["p-tuned"]
    tuned = profile.configuration("tuned")
    assert tuned.flags == ("-c", "512", "-lm", "none", "-t", "4", "-ub", "512")  # as raced
    assert tuned.env == {"A": "1"} and tuned.pinning.numa == "isolate"
    assert profile.configuration("t4-ub512").flags == tuned.flags
    assert profile.configuration("base").flags == ("-t", "8", "-c", "512", "-lm", "none")
    assert profile.model == str(tmp_path / "m.gguf")  # the new file lies elsewhere
    assert tomllib.loads(output.read_text())["profiles"]["p-tuned"]["workloads"] == ["pp512"]
    text = tests.read_text()
    compile(text, str(tests), "exec")
    claim = next(line for line in text.splitlines() if "tuned.pp512 >=" in line)
    factor = float(claim.split(">=")[1].split("*")[0])
    c = result.confirmation
    assert c is not None and factor <= c.verdict.low * 0.95 + 0.01
    Claim.parse(claim.split('"')[1])
    # what lost within twice the margin is a claim that it stays slower, the rest dead ends
    lost = [d for d in result.duels if d.outcome == "slower"]
    for d in lost:
        dead_end = d.dead_end(0.05)
        assert (f'config="{d.challenger}"' in text) == dead_end
        assert (f'moeperf.check("{d.challenger}.pp512 <= ' in text) == (not dead_end)
    assert not race.state.path.exists()  # written down: the next run races again
    with pytest.raises(ConfigError, match="profile 'p-tuned' exists already; choose another"):
        write_finding(race, result, "p-tuned", output, tmp_path / "t2.py", date="2026-12-02")


def test_the_confirmation_is_a_duel_of_its_own(tmp_path, clock):
    race, source, _ = _race(tmp_path, clock, ["-t=4"])
    result = run_race(race)
    assert result.duels[0].challenger == "t4" and result.confirmation is not None
    assert source.pairs == [("base", "t4"), ("base", "t4")]  # measured twice, not reused


def test_knob_values_are_names_a_claim_can_hold(tmp_path):
    knob = Knob.parse("-ot=exps=CPU,blk.1.ffn=CPU")
    assert [knob.label(v) for v in knob.values] == ["otexps_CPU", "otblk.1.ffn_CPU"]
    with pytest.raises(ConfigError, match="two values name one candidate"):
        Knob.parse("-ot=a/b,a_b")
    with pytest.raises(ConfigError, match="--knob=-t: give FLAG=V1,V2"):
        Knob.parse("-t")
    minus = Knob.parse("-t=-,4")  # "-" leaves a valued flag out, value and all
    base = race_config(("-t", "8", "-c", "512"))
    assert minus.apply(base, "-").flags == ("-c", "512")


def race_config(flags):
    from pytest_moeperf.config.profiles import Configuration, Pinning

    return Configuration(name="c", profile="p", flags=flags, pinning=Pinning())


def test_the_race_draws_each_duel_with_its_interval(tmp_path, clock):
    from pytest_moeperf.report.tune import race_markdown, race_text
    from pytest_moeperf.report.tune_plot import plot_race

    race, _, _ = _race(tmp_path, clock, ["-t=1,4", "-ub=64,512"])
    result = run_race(race)
    png = plot_race(result, "tune p.mmap", tmp_path / "race.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = race_text(result, 6)
    assert "t4-ub512" in text and "(dead end)" in text and "(leads)" in text
    assert "family: 6 duel(s), each judged at 0.83 %" in text
    assert race_markdown(result, 6, "Tuning").startswith("# Tuning\n\n## Evidence")


def test_a_value_that_is_the_leaders_own_is_not_raced(tmp_path, clock):
    race, source, _ = _race(
        tmp_path, clock, ["-t=8,4"], keys='flags = ["-t", "8", "-c", "512"]', configuration_keys=""
    )
    result = run_race(race)
    assert [d.challenger for d in result.duels] == ["t4"]  # -t 8 is the base itself
    assert ("base", "t8") not in source.pairs


def test_a_leader_that_cannot_run_stops_the_race_naming_it(tmp_path, clock):
    from pytest_moeperf.errors import MoeperfError

    race, _, _ = _race(tmp_path, clock, ["-t=4"], stage=FakeStage(unavailable=["base"]))
    with pytest.raises(MoeperfError, match="the leader base cannot run here"):
        run_race(race)
