"""The one decision loop, driven by fake sources: looks on the plan's schedule, the budget, the
order of a round's samples (A B, B A, ...), restart blocks, the busy and moved-host overrides,
stored figures, and a replayed verdict judged on the rounds that were measured."""

from __future__ import annotations

import json
import math
import random
import statistics
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _fakes import Clock, FakeFeed, FakeSource, Profile, W, config, measurement, stored_feed

from pytest_moeperf.config.profiles import Configuration
from pytest_moeperf.measure.measurement import Measurement
from pytest_moeperf.measure.round import Round
from pytest_moeperf.measure.stats import Figure
from pytest_moeperf.run import rounds as rounds_mod
from pytest_moeperf.run.feeds import LivePairing
from pytest_moeperf.run.rounds import decide_baseline, decide_pair, until_decided
from pytest_moeperf.run.source import BLOCK_SAMPLES, RESTART_METHOD, Feed, Side, StoredFeed
from pytest_moeperf.store.record import ROUNDS_KEY, RunRecord, VerdictSide
from pytest_moeperf.verdicts.baseline_check import judge_baseline
from pytest_moeperf.verdicts.sequential import Coin, Plan, Rule


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(rounds_mod.time, "monotonic", c)
    return c


@dataclass(frozen=True)
class Looked:
    """A decided pair and the round counts of its looks."""

    got: rounds_mod.Decided
    looks: list[int]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.got, name)


def decide(source: FakeSource, rule: Rule, **kw: Any) -> Any:
    looks: list[int] = []
    options = {"plan": Plan(first_look=6, max_rounds=200), "budget": 1e9, "busy_limit": 0.25}
    options.update(kw)
    got = decide_pair(
        source,  # type: ignore[arg-type]
        Profile(),  # type: ignore[arg-type]
        rule,
        Side(config("a"), W),
        Side(config("b"), W),
        label="b.pp512 / a.pp512",
        on_look=lambda v, t: looks.append(v.rounds or 0),
        **options,
    )
    return Looked(got, looks)


def test_looks_come_on_the_plans_schedule_until_decided(clock):
    got = decide(FakeSource(FakeFeed(1.0, clock)), Rule("change", margin=0.05))
    plan = Plan(first_look=6, max_rounds=200)
    assert got.verdict.outcome == "unchanged"
    assert got.looks == list(plan.looks[: len(got.looks)])  # every look on the schedule
    assert got.verdict.rounds == got.looks[-1] == len(got.values[0])
    assert got.verdict.method.startswith("paired rounds")


def test_a_clear_change_decides_at_the_first_look(clock):
    got = decide(FakeSource(FakeFeed(0.5, clock)), Rule("change", margin=0.05))
    assert got.verdict.outcome == "slower" and got.looks[-1] <= 4  # the early look at 4 rounds


def test_the_budget_ends_the_rounds_undecided(clock):
    """A change at the margin's edge cannot decide; the budget (40 s at 1 s a round) ends it
    within one round of being spent, and the verdict says so."""
    got = decide(FakeSource(FakeFeed(0.95, clock)), Rule("change", margin=0.05), budget=40.0)
    assert got.verdict.outcome in ("undecided", "slower", "small-slower")
    assert 40 <= len(got.values[0]) <= 41
    assert got.seconds == pytest.approx(len(got.values[0]), abs=1)


def test_a_budget_short_of_the_main_schedule_is_said_after_the_first_round(clock):
    """At 40 s a round (a 15 tok/s host's tg128 against a cache configuration), the 180 s
    budget reaches 5 rounds, short of the main schedule's first look at 6: the verdict says so
    after its first round (only its early look at 4 rounds can decide, a large change) and
    names the budget that would reach it, before it spends its 180 s."""
    source = FakeSource(FakeFeed(0.97, clock, step=40.0))
    got = decide(source, Rule("change", margin=0.05), budget=180.0)
    assert got.verdict.outcome == "undecided" and len(got.values[0]) <= 6
    [line] = source.notices
    assert line.startswith("b.pp512 / a.pp512: a round takes 40.0 s, so the budget of 180 s")
    assert "reaches about 5 rounds, short of the main schedule's first look (6 rounds)" in line
    assert "budget = 480 (or budget" in line
    # blocks of 5 on a host not calibrated: the main schedule starts at the third block
    blocky = FakeSource(BlockyFeed(0.97, clock, step=10.0))
    decide(blocky, Rule("change", margin=0.05), budget=100.0)
    [line] = blocky.notices
    assert "short of the main schedule's first look (15 rounds)" in line
    assert "prior bound of 5 %: a change within about" in line
    # a budget the main schedule fits in says nothing
    quiet = FakeSource(FakeFeed(0.5, clock, step=1.0))
    decide(quiet, Rule("change"), budget=180.0)
    assert quiet.notices == []


class OnePairFeed(FakeFeed):
    """A :class:`FakeFeed` whose rounds are all served by one process pair."""

    process_block = 0

    def take(self, index: int) -> Round | None:
        got = super().take(index)
        return None if got is None else replace(got, block=0)


def test_one_process_pair_says_no_budget_reaches_a_main_look(clock):
    """Rounds of one process pair on a host not calibrated: no budget buys a main look, so
    the notice names what does (a process block, a calibration), not a budget; CI's calibrate
    of --process-block 0 was told its 5 s "reaches about 47 rounds, short of the main
    schedule's first look (6 rounds)"."""
    source = FakeSource(OnePairFeed(0.97, clock, step=0.1))
    decide(source, Rule("change", margin=0.05), budget=5.0)
    [line] = source.notices
    assert "its rounds are one process pair (never restarted)" in line
    assert "give a process block" in line and "short of" not in line


class BlockyFeed(FakeFeed):
    """A :class:`FakeFeed` whose rounds are served in process blocks of 5."""

    process_block = 5

    def take(self, index: int) -> Round | None:
        got = super().take(index)
        return None if got is None else replace(got, block=index // 5)


def test_an_automatic_budget_is_set_by_the_first_rounds_pace(clock):
    """``budget = "auto"``: the first round's pace buys 40 rounds (at least the default
    budget, at most 30 minutes), said once; a change inside the margin then takes them."""
    source = FakeSource(FakeFeed(0.97, clock, step=10.0))
    got = decide(source, Rule("change", margin=0.05), budget=None)
    assert source.notices == [
        "b.pp512 / a.pp512: a round takes 10.0 s: an automatic budget of 400 s "
        "(40 rounds, at most 1800 s)"
    ]
    assert 18 < len(got.values[0]) <= 41  # past the 180 s a fixed default would stop at
    assert rounds_mod.auto_budget(0.5) == 180.0 and rounds_mod.auto_budget(100.0) == 1800.0


def test_the_round_cap_ends_the_rounds(clock):
    plan = Plan(first_look=6, max_rounds=12)
    got = decide(FakeSource(FakeFeed(0.95, clock)), Rule("change"), plan=plan)
    assert len(got.values[0]) == 12


def test_a_busy_host_never_decides(clock):
    feed = FakeFeed(0.5, clock)
    busy = measurement("b", [1.0], busy=0.6)
    feed.measurements = lambda: (measurement("a", feed.values[0]), busy)  # type: ignore[method-assign]
    got = decide(FakeSource(feed), Rule("change"))
    assert got.verdict.outcome == "undecided" and "host 60 % busy" in (got.verdict.reason or "")


def test_a_moved_host_decides_a_gate_row_but_not_a_claim(clock):
    moved = ["memory bandwidth on CPUs 0-1: 20 -> 10 GB/s (-50 %)"]
    claim = decide(
        FakeSource(FakeFeed(0.5, clock), moved), Rule("claim", threshold=0.7, relation="<=")
    )
    assert claim.verdict.outcome == "undecided" and "host changed" in (claim.verdict.reason or "")
    row = decide(FakeSource(FakeFeed(0.5, clock), moved), Rule("change"), host_decides=False)
    assert row.verdict.outcome == "slower"


def test_stored_figures_are_judged_once_unpaired(clock):
    feed = StoredFeed((), [], [])
    feed.unpaired = (Figure(100.0, 0.01), Figure(200.0, 0.01))
    feed.measurements = lambda: (  # type: ignore[method-assign]
        measurement("a", [100.0]),
        measurement("b", [200.0]),
    )
    got = decide(FakeSource(feed), Rule("claim", threshold=1.9, relation=">="))
    assert got.verdict.outcome == "holds" and got.verdict.rounds is None
    assert got.verdict.ratio == pytest.approx(2.0) and got.values == ((), ())


def test_rounds_held_already_are_judged_together_at_the_first_look(clock):
    """A stored feed holds 30 rounds: one look at 30, then no more can be had."""
    rng = random.Random(3)
    a = [500 * (1 + 0.02 * rng.gauss(0, 1)) for _ in range(30)]
    b = [v * 0.8 for v in a]
    feed = stored_feed((measurement("a", a), measurement("b", b)), [a, b], blocks=range(30))
    got = decide(FakeSource(feed), Rule("change"))
    assert got.looks == [30] and got.verdict.outcome == "slower"
    assert clock.now == 1000.0  # nothing was measured


def test_after_round_runs_only_for_rounds_measured_now(clock):
    seen: list[tuple[int, str, bool]] = []
    decide(
        FakeSource(FakeFeed(0.5, clock)),
        Rule("change"),
        after_round=lambda i, first, r: seen.append((i, first, r)),
    )
    # a feed without a coin: a first; decided at the early look (4 rounds)
    assert seen == [(i, "a", False) for i in range(len(seen))] and len(seen) == 4
    stored = stored_feed(
        (measurement("a", [1.0] * 8), measurement("b", [1.0] * 8)),
        [[500.0] * 8, [400.0] * 8],
        blocks=range(8),
    )
    seen.clear()
    decide(FakeSource(stored), Rule("change"), after_round=lambda *args: seen.append(args))
    assert seen == []


def test_a_baseline_check_takes_more_samples_while_undecided(clock):
    """One side against a stored baseline: rounds of one value, looks on the plan's schedule
    (the first at the samples held), undecided until the interval clears the limit."""
    rng = random.Random(5)
    values = [400 * (1 + 0.08 * rng.gauss(0, 1)) for _ in range(200)]

    class Series(Feed):
        ready = 3

        def take(self, index: int) -> Round | None:
            clock.now += 1
            return Round((values[index],), ((index,),))

        def measurements(self) -> tuple[Measurement, ...]:
            return (measurement("a", values[: self.taken]),)

        def sides(self) -> tuple[VerdictSide, ...]:
            return ()

    series = Series()
    series.taken = 0  # type: ignore[attr-defined]
    orig = series.take

    def take(index: int) -> Round | None:
        series.taken = index + 1  # type: ignore[attr-defined]
        return orig(index)

    series.take = take  # type: ignore[method-assign]
    calls: list[int] = []

    def judge(vals: list[float], confidence: float) -> Any:
        calls.append(len(vals))
        return judge_baseline(vals, 400.0, 0.05, confidence=confidence)

    checked = decide_baseline(
        FakeSource(series),  # type: ignore[arg-type]
        Profile(),  # type: ignore[arg-type]
        Side(config("a"), W),
        judge,
        plan=Plan(first_look=3, max_rounds=200),
        budget=1e9,
        busy_limit=0.25,
    )
    looks = Plan(first_look=3, max_rounds=200, early=False).looks  # no early looks: no blocks
    assert calls[0] == 3 and calls == list(looks[: len(calls)])
    assert checked.check.outcome == "passed"


# -- the live pairing: order of samples, restart blocks ---------------------------------------


class StubLive:
    """What a live pairing asks of its source: samples of a side (each a fresh value), restarts
    and whether two servers fit together."""

    def __init__(self, fit: bool) -> None:
        self.fit = fit
        self.calls: list[str] = []
        self.restarts: list[str] = []
        self.counts: dict[str, int] = {}
        self.stage = self.launcher = self.pool = self
        self.options = SimpleNamespace(busy_limit=0.25)

    def measure(
        self, profile: Any, configuration: Configuration, workload: Any, n: int, build: Any
    ) -> Measurement:
        name = configuration.name
        have = self.counts.get(name, 0)
        self.calls += [name] * (n - have)
        self.counts[name] = max(have, n)
        values = [100.0 + i for i in range(self.counts[name])]
        return measurement(name, values)

    def fit_together(self, profile: Any, sides: Any) -> bool:
        return self.fit

    def restart(self, profile: Any, configuration: Configuration, build: Any) -> None:
        self.restarts.append(configuration.name)

    def using(self, keys: Any) -> AbstractContextManager[None]:
        return nullcontext()


def test_live_rounds_follow_the_coin():
    live = StubLive(fit=True)
    pairing = LivePairing(
        live.measure, live, Profile(), Side(config("a"), W), Side(config("b"), W), "b / a"
    )  # type: ignore[arg-type]
    assert live.calls == ["a", "b"]  # both servers started, one sample each, not paired
    got = [pairing.take(i) for i in range(8)]
    assert pairing.coin is not None and len(pairing.coin.orders) == 8
    expected = [side for order in pairing.coin.orders for side in order]
    assert live.calls[2:] == expected  # each round in the order its coin threw
    assert [r.first for r in got] == [order[0] for order in pairing.coin.orders]
    # each round names its samples: from the second of each side (the first not paired)
    assert [r.samples for r in got] == [((i,), (i,)) for i in range(1, 9)]
    assert not pairing.restarts and [r.block for r in got] == [i // pairing.block for i in range(8)]


def test_sides_that_do_not_fit_together_are_measured_across_restarts():
    live = StubLive(fit=False)
    pairing = LivePairing(
        live.measure, live, Profile(), Side(config("a"), W), Side(config("b"), W), "b / a"
    )  # type: ignore[arg-type]
    pairing.coin = Coin(seed=1, orders=["ab", "ba"])  # these two rounds' orders, thrown
    got = [pairing.take(i) for i in range(2)]
    assert pairing.restarts and pairing.method == RESTART_METHOD
    assert live.restarts == ["a", "b", "b", "a"]  # a fresh process per block
    assert live.calls[2:] == ["a"] * 3 + ["b"] * 3 + ["b"] * 3 + ["a"] * 3
    # the block's median: samples 1..3 of a are 101, 102, 103
    assert got[0].values == pytest.approx((102.0, 102.0))
    assert got[0].samples == ((1, 2, 3), (1, 2, 3)) and got[1].samples == ((4, 5, 6),) * 2
    assert [r.block for r in got] == [0, 1] and [r.first for r in got] == ["a", "b"]


# -- the run record: a replayed verdict is the one that was measured -----------------------------


def _across_restarts() -> tuple[Measurement, Measurement, list[Round]]:
    """Two sides measured across restarts after samples an earlier test took: 8 rounds of a
    block of samples a side, the rounds as the live feed takes them."""
    rng = random.Random(11)
    earlier = [480.0, 520.0, 300.0]  # taken by an earlier test, never paired
    blocks_a, blocks_b = [], []
    for _ in range(8):
        host = 500 * (1 + 0.2 * rng.random())
        blocks_a += [host * (1 + 0.03 * rng.gauss(0, 1)) for _ in range(BLOCK_SAMPLES)]
        blocks_b += [0.9 * host * (1 + 0.03 * rng.gauss(0, 1)) for _ in range(BLOCK_SAMPLES)]
    ma = measurement("a", earlier + blocks_a)
    mb = measurement("b", earlier + blocks_b)
    rounds = []
    for k in range(8):  # across restarts every round is a fresh pair: a block of its own
        places = tuple(range(3 + 3 * k, 6 + 3 * k))
        values = tuple(statistics.median(m.values[i] for i in places) for m in (ma, mb))
        rounds.append(Round(values, (places, places), block=k, first="ab"[k % 2]))
    return ma, mb, rounds


SIDES = (VerdictSide("p", "a", "b1", "pp512"), VerdictSide("p", "b", "b1", "pp512"))


def test_a_replayed_verdict_is_judged_on_the_rounds_that_were_measured(clock):
    """A verdict measured across restarts, after samples an earlier test took: the record
    keeps its rounds as they were taken, and the stored feed gives exactly those back."""
    ma, mb, rounds = _across_restarts()
    live = decide(FakeSource(StoredFeed((ma, mb), rounds, SIDES, RESTART_METHOD)), Rule("change"))
    assert live.taken == RESTART_METHOD and live.rounds == tuple(rounds)
    record = RunRecord(
        fingerprint={},
        measurements=[ma, mb],
        verdicts=[live.got.record("t", "b.pp512 / a.pp512")],
    )
    back = RunRecord.from_dict(json.loads(record.json_text()))
    (stored,) = back.verdicts
    assert stored.sides == SIDES and stored.verdict == replace(live.verdict)
    assert stored.rounds == tuple(rounds)
    replayed = decide(
        FakeSource(StoredFeed(back.measurements, stored.rounds, stored.sides, stored.taken)),
        Rule("change"),
    )
    assert replayed.verdict == live.verdict
    # paired naively from the first sample, the same file reads another verdict
    n = len(ma.values)
    naive = decide(
        FakeSource(stored_feed((ma, mb), [ma.values[:n], mb.values[:n]], blocks=range(n))),
        Rule("change"),
    )
    assert (naive.verdict.ratio, naive.verdict.low) != (live.verdict.ratio, live.verdict.low)


def test_a_verdict_of_format_2_reads_as_the_rounds_it_was_judged_on(clock):
    """Format 2 said where a verdict's rounds lie (each side's first sample and samples a
    round, the judged rounds' blocks, the places of those set aside): read back, they are the
    rounds as format 3 keeps them, the set-aside one among them, and judge as they did."""
    ma, mb, rounds = _across_restarts()
    aside = "host 40 % busy with other work"
    taken = [replace(rounds[0], aside=aside), *rounds[1:]]  # the first measured again
    live = decide(FakeSource(StoredFeed((ma, mb), taken, SIDES, RESTART_METHOD)), Rule("change"))
    doc = RunRecord(fingerprint={}, measurements=[ma, mb]).to_dict()
    old = live.got.record("t", "b.pp512 / a.pp512").to_dict()
    del old[ROUNDS_KEY]
    old["sides"] = [{**s.to_dict(), "first": 3, "per_round": BLOCK_SAMPLES} for s in SIDES]
    old["blocks"] = [r.block for r in taken[1:]]
    old["set_aside"] = [{"round": 0, "why": aside}]
    doc.update(moeperf_results=2, verdicts=[old])
    (stored,) = RunRecord.from_dict(doc).verdicts
    assert [r.samples for r in stored.rounds] == [r.samples for r in taken]
    assert [r.values for r in stored.rounds] == [r.values for r in taken]
    assert [r.aside for r in stored.rounds] == [aside] + [None] * 7
    assert [r.block for r in stored.rounds] == [1, 1, 2, 3, 4, 5, 6, 7]  # on the next pair
    replayed = decide(
        FakeSource(StoredFeed((ma, mb), stored.rounds, SIDES, stored.taken)), Rule("change")
    )
    assert replayed.verdict == live.verdict and replayed.aside == ((0, aside),)


def test_until_decided_gives_the_judge_whether_more_can_be_had(clock):
    feed = stored_feed((), [[1.0, 2.0, 3.0]])
    seen: list[tuple[int, bool]] = []

    def judge(rounds: list[Round], spent: bool, plan: Plan) -> tuple[Any, bool]:
        seen.append((len(rounds), spent))
        return None, spent

    until_decided(feed, judge, Plan(first_look=2, max_rounds=50), 1e9)
    assert seen == [(3, True)]  # three stored rounds, then no more: judged once, spent


def test_a_stored_verdict_keeps_the_host_moves_it_saw_not_those_of_the_whole_run(clock):
    """A run whose host moved late: verdicts before the move decided, and replayed they
    decide again; only a file that does not say (format 1) gets the run's moves for all."""
    a = [500.0 * (1 + 0.01 * (i % 3)) for i in range(10)]
    b = [v * 0.5 for v in a]
    ms = (measurement("a", a), measurement("b", b))
    late = ["memory bandwidth on CPUs 0-1: 17 -> 14 GB/s (-18 %)"]
    rule = Rule("claim", threshold=0.7, relation="<=")
    feed = stored_feed(ms, [a, b], moved=(), blocks=range(10))
    before = decide(FakeSource(feed, late), rule)
    assert before.verdict.outcome == "holds" and before.moved == ()
    unknown = decide(FakeSource(stored_feed(ms, [a, b], blocks=range(10)), late), rule)
    assert unknown.verdict.outcome == "undecided" and unknown.moved == tuple(late)


def test_process_blocks_restart_both_servers_and_their_spread_widens_the_interval():
    from pytest_moeperf.measure.dependence import DEFAULT_DEPENDENCE, Dependence, block_excess
    from pytest_moeperf.measure.stats import paired_interval
    from pytest_moeperf.measure.student import trimmed_t_rows

    live = StubLive(fit=True)
    side_a, side_b = Side(config("a"), W), Side(config("b"), W)
    pairing = LivePairing(live.measure, live, Profile(), side_a, side_b, "b / a", block=3)  # type: ignore[arg-type]
    got = [pairing.take(i) for i in range(7)]
    assert live.restarts == ["a", "b", "a", "b"]  # before rounds 3 and 6: fresh pairs
    assert [r.block for r in got] == [0, 0, 0, 1, 1, 1, 2]
    assert "process blocks of 3" in pairing.method
    # blocks that differ by more than their rounds do widen the interval
    rng = random.Random(2)
    d, blocks = [], []
    for j in range(8):
        shift = rng.gauss(0, 0.05)  # a process pair's own term
        d += [shift + rng.gauss(0, 0.01) for _ in range(5)]
        blocks += [j] * 5
    shown = block_excess(d, blocks)
    assert shown is not None and shown[0] > 0.03**2
    assert block_excess(d, [0] * len(d)) is None  # one pair: nothing to tell it by
    a = [100.0] * len(d)
    b = [100.0 * math.exp(x) for x in d]
    _, yuen, _ = trimmed_t_rows(np.asarray([d]), 0.2)  # as if the rounds were independent
    blocked = paired_interval(a, b, blocks=blocks, dependence=DEFAULT_DEPENDENCE)
    assert blocked.se > 1.5 * float(yuen[0])
    assert blocked.design_effect > 3 and blocked.df == 7  # the blocks' evidence: 8 less one
    # one pair for every round on a calibrated host: its offset is one draw of the host's
    # process term, and no number of rounds narrows the interval below it
    term = Dependence(process=0.02, process_df=40)
    steady = [100.0 * math.exp(0.001 * (i % 3)) for i in range(200)]
    one = paired_interval([100.0] * 200, steady, dependence=term, min_rel_spread=0.0)
    assert one.se >= 0.02 * math.sqrt(1 - 1 / 200)
