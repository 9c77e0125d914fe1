"""A verdict's process term from its own blocks: where the looks fall on a host not calibrated,
what one process pair can say, what a louder host does to its interval, where the budget's last
look lies, and what ``moeperf calibrate`` makes of blocks that hold no term."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from _fakes import Clock, FakeSource, Profile, W, config, measurement

from pytest_moeperf.measure.dependence import (
    DEFAULT_DEPENDENCE,
    Dependence,
    block_excess,
    robust_rows,
)
from pytest_moeperf.measure.round import Round
from pytest_moeperf.measure.student import t_sf
from pytest_moeperf.run import rounds as rounds_mod
from pytest_moeperf.run.rounds import decide_pair, until_decided
from pytest_moeperf.run.source import Feed, Side, StoredFeed, block_length
from pytest_moeperf.store.record import ROUNDS_KEY, VerdictRecord, VerdictSide
from pytest_moeperf.verdicts.calibration import noise_figure
from pytest_moeperf.verdicts.judge import ONE_PAIR
from pytest_moeperf.verdicts.levels import Design, per_look_alpha
from pytest_moeperf.verdicts.sequential import Plan, Rule

CALIBRATED = Dependence(process=0.01, process_df=40, round_spread=0.05)


class BlockFeed(Feed):
    """Rounds of log-SD *sd* at *ratio*, a fresh process pair (an offset of log-SD *process*)
    every *block* rounds (0: one pair for all); each round costs *step* seconds of *clock*,
    or *slow* seconds from round *after* on."""

    def __init__(
        self, clock: Clock, *, ratio: float = 1.0, sd: float = 0.02, process: float = 0.0,
        block: int = 5, step: float = 1.0, slow: float | None = None, after: int = 0,
        seed: int = 1,
    ) -> None:  # fmt: skip
        self.clock, self.ratio, self.sd, self.process = clock, ratio, sd, process
        self.process_block, self.step, self.slow, self.after = block, step, slow, after
        self.rng = random.Random(seed)
        self.values: list[list[float]] = [[], []]
        self._offset = 0.0
        self._block: int | None = None

    def take(self, index: int) -> Round | None:
        late = self.slow is not None and index >= self.after
        step = self.slow if late and self.slow is not None else self.step
        self.clock.now += step
        block = index // self.process_block if self.process_block else 0
        if block != self._block:
            self._offset = self.rng.gauss(0.0, self.process)
        self._block = block
        a = 500.0
        b = a * self.ratio * math.exp(self._offset + self.rng.gauss(0.0, self.sd))
        places = ((len(self.values[0]),), (len(self.values[1]),))
        self.values[0].append(a)
        self.values[1].append(b)
        return Round((a, b), places, block=block, seconds=step)

    def measurements(self) -> tuple:
        return (measurement("a", self.values[0]), measurement("b", self.values[1]))

    def sides(self) -> tuple[VerdictSide, ...]:
        return (VerdictSide("p", "a", "b1", "pp512"), VerdictSide("p", "b", "b1", "pp512"))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(rounds_mod.time, "monotonic", c)
    return c


def _decide(feed: Feed, rule: Rule, plan: Plan, budget: float = 180.0, busy_limit: float = 1.0):
    return decide_pair(
        FakeSource(feed),  # type: ignore[arg-type]
        Profile(),  # type: ignore[arg-type]
        rule,
        Side(config("a"), W),
        Side(config("b"), W),
        label="b / a",
        plan=plan,
        budget=budget,
        busy_limit=busy_limit,
    )


def test_a_host_not_calibrated_looks_at_whole_blocks_from_the_third():
    """Blocks of 10 in a budget of 61 rounds: the main looks at 30, 40, 50, 60 (the budget's
    end in whole blocks), early looks at 4 and each block's end before them; a calibrated
    host looks on the round schedule; every round a fresh pair (restarts) looks on the round
    schedule too."""
    plan = Plan(block=10).within(61)
    assert plan.blockwise and plan.main_looks == (30, 40, 50, 60) and plan.max_rounds == 60
    assert plan.early_looks == (4, 10, 20) and plan.looks == (4, 10, 20, 30, 40, 50, 60)
    assert plan.judged(57) == 50 and plan.judged(9) == 9  # not one whole block: all of it
    assert Plan(block=5).within(73).main_looks == (15, 20, 25, 30, 35, 45, 55, 70)
    # two blocks: no main look; the budget's end is an early look (the prior bound's)
    two = Plan(block=30).within(61)
    assert two.main_looks == () and two.early_looks == (4, 30, 60) and two.is_early(60)
    calibrated = Plan(block=10, dependence=CALIBRATED).within(61)
    assert not calibrated.blockwise and calibrated.main_looks[:3] == (6, 8, 10)
    assert calibrated.looks[:2] == (4, 6) and calibrated.looks[-1] == 61
    assert Plan(block=1).within(61).main_looks[:2] == (6, 8)
    assert block_length([0, 0, 0, 1, 1, 1, 2]) == 3 and block_length([0] * 5) == 0
    assert block_length([0, 1, 2]) == 1 and block_length([0, 0, 1, 2, 2, 2]) is None


def test_one_pair_on_a_host_not_calibrated_decides_only_a_large_change(clock):
    """Rounds of one process pair cannot show its offset: on a host not calibrated every look
    holds the process term at its prior bound (5 %), so a 2x change decides at the fourth round
    (the first early look) while a 3 % one spends the budget undecided; a stored plan of before
    early looks says one pair decides nothing, and why."""
    big = _decide(BlockFeed(clock, ratio=0.5, block=0), Rule("change"), Plan())
    assert big.verdict.outcome == "slower" and len(big.values[0]) == 4
    small = _decide(BlockFeed(clock, ratio=0.97, block=0), Rule("change"), Plan(), budget=30.0)
    assert small.verdict.outcome == "undecided" and small.verdict.reason is None
    assert small.verdict.high / small.verdict.low > math.exp(2 * 2.5 * 0.05)  # the bound's width
    old = Plan(early=False)
    one = _decide(BlockFeed(clock, ratio=0.5, block=0), Rule("change"), old)
    assert one.verdict.outcome == "undecided" and one.verdict.reason == ONE_PAIR
    assert len(one.values[0]) == old.first_look and one.verdict.mde is None
    assert "process term cannot be estimated" in one.verdict.explain()
    calibrated = Plan(dependence=CALIBRATED)
    sure = _decide(BlockFeed(clock, ratio=0.5, block=0), Rule("change"), calibrated)
    assert sure.verdict.outcome == "slower" and len(sure.values[0]) == 4


def test_a_louder_host_widens_its_own_interval():
    """Not calibrated: the blocks' own spread is the error, so offsets of 5 % widen it about as
    much as they should (blocks of 10, 6 blocks: 5 % / sqrt(6)), whatever a default says.
    Calibrated at 1 %: the blocks' evidence is pooled with the calibration's, so a host louder
    today widens the interval beyond the calibrated one."""
    rng = np.random.default_rng(4)
    blocks = [i // 10 for i in range(60)]
    quiet = rng.normal(0, 0.02, (2000, 60))
    loud = quiet + rng.normal(0, 0.05, (2000, 6))[:, blocks]
    se_quiet = robust_rows(quiet, blocks=blocks).se
    se_loud = robust_rows(loud, blocks=blocks).se
    truth = math.sqrt(0.02**2 / 60 + 0.05**2 / 6)
    assert np.median(se_quiet) < 0.5 * truth < np.median(se_loud)
    assert np.median(se_loud) == pytest.approx(truth, rel=0.25)
    on_calibration = robust_rows(quiet, blocks=blocks, dependence=CALIBRATED).se
    louder_today = robust_rows(loud, blocks=blocks, dependence=CALIBRATED).se
    assert np.median(louder_today) > 1.2 * np.median(on_calibration)


@pytest.mark.parametrize("ratio", [0.0, 1.0, 3.0])
def test_the_blocks_own_t_holds_its_rate_whatever_the_term(ratio):
    """Whole blocks (6 of 10 rounds), not calibrated: the t on the blocks' evidence rejects a
    true ratio at its nominal 5 % whether the process term is none, the round spread, or three
    times it (the level is simulated at none)."""
    rng = np.random.default_rng(5 + int(ratio))
    blocks = [i // 10 for i in range(60)]
    d = rng.normal(0, 1, (8000, 60)) + ratio * rng.normal(0, 1, (8000, 6))[:, blocks]
    got = robust_rows(d, blocks=blocks, dependence=DEFAULT_DEPENDENCE)
    assert set(got.df) == {5.0}
    p = 2 * t_sf(np.abs(got.mean / got.se), got.df)
    assert 0.04 <= float((p < 0.05).mean()) <= 0.065


def test_the_budgets_last_look_is_a_look_of_the_plan(clock):
    """The rounds slow down after the first look, so the budget runs out before the plan's last
    look: the rounds there are judged at a look of the plan's own, with the level calibrated
    for the looks taken (a larger one than the schedule to the old end had)."""
    seen: list[tuple[int, bool]] = []

    def judge(rounds, spent, plan):
        seen.append((len(rounds), spent))
        return plan, spent

    feed = BlockFeed(clock, step=1.0, slow=2.0, after=6, block=1)
    ran = until_decided(feed, judge, Plan(first_look=6, block=1), 60.0)
    n = len(ran.judged)
    assert seen[-1] == (n, True) and ran.plan.looks[-1] == n
    assert n not in Plan(first_look=6, block=1).within(6 + 54 + 1).looks  # not on the schedule
    before = Plan(first_look=6, block=1).within(61)
    assert per_look_alpha(ran.plan.design(), 0.05) >= per_look_alpha(before.design(), 0.05)
    assert ran.plan.design() == Design.of(ran.plan.main_looks, 0.2, DEFAULT_DEPENDENCE, 1)


def test_calibrate_pools_the_blocks_evidence_before_cutting_at_zero():
    """Twelve A/A gates of blocks with no process term: each gate's estimate cut at zero would
    read a term of about half the rounds' spread over the block; pooled first (by each gate's
    blocks less one), the term comes out near zero. With a real 3 % term it is found, and its
    degrees of freedom are the blocks'. A last block of one round counts as what it is."""
    rng = random.Random(8)

    def gates(term: float) -> tuple[list[list[float]], list[list[int]]]:
        rounds, blocks = [], []
        for _ in range(12):
            d, b = [], []
            for j in range(6):
                shift = rng.gauss(0, term)
                d += [shift + rng.gauss(0, 0.05) for _ in range(10)]
                b += [j] * 10
            d.append(rng.gauss(0, 0.05))  # the budget's last round: a block of one
            b.append(6)
            rounds.append(d)
            blocks.append(b)
        return rounds, blocks

    none, blocks = gates(0.0)
    each = [block_excess(d, b) for d, b in zip(none, blocks, strict=True)]
    cut = [max(0.0, got[0]) for got in each if got is not None]
    assert math.sqrt(sum(cut) / len(cut)) > 0.008  # the old reading: a term that is not there
    figure = noise_figure(["unchanged"] * 12, none, [0.03] * 12, build="b", date="d",
                          budget=180.0, blocks=blocks)  # fmt: skip
    assert figure.process is not None and figure.process < 0.006 and figure.process_df == 72
    loud, blocks = gates(0.03)
    figure = noise_figure(["undecided"] * 12, loud, [0.05] * 12, build="b", date="d",
                          budget=180.0, blocks=blocks)  # fmt: skip
    assert figure.process == pytest.approx(0.03, rel=0.3)


def test_a_calibration_whose_gates_reached_no_mde_says_so():
    """Gates of one process pair each decide nothing and reach no MDE: the figure says "not
    reached" (it had said "MDE 0.0 %", a resolution nothing measured), and survives a round
    trip through the stored file."""
    from pytest_moeperf.report.calibrate import _notes
    from pytest_moeperf.verdicts.calibration import NoiseFigure

    rounds = [[0.01, -0.02, 0.03, 0.0]] * 4
    figure = noise_figure(["undecided"] * 4, rounds, [], build="b", date="d", budget=90.0)
    assert math.isinf(figure.mde)
    assert "MDE not reached at 90 s" in figure.describe() and "0.0 %" not in figure.describe()
    assert any("no A/A gate reached an MDE" in n for n in _notes({"mmap.pp512": figure}, 0.05))
    stored = figure.to_dict()
    assert "mde" not in stored  # JSON and TOML have no infinity
    assert math.isinf(NoiseFigure.from_dict(stored).mde)


class BusyFirstFeed(BlockFeed):
    """A :class:`BlockFeed` whose first *busy* rounds taken ran beside other work: the host's
    watch marks them, and side b lost a random 0-60 % in each (what a minute of a co-tenant
    does to one side of a round on a 2-core host); *marks* false: the watch sees nothing."""

    def __init__(self, clock: Clock, *, busy: int, marks: bool = True, **kw) -> None:
        super().__init__(clock, **kw)
        self.busy, self.marks, self.taken = busy, marks, 0

    def take(self, index: int) -> Round | None:
        got = super().take(index)
        assert got is not None
        self.taken += 1
        if self.taken <= self.busy:
            self.values[1][-1] *= 1 - 0.6 * self.rng.random()
            why = "host 45 % busy with other work" if self.marks else None
            busy = 0.45 * got.seconds
            return replace(got, values=(got.values[0], self.values[1][-1]), busy=busy, marked=why)
        return got


def test_disturbed_rounds_are_set_aside_and_measured_again(clock):
    """A first minute of other work disturbs the first ten rounds: set aside by the rule the
    watch gives (fixed before any outcome), measured again within the budget, named in the
    record; the interval is of the rest, as narrow as on a quiet host, where taking them in
    widens it."""
    rule = Rule("claim", threshold=0.7, relation="<=")
    plan = Plan()
    kept = _decide(BusyFirstFeed(clock, busy=10, ratio=0.53, sd=0.03, block=5), rule, plan)
    blind = _decide(
        BusyFirstFeed(clock, busy=10, ratio=0.53, sd=0.03, block=5, marks=False), rule, plan
    )
    quiet = _decide(BlockFeed(clock, ratio=0.53, sd=0.03, block=5), rule, plan)
    assert kept.verdict.outcome == quiet.verdict.outcome == "holds"
    assert [i for i, _ in kept.aside] == list(range(10))
    assert {why for _, why in kept.aside} == {"host 45 % busy with other work"}
    record = kept.record("t", "b / a").to_dict()
    assert record[ROUNDS_KEY][0]["aside"] == "host 45 % busy with other work"
    assert [r.get("aside") for r in record[ROUNDS_KEY][9:11]] == [
        record[ROUNDS_KEY][0]["aside"],
        None,
    ]
    # the samples of a round set aside stay in the measurement: the next round is of the next
    assert record[ROUNDS_KEY][10]["samples"] == [[10], [10]]
    # the rest decide as a quiet host's rounds do; taken in, the disturbed ones cost rounds
    assert kept.verdict.rounds == quiet.verdict.rounds
    assert math.log(kept.verdict.high / kept.verdict.low) <= 1.2 * math.log(
        quiet.verdict.high / quiet.verdict.low
    )
    assert blind.aside == () and (blind.verdict.rounds or 0) > 3 * (kept.verdict.rounds or 0)


def test_a_host_busy_throughout_sets_aside_no_more_rounds_than_the_plan_holds(clock):
    """Every round marked busy (a co-tenant for the whole verdict) under a cap of 6 rounds: 6
    are set aside and measured again, then the host is busy, not disturbed: the rest are kept
    and judged (CI's gate of --max-rounds 3 on a host busy with the other xdist worker took 366
    rounds, setting aside until its budget was spent)."""
    rule = Rule("claim", threshold=0.7, relation="<=")
    got = _decide(
        BusyFirstFeed(clock, busy=10**6, ratio=0.53, sd=0.03, block=5),
        rule,
        Plan(first_look=6, max_rounds=6),
    )
    assert [i for i, _ in got.aside] == list(range(6))
    assert 2 <= (got.verdict.rounds or 0) <= 6


class BusyThenQuietFeed(BusyFirstFeed):
    """A :class:`BusyFirstFeed` as the live feed counts it: its measurements carry the busy
    minute (45 % of their time, set-aside rounds included), the kept rounds ran quiet."""

    def measurements(self) -> tuple:
        return (
            measurement("a", self.values[0], busy=0.45),
            measurement("b", self.values[1], busy=0.45),
        )


def test_a_replay_holds_the_busy_limit_to_the_kept_rounds_as_the_run_did(clock):
    """A verdict whose busy rounds were set aside was judged on quiet rounds; its stored record
    keeps that share, so a replay does not end it undecided for a busy host on the strength of
    rounds the verdict left out (CI: a gate's replay said "host 50 % busy" where the gate had
    judged its rows)."""
    rule = Rule("claim", threshold=0.7, relation="<=")
    live = _decide(
        BusyThenQuietFeed(clock, busy=10, ratio=0.53, sd=0.03, block=5), rule, Plan(),
        busy_limit=0.25,
    )  # fmt: skip
    assert live.verdict.outcome == "holds" and len(live.aside) == 10 and live.busy == 0.0
    stored = VerdictRecord.from_dict(live.record("t", "b / a").to_dict())
    assert stored.busy is None and stored.rounds == live.rounds  # the rounds say it

    def replay(rounds: Sequence[Round], busy: float | None = None):
        plan = Plan.from_dict(stored.plan or {})
        feed = StoredFeed((live.a, live.b), rounds, live.sides, plan=plan, busy=busy)
        return _decide(feed, rule, plan, busy_limit=0.25).verdict

    assert replay(stored.rounds).to_dict() == live.verdict.to_dict()
    unwatched = [replace(r, seconds=0.0, busy=0.0) for r in stored.rounds]  # format 2's rounds
    assert replay(unwatched, busy=0.0).to_dict() == live.verdict.to_dict()  # its kept_busy
    assert "busy" in (replay(unwatched).label or "")  # what the replay said before it was kept


class StoppedFirstFeed(BlockFeed):
    """A :class:`BlockFeed` whose first process pair was stopped a share of the time (a SIGSTOP
    duty, or a cgroup cap, on side b's server only): side b reads 15 % slow and its CPUs sat
    idle 18 % of each round where the other pairs' sat idle 3 %."""

    def take(self, index: int) -> Round | None:
        got = super().take(index)
        assert got is not None
        if got.block == 0:
            self.values[1][-1] *= 0.85
            return replace(got, values=(got.values[0], self.values[1][-1]), idle=0.18)
        return replace(got, idle=0.03)


def test_a_process_pair_stopped_for_its_block_is_marked_once_the_others_show_it(clock):
    """The watch marks rounds whose servers' CPUs sat idle beyond the verdict's own median (a
    rule over the idle shares alone, fixed before any outcome), at every look over all rounds:
    the first pair's block is set aside once the later pairs show what a round idles, and the
    claim is judged on the rest, as on the host undisturbed."""
    rule = Rule("change", margin=0.05)
    stopped = _decide(StoppedFirstFeed(clock, ratio=1.0, sd=0.02, block=5, seed=3), rule, Plan())
    quiet = _decide(BlockFeed(clock, ratio=1.0, sd=0.02, block=5, seed=3), rule, Plan())
    assert [i for i, _ in stopped.aside] == [0, 1, 2, 3, 4]
    assert "idle (the verdict's median 3 %): a server stopped or throttled" in stopped.aside[0][1]
    assert 0 not in stopped.blocks and stopped.verdict.outcome == quiet.verdict.outcome
    assert stopped.verdict.ratio == pytest.approx(1.0, abs=0.03)


def test_a_stored_plan_keeps_the_early_looks_it_was_judged_by():
    """A plan stores its first early look, so that a replay judges a stored verdict at the looks
    it was judged at: a record of before 2026-12-06 (early looks at 2 and 4 rounds, no
    ``first_early`` stored) is judged again with the look after 2 rounds; a record of now, at 4
    rounds first."""
    now = Plan(block=5).within(73)
    again = Plan.from_dict(now.to_dict())
    assert again == now and again.early_looks == (4, 5, 10)
    before = {k: v for k, v in now.to_dict().items() if k != "first_early"}
    assert Plan.from_dict(before).early_looks == (2, 4, 5, 10)
    unlooked = Plan.from_dict({**before, "prior_process": None})  # before the early looks: none
    assert unlooked.early_looks == () and unlooked.looks[0] == 15
    with pytest.raises(ValueError, match="first early look after 1 rounds"):
        Plan(first_early=1)
