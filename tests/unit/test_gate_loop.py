"""The gate and bisect, run through the real decision loop on a fake source: each build runs at
a known speed, each round costs 2.5 s of a fake clock and carries seeded noise, and every 10
rounds the process pair restarts with an offset of its own. Nothing of the gate is replaced:
its up-front check, its skipped rows, the loop's looks and budget, Holm, the correctness guard,
and bisect's steps, premise and state file all run as ``moeperf gate`` and ``moeperf bisect``
run them (the live host's servers are what the fake stands in for)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_moeperf.errors import Unavailable
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.run import rounds as rounds_mod
from pytest_moeperf.run.bisect import run_bisect
from pytest_moeperf.run.gate import BuildUnderTest, run_gate
from pytest_moeperf.run.profiles import Configuration, HostLacks, Profile
from pytest_moeperf.run.session import Options, PerfSession
from pytest_moeperf.run.source import PAIRED_METHOD, Feed, RunSource, Side
from pytest_moeperf.store.record import SideRounds
from pytest_moeperf.verdicts.sequential import Coin

PACE = 2.5
"""Seconds of the fake clock a round takes."""
BLOCK = 10
"""Rounds a process pair serves before the fake restarts both."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The loop's clock (``time.monotonic`` as the rounds module sees it), moved by rounds."""
    c = Clock()
    monkeypatch.setattr(rounds_mod.time, "monotonic", c)
    return c


class Builds:
    """What the fake host knows: each build's speed (tok/s), the round noise and the process
    term (log-SDs)."""

    def __init__(self, speeds: dict[int, float], sd: float = 0.03, process: float = 0.01) -> None:
        self.speeds, self.sd, self.process = speeds, sd, process


class FakeFeed(Feed):
    """Paired rounds of two builds: each round one value a side, a process offset a block."""

    def __init__(self, host: Builds, targets: tuple[int, int], rng: random.Random, clock: Clock):
        self.host, self.targets, self.rng, self.clock = host, targets, rng, clock
        self.values: list[list[float]] = [[], []]
        self.blocks = []
        self.coin = Coin(seed=rng.randrange(2**32))
        self.method = f"{PAIRED_METHOD} in process blocks of {BLOCK}"
        self._offsets = (0.0, 0.0)

    def take(self, index: int) -> tuple[float, ...] | None:
        self.clock.now += PACE
        block = index // BLOCK
        if not self.blocks or block != self.blocks[-1]:
            self._offsets = (
                self.rng.gauss(0.0, self.host.process),
                self.rng.gauss(0.0, self.host.process),
            )
        self.blocks.append(block)
        got = []
        for i, target in enumerate(self.targets):
            noise = self._offsets[i] + self.rng.gauss(0.0, self.host.sd)
            got.append(self.host.speeds[target] * math.exp(noise))
            self.values[i].append(got[-1])
        return tuple(got)

    def measurements(self) -> tuple[Measurement, ...]:
        return tuple(
            _measurement(f"b{t}", v) for t, v in zip(self.targets, self.values, strict=True)
        )

    def sides(self) -> tuple[SideRounds, ...]:
        return tuple(SideRounds("p", "mmap", f"b{t}", "pp512", 0) for t in self.targets)


def _measurement(build: str, values: Sequence[float]) -> Measurement:
    samples = tuple(Sample(512, 512.0 / v) for v in values)
    told = Conditions(profile="p", measured_s=PACE * len(values), probe_cpus="0-1")
    return Measurement("mmap", build, Workload.parse("pp512"), samples, told)


class FakeSource(RunSource):
    """The session's source: rounds of :class:`FakeFeed`, a host that stays where it is."""

    def __init__(self, host: Builds, clock: Clock, seed: int = 1) -> None:
        super().__init__()
        self.host_builds, self.clock, self.rng = host, clock, random.Random(seed)
        self.pairs: list[tuple[int, int]] = []

    def measure(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        repetitions: int | None = None, build: str | None = None,
    ) -> Measurement:  # fmt: skip
        raise AssertionError("the gate measures in rounds only")

    def pair(self, profile: Profile, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        targets = (int(profile.builds[a.build or ""]), int(profile.builds[b.build or ""]))
        self.pairs.append(targets)
        return FakeFeed(self.host_builds, targets, self.rng, self.clock)

    def series(self, profile: Profile, configuration: Configuration, workload: Workload) -> Feed:
        raise AssertionError("the gate checks no baseline")

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        return []

    def fingerprint(self, profile: Profile, label: str | None = None) -> dict[str, Any]:
        return {"cpu_model": "fake", "cpus": 2}

    @property
    def host_changes(self) -> list[str]:
        return []


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

    def start(self, profile: Profile, configuration: Configuration, label: str) -> None:
        if configuration.name in self.unavailable:
            raise Unavailable(f"build {label} cannot run {configuration.name}")
        self.started.append((configuration.name, label))

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


def _session(tmp_path: Path, source: FakeSource, configurations: Sequence[str] = ("mmap",)):
    toml = tmp_path / "moeperf.toml"
    toml.write_text(
        '[profiles.p]\nmodel = "m.gguf"\nworkloads = ["pp512"]\nbudget = 180\n'
        + "".join(f"[profiles.p.configurations.{c}]\n" for c in configurations)
    )
    options = Options(profile="p", config_file=toml, rootdir=tmp_path, results_dir=tmp_path)
    session = PerfSession(options, source=source)
    return session, session.profile("p")


def _gate(tmp_path, clock, speeds, stage=None, configurations=("mmap",), **kw):
    source = FakeSource(Builds(speeds, **kw.pop("host", {})), clock)
    session, profile = _session(tmp_path, source, configurations)
    result = run_gate(
        session, stage or FakeStage(), profile, BuildUnderTest(0), BuildUnderTest(1), **kw
    )
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


def test_a_different_output_fails_the_gate_unless_allowed(tmp_path, clock):
    stage = FakeStage(tokens={0: (5, 6, 7), 1: (5, 9, 7)})
    result, _ = _gate(tmp_path, clock, {0: 100.0, 1: 100.0}, stage=stage)
    assert result.outcome == "different-output" and result.exit_code() == 1
    assert result.different[0].first_difference == 1
    allowed, _ = _gate(tmp_path, clock, {0: 100.0, 1: 100.0}, stage=stage, allow_different=True)
    assert allowed.passed


def _bisect(tmp_path, clock, speeds, state_dir=None):
    source = FakeSource(Builds(dict(enumerate(speeds))), clock)
    session, profile = _session(tmp_path, source)
    said: list[str] = []
    result = run_bisect(
        session,
        FakeStage(),
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
