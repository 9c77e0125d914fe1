"""Fakes of the decision loop's parts, shared by the unit tests that drive it: a profile and
configurations by name, measurements of given values, a clock the loop reads, a feed whose side
b runs at a ratio of side a, and a source that hands out that feed."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_moeperf.config.profiles import Configuration, Pinning
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.round import Round
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.run.source import Feed, Side, StoredFeed, paired_in_order
from pytest_moeperf.store.record import VerdictSide

W = Workload.parse("pp512")


@dataclass
class Profile:
    name: str = "p"


def config(name: str) -> Configuration:
    return Configuration(name=name, profile="p", flags=(), pinning=Pinning())


def measurement(name: str, values: Sequence[float], busy: float = 0.0) -> Measurement:
    samples = tuple(Sample(512, 512_000 / v) for v in values)
    told = Conditions(profile="p", measured_s=10.0, busy_s=10.0 * busy, probe_cpus="0-1")
    return Measurement(name, "b1", W, samples, told)


class Clock:
    """time.monotonic for the loop: each round costs *step* seconds."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeFeed(Feed):
    """Side b runs at *ratio* of side a, with multiplicative noise; each round costs time and
    is served by a fresh pair of processes (a process block of its own), as across restarts."""

    process_block = 1

    def __init__(self, ratio: float, clock: Clock, *, step: float = 1.0, seed: int = 1) -> None:
        self.ratio = ratio
        self.clock = clock
        self.step = step
        self.rng = random.Random(seed)
        self.values: list[list[float]] = [[], []]

    def take(self, index: int) -> Round | None:
        self.clock.now += self.step
        host = 500.0 * (1 + 0.3 * self.rng.random())  # a phase both sides of a round share
        a = host * (1 + self.rng.gauss(0, 0.02))
        b = host * self.ratio * (1 + self.rng.gauss(0, 0.02))
        places = ((len(self.values[0]),), (len(self.values[1]),))
        self.values[0].append(a)
        self.values[1].append(b)
        return Round((a, b), places, block=index)

    def measurements(self) -> tuple[Measurement, ...]:
        return (measurement("a", self.values[0]), measurement("b", self.values[1]))

    def sides(self) -> tuple[VerdictSide, ...]:
        return (VerdictSide("p", "a", "b1", "pp512"), VerdictSide("p", "b", "b1", "pp512"))


@dataclass
class FakeSource:
    """A source whose pairs are :class:`FakeFeed`s (or a given feed), whose host moved or not."""

    feed: Feed
    moved: list[str] = field(default_factory=list)
    asked: list[tuple[str, str]] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def notice(self, line: str) -> None:
        self.notices.append(line)

    def pair(self, profile: Any, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        self.asked.append((label, relation))
        return self.feed

    def series(self, profile: Any, configuration: Any, workload: Any) -> Feed:
        return self.feed

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        return list(self.moved)


def stored_feed(
    measurements: Sequence[Measurement],
    values: Sequence[Sequence[float]],
    sides: Sequence[VerdictSide] = (),
    *,
    blocks: Iterable[int] = (),
    **kw: Any,
) -> StoredFeed:
    """A stored feed of rounds of these per-side *values* (the *i*-th of each the *i*-th
    round, each its sample *i*), in these process *blocks* (default: one pair)."""
    rounds = paired_in_order(values)
    labels = list(blocks) or [0] * len(rounds)
    return StoredFeed(
        measurements,
        [replace(r, block=b) for r, b in zip(rounds, labels, strict=False)],
        sides,
        **kw,
    )
