"""The journal is the one way into a run record: what the host, the loop and the tests append,
as it happens, is what the record holds (in that order); a stored run read back is a frozen
journal that a stored host replays, and freezes to the record it was read from."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from pytest_moeperf.config.profiles import load_profiles
from pytest_moeperf.host.probe import Probe
from pytest_moeperf.llama.bench import BenchResult
from pytest_moeperf.llama.startup import StartupFinding
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.run.replayed import StoredHost
from pytest_moeperf.store.journal import Journal
from pytest_moeperf.store.record import CheckRecord, RunRecord, VerdictRecord, VerdictSide
from pytest_moeperf.verdicts.baseline_check import BaselineCheck
from pytest_moeperf.verdicts.judge import Verdict

W = Workload.parse("pp512")


def _probe(bandwidth: float) -> Probe:
    return Probe("0-1", bandwidth, 0.01, 8.0, 0.01, 5, 0.5)


def _m(
    configuration: str, build: str, values: tuple[float, ...], profile: str = "p"
) -> Measurement:
    samples = tuple(Sample(512, 512_000 / v) for v in values)
    return Measurement(configuration, build, W, samples, Conditions(profile=profile))


def _verdict() -> Verdict:
    return Verdict("holds", 1.1, 1.0, 1.2, 1.0, label="lm.pp512 / mmap.pp512", relation=">=")


def _journal() -> Journal:
    """A run as the host, the loop and a test append it."""
    j = Journal()
    j.hosted({"hostname": "h", "cpu_model": "x", "cpus": 2})
    j.probed("0-1", _probe(20.0))
    j.started(("p", "mmap", "b1"), 0.4)
    j.measured(("p", "mmap", "b1", "pp512"), _m("mmap", "b1", (100.0,)))
    j.fingerprinted("p", {"hostname": "h", "llama_server": "version: 1", "probes": {}})
    j.started(("p", "lm", "b1"), 0.6)
    j.measured(("p", "lm", "b1", "pp512"), _m("lm", "b1", (110.0,)))
    j.measured(("p", "mmap", "b1", "pp512"), _m("mmap", "b1", (100.0, 101.0)))  # more samples
    j.noticed("lm.pp512 / mmap.pp512: a round takes 1.0 s")
    j.reprobed("0-1", 1234.5, _probe(14.0))
    j.host_changed("memory bandwidth on CPUs 0-1: 20 -> 15")
    j.host_changed("memory bandwidth on CPUs 0-1: 20 -> 14")
    sides = (VerdictSide("p", "mmap", "b1", "pp512"), VerdictSide("p", "lm", "b1", "pp512"))
    j.judged(
        VerdictRecord(
            test="t::claim", verdict=_verdict(), sides=sides, asked="lm.pp512 / mmap.pp512"
        )
    )
    check = BaselineCheck("passed", 100.5, 100.0, 0.05, low=0.97, high=1.04)
    j.checked(CheckRecord("t::baseline", ("p", "mmap", "b1", "pp512"), check))
    bench = BenchResult(W, (99.0, 98.0), 98.5, 0.5, command=("llama-bench",))
    j.benched(("p", "mmap", "b1", "pp512"), bench)
    return j


def test_the_record_is_what_was_appended_in_order():
    record = _journal().freeze()
    assert record.fingerprint == {"hostname": "h", "cpu_model": "x", "cpus": 2}
    assert [m.configuration for m in record.measurements] == ["mmap", "lm"]  # first taken first
    assert [len(m.samples) for m in record.measurements] == [2, 1]  # each as it stands
    # the profile's fingerprint (its build) with every probe the run took, however late
    assert record.fingerprints["p"]["llama_server"] == "version: 1"
    assert record.fingerprints["p"]["probes"]["0-1"]["bandwidth_gbs"] == 20.0
    assert record.probes == {"0-1": _probe(20.0).to_dict()}
    assert record.reprobes == {"0-1": [{"at": 1234.5, **_probe(14.0).to_dict()}]}
    assert record.host_changes == ["memory bandwidth on CPUs 0-1: 20 -> 14"]  # the latest
    assert record.server_starts == {"mmap (b1)": [0.4], "lm (b1)": [0.6]}
    assert [v.test for v in record.verdicts] == ["t::claim"]
    assert [c.test for c in record.baseline_checks] == ["t::baseline"]
    assert record.bench[0]["key"] == ["p", "mmap", "b1", "pp512"]
    assert record.bench[0]["command"] == ["llama-bench"]
    # and it is a results file's document, read back whole
    again = RunRecord.from_dict(record.to_dict())
    assert again.to_dict() == {**record.to_dict(), "date": again.date}


def test_a_gate_forgets_its_sides_before_they_name_other_builds():
    j = _journal()
    j.started(("p", "mmap", "baseline"), 1.0)
    j.measured(("p", "mmap", "baseline", "pp512"), _m("mmap", "baseline", (90.0,)))
    j.forget("p", ["baseline"])
    assert ("p", "mmap", "baseline", "pp512") not in j.measurements
    assert ("p", "mmap", "baseline") not in j.starts
    assert len(j.measurements) == 2 and len(j.taken) == 2


def test_a_stored_run_reads_back_into_a_stored_host(tmp_path: Path):
    record = _journal().freeze()
    path = tmp_path / "results.json"
    path.write_text(record.json_text())
    # the stored host judges on the record as read; what it gives the run is read, not taken:
    # the run's own journal holds no measurement, and a replay writes no run
    toml = tmp_path / "moeperf.toml"
    toml.write_text(
        '[profiles.p]\nmodel = "m.gguf"\nworkloads = ["pp512"]\n'
        "[profiles.p.configurations.mmap]\n[profiles.p.configurations.lm]\n"
    )
    profiles = load_profiles(toml, None)
    host = StoredHost.read(path, profiles)
    assert host.record.to_dict() == RunRecord.from_dict(record.to_dict()).to_dict()
    assert host.measured_on == record.host_fingerprint == _journal().measured_on
    assert host.host_changes == record.host_changes
    assert [m.configuration for m in host.record.measurements] == ["mmap", "lm"]
    assert [v.test for v in host.record.verdicts] == ["t::claim"]
    p = profiles["p"]
    m = host.measure(p, p.configurations["lm"], W)
    assert m.values == record.measurements[1].values
    assert list(host.measurements) == [("p", "lm", "b1", "pp512")]
    assert host.journal.taken == []


def test_the_record_keeps_startup_warnings_setup_time_and_notices():
    """What the summary reads of a run is the journal's, and the record keeps it: the startup
    warnings by server, the seconds spent outside every budget, what verdicts said first."""
    journal = Journal()
    warned = StartupFinding("no-numa", "numa not set", 12, "pin it", path="/l/mmap.log")
    journal.found(("embedded", "mmap", "b11434"), [warned], start=True)
    journal.found(
        ("embedded", "mmap", "b11434"), [replace(warned, id="numa-placement")], start=False
    )
    journal.set_up(12.5)
    journal.set_up(0.25)
    journal.noticed("mmap.pp512: a round takes 6.8 s")
    record = RunRecord.from_dict(json.loads(journal.freeze().json_text()))
    assert record.setup_seconds == 12.75 and record.notices == ["mmap.pp512: a round takes 6.8 s"]
    assert [f["id"] for f in record.startup_findings["mmap (b11434)"]] == [
        "no-numa",
        "numa-placement",
    ]
    journal.found(("embedded", "mmap", "b11434"), [], start=True)  # a restart without warnings
    assert journal.freeze().startup_findings == {}
