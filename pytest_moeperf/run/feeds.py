"""The feeds of the live source: a verdict's rounds measured now.

A paired verdict's rounds are two samples back to back, in the order a seeded coin throws for
each round. Both servers are restarted after every *process block* of rounds, so that what
belongs to a process (where its pages and huge pages landed, which cores its threads got, its
private copy of the weights under ``-lm none``) is not read as a difference between the sides:
the interval then also carries the spread between process pairs (what the blocks show of it,
or the host's calibrated term pooled with that). The block's length is chosen so that
restarting costs about a third of the measuring time (at most :data:`MAX_AUTO_BLOCK` rounds),
unless a profile or the gate sets it.
Sides whose servers do not fit in memory together are measured across restarts instead: each
round is two blocks of a fresh process each, a block's median the side's value (each round a
process block of its own).
"""

from __future__ import annotations

import contextlib
import math
import statistics
from typing import Protocol

from ..errors import MoeperfError
from ..measure.measurement import Measurement
from ..measure.workload import Workload
from ..store.record import SideRounds
from ..verdicts.sequential import Coin
from .live_stage import LiveStage
from .profiles import Configuration, Profile
from .source import BLOCK_SAMPLES, PAIRED_METHOD, RESTART_METHOD, Feed, Side, side_rounds

RESTART_SHARE = 1 / 3
"""The share of the measuring time process blocks may spend restarting (server load and
warmup): what sets their length when nothing else does."""
MAX_AUTO_BLOCK = 10
"""The longest automatic process block: on a host not calibrated a verdict's blocks are its
only evidence on the process term (it looks from the third block on), so cheap restarts are
not saved up into a few long blocks."""


class Measuring(Protocol):
    """What a live feed asks of its source: measurements, and the servers they are taken on
    (restarted after a process block, held alive through the rounds)."""

    stage: LiveStage

    def measure(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        repetitions: int | None = None, build: str | None = None,
    ) -> Measurement: ...  # fmt: skip


class LivePairing(Feed):
    """Two sides measured now, back to back in the order a seeded coin throws for each round,
    both restarted after every process block; across restarts (a fresh, warmed-up process per
    side and round, its median the round's value) when their servers do not fit together."""

    def __init__(
        self,
        source: Measuring,
        profile: Profile,
        a: Side,
        b: Side,
        label: str,
        *,
        block: int | None = None,
    ) -> None:
        self.source = source
        self.profile = profile
        self._sides = (a, b)
        # starts both servers; samples an earlier test took are kept, not paired
        self._got = [self._take(a, 1), self._take(b, 1)]
        if self._got[0].key == self._got[1].key:
            raise MoeperfError(f"{label}: both sides are the same measurement; name two")
        self.start = (len(self._got[0].samples), len(self._got[1].samples))
        """Each side's first sample of this verdict's rounds (the earlier ones not paired)."""
        taken = list(zip(self._sides, self._got, strict=True))
        self._keys = [(profile.name, s.configuration.name, m.build) for s, m in taken]
        builds = [(s.configuration, m.build) for s, m in taken]
        # one server always fits beside itself
        self.restarts = self._keys[0] != self._keys[1] and not source.stage.launcher.fit_together(
            profile, builds
        )
        self.block = 0 if self.restarts else (block if block is not None else self._auto_block())
        """Rounds a process pair serves before both are restarted (0: never)."""
        self.process_block = 1 if self.restarts else self.block  # across restarts: every round
        self.blocks: list[int] = []
        self.method = RESTART_METHOD if self.restarts else PAIRED_METHOD
        if self.block:
            self.method = f"{PAIRED_METHOD} in process blocks of {self.block}"
        self.coin = Coin()

    def _auto_block(self) -> int:
        """Rounds per process pair so that restarting (both servers' load and warmup) takes
        about :data:`RESTART_SHARE` of the measuring time; at least 2, at most
        :data:`MAX_AUTO_BLOCK`."""
        sample = max(m.conditions.measured_s / max(len(m.samples), 1) for m in self._got)
        load = max(m.conditions.server_ready_s or 0.0 for m in self._got)
        if sample <= 0:
            return 0
        return min(MAX_AUTO_BLOCK, max(2, math.ceil((load + sample) / (RESTART_SHARE * sample))))

    def _take(self, side: Side, n: int) -> Measurement:
        return self.source.measure(self.profile, side.configuration, side.workload, n, side.build)

    def take(self, index: int) -> tuple[float, ...] | None:
        if self.block and index and index % self.block == 0:  # a fresh process pair
            for side in self._sides:
                self.source.stage.launcher.restart(self.profile, side.configuration, side.build)
        # across restarts every round is a fresh pair: a block of its own
        self.blocks.append(index if self.restarts else index // self.block if self.block else 0)
        values = [0.0, 0.0]
        for i in (0, 1) if self.first(index) == "a" else (1, 0):
            side = self._sides[i]
            if self.restarts:  # a block: a fresh, warmed-up process and its median
                self.source.stage.launcher.restart(self.profile, side.configuration, side.build)
                self._got[i] = self._take(side, len(self._got[i].samples) + BLOCK_SAMPLES)
                values[i] = statistics.median(self._got[i].values[-BLOCK_SAMPLES:])
            else:
                self._got[i] = self._take(side, self.start[i] + index + 1)
                values[i] = self._got[i].values[-1]
        return (values[0], values[1])

    def measurements(self) -> tuple[Measurement, ...]:
        return tuple(self._got)

    def setup_seconds(self) -> float:
        return self.source.stage.launcher.setup_seconds

    def sides(self) -> tuple[SideRounds, ...]:
        per_round = BLOCK_SAMPLES if self.restarts else 1
        return tuple(
            side_rounds(self.profile, m, first, per_round)
            for m, first in zip(self._got, self.start, strict=True)
        )

    def holding(self) -> contextlib.AbstractContextManager[None]:
        return self.source.stage.pool.using([] if self.restarts else self._keys)


class LiveSeries(Feed):
    """One measurement's samples as rounds of one value, measured now beyond those it holds."""

    def __init__(
        self, source: Measuring, profile: Profile, configuration: Configuration, workload: Workload
    ) -> None:
        self.source = source
        self.profile = profile
        self.configuration = configuration
        self.workload = workload
        self._m = source.measure(profile, configuration, workload)
        self.ready = len(self._m.samples)

    def take(self, index: int) -> tuple[float, ...] | None:
        if index >= len(self._m.samples):
            self._m = self.source.measure(
                self.profile, self.configuration, self.workload, index + 1
            )
        return (self._m.values[index],)

    def measurements(self) -> tuple[Measurement, ...]:
        return (self._m,)

    def setup_seconds(self) -> float:
        return self.source.stage.launcher.setup_seconds

    def sides(self) -> tuple[SideRounds, ...]:
        return (side_rounds(self.profile, self._m, 0),)
