"""A fake live host for the unit tests that drive the gate, bisect and tune through the real
decision loop: a clock the loop reads, sides whose speeds a function of the side gives, rounds
with seeded noise and a process offset a block, a session's source, and the stage a gate asks
of the host (servers that start or cannot, a check that refuses, the guard's tokens)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_moeperf.config.profiles import Configuration, HostLacks, Profile
from pytest_moeperf.errors import Unavailable
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.round import Round
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.run import rounds as rounds_mod
from pytest_moeperf.run.session import Options, PerfSession
from pytest_moeperf.run.source import PAIRED_METHOD, Feed, Side
from pytest_moeperf.run.source import Host as RunHost
from pytest_moeperf.store.record import VerdictSide
from pytest_moeperf.verdicts.sequential import Coin

PACE = 2.5
"""Seconds of the fake clock a round takes."""
BLOCK = 5
"""Rounds a process pair serves before the fake restarts both (as the embedded host's
automatic blocks do: a few rounds each)."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The loop's clock (``time.monotonic`` as the rounds module sees it), moved by rounds."""
    c = Clock()
    monkeypatch.setattr(rounds_mod.time, "monotonic", c)
    return c


class Host:
    """What the fake host knows: each side's speed (tok/s) and what names it, the round noise
    and the process term (log-SDs)."""

    def __init__(
        self,
        speed: Callable[[Profile, Side], float],
        key: Callable[[Profile, Side], Any],
        sd: float = 0.03,
        process: float = 0.01,
    ) -> None:
        self.speed, self.key, self.sd, self.process = speed, key, sd, process


def builds(speeds: dict[int, float], **noise: float) -> Host:
    """A host where each build (a gate's side, by its number) runs at its speed."""

    def target(profile: Profile, side: Side) -> int:
        return int(profile.builds[side.build or ""])

    return Host(lambda p, s: speeds[target(p, s)], target, **noise)


class FakeFeed(Feed):
    """Paired rounds of two sides: each round one value a side, a process offset a block."""

    def __init__(
        self,
        host: Host,
        speeds: tuple[float, float],
        rng: random.Random,
        clock: Clock,
        keys: Sequence[tuple[str, str, str, str]] = (),
        taken: dict[Any, Measurement] | None = None,
    ) -> None:
        self.host, self.speeds, self.rng, self.clock = host, speeds, rng, clock
        self.taken = taken
        self.keys = list(keys) or [("p", "mmap", f"s{i}", "pp512") for i in range(2)]
        """(profile, configuration, build, workload) of each side."""
        self.values: list[list[float]] = [[], []]
        self._block: int | None = None
        self.process_block = BLOCK
        self.coin = Coin(seed=rng.randrange(2**32))
        self.method = f"{PAIRED_METHOD} in process blocks of {BLOCK}"
        self._offsets = (0.0, 0.0)

    def take(self, index: int) -> Round | None:
        self.clock.now += PACE
        block = index // BLOCK
        if block != self._block:
            self._offsets = (
                self.rng.gauss(0.0, self.host.process),
                self.rng.gauss(0.0, self.host.process),
            )
        self._block = block
        places = ((len(self.values[0]),), (len(self.values[1]),))
        got = []
        for i, speed in enumerate(self.speeds):
            noise = self._offsets[i] + self.rng.gauss(0.0, self.host.sd)
            tokens = Workload.parse(self.keys[i][3]).tokens
            # the value as a stored sample gives it back, so a replay judges the same rounds
            got.append(Sample(tokens, 1000.0 * tokens / (speed * math.exp(noise))).tok_per_s)
            self.values[i].append(got[-1])
        return Round(tuple(got), places, block=block, first=self.coin.first(index))

    def measurements(self) -> tuple[Measurement, ...]:
        got = tuple(_measurement(k, v) for k, v in zip(self.keys, self.values, strict=True))
        if self.taken is not None:  # what a session's source holds, for its run record
            self.taken.update(zip(self.keys, got, strict=True))
        return got

    def sides(self) -> tuple[VerdictSide, ...]:
        return tuple(VerdictSide(*k) for k in self.keys)


def _measurement(key: tuple[str, str, str, str], values: Sequence[float]) -> Measurement:
    profile, configuration, build, workload = key
    w = Workload.parse(workload)
    samples = tuple(Sample(w.tokens, 1000.0 * w.tokens / v) for v in values)
    told = Conditions(profile=profile, measured_s=PACE * len(values), probe_cpus="0-1")
    return Measurement(configuration, build, w, samples, told)


class FakeSource(RunHost):
    """The session's source: rounds of :class:`FakeFeed`, a host that stays where it is."""

    def __init__(self, host: Host, clock: Clock, seed: int = 1) -> None:
        super().__init__()
        self.fake, self.clock, self.rng = host, clock, random.Random(seed)
        self.pairs: list[tuple[Any, Any]] = []
        """Each pair asked, by its sides' keys (:attr:`Host.key`)."""

    def measure(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        repetitions: int | None = None, build: str | None = None,
    ) -> Measurement:  # fmt: skip
        raise AssertionError("the gate measures in rounds only")

    def pair(self, profile: Profile, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        self.pairs.append((self.fake.key(profile, a), self.fake.key(profile, b)))
        speeds = (self.fake.speed(profile, a), self.fake.speed(profile, b))
        keys = [
            (profile.name, s.configuration.name, s.build or "", s.workload.name) for s in (a, b)
        ]
        return FakeFeed(self.fake, speeds, self.rng, self.clock, keys, self.measurements)

    def series(self, profile: Profile, configuration: Configuration, workload: Workload) -> Feed:
        raise AssertionError("the gate checks no baseline")

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        return []

    def fingerprint(self, profile: Profile, label: str | None = None) -> dict[str, Any]:
        return {"cpu_model": "fake", "cpus": 2}


class FakeStage:
    """The host beside the rounds: servers that start unless a configuration is listed as
    unavailable, a check that refuses what the host lacks, the guard's tokens per build."""

    def __init__(
        self,
        unavailable: Sequence[str] = (),
        lacks: Sequence[str] = (),
        tokens: dict[int, tuple[int, ...]] | None = None,
    ) -> None:
        self.unavailable, self.lacks, self.tokens = set(unavailable), set(lacks), tokens or {}
        self.started: list[tuple[str, str]] = []
        self.stops = 0

    def check(
        self, profile: Profile, configurations: Sequence[Configuration], labels: Sequence[str]
    ) -> None:
        for c in configurations:
            if c.name in self.lacks:
                raise HostLacks(f"{c.name}: this host has no GPU")

    def forget(self, profile: str, labels: Sequence[str]) -> None:
        pass

    def start(self, profile: Profile, configuration: Configuration, label: str | None) -> None:
        if configuration.name in self.unavailable:
            raise Unavailable(f"build {label} cannot run {configuration.name}")
        self.started.append((configuration.name, str(label)))

    def stop_servers(self, keep: Callable[[tuple[str, str, str]], bool] | None = None) -> None:
        self.stops += 1

    def greedy(self, profile: Profile, configuration: Configuration, label: str) -> tuple[int, ...]:
        return self.tokens.get(int(profile.builds[label]), (1, 2, 3))

    def host_load(self, seconds: float) -> tuple[float, tuple[float, float, float]]:
        return 0.0, (0.0, 0.0, 0.0)

    def bench_sample(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        label: str | None = None,
    ) -> float:  # fmt: skip
        raise AssertionError("no --attribute here")


def fake_session(
    tmp_path: Path,
    source: FakeSource,
    configurations: Sequence[str] = ("mmap",),
    *,
    keys: str = "",
    configuration_keys: str = "",
    stage: Any = None,
) -> tuple[PerfSession, Profile]:
    """A session of profile ``p`` (its *configurations*, workload pp512, and the TOML lines
    *keys* and, in each configuration, *configuration_keys*) on *source*, its stage *stage*
    (default a :class:`FakeStage`)."""
    toml = tmp_path / "moeperf.toml"
    toml.write_text(
        f'[profiles.p]\nmodel = "m.gguf"\nworkloads = ["pp512"]\nbudget = 180\n{keys}\n'
        + "".join(
            f"[profiles.p.configurations.{c}]\n{configuration_keys}\n" for c in configurations
        )
    )
    options = Options(profile="p", config_file=toml, rootdir=tmp_path, results_dir=tmp_path)
    session = PerfSession(options, source=source, stage=stage or FakeStage())
    return session, session.profile("p")
