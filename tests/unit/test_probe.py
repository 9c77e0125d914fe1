"""The calibration probe (real, short runs), probe comparisons, per-CPU host load, and the
bytes a decode step reads (from a real synthetic GGUF)."""

from __future__ import annotations

import time

import pytest

from pytest_moeperf.errors import ModelError
from pytest_moeperf.host.machine import OtherWork, online_cpus
from pytest_moeperf.host.probe import Probe, probe_differences, probe_moved, run_probe
from pytest_moeperf.llama.model_bytes import KV_BYTES_PER_ELEMENT, decode_bytes
from pytest_moeperf.llama.synthetic_gguf import write_model
from pytest_moeperf.llama.synthetic_model import model_spec


def test_a_real_probe_on_one_cpu_round_trips():
    cpu = min(online_cpus())
    p = run_probe({cpu}, samples=3, sample_seconds=0.03)
    assert p.cpus == str(cpu) and p.samples == 3
    assert p.bandwidth_gbs > 0 and p.compute_gops > 0
    assert 0 <= p.bandwidth_cv < 10 and 0 <= p.compute_cv < 10
    assert Probe.from_dict(p.to_dict()) == p
    assert f"on CPUs {cpu}" in p.describe()


def test_the_probe_leaves_the_callers_affinity_alone():
    """Probe threads pin themselves, never the caller."""
    before = online_cpus()
    run_probe({min(before)}, samples=1, sample_seconds=0.02)
    assert online_cpus() == before


@pytest.mark.parametrize(
    "change, message",
    [
        ({"bandwidth_gbs": "fast"}, "'bandwidth_gbs' must be a finite number"),
        ({"compute_gops": 0}, "'compute_gops' must be positive"),
        ({"cpus": 1}, "'cpus' must be a string"),
        ({"samples": float("nan")}, "'samples' must be a finite number"),
    ],
)
def test_a_bad_stored_probe_is_named(change, message):
    good = Probe("0-1", 19.4, 0.01, 30.0, 0.02, 7, 2.0).to_dict()
    with pytest.raises(ValueError, match=message):
        Probe.from_dict({**good, **change})


def test_probe_differences_and_moves():
    base = Probe("0-1", 19.4, 0.01, 30.0, 0.02, 7, 2.0)
    same = Probe("0-1", 18.0, 0.01, 32.0, 0.02, 7, 2.0)  # -7 %, +7 %: the same host
    slow = Probe("0-1", 7.1, 0.03, 29.0, 0.02, 7, 2.0)
    assert probe_differences(same, base) == []
    assert probe_differences(slow, base) == [
        "memory bandwidth on CPUs 0-1: this host 7.1 GB/s, baseline host 19.4 GB/s "
        "(-63 %, more than the probe tolerance 15 %)"
    ]
    assert probe_differences(same, base, tolerance=0.05)[1].startswith("compute on CPUs 0-1")
    assert probe_moved(base, slow) == ["memory bandwidth on CPUs 0-1: 19.4 -> 7.1 GB/s (-63 %)"]
    assert probe_moved(base, same) == []
    # a move counts when a second probe confirms it, in the same direction
    assert probe_moved(base, slow, slow) == [
        "memory bandwidth on CPUs 0-1: 19.4 -> 7.1, 7.1 GB/s (-63 %)"
    ]
    assert probe_moved(base, slow, same) == []
    fast = Probe("0-1", 29.0, 0.01, 30.0, 0.02, 7, 2.0)
    assert probe_moved(base, slow, fast) == []  # wandered down, then up: no move


def test_other_work_is_read_on_the_pinned_cpus():
    cpu = min(online_cpus())
    other = OtherWork(cpus={cpu})
    time.sleep(0.2)
    assert 0.0 <= other.share() <= 1.0 and 0.0 <= other.steal() <= 1.0
    assert other.share() == other.share()  # the first call ends the span


def test_decode_bytes_of_the_synthetic_model(tmp_path):
    spec = model_spec("tiny", n_layer=3)
    path = tmp_path / "m.gguf"
    write_model(spec, path)
    d = decode_bytes(path)
    f16 = 2
    experts = spec.n_layer * 3 * spec.n_embd * spec.n_ff_exp * spec.n_expert * f16
    assert (d.experts, d.experts_used) == (spec.n_expert, spec.n_expert_used)
    assert d.experts_active == experts * spec.n_expert_used // spec.n_expert
    assert d.lookup == spec.n_embd * f16  # one row of token_embd
    kv = spec.n_layer * spec.n_head_kv * 2 * spec.head_dim * KV_BYTES_PER_ELEMENT
    assert d.kv_per_token_of_depth == kv
    output = spec.n_embd * spec.n_vocab * f16
    attention = (
        spec.n_layer
        * (
            2 * spec.n_embd * spec.n_head * spec.head_dim
            + 2 * spec.n_embd * spec.n_head_kv * spec.head_dim
        )
        * f16
    )
    assert d.dense > output + attention  # plus norms and the router, in f32
    assert d.per_token(512) == d.per_token(0) + 512 * kv
    assert d.limit(10.0) == pytest.approx(10e9 / d.per_token(0))
    total = path.stat().st_size
    assert d.per_token(0) < total  # only the routed experts' share is read


def test_decode_bytes_of_a_file_that_is_not_gguf(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelError, match=r"x\.gguf: not a readable GGUF file"):
        decode_bytes(bad)


def test_host_lines_report_probes_load_and_changes():
    from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
    from pytest_moeperf.measure.workload import Workload
    from pytest_moeperf.report.tables import host_lines

    def busy(share: float, steal: float) -> Conditions:
        return Conditions(measured_s=10.0, busy_s=10.0 * share, steal_s=10.0 * steal)

    w = Workload.parse("pp512")
    ms = [
        Measurement("mmap", "b1", w, (Sample(512, 100.0),), busy(0.03, 0.01)),
        Measurement("lm-none", "b1", w, (Sample(512, 100.0),), busy(0.2, 0.0)),
    ]
    probe = Probe("0-1", 19.4, 0.01, 30.0, 0.02, 7, 2.0)
    lines = host_lines([probe], ["compute on CPUs 0-1: 30.0 -> 20.0, 19.0 Gop/s (-37 %)"], ms)
    assert lines == [
        "host probe: 19.4 GB/s (cv 1.0 %), 30.0 Gop/s (cv 2.0 %) on CPUs 0-1",
        "while measuring, on the server's CPUs: other work up to 20 % (lm-none), "
        "steal up to 1 % (mmap)",
        "host changed under the run (later verdicts undecided): "
        "compute on CPUs 0-1: 30.0 -> 20.0, 19.0 Gop/s (-37 %)",
    ]


def test_no_decode_is_shown_above_its_limit_and_a_probe_it_beats_is_named():
    """On a host whose probe reads slower than llama.cpp (103 % and 160 % of the probe's
    limit were printed once): the limit shown is the best bandwidth seen, and a warning names
    the probe that was no upper bound."""
    from pytest_moeperf.measure.measurement import Conditions, Measurement, Roofline, Sample
    from pytest_moeperf.measure.workload import Workload
    from pytest_moeperf.report.tables import roofline_warnings, summary_rows

    w = Workload.parse("tg64")
    per_token = 100_000_000  # bytes a step reads

    def decode(config: str, tok_s: float, probe_gbs: float) -> Measurement:
        limit = Roofline(probe_gbs, "probe on CPUs 0-1", per_token, probe_gbs * 1e9 / per_token)
        samples = (Sample(63, 63_000 / tok_s),)
        return Measurement(config, "b1", w, samples, Conditions(roofline=limit))

    ms = [decode("mmap", 324.0, 30.0), decode("one-core", 100.0, 30.0)]  # mmap: 108 % of 300
    headers, rows = summary_rows(ms)
    cells = {row[0]: row[headers.index("decode / bandwidth limit")] for row in rows}
    assert cells["mmap"] == "tg64 100% of 324 (seen)"
    assert cells["one-core"] == "tg64 31% of 324 (seen)"
    (line,) = roofline_warnings(ms)
    assert line.startswith("mmap tg64 decodes at 108 % of the limit of the probe on CPUs 0-1")
    assert "32.4 GB/s" in line and "no upper bound" in line


def _fake_probes(monkeypatch, gops: list[float], busy: list[float] | None = None) -> list[float]:
    """run_probe as the host watch calls it, reading *gops* in turn (bandwidth steady), each
    beside other work of the share *busy* gives in turn (none when not given)."""
    from pytest_moeperf.run import hostwatch

    left = list(gops)
    shares = list(busy or [0.0] * len(gops))

    def fake(cpus):
        return Probe("0-1", 15.0, 0.02, left.pop(0), 0.02, 7, 1.0)

    class FakeOtherWork:
        def __init__(self, *ours, cpus=None) -> None:
            self.got = shares.pop(0)

        def share(self) -> float:
            return self.got

    monkeypatch.setattr(hostwatch, "run_probe", fake)
    monkeypatch.setattr(hostwatch, "OtherWork", FakeOtherWork)
    return left


def _watch(said: list[str]):
    from types import SimpleNamespace

    from pytest_moeperf.run.hostwatch import HostWatch

    return HostWatch(SimpleNamespace(probe_tolerance=0.15, reprobe_seconds=0.0), said.append)


def test_a_reference_probed_beside_other_work_gives_way_to_the_first_quiet_probe(monkeypatch):
    """A core kept busy by other work for the run's first minute: its probes read 4.0 and 4.1
    Gop/s where the quiet host reads 5.3, and every verdict after the minute ended undecided
    "host changed under the run: compute +29 %" (the README's main job, exit 5). Other work
    only lowers a probe: the first quiet one that reads no lower becomes the reference."""
    _fake_probes(monkeypatch, [4.0, 4.1, 5.3, 5.2], busy=[0.5, 0.5, 0.02, 0.02])
    said: list[str] = []
    watch = _watch(said)
    assert watch.probe(frozenset({0, 1})).compute_gops == 4.1  # type: ignore[union-attr]
    assert any("taken while other work held 50 % of them" in s for s in said)
    assert watch.host_moved(["0-1"]) == [] and watch.journal.probes["0-1"].compute_gops == 5.3
    assert any("quiet (2 % other work): " in s and "the run's reference now" in s for s in said)
    assert watch.host_moved(["0-1"]) == [] and watch.journal.host_changes == []


def test_a_quiet_probe_below_a_busy_reference_is_the_host_moving(monkeypatch):
    """A host throttled after a busy start (a cgroup's cap shows as idle, not busy): its quiet
    probe reads below even the busy reference, and that is a move, said as one; a probe that
    is not quite quiet (the end of the busy minute within it) replaces nothing either."""
    # (a move is confirmed by a second probe at once; that one's share is not asked)
    _fake_probes(monkeypatch, [4.0, 4.1, 5.3, 5.5, 2.0, 2.1], busy=[0.5, 0.5, 0.12, 0.0])
    watch = _watch([])
    watch.probe(frozenset({0, 1}))
    (up,) = watch.host_moved(["0-1"])  # not quiet: compared, as every reprobe
    assert up.startswith("compute on CPUs 0-1: 4.1 -> 5.3, 5.5 Gop/s")
    (line,) = watch.host_moved(["0-1"])
    assert line.startswith("compute on CPUs 0-1: 4.1 -> 2.0, 2.1 Gop/s")
    assert watch.journal.probes["0-1"].compute_gops == 4.1


def test_a_slow_first_reading_is_not_the_runs_reference(monkeypatch):
    """A CI perf job read its first probe at 2.3 Gop/s against 4.1-4.6 later, and every claim
    after it ended undecided "host changed": the first reading is probed again until two in a
    row agree, and the later of them is the reference."""
    left = _fake_probes(monkeypatch, [2.3, 4.4, 4.5, 9.9])
    said: list[str] = []
    probe = _watch(said).probe(frozenset({0, 1}))
    assert probe is not None and probe.compute_gops == 4.5 and left == [9.9]
    assert any("the first reading was off (compute on CPUs 0-1: 2.3 -> 4.5" in s for s in said)


def test_two_agreeing_readings_are_enough_and_an_unsteady_host_is_named(monkeypatch):
    left = _fake_probes(monkeypatch, [4.4, 4.5, 9.9])
    said: list[str] = []
    assert _watch(said).probe(None).compute_gops == 4.5 and left == [9.9]  # type: ignore[union-attr]
    assert not any("first reading" in s or "unsteady" in s for s in said)
    _fake_probes(monkeypatch, [2.0, 4.0, 8.0, 16.0])
    said.clear()
    assert _watch(said).probe(frozenset({0})).compute_gops == 16.0  # type: ignore[union-attr]
    assert any("unsteady: 4 probes and no two in a row agree" in s for s in said)


def test_the_bandwidth_probes_swing_is_no_move_but_a_halved_bandwidth_is(monkeypatch):
    """The README's main job on a quiet 2-core VM: the reference read 20.3 GB/s, later probes
    26-28 (+32-40 %) while llama.cpp's tg64 held (cv 1 %), and four of seven verdicts ended
    undecided "host changed". The bandwidth probe must move by half to be the host changing;
    compute keeps the probe tolerance."""
    from pytest_moeperf.run import hostwatch

    readings = [(20.3, 9.6), (20.3, 9.6), (26.3, 9.5), (28.4, 9.4), (9.0, 9.5), (9.2, 9.6)]
    readings += [(20.0, 7.6), (20.1, 7.5)]

    def fake(cpus):
        bandwidth, gops = readings.pop(0)
        return Probe("0-1", bandwidth, 0.02, gops, 0.02, 7, 1.0)

    class Quiet:
        def __init__(self, *ours, cpus=None) -> None:
            pass

        def share(self) -> float:
            return 0.0

    monkeypatch.setattr(hostwatch, "run_probe", fake)
    monkeypatch.setattr(hostwatch, "OtherWork", Quiet)
    watch = _watch([])
    watch.probe(frozenset({0, 1}))
    assert watch.host_moved(["0-1"]) == []  # +30 %, +40 %: the probe's swing, not the host's
    assert watch.host_moved(["0-1"]) == []
    (halved,) = watch.host_moved(["0-1"])
    assert halved.startswith("memory bandwidth on CPUs 0-1: 20.3 -> 9.0, 9.2 GB/s")
    (throttled,) = watch.host_moved(["0-1"])
    assert throttled.startswith("compute on CPUs 0-1: 9.6 -> 7.6, 7.5 Gop/s")
