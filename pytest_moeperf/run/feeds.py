"""The feeds of the live source: a verdict's rounds measured now.

A paired verdict's rounds are two samples back to back, in the order a seeded coin throws for
each round. Both servers are restarted after every *process block* of rounds, so that what
belongs to a process (where its pages and huge pages landed, which cores its threads got, its
private copy of the weights under ``-lm none``) is not read as a difference between the sides:
the interval then also carries the spread between process pairs (what the blocks show of it,
or the host's calibrated term pooled with that). The block's length is chosen where the
variance is and what a restart costs (Kalibera and Jones:
:func:`~pytest_moeperf.measure.dependence.rounds_per_process`, from the host's calibrated round
spread and process term, or the defaults), unless a profile or the gate sets it.
Sides whose servers do not fit in memory together are measured across restarts instead: each
round is two blocks of a fresh process each, a block's median the side's value (each round a
process block of its own).
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable

from ..config.profiles import Configuration, Profile
from ..defaults import PROCESS_TERM, ROUND_SPREAD
from ..errors import MoeperfError
from ..measure.dependence import rounds_per_process
from ..measure.measurement import Measurement
from ..measure.round import Round
from ..measure.workload import Workload
from ..store.record import VerdictSide
from ..verdicts.sequential import Coin
from .live_stage import LiveStage
from .source import BLOCK_SAMPLES, PAIRED_METHOD, RESTART_METHOD, Feed, Side, side_of

MAX_AUTO_BLOCK = 5
"""The longest automatic process block on a host not calibrated: its verdict's blocks are its
only evidence on the process term (its main looks come from the third block on, its t has as
many degrees of freedom as blocks less one), so restarts are not saved up into a few long
blocks. On a simulated ADR-0042 host (round SD 3 %, process term 1.5 %, 16 s a round, 120 s a
restart) blocks of 5 decided its claims 3 % beyond their bound more often than blocks of 10
(``benchmarks/decision_speed.py``), which is also about what Kalibera and Jones give there."""
WATCHED_ROUND = 0.5
"""The seconds a round must measure for its servers' idle CPUs to mark it (a request of a few
milliseconds is mostly the HTTP round trip: its CPUs idle between, not stopped)."""
MAX_CALIBRATED_BLOCK = 30
"""The longest automatic process block on a calibrated host (its term is known: a block is
only as long as restarts are dear)."""


Measure = Callable[[Profile, Configuration, Workload, int | None, str | None], Measurement]
"""The live host's :meth:`~pytest_moeperf.run.source.Host.measure` (profile, configuration,
workload, repetitions, build): what a live feed's rounds are taken with, on the servers of its
stage (restarted after a process block, held alive through the rounds)."""


class LivePairing(Feed):
    """Two sides measured now, back to back in the order a seeded coin throws for each round,
    both restarted after every process block; across restarts (a fresh, warmed-up process per
    side and round, its median the round's value) when their servers do not fit together."""

    def __init__(
        self,
        measure: Measure,
        stage: LiveStage,
        profile: Profile,
        a: Side,
        b: Side,
        label: str,
        *,
        block: int | None = None,
    ) -> None:
        self.measure, self.stage = measure, stage
        self.profile = profile
        self._sides = (a, b)
        # starts both servers; samples an earlier test took are kept, not paired
        self._got = [self._take(a, 1), self._take(b, 1)]
        if self._got[0].key == self._got[1].key:
            raise MoeperfError(f"{label}: both sides are the same measurement; name two")
        taken = list(zip(self._sides, self._got, strict=True))
        self._keys = [(profile.name, s.configuration.name, m.build) for s, m in taken]
        builds = [(s.configuration, m.build) for s, m in taken]
        # one server always fits beside itself
        self.restarts = self._keys[0] != self._keys[1] and not stage.launcher.fit_together(
            profile, builds
        )
        self._fixed = block is not None
        self.block = 0 if self.restarts else (block if block is not None else self._auto_block())
        """Rounds a process pair serves before both are restarted (0: never)."""
        self.coin: Coin = Coin()
        self._described()
        self._pair = 0
        """The process block the running pair of servers serves."""
        self._began = False
        """Whether a round was taken (the blocks are then fixed)."""

    def _described(self) -> None:
        self.process_block = 1 if self.restarts else self.block  # across restarts: every round
        self.method = RESTART_METHOD if self.restarts else PAIRED_METHOD
        if self.block:
            self.method = f"{PAIRED_METHOD} in process blocks of {self.block}"

    def size_blocks(self, round_spread: float, process: float, *, calibrated: bool) -> None:
        if self._fixed or self.restarts or self._began:
            return
        self.block = self._auto_block(round_spread, process, calibrated=calibrated)
        self._described()

    def _auto_block(
        self,
        round_spread: float = ROUND_SPREAD,
        process: float = PROCESS_TERM,
        *,
        calibrated: bool = False,
    ) -> int:
        """Rounds per process pair where the variance is and what a restart costs (both
        servers' load and a warmup sample each, against a round of a sample each):
        :func:`~pytest_moeperf.measure.dependence.rounds_per_process`; at most
        :data:`MAX_AUTO_BLOCK` on a host not calibrated, :data:`MAX_CALIBRATED_BLOCK` on one
        that is."""
        sample = max(m.conditions.measured_s / max(len(m.samples), 1) for m in self._got)
        load = max(m.conditions.server_ready_s or 0.0 for m in self._got)
        if sample <= 0:
            return 0
        most = MAX_CALIBRATED_BLOCK if calibrated else MAX_AUTO_BLOCK
        return rounds_per_process(2 * (load + sample), 2 * sample, round_spread, process, most=most)

    def _take(self, side: Side, n: int) -> Measurement:
        return self.measure(self.profile, side.configuration, side.workload, n, side.build)

    def take(self, index: int) -> Round:
        self._began = True
        block = index // self.block if self.block else 0
        if self.block and block != self._pair:  # a fresh process pair
            for side in self._sides:
                self.stage.launcher.restart(self.profile, side.configuration, side.build)
            self._pair = block
        first = self.coin.first(index)
        values = [0.0, 0.0]
        samples: list[tuple[int, ...]] = [(), ()]
        busy = measured = idle = 0.0
        for i in (0, 1) if first == "a" else (1, 0):
            side = self._sides[i]
            before = self._got[i]
            per_round = 1
            if self.restarts:  # a block: a fresh, warmed-up process and its median
                self.stage.launcher.restart(self.profile, side.configuration, side.build)
                per_round = BLOCK_SAMPLES
            self._got[i] = self._take(side, len(before.samples) + per_round)
            samples[i] = tuple(range(len(before.samples), len(self._got[i].samples)))
            values[i] = statistics.median(self._got[i].values[j] for j in samples[i])
            after, was = self._got[i].conditions, before.conditions
            busy += after.busy_s - was.busy_s
            idle += after.idle_s - was.idle_s
            measured += after.measured_s - was.measured_s
        share = busy / measured if measured > 0 else 0.0
        limit = self.stage.options.busy_limit
        return Round(
            values=(values[0], values[1]),
            samples=(samples[0], samples[1]),
            # across restarts every round is a fresh pair: a block of its own
            block=index if self.restarts else block,
            first=first,
            seconds=measured,
            busy=busy,
            idle=idle / measured if measured >= WATCHED_ROUND else 0.0,
            marked=f"host {100 * share:.0f} % busy with other work" if share > limit else None,
        )

    def measurements(self) -> tuple[Measurement, ...]:
        return tuple(self._got)

    def setup_seconds(self) -> float:
        return self.stage.journal.setup_seconds

    def sides(self) -> tuple[VerdictSide, ...]:
        return tuple(side_of(self.profile, m) for m in self._got)

    def holding(self) -> contextlib.AbstractContextManager[None]:
        return self.stage.pool.using([] if self.restarts else self._keys)


class LiveSeries(Feed):
    """One measurement's samples as rounds of one value, measured now beyond those it holds."""

    def __init__(
        self,
        measure: Measure,
        stage: LiveStage,
        profile: Profile,
        configuration: Configuration,
        workload: Workload,
    ) -> None:
        self.measure, self.stage = measure, stage
        self.profile = profile
        self.configuration = configuration
        self.workload = workload
        self._m = measure(profile, configuration, workload, None, None)
        self.ready = len(self._m.samples)

    def take(self, index: int) -> Round:
        if index >= len(self._m.samples):
            self._m = self.measure(self.profile, self.configuration, self.workload, index + 1, None)
        return Round((self._m.values[index],), ((index,),))

    def measurements(self) -> tuple[Measurement, ...]:
        return (self._m,)

    def setup_seconds(self) -> float:
        return self.stage.journal.setup_seconds

    def sides(self) -> tuple[VerdictSide, ...]:
        return (side_of(self.profile, self._m),)
