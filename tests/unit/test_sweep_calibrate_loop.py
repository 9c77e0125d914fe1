"""Calibrate and both sweeps, run through their real loops on fakes (no server, no real time).

The calibration's A/A gates are real gates (:func:`run_gate` and the decision loop) on the fake
host of ``_fake_host``: a build against itself, rounds with seeded noise of a known log-SD and a
process offset a block of :data:`BLOCK` rounds. What the fake puts into one round's
``log(b / a)`` is the difference of two sides' noises: a spread of ``sqrt(2) * sd`` within a
block, and ``sqrt(2) * process`` between blocks; the calibration's figure must give both back.

The sweeps run on a fake host whose measurements have the medians a table gives
per configuration name, and a fake stage whose traffic is real :class:`TrafficRun`
passes of the configuration's own (real) :class:`Traffic`.
"""

from __future__ import annotations

import json
import math
import statistics
import tomllib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from _fake_host import BLOCK, PACE, Clock, FakeSource, FakeStage, builds, fake_clock, fake_session

from pytest_moeperf.config.profiles import Configuration, HostLacks, Profile, parse_profiles
from pytest_moeperf.config.profiles import traffic_of as traffic_table_of
from pytest_moeperf.errors import ConfigError
from pytest_moeperf.host.gpu_telemetry import DmonSample, GpuTelemetry
from pytest_moeperf.llama.flags import flag_value, flag_values, has_flag
from pytest_moeperf.llama.model_bytes import DecodeBytes
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.traffic import Pass, RequestRecord, Traffic, TrafficRun
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.report.calibrate import calibration_json
from pytest_moeperf.run.calibrate import Calibration, run_calibration
from pytest_moeperf.run.gate import BuildUnderTest
from pytest_moeperf.run.source import Feed, Host, Side
from pytest_moeperf.run.sweep import METRICS, run_ncmoe_sweep, run_sweep
from pytest_moeperf.verdicts.calibration import NoiseFigure, noise_figure

# --------------------------------------------------------------------------------------------
# The calibration: A/A gates through run_gate and the decision loop


class MetricNoise(FakeSource):
    """The fake host with its round noise and process term per workload: (sd, process) log-SDs
    of each workload's rounds, the build running at 100 tok/s on both sides."""

    def __init__(self, noise: dict[str, tuple[float, float]], clock: Clock, seed: int) -> None:
        super().__init__(builds({0: 100.0}), clock, seed)
        self.hosts = {w: builds({0: 100.0}, sd=sd, process=p) for w, (sd, p) in noise.items()}

    def pair(self, profile: Profile, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        self.fake = self.hosts[a.workload.name]  # the feed keeps the host it was given
        return super().pair(profile, a, b, label=label, relation=relation)


class CountingStage(FakeStage):
    """The fake stage, counting the correctness guard's requests."""

    def __init__(self) -> None:
        super().__init__()
        self.guarded = 0

    def greedy(self, profile: Profile, configuration: Configuration, label: str) -> tuple[int, ...]:
        self.guarded += 1
        return super().greedy(profile, configuration, label)


def _calibrate(
    tmp_path: Path,
    noise: dict[str, tuple[float, float]],
    *,
    seed: int,
    gates: int,
    clock: Clock,
    stage: FakeStage | None = None,
    **kw: Any,
) -> tuple[Calibration, MetricNoise]:
    source = MetricNoise(noise, clock, seed)
    session, profile = fake_session(tmp_path, source, stage=stage)
    calibration = run_calibration(
        session,
        profile,
        BuildUnderTest(0),
        configurations=["mmap"],
        workloads=[Workload.parse(w) for w in noise],
        gates=gates,
        **kw,
    )
    return calibration, source


def _aa_outcomes(calibration: Calibration) -> set[str]:
    return {r.verdict.outcome for rows in calibration.rows.values() for r in rows}


def test_calibration_runs_a_a_gates_and_keeps_every_rows_rounds(tmp_path, clock):
    """Each gate is the build against itself (one pair of the same build, both servers of
    it, no correctness guard), heard as it ends; the calibration keeps, per metric, every
    gate's row with its rounds' log-ratios and blocks as the fake measured
    them; its figure counts those gates, rounds, outcomes, budget and pace."""
    stage, heard = CountingStage(), []
    calibration, source = _calibrate(
        tmp_path,
        {"pp512": (0.03, 0.01)},
        seed=1,
        gates=4,
        stage=stage,
        clock=clock,
        budget=120.0,
        margin=0.06,
        on_gate=lambda i, result: heard.append((i, result)),
    )
    assert (calibration.build, calibration.budget, calibration.margin) == ("b0", 120.0, 0.06)
    assert source.pairs == [(0, 0)] * 4  # A/A: build 0 on both sides, one pair a gate
    assert stage.started == [("mmap", "baseline"), ("mmap", "candidate")] * 4
    assert stage.guarded == 0  # the same binary's output is not checked against itself
    assert [i for i, _ in heard] == [0, 1, 2, 3]
    gates = [r for _, r in heard]
    assert all(g.baseline == g.candidate == "b0" and g.margin == 0.06 for g in gates)
    assert list(calibration.rows) == ["mmap.pp512"]
    rows = calibration.rows["mmap.pp512"]
    assert rows == [g.rows[0] for g in gates]
    assert _aa_outcomes(calibration) <= {"unchanged", "undecided"}
    for row in rows:
        a, b = row.baseline.values, row.candidate.values  # the fake's rounds, every one
        assert row.log_ratios == pytest.approx(
            [math.log(y / x) for x, y in zip(a, b, strict=True)], abs=1e-12
        )
        assert row.blocks == tuple(i // BLOCK for i in range(len(a)))
        assert row.seconds <= 120.0 + PACE
    figure = calibration.figures("2026-01-02")["mmap.pp512"]
    assert isinstance(figure, NoiseFigure)
    assert (figure.build, figure.date, figure.budget, figure.gates) == ("b0", "2026-01-02", 120, 4)
    assert figure.rounds == sum(len(r.log_ratios) for r in rows)
    assert figure.false_alarms == figure.spurious == 0
    assert figure.undecided == sum(r.verdict.outcome == "undecided" for r in rows)
    assert figure.pace == pytest.approx(PACE)  # seconds of the fake clock a round
    assert figure.mde == statistics.median(r.verdict.mde for r in rows if r.verdict.mde)
    # the --json keeps each gate's rounds and blocks: the figure is computed again from it
    stored = json.loads(calibration_json(calibration.rows, {"mmap.pp512": figure}))
    gates = stored["mmap.pp512"]["gates"]
    again = noise_figure(
        [g["verdict"]["outcome"] for g in gates],
        [g["log_ratios"] for g in gates],
        [r.verdict.mde for r in rows if r.verdict.mde],
        build="b0",
        date="2026-01-02",
        budget=120.0,
        blocks=[g["blocks"] for g in gates],
        seconds=[r.seconds for r in rows],
    )
    assert again == figure


# Each metric's (round sd, process) of the fake host, and its figure's tolerances. With 16 A/A
# gates at seed 1, pp512 pools about 600 rounds and tg64 about 1000 (df: rounds less blocks),
# so the round spread's relative standard error is 1 / sqrt(2 df) < 3 %: over seeds 1-100 the
# ratio of figure to sqrt(2) * sd stayed within 0.94-1.08, and 10 % is more than 3 standard
# errors. The process term rests on the blocks (about 3 per gate): its ratio over the same
# seeds stayed within 0.73-1.2, a little low on average (0.9 for pp512: gates whose process
# pairs happened to agree decide sooner, with fewer blocks), hence 35 %. Pooling the rounds
# across blocks (the process offset counted as round noise) gives pp512 a spread 41 % too
# large, and a calibration that swapped or merged the metrics misses tg64's by a factor 2.5.
NOISE = {"pp512": (0.02, 0.02), "tg64": (0.05, 0.03)}
SPREAD_TOLERANCE, PROCESS_TOLERANCE = 0.10, 0.35


def _close_to_the_host(figure: NoiseFigure, sd: float, process: float) -> None:
    assert figure.round_spread == pytest.approx(math.sqrt(2) * sd, rel=SPREAD_TOLERANCE)
    assert figure.process is not None
    assert figure.process == pytest.approx(math.sqrt(2) * process, rel=PROCESS_TOLERANCE)


@pytest.fixture(scope="module")
def noisy(tmp_path_factory: pytest.TempPathFactory) -> Calibration:
    """16 A/A gates of pp512 and tg64 on the host of :data:`NOISE` (seed 1), run once."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        clock = fake_clock(monkeypatch)
        path = tmp_path_factory.mktemp("noisy")
        calibration, _ = _calibrate(path, NOISE, seed=1, gates=16, clock=clock)
    return calibration


def test_each_metrics_figure_is_the_noise_the_host_put_in(noisy):
    assert _aa_outcomes(noisy) <= {"unchanged", "undecided"}  # at this seed: no alarm
    figures = noisy.figures("2026-01-02")
    assert sorted(figures) == ["mmap.pp512", "mmap.tg64"]
    for workload, (sd, process) in NOISE.items():
        figure = figures[f"mmap.{workload}"]
        assert figure.gates == 16 and figure.false_alarms == figure.spurious == 0
        _close_to_the_host(figure, sd, process)


def test_a_host_with_independent_rounds_has_a_lag1_of_about_zero(noisy):
    """The fake's rounds are independent (lag-1 0): the calibration reads about 0 (sd about
    0.03 over seeds at 16 gates), not the -1/m (m: rounds a block, 10 here) that reading each
    block around its own mean takes away (-0.12 on average over seeds 1-30 without the
    correction)."""
    for name, figure in noisy.figures("2026-01-02").items():
        assert figure.lag1 == pytest.approx(0.0, abs=0.08), name


def test_a_host_with_louder_rounds_gets_a_larger_figure(tmp_path, clock):
    """Two hosts alike but for the rounds' noise (sd 0.02 and 0.05): the figures' spreads
    stand as 2.5 to 1 (over seeds 1-100, each within 0.91-1.12 of its host's, so the ratio
    stays within 2-3); a calibration that did not read the rounds would give both alike."""
    spreads = []
    for sd in (0.02, 0.05):
        (tmp_path / str(sd)).mkdir()
        calibration, _ = _calibrate(
            tmp_path / str(sd), {"pp512": (sd, 0.01)}, seed=2, gates=16, clock=clock
        )
        # no false alarm (a small-* where the interval missed 1 is within the stated rate)
        assert not _aa_outcomes(calibration) & {"slower", "faster"}
        spreads.append(calibration.figures()["mmap.pp512"].round_spread)
    quiet, loud = spreads
    assert 2.0 < loud / quiet < 3.0
    assert quiet == pytest.approx(math.sqrt(2) * 0.02, rel=SPREAD_TOLERANCE)


# --------------------------------------------------------------------------------------------
# The sweeps: a source of given medians, a host of real traffic passes

PROFILE = """
[profiles.p]
model = "m.gguf"
workloads = ["pp512", "tg64", "traffic.throughput"]
[profiles.p.configurations.traffic]
flags = ["-c", "8192", "-np", "1"]
traffic = {mix = [[512, 64], [128, 256]], requests = 6}
[profiles.p.configurations.plain]
flags = ["-c", "8192"]
[profiles.p.configurations.gpu]
flags = ["-c", "4096", "-ngl", "999", "-cmoe", "--n-cpu-moe", "7", "-ot", "exps=CPU"]
vram_gib = 20
ram_gib = 40
traffic = {mix = [[64, 8]]}
[profiles.p.configurations.cpu]
flags = ["-ngl", "0"]
[profiles.q]
model = "m.gguf"
workloads = ["traffic.throughput"]
[profiles.q.configurations.gpu]
flags = ["-ngl", "999"]
traffic = {mix = [[64, 8]]}
"""


def _profiles(tmp_path: Path) -> dict[str, Profile]:
    return parse_profiles(tomllib.loads(PROFILE), "moeperf.toml", tmp_path)


class TableSource(Host):
    """Measurements whose medians *medians* gives per configuration name and workload name,
    each of three samples around it (and the GPU telemetry *telemetry* gives per
    configuration); every call in *log*."""

    def __init__(
        self,
        medians: dict[str, dict[str, float]],
        log: list[tuple[str, ...]],
        telemetry: dict[str, GpuTelemetry] | None = None,
    ) -> None:
        super().__init__()
        self.medians, self.log, self.telemetry = medians, log, telemetry or {}
        self.asked: list[tuple[Configuration, Workload, int | None]] = []
        self.given: list[Measurement] = []

    def measure(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        repetitions: int | None = None, build: str | None = None,
    ) -> Measurement:  # fmt: skip
        self.log.append(("measure", configuration.name, workload.name))
        self.asked.append((configuration, workload, repetitions))
        median = self.medians.get(configuration.name, {}).get(workload.name)
        if median is None:
            raise AssertionError(f"{configuration.name} {workload.name} measured: no median given")
        samples = tuple(Sample.of_value(workload, median * f) for f in (1.2, 0.9, 1.0))
        told = Conditions(
            profile=profile.name,
            flags=tuple(configuration.flags),
            gpu_telemetry=self.telemetry.get(configuration.name),
        )
        self.given.append(Measurement(configuration.name, "b1", workload, samples, told))
        return self.given[-1]

    def pair(self, profile: Profile, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        raise AssertionError("a sweep measures each point; it pairs no rounds")

    def series(self, profile: Profile, configuration: Configuration, workload: Workload) -> Feed:
        raise AssertionError("a sweep checks no baseline")

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        raise AssertionError("a sweep asks nothing of the host's probes")


class SweepStage:
    """The stage a sweep asks (:class:`Stage`): a check that refuses the
    configurations listed in *lacks*, each server's traffic as real passes of the
    configuration's own traffic table (one more pass than its clients, each request of its
    mix's shape, slower as more clients share the server), the model and its layers, servers
    stopped; every call in *log*."""

    def __init__(
        self,
        rootdir: Path,
        log: list[tuple[str, ...]],
        *,
        lacks: Sequence[str] = (),
        decode: DecodeBytes | None = None,
    ) -> None:
        self.rootdir, self.log, self.lacks, self.decode = rootdir, log, set(lacks), decode
        self.runs: dict[str, TrafficRun] = {}

    def check(
        self, profile: Profile, configurations: Sequence[Configuration], labels: Sequence[str]
    ) -> None:
        self.log.append(("check", *(c.name for c in configurations)))
        for c in configurations:
            if c.name in self.lacks:
                raise HostLacks(f"{c.name}: this host has no GPU")

    def traffic_of(self, profile: Profile, configuration: Configuration) -> TrafficRun:
        self.log.append(("traffic", configuration.name))
        traffic = traffic_table_of(profile, configuration, self.rootdir)
        run = TrafficRun(traffic, [_pass(traffic, i) for i in range(traffic.concurrency + 1)])
        self.runs[configuration.name] = run
        return run

    def model_of(self, profile: Profile) -> tuple[Path, DecodeBytes | None]:
        self.log.append(("model",))
        return self.rootdir / "models" / "m.gguf", self.decode

    def stop_servers(self, keep: Callable[[tuple[str, str, str]], bool] | None = None) -> None:
        self.log.append(("stop",))


def _pass(traffic: Traffic, index: int) -> Pass:
    slow = 1.0 + 0.25 * traffic.concurrency + 0.01 * index
    records = []
    for i in range(traffic.requests):
        shape = traffic.mix.shape(i)
        records.append(
            RequestRecord(
                i,
                shape,
                ttft_ms=shape.prompt * 0.5 * slow,
                e2e_ms=(shape.prompt * 0.5 + shape.gen * 20.0) * slow,
                itl_ms=[20.0 * slow] * (shape.gen - 1),
                prompt_n=shape.prompt,
                prompt_ms=shape.prompt * 0.5 * slow,
                predicted_n=shape.gen,
                predicted_ms=shape.gen * 20.0 * slow,
            )
        )
    return Pass(
        records, wall_ms=1000.0 * traffic.requests * slow / traffic.concurrency, traffic=traffic
    )


SLOT_MEDIANS = {
    f"traffic-np{n}": {
        "traffic.throughput": throughput,
        "traffic.decode": decode,
        "traffic.prefill": prefill,
        "traffic.requests": requests,
    }
    for n, throughput, decode, prefill, requests in (
        (1, 48.0, 50.0, 950.0, 0.7),
        (2, 90.0, 46.0, 910.0, 1.3),
        (4, 150.0, 39.0, 820.0, 2.1),
    )
}


def test_the_slots_sweep_measures_each_np_on_its_own_server(tmp_path):
    log: list[tuple[str, ...]] = []
    source, stage = TableSource(SLOT_MEDIANS, log), SweepStage(tmp_path, log)
    profile = _profiles(tmp_path)["p"]
    result = run_sweep(
        source, stage, profile, profile.configuration("traffic"), [1, 2, 4], repetitions=5
    )
    assert result.configuration == "traffic"
    assert [p.slots for p in result.points] == [1, 2, 4]
    assert [p.configuration for p in result.points] == ["traffic-np1", "traffic-np2", "traffic-np4"]
    given = {(m.configuration, m.workload.metric): m.summary.median for m in source.given}
    for point in result.points:  # the medians of what was measured, each metric its own
        assert point.medians == {m: given[point.configuration, m] for m in METRICS}
        table = SLOT_MEDIANS[point.configuration]
        assert point.medians == pytest.approx({m: table[f"traffic.{m}"] for m in METRICS})
    # every point's measurements: each traffic metric, at the repetitions asked, on a
    # configuration with -np N last (its own -np 1 before it) and N clients
    assert [(c.name, w.name, r) for c, w, r in source.asked] == [
        (f"traffic-np{n}", f"traffic.{m}", 5) for n in (1, 2, 4) for m in METRICS
    ]
    for cfg, _, _ in source.asked:
        n = int(cfg.name.removeprefix("traffic-np"))
        assert cfg.flags == ("-c", "8192", "-np", "1", "-np", str(n))
        assert flag_value(cfg.flags, "-np") == str(n)
        assert cfg.traffic["concurrency"] == n and cfg.traffic["requests"] >= 2 * n
        assert cfg.traffic["mix"] == [[512, 64], [128, 256]]
        assert stage.runs[cfg.name].traffic.concurrency == n  # the clients the host sent
    for point in result.points:  # the passes of that point's own server
        run = stage.runs[point.configuration]
        assert point.overall == run.overall.figures() and point.passes == point.slots + 1
        assert point.overall["requests"] == (point.slots + 1) * max(6, 2 * point.slots)
    assert result.traffic == stage.runs["traffic-np4"].traffic.mix.describe()
    # checked before any server, then each point measured, its traffic read, its server stopped
    point_calls = [
        [
            *(("measure", f"traffic-np{n}", f"traffic.{m}") for m in METRICS),
            ("traffic", f"traffic-np{n}"),
            ("stop",),
        ]
        for n in (1, 2, 4)
    ]
    assert log == [("check", "traffic"), *(c for calls in point_calls for c in calls)]


@pytest.mark.parametrize(
    "name, slots, message",
    [
        (
            "plain",
            [1, 2],
            "configuration 'plain': the slots sweep sends the configuration's traffic; it has "
            "no traffic table",
        ),
        ("traffic", [1, 0, 2], "--np [1, 0, 2]: give slot counts >= 1"),
        ("traffic", [], "--np []: give slot counts >= 1"),
    ],
)
def test_the_slots_sweep_refuses_what_it_cannot_sweep_before_measuring(
    tmp_path, name, slots, message
):
    log: list[tuple[str, ...]] = []
    source, stage = TableSource(SLOT_MEDIANS, log), SweepStage(tmp_path, log)
    profile = _profiles(tmp_path)["p"]
    with pytest.raises(ConfigError) as info:
        run_sweep(source, stage, profile, profile.configuration(name), slots)
    assert type(info.value) is ConfigError
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not source.asked and not stage.runs
    assert ("stop",) not in log


def test_a_sweep_of_what_the_host_lacks_starts_nothing(tmp_path):
    log: list[tuple[str, ...]] = []
    source, stage = TableSource(SLOT_MEDIANS, log), SweepStage(tmp_path, log, lacks=["gpu"])
    profile = _profiles(tmp_path)["p"]
    for sweep in (
        lambda: run_sweep(source, stage, profile, profile.configuration("gpu"), [1, 2]),
        lambda: run_ncmoe_sweep(source, stage, profile, profile.configuration("gpu"), None),
    ):
        with pytest.raises(HostLacks, match="gpu: this host has no GPU"):
            sweep()
    assert log == [("check", "gpu"), ("check", "gpu")]


def _telemetry(memory_mib: float, rx_mbs: float) -> GpuTelemetry:
    return GpuTelemetry.of(
        [
            DmonSample(0, fb_mib=memory_mib, rx_mbs=rx_mbs),
            DmonSample(0, fb_mib=memory_mib - 100, rx_mbs=rx_mbs),
        ]
    )


def _decode(n_layer: int) -> DecodeBytes:
    return DecodeBytes(
        dense=10, experts_active=20, lookup=1, kv_per_token_of_depth=1, experts_used=8, experts=128,
        n_layer=n_layer,
    )  # fmt: skip


def test_the_ncmoe_sweep_resolves_all_against_the_models_layers(tmp_path):
    """``--ncmoe all`` on a model of 16 layers: 0, 2, ..., 16; each point's flags have
    ``-ncmoe N`` in place of the configuration's own ``-cmoe`` and ``--n-cpu-moe 7`` (its
    ``-ot`` rules stay), no memory figure of its own, the profile's prefill and decode
    workloads measured (not its traffic metric), and the medians and GPU figures of what was
    measured."""
    values = list(range(0, 17, 2))
    medians = {f"gpu-ncmoe{n}": {"pp512": 3000.0 - 100 * n, "tg64": 150.0 - 3 * n} for n in values}
    telemetry = {f"gpu-ncmoe{n}": _telemetry(24000.0 - 1000 * n, 500.0 * n) for n in values}
    log: list[tuple[str, ...]] = []
    source = TableSource(medians, log, telemetry)
    stage = SweepStage(tmp_path, log, decode=_decode(16))
    profile = _profiles(tmp_path)["p"]
    result = run_ncmoe_sweep(
        source, stage, profile, profile.configuration("gpu"), None, repetitions=4
    )
    assert (result.configuration, result.model, result.n_layer) == ("gpu", "m.gguf", 16)
    assert [p.ncmoe for p in result.points] == values
    assert [p.configuration for p in result.points] == [f"gpu-ncmoe{n}" for n in values]
    assert [(c.name, w.name, r) for c, w, r in source.asked] == [
        (f"gpu-ncmoe{n}", w, 4) for n in values for w in ("pp512", "tg64")
    ]
    for cfg, _, _ in source.asked:
        n = cfg.name.removeprefix("gpu-ncmoe")
        assert cfg.flags == ("-c", "4096", "-ngl", "999", "-ot", "exps=CPU", "-ncmoe", n)
        assert not has_flag(cfg.flags, "-cmoe") and flag_values(cfg.flags, "-ncmoe") == [n]
        assert cfg.vram_gib is None and cfg.ram_gib is None
    for point in result.points:
        assert point.medians == pytest.approx(medians[point.configuration])
        assert point.samples == {"pp512": 3, "tg64": 3}
        assert point.gpu_memory_mib == 24000.0 - 1000 * point.ncmoe
        assert point.prefill_rx_mbs == 500.0 * point.ncmoe
    point_calls = [
        [("measure", f"gpu-ncmoe{n}", "pp512"), ("measure", f"gpu-ncmoe{n}", "tg64"), ("stop",)]
        for n in values
    ]
    assert log == [("check", "gpu"), ("model",), *(c for calls in point_calls for c in calls)]


def test_the_ncmoe_sweep_takes_the_values_given_in_their_order(tmp_path):
    medians = {f"gpu-ncmoe{n}": {"pp512": 1000.0 + n, "tg64": 100.0 + n} for n in (8, 0, 30)}
    log: list[tuple[str, ...]] = []
    source, stage = TableSource(medians, log), SweepStage(tmp_path, log, decode=None)
    profile = _profiles(tmp_path)["p"]
    result = run_ncmoe_sweep(source, stage, profile, profile.configuration("gpu"), (8, 0, 30))
    assert [p.ncmoe for p in result.points] == [8, 0, 30]
    assert result.n_layer == 0  # the model's tensor table could not be read
    assert [p.medians for p in result.points] == [
        pytest.approx(medians[f"gpu-ncmoe{n}"]) for n in (8, 0, 30)
    ]
    assert [c for c in log if c == ("stop",)] == [("stop",)] * 3


@pytest.mark.parametrize(
    "profile, configuration, values, decode, message",
    [
        ("q", "gpu", (0, 4), _decode(16), "profile 'q' lists no prefill or decode workload"),
        ("p", "cpu", (0, 4), _decode(16), "-ngl 0 keeps every layer in system RAM"),
        ("p", "gpu", None, None, "--ncmoe all: the model's layer count is unknown"),
    ],
)
def test_the_ncmoe_sweep_refuses_what_it_cannot_sweep(
    tmp_path, profile, configuration, values, decode, message
):
    log: list[tuple[str, ...]] = []
    medians = {"gpu-ncmoe0": {"pp512": 1000.0, "tg64": 100.0}}
    source, stage = TableSource(medians, log), SweepStage(tmp_path, log, decode=decode)
    p = _profiles(tmp_path)[profile]
    with pytest.raises(ConfigError) as info:
        run_ncmoe_sweep(source, stage, p, p.configuration(configuration), values)
    assert type(info.value) is ConfigError
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not source.asked and ("stop",) not in log  # refused before any point
