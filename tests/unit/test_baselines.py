"""Baseline files: the ADR-0042 file, round trips, corrupt files, accept, fingerprints."""

from __future__ import annotations

import os
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_moeperf import fs
from pytest_moeperf.errors import BaselineError
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.stats import Figure
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.store.accept import accept_measurements as accept
from pytest_moeperf.store.accepted import accepted_history, host_for
from pytest_moeperf.store.baselines import (
    TRAFFIC_METRIC,
    BaselineEntry,
    BaselineFile,
    dump_baselines,
    load_baselines,
    parse_baselines,
)
from pytest_moeperf.store.hosts import BaselineHost, fingerprint_mismatch, host_differences
from pytest_moeperf.verdicts.claims import CONFIGURATION_NAME

ADR = Path(__file__).resolve().parents[2] / "baselines" / "adr-0042.toml"

# --- the ADR-0042 file ------------------------------------------------------------------------

BENCH_TABLE = [
    ("b11053", "mmap", 176.9, 11.48),
    ("b11713", "mmap", 189.0, 15.92),
    ("b11713", "cache-2gib", 187.5, 4.69),
    ("b11713", "cache-4gib", 189.9, 7.87),
    ("b11713", "cache-6gib", 189.3, 10.19),
    ("b11713", "lm-none-node0", 389.9, 11.67),
    ("b11713", "lm-none-node1", 391.4, 15.71),
    ("b11713", "lm-none-cache-2.5gib-gpu0-near", 412.7, 13.31),
    ("b11713", "lm-none-cache-2.5gib-gpu0-far", 413.6, 13.47),
]
TRAFFIC_TABLE = [
    ("prefill-aggregate>=256", (96.9, 601), (218.5, 22)),
    ("prefill-aggregate>=4000", (113.3, None), (242.0, None)),
    ("decode-aggregate>=32", (13.64, 1047), (14.60, 43)),
    ("decode-median", (14.28, None), (14.62, None)),
]


def test_adr_file_holds_every_table_cell():
    bf = load_baselines(ADR)
    assert bf.profile == "adr-0042"
    assert len(bf.entries) == 2 * len(BENCH_TABLE) + 2 * len(TRAFFIC_TABLE)
    for row, (build, conf, pp, tg) in enumerate(BENCH_TABLE, start=1):
        for workload, value in (("pp2048", pp), ("tg128", tg)):
            e = bf.find(build, conf, workload)
            assert e is not None, (build, conf, workload)
            assert e.kind == "bench"
            assert e.value == value
            assert e.operand == Figure(value, 0.01)
            assert e.repetitions == 3 and e.date == "2026-10-17"
            assert f"row {row}," in e.source
            assert e.flags and "-ncmoe 48" in e.flags
    for conf, build in (("serve-legacy", "b11053"), ("serve-new", "b11713")):
        for metric, legacy, new in TRAFFIC_TABLE:
            value, n = legacy if conf == "serve-legacy" else new
            e = bf.find(build, conf, metric)
            assert e is not None and e.kind == "traffic"
            assert (e.value, e.requests) == (value, n)
    assert bf.find("b11713", "cache-2gib", "tg128").extra == {"cache_hit": "47-49%"}
    fp = bf.fingerprint
    assert fp["cpu_model"] == "Intel Xeon Silver 4210"
    assert fp["numa_nodes"] == {"0": "0-9,20-29", "1": "10-19,30-39"}
    assert (fp["sockets"], fp["cores"], fp["cpus"], fp["memory_gib"]) == (2, 20, 40, 376)
    assert fp["model"] == "Qwen3.8-Flash-Next-UD-Q4_K_XL"


def test_adr_file_known_configurations():
    names = {conf for _, conf, _, _ in BENCH_TABLE}
    load_baselines(ADR, known_configurations=names)  # traffic rows are not checked
    with pytest.raises(BaselineError, match="'cache-6gib' is not in the profile"):
        load_baselines(ADR, known_configurations=names - {"cache-6gib"})


def test_adr_file_is_in_dump_order():
    text = ADR.read_text(encoding="utf-8")
    bf = parse_baselines(text)
    strip = [ln for ln in text.splitlines() if not ln.startswith("#")]
    dumped = [ln for ln in dump_baselines(bf).splitlines() if not ln.startswith("#")]
    assert strip == dumped


def test_find_accepts_any_workload_spelling():
    bf = BaselineFile(
        profile="p",
        entries=(
            BaselineEntry("b1", "a", "tg128 @ d8192", 10.0, "2026-10-17", "s", rel_spread=0.01),
        ),
    )
    assert bf.find("b1", "a", "tg128@d8192") is bf.entries[0]
    assert bf.find("b1", "a", "tg128") is None
    assert bf.tolerance_for(bf.entries[0]) == 0.05


# --- round trip -------------------------------------------------------------------------------

keys = st.text(min_size=0, max_size=12)
scalars = (
    st.text(max_size=30)
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.booleans()
)
free_form = st.dictionaries(
    keys,
    st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
        max_leaves=6,
    ),
    max_size=5,
)
words = st.text(min_size=1, max_size=30).filter(str.strip)
positive = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)
unit = st.floats(min_value=0.0, max_value=1.0, exclude_max=True, allow_nan=False)
bench_workloads = st.builds(
    Workload, st.sampled_from(["pp", "tg"]), st.integers(1, 10**6), st.integers(0, 10**6)
).map(lambda w: w.name)


@st.composite
def entries(draw: st.DrawFn, history: bool = False) -> BaselineEntry:
    kind = draw(st.sampled_from(["bench", "traffic"]))
    workload = draw(
        bench_workloads if kind == "bench" else st.from_regex(TRAFFIC_METRIC, fullmatch=True)
    )
    samples = draw(st.none() | st.lists(positive, min_size=1, max_size=6).map(tuple))
    if samples:
        value = statistics.median(samples)
        rel_spread = draw(st.none() | unit)
        repetitions = draw(st.none() | st.just(len(samples)))
    else:
        value = draw(positive)
        rel_spread = draw(unit)
        repetitions = draw(st.none() | st.integers(1, 1000))
    return BaselineEntry(
        build=draw(words),
        configuration=draw(st.from_regex(CONFIGURATION_NAME, fullmatch=True)),
        workload=workload,
        value=value,
        date=draw(words),
        source=draw(words),
        kind=kind,
        rel_spread=rel_spread,
        samples=samples,
        repetitions=repetitions,
        requests=draw(st.none() | st.integers(1, 10**6)),
        tolerance=draw(st.none() | unit),
        flags=draw(st.none() | words),
        note=draw(st.none() | words),
        replaced=draw(words) if history else None,
        extra=draw(free_form),
    )


host_ids = st.lists(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,10}", fullmatch=True),
    min_size=1,
    max_size=3,
    unique=True,
)


@st.composite
def baseline_files(draw: st.DrawFn) -> BaselineFile:
    ids = draw(host_ids)
    hosts = tuple(
        BaselineHost(
            i, draw(free_form.filter(lambda fp: "probes" not in fp)), draw(st.none() | words)
        )
        for i in ids
    )
    on_host = st.sampled_from(ids)
    mine = draw(st.lists(st.tuples(entries(), on_host), max_size=5))
    old = draw(st.lists(st.tuples(entries(history=True), on_host), max_size=3))
    unique = {(h, *e.key): replace(e, host=h) for e, h in mine}
    return BaselineFile(
        profile=draw(words),
        tolerance=draw(unit),
        hosts=hosts,
        entries=tuple(unique.values()),
        history=tuple(replace(e, host=h) for e, h in old),
        note=draw(st.none() | st.text(max_size=40)),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(baseline_files())
def test_dump_then_load_round_trips(bf):
    text = dump_baselines(bf)
    assert parse_baselines(text) == bf
    assert dump_baselines(parse_baselines(text)) == text  # stable


# --- corrupt files ----------------------------------------------------------------------------

HEAD = 'schema = 1\nprofile = "p"\n'
HEAD2 = 'schema = 2\nprofile = "p"\n'
HOST_A = '[[host]]\nid = "a"\n'
ENTRY = (
    '[[entry]]\nbuild = "b1"\nconfiguration = "mmap"\nworkload = "pp2048"\n'
    'value = 100.0\nrel_spread = 0.01\ndate = "2026-10-17"\nsource = "s"\n'
)


def _entry(**changes: str | None) -> str:
    lines = []
    for line in ENTRY.splitlines():
        key = line.split(" = ")[0]
        if key in changes:
            if changes[key] is not None:
                lines.append(f"{key} = {changes.pop(key)}")
            else:
                changes.pop(key)
        else:
            lines.append(line)
    lines += [f"{k} = {v}" for k, v in changes.items() if v is not None]
    return "\n".join(lines) + "\n"


CORRUPT = {
    "toml-syntax": (HEAD + "[[entry]\n", ["invalid TOML", "line 3"]),
    "duplicate-key": (
        HEAD + ENTRY + "value = 101.0\n",
        ["invalid TOML", "line 11", "a key is written twice"],
    ),
    "value-string": (HEAD + _entry(value='"fast"'), ["entry #1", "value 'fast' is not a number"]),
    "value-bool": (HEAD + _entry(value="true"), ["value true is not a number"]),
    "missing-source": (HEAD + _entry(source=None), ["missing field 'source'"]),
    "missing-build": (HEAD + _entry(build=None), ["missing field 'build'"]),
    "missing-value": (HEAD + _entry(value=None), ["missing field 'value'"]),
    "missing-spread": (HEAD + _entry(rel_spread=None), ["missing field 'rel_spread'"]),
    "value-nan": (HEAD + _entry(value="nan"), ["value nan is not a finite number"]),
    "value-inf": (HEAD + _entry(value="inf"), ["value inf is not a finite number"]),
    "value-negative": (HEAD + _entry(value="-3.0"), ["value -3.0 must be > 0"]),
    "value-zero": (HEAD + _entry(value="0"), ["value 0.0 must be > 0"]),
    "spread-negative": (HEAD + _entry(rel_spread="-0.01"), ["rel_spread -0.01 must be in [0, 1)"]),
    "sample-nan": (HEAD + _entry(value=None, samples="[1.0, nan]"), ["sample nan"]),
    "samples-not-median": (
        HEAD + _entry(samples="[1.0, 2.0, 3.0]"),
        ["value 100.0 is not the median of samples"],
    ),
    "repetitions-vs-samples": (
        HEAD + _entry(value=None, samples="[1.0, 2.0]", repetitions="3"),
        ["repetitions 3 but 2 samples"],
    ),
    "file-tolerance-1": (HEAD + "tolerance = 1.0\n" + ENTRY, ["tolerance 1.0 must be"]),
    "file-tolerance-negative": (HEAD + "tolerance = -0.1\n", ["tolerance -0.1 must be"]),
    "entry-tolerance": (HEAD + _entry(tolerance="1.5"), ["entry #1", "tolerance 1.5 must be"]),
    "unknown-workload": (HEAD + _entry(workload='"prefill"'), ["unknown workload", "'prefill'"]),
    "unknown-traffic": (
        HEAD + _entry(kind='"traffic"', workload='"pp2048"'),
        ["unknown traffic workload 'pp2048'"],
    ),
    "unknown-kind": (HEAD + _entry(kind='"server"'), ["kind 'server' is not one of"]),
    "unknown-field": (HEAD + _entry(toleranse="0.1"), ["unknown field 'toleranse'"]),
    "bad-configuration": (HEAD + _entry(configuration='"my mmap"'), ["configuration 'my mmap'"]),
    "newline-configuration": (
        HEAD + _entry(configuration='"mmap\\n"'),
        ["configuration 'mmap\\n'"],
    ),
    "duplicate-entry": (HEAD + ENTRY + ENTRY, ["entry #2 at line 11", "duplicate of entry #1"]),
    "duplicate-depth": (
        HEAD + _entry(workload='"tg128@d8192"') + _entry(workload='"tg128 @ d8192"'),
        ["entry #2", "duplicate of entry #1"],
    ),
    "schema-3": (HEAD.replace("1", "3") + ENTRY, ["schema 3 is not supported"]),
    "host-in-schema-1": (HEAD + _entry(host='"a"'), ["a 'host' field needs schema = 2"]),
    "fingerprint-in-schema-2": (
        HEAD2 + "[fingerprint]\ncpu_model = 'x'\n",
        ["unknown top-level field 'fingerprint'"],
    ),
    "host-unknown": (
        HEAD2 + HOST_A + _entry(host='"b"'),
        ["entry #1", "host 'b' is not a [[host]] of this file (hosts: a)"],
    ),
    "host-missing-of-two": (
        HEAD2 + HOST_A + '[[host]]\nid = "b"\n' + ENTRY,
        ["missing field 'host': this file holds the hosts a, b"],
    ),
    "host-duplicate": (HEAD2 + HOST_A + HOST_A, ["host #2 at line 5", "a second host with id 'a'"]),
    "host-bad-id": (HEAD2 + '[[host]]\nid = "a b"\n', ["host #1", "id 'a b' must be a name"]),
    "host-unknown-field": (HEAD2 + HOST_A + "ip = 1\n", ["host #1", "unknown field 'ip'"]),
    "host-bad-probe": (
        HEAD2 + HOST_A + '[host.fingerprint]\nprobes = { "0-1" = { cpus = "0-1" } }\n',
        ["probe on CPUs '0-1'", "'bandwidth_gbs' must be a finite number"],
    ),
    "schema-missing": ('profile = "p"\n', ["no 'schema' field"]),
    "profile-missing": ("schema = 1\n", ["missing field 'profile'"]),
    "unknown-top": (HEAD + "tolerence = 0.1\n", ["unknown top-level field 'tolerence'"]),
    "entry-not-array": (HEAD + "entry = 5\n", ["'entry' must be written as [[entry]]"]),
    "fingerprint-not-table": (HEAD + "fingerprint = 'x'\n", ["[fingerprint] must be a table"]),
    "repetitions-zero": (HEAD + _entry(repetitions="0"), ["repetitions 0 must be a whole number"]),
    "date-empty": (HEAD + _entry(date='""'), ["date '' must be a non-empty string"]),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_file_is_a_one_line_error(tmp_path, case):
    text, problems = CORRUPT[case]
    path = tmp_path / f"corrupt-{case}.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BaselineError) as e:
        load_baselines(path)
    message = str(e.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    for problem in problems:
        assert problem in message


def test_entry_errors_name_the_entry(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(HEAD + ENTRY + "\n" + _entry(configuration='"cache-2gib"', value='"fast"'))
    with pytest.raises(BaselineError) as e:
        load_baselines(path)
    assert str(e.value) == (
        f"{path}: entry #2 at line 12 (build b1, configuration cache-2gib, workload pp2048): "
        "value 'fast' is not a number"
    )


def test_unknown_configuration_when_profile_known(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(HEAD + ENTRY)
    load_baselines(path, known_configurations=["mmap"])
    with pytest.raises(BaselineError, match=r"b\.toml: entry #1 .*'mmap' is not in the profile"):
        load_baselines(path, known_configurations=["lm-none"])


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(BaselineError, match=r"nope\.toml: no such baseline file"):
        load_baselines(tmp_path / "nope.toml")
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'schema = 1\nprofile = "caf\xe9"\n')
    with pytest.raises(BaselineError, match=r"latin1\.toml: cannot read"):
        load_baselines(bad)


def test_toml_dates_are_read_as_text():
    bf = parse_baselines(HEAD + _entry(date="2026-10-17"))
    assert bf.entries[0].date == "2026-10-17"


def test_entry_with_samples_only():
    bf = parse_baselines(HEAD + _entry(value=None, rel_spread=None, samples="[3.0, 1.0, 2.0]"))
    e = bf.entries[0]
    assert e.value == 2.0 and e.operand == [3.0, 1.0, 2.0]


# --- accept -----------------------------------------------------------------------------------


def _measurement(conf: str, workload: str, tok_s: list[float], build: str = "b1") -> Measurement:
    tokens = 2048 if workload.startswith("pp") else 128
    samples = tuple(Sample(tokens, tokens * 1000.0 / v) for v in tok_s)
    told = Conditions(flags=("-lm", "none"))
    return Measurement(conf, build, Workload.parse(workload), samples, told)


FP = {"cpu_model": "Intel Xeon Silver 4210", "numa_nodes": 2}


def test_accept_creates_a_missing_file(tmp_path):
    path = tmp_path / "new" / "dir" / "p.toml"
    bf = accept(
        path,
        "p",
        [_measurement("mmap", "pp2048", [189.0, 190.5, 188.25])],
        FP,
        date="2026-10-20",
        source="test run",
    )
    assert path.exists()
    assert load_baselines(path) == bf
    e = bf.find("b1", "mmap", "pp2048")
    assert e is not None
    assert e.value == 189.0 and e.samples == (189.0, 190.5, 188.25) and e.repetitions == 3
    assert e.flags == "-lm none" and e.date == "2026-10-20" and e.source == "test run"
    assert bf.fingerprint == FP and bf.history == ()
    assert sorted(os.listdir(path.parent)) == ["p.toml"]  # no temp files left


def test_accept_moves_old_values_to_history(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(
        HEAD
        + _entry(tolerance="0.1")
        + "\n"
        + _entry(configuration='"keep"', note='"hand-written"')
        + '\n[fingerprint]\ncpu_model = "Intel Xeon Silver 4210"\nkernel = "old"\n'
    )
    old = load_baselines(path)
    bf = accept(
        path,
        "p",
        [
            _measurement("mmap", "pp2048", [150.0, 151.0, 149.0]),
            _measurement("lm-none", "tg128", [15.7]),
        ],
        FP,
        date="2026-10-21",
        source="rerun",
    )
    # replaced in place, per-entry tolerance kept; new entries appended; others untouched
    assert [e.configuration for e in bf.entries] == ["mmap", "keep", "lm-none"]
    assert bf.entries[0].value == 150.0 and bf.entries[0].tolerance == 0.1
    assert bf.entries[1] == old.entries[1]
    assert bf.history == (replace(old.entries[0], replaced="2026-10-21"),)
    assert bf.fingerprint == FP
    assert load_baselines(path) == bf
    # a second accept keeps the earlier history
    bf2 = accept(
        path, "p", [_measurement("mmap", "pp2048", [140.0])], FP, date="2026-10-22", source="x"
    )
    assert [h.value for h in bf2.history] == [100.0, 150.0]
    assert [h.replaced for h in bf2.history] == ["2026-10-21", "2026-10-22"]
    assert sorted(os.listdir(tmp_path)) == ["p.toml"]
    # the chain of accepted values, oldest first: what the gate sets a candidate beside
    chain = accepted_history(bf2, bf2.entries[0].host, "mmap", "pp2048")
    assert [e.value for e in chain] == [100.0, 150.0, 140.0]
    assert accepted_history(bf2, "no-such-host", "mmap", "pp2048") == []


def test_accept_failure_mid_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "p.toml"
    path.write_text(HEAD + ENTRY)
    before = path.read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fs.os, "replace", broken_replace)
    with pytest.raises(BaselineError, match=r"p\.toml: cannot write: .*No space left"):
        accept(path, "p", [_measurement("mmap", "pp2048", [1.0])], FP, date="d", source="s")
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["p.toml"]


def test_accept_refuses_another_profile_and_bad_input(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(HEAD + ENTRY)
    before = path.read_bytes()
    with pytest.raises(BaselineError, match="holds baselines of profile 'p', not 'q'"):
        accept(path, "q", [], FP, date="d", source="s")
    twice = [_measurement("a", "pp512", [1.0]), _measurement("a", "pp512", [2.0])]
    with pytest.raises(BaselineError, match="two measurements of b1, a, pp512"):
        accept(path, "p", twice, FP, date="d", source="s")
    with pytest.raises(BaselineError, match="fingerprint field 'gpu'"):
        accept(path, "p", [], {"gpu": None}, date="d", source="s")
    assert path.read_bytes() == before


def test_accept_keeps_a_corrupt_file_untouched(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(HEAD + _entry(value='"fast"'))
    before = path.read_bytes()
    with pytest.raises(BaselineError, match="value 'fast'"):
        accept(path, "p", [], FP, date="d", source="s")
    assert path.read_bytes() == before


# --- fingerprints -----------------------------------------------------------------------------


def test_fingerprint_mismatch():
    adr = load_baselines(ADR).fingerprint
    host = {  # shaped like pytest_moeperf.host.machine.host_fingerprint()
        "hostname": "box",
        "cpu_model": "AMD EPYC 7302",
        "cpus": 40,
        "numa_nodes": {"0": "0-9,20-29", "1": "10-19,30-39"},
        "memory_gib": 377.2,  # within 2 %: the same memory
        "gpus": ("NVIDIA GeForce RTX 4090",),
        "gpu_memory": ["24564 MiB"],
        "numa_balancing": "0",
        "kernel": "6.8.0",
    }
    assert fingerprint_mismatch(adr, host) == [
        "cpu_model: baseline 'Intel Xeon Silver 4210', host 'AMD EPYC 7302'",
        "gpus: baseline ['NVIDIA GeForce RTX 2080 Ti', 'NVIDIA GeForce RTX 2080 Ti'], "
        "host ('NVIDIA GeForce RTX 4090',)",
    ]
    same = {**host, "cpu_model": adr["cpu_model"], "gpus": tuple(adr["gpus"])}
    assert adr["numa_balancing"] != same["numa_balancing"]  # not an identity field
    assert fingerprint_mismatch(adr, same) == []
    assert fingerprint_mismatch(adr, {**same, "cpus": 16, "numa_nodes": {"0": "0-15"}}) == [
        "cpus: baseline 40, host 16",
        "numa_nodes: baseline {'0': '0-9,20-29', '1': '10-19,30-39'}, host {'0': '0-15'}",
    ]


def test_accept_stores_a_host_fingerprint(tmp_path):
    fp = {"cpu_model": "x", "numa_nodes": {"0": "0-3"}, "gpus": [], "memory_gib": 7.7}
    bf = accept(tmp_path / "p.toml", "p", [], fp, date="d", source="s")
    assert bf.fingerprint == fp
    assert load_baselines(tmp_path / "p.toml").fingerprint == fp


# --- hosts: numbers apply only where the host measures the same --------------------------------


def _probe(bandwidth: float, compute: float, cpus: str = "0-1") -> dict:
    return {
        "cpus": cpus,
        "bandwidth_gbs": bandwidth,
        "bandwidth_cv": 0.01,
        "compute_gops": compute,
        "compute_cv": 0.01,
        "samples": 7,
        "seconds": 2.0,
    }


VM = {"cpu_model": "AMD EPYC", "cpus": 2, "memory_gib": 23.5, "hostname": "vm"}


def _fp(bandwidth: float, compute: float, **probes: dict) -> dict:
    return {**VM, "probes": {"0-1": _probe(bandwidth, compute), **probes}}


def test_accept_keeps_one_set_of_numbers_per_host(tmp_path):
    path = tmp_path / "p.toml"
    fast, slow = _fp(19.4, 30.0), _fp(7.1, 11.0)
    accept(path, "p", [_measurement("mmap", "pp512", [1160.0])], fast, date="d1", source="s")
    # the same host again (probe within 10 %): its numbers are replaced, no new host
    bf = accept(
        path, "p", [_measurement("mmap", "pp512", [1100.0])], _fp(18.5, 31.0), date="d2", source="s"
    )
    assert [h.id for h in bf.hosts] == ["host-1"]
    assert [e.value for e in bf.entries] == [1100.0] and [e.value for e in bf.history] == [1160.0]
    assert bf.hosts[0].fingerprint["probes"]["0-1"]["bandwidth_gbs"] == 18.5
    # a host that looks the same but measures 2.7x slower gets its own numbers
    bf = accept(path, "p", [_measurement("mmap", "pp512", [424.0])], slow, date="d3", source="s")
    assert [h.id for h in bf.hosts] == ["host-1", "host-2"]
    assert {(e.host, e.value) for e in bf.entries} == {("host-1", 1100.0), ("host-2", 424.0)}
    assert load_baselines(path) == bf
    assert 'host = "host-2"' in path.read_text()  # entries name their host once there are two
    assert bf.find("b1", "mmap", "pp512", host="host-2").value == 424.0

    host, why = host_for(bf, _fp(7.3, 10.8), "0-1")
    assert host is not None and host.id == "host-2" and why == []
    host, why = host_for(bf, _fp(19.0, 30.5), "0-1")
    assert host is not None and host.id == "host-1"
    host, why = host_for(bf, _fp(12.0, 20.0), "0-1")
    assert host is None
    assert why[0] == (
        "host-1: memory bandwidth on CPUs 0-1: this host 12.0 GB/s, baseline host 18.5 GB/s "
        "(-35 %, more than the probe tolerance 15 %)"
    )
    assert any(line.startswith("host-2: memory bandwidth") for line in why)
    # a wider tolerance is the caller's choice
    assert host_for(bf, _fp(12.0, 20.0), "0-1", tolerance=0.5)[0] is not None


def test_a_host_without_probe_figures_never_applies_to_a_probed_run(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(HEAD + ENTRY + '\n[fingerprint]\ncpu_model = "AMD EPYC"\ncpus = 2\n')
    old = load_baselines(path)
    assert [h.id for h in old.hosts] == ["host-1"] and old.schema == 1
    host, why = host_for(old, _fp(19.4, 30.0), "0-1")
    assert host is None
    assert "host-1 has no probe figures on CPUs 0-1 (recorded without a probe)" in why[0]
    # accept adds this host beside it, keeping the old numbers, and writes schema 2
    bf = accept(
        path, "p", [_measurement("mmap", "pp2048", [150.0])], _fp(19.4, 30.0), date="d", source="s"
    )
    assert [h.id for h in bf.hosts] == ["host-1", "host-2"]
    assert bf.find("b1", "mmap", "pp2048", host="host-1") == replace(old.entries[0])
    assert path.read_text().splitlines()[2] == "schema = 2"
    # replaying an old results file without probes: the identity fields decide
    assert host_for(old, {"cpu_model": "AMD EPYC", "cpus": 2}, "0-1")[0] is not None
    assert host_for(old, {"cpu_model": "Intel", "cpus": 2}, "0-1")[1] == [
        "host-1: cpu_model: baseline 'AMD EPYC', host 'Intel'"
    ]


def test_probes_on_other_cpus_do_not_vouch_for_these(tmp_path):
    bf = accept(tmp_path / "p.toml", "p", [], _fp(19.4, 30.0), date="d", source="s")
    host, why = host_for(bf, _fp(19.4, 30.0, **{"0": _probe(10.0, 15.0, "0")}), "0")
    assert host is None
    assert why == [
        "host-1 has no probe figures on CPUs 0 (recorded on CPUs 0-1): record this host's "
        "numbers with --moeperf-accept"
    ]
    assert host_differences(bf.hosts[0], _fp(19.4, 30.0), None) == []
